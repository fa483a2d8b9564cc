"""Pure-torch quantization references (fp32 math) used to build GEMM inputs and check kernels.

Semantics follow vLLM 0.26:

* per-token fp8 (``QuantFP8(static=False, GroupShape.PER_TOKEN).forward_native``,
  ``torch.ops._C.dynamic_per_token_scaled_fp8_quant``):
  ``scale[m] = max(amax(|x[m, :]|) / 448, 1 / (448 * 512))``, ``q = clamp(x / scale, -448, 448)``;
* per-token-group fp8, group 128 (``fp8_utils.per_token_group_quant_fp8``, eps = 1e-10):
  ``scale[m, g] = max(amax(|x[m, 128g : 128g + 128]|), 1e-10) / 448``;
* 128x128 weight blocks (how block-FP8 checkpoints store ``weight_scale_inv``): ``amax / 448``
  per block;
* per-token int8, symmetric (``ops.scaled_int8_quant``): ``scale[m] = amax / 127``,
  ``q = round_half_even(x / scale)`` saturated to [-128, 127]; an all-zero row gets scale 0, q 0.

The Helion quant kernels of the auxiliary-kernel work reuse these as their ``*_ref``.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0
FP8_MIN_SCALE = 1.0 / (FP8_MAX * 512.0)  # vLLM's min scaling factor for dynamic per-token quant


def per_token_fp8_quant_ref(
    x: torch.Tensor, scale_ub: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token fp8 quantization of ``x`` ``[M, K]`` (any float dtype).

    Returns ``(q [M, K] float8_e4m3fn, scale [M, 1] float32)`` with ``x ~= q * scale``. Saturates
    (never produces NaN bytes for finite or infinite inputs); an all-zero row gets the minimum scale
    and zero bytes. ``scale_ub`` (a one-element fp32 tensor) caps ``amax`` as vLLM does.
    """
    x32 = x.to(torch.float32)
    amax = x32.abs().amax(dim=-1, keepdim=True) if x32.shape[-1] else x32.new_zeros((*x32.shape[:-1], 1))
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub.to(torch.float32))
    scale = (amax / FP8_MAX).clamp(min=FP8_MIN_SCALE)
    # inf / inf and nan stay out of the bytes: saturate infinities, keep the scale finite
    scale = torch.where(
        torch.isfinite(scale), scale, torch.full_like(scale, torch.finfo(torch.float32).max / FP8_MAX)
    )
    q = (x32 / scale).nan_to_num(nan=0.0).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def per_channel_fp8_quant_ref(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Static per-output-channel fp8 quantization of a weight ``w`` ``[N, K]``, as a compressed-tensors
    FP8_DYNAMIC checkpoint stores it: returns ``(q [N, K] float8_e4m3fn, scale [N, 1] float32)``."""
    return per_token_fp8_quant_ref(w)


def _saturate_fp8(x32: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (x32 / scale).nan_to_num(nan=0.0).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def per_token_group_fp8_quant_ref(
    x: torch.Tensor, group_size: int = 128, eps: float = 1e-10
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic fp8 quantization of ``x`` ``[M, K]`` in 1 x ``group_size`` groups along K (the last
    group may be partial). Returns ``(q [M, K] e4m3, scale [M, ceil(K / group_size)] fp32)``,
    row-major scales (``.t().contiguous().t()`` gives vLLM's column-major layout)."""
    m, k = x.shape
    groups = -(-k // group_size)
    x32 = x.to(torch.float32)
    padded = torch.nn.functional.pad(x32, (0, groups * group_size - k)).view(m, groups, group_size)
    amax = padded.abs().amax(dim=-1).nan_to_num(nan=0.0, posinf=torch.finfo(torch.float32).max)
    scale = amax.clamp(min=eps) / FP8_MAX  # [M, groups]
    q = _saturate_fp8(x32, scale.repeat_interleave(group_size, dim=1)[:, :k])
    return q, scale


def per_block_fp8_quant_ref(
    w: torch.Tensor, block_size: tuple[int, int] = (128, 128), eps: float = 1e-10
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 quantization of a weight ``w`` ``[N, K]`` in ``block_size = (bn, bk)`` blocks (partial last
    blocks allowed). Returns ``(q [N, K] e4m3, scale [ceil(N / bn), ceil(K / bk)] fp32)``."""
    n, k = w.shape
    bn, bk = block_size
    gn, gk = -(-n // bn), -(-k // bk)
    w32 = w.to(torch.float32)
    padded = torch.nn.functional.pad(w32, (0, gk * bk - k, 0, gn * bn - n)).view(gn, bn, gk, bk)
    scale = padded.abs().amax(dim=(1, 3)).clamp(min=eps) / FP8_MAX  # [gn, gk]
    full = scale.repeat_interleave(bn, dim=0).repeat_interleave(bk, dim=1)[:n, :k]
    return _saturate_fp8(w32, full), scale


INT8_MAX = 127.0


def per_token_int8_quant_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic symmetric per-token int8 quantization of ``x`` ``[M, K]``: returns ``(q [M, K] int8,
    scale [M, 1] fp32)`` with ``x ~= q * scale``; rounding half to even, saturating, finite for
    zero, huge and infinite inputs (an all-zero row: scale 0, q 0)."""
    x32 = x.to(torch.float32).nan_to_num(nan=0.0)
    amax = x32.abs().amax(dim=-1, keepdim=True) if x32.shape[-1] else x32.new_zeros((*x32.shape[:-1], 1))
    amax = amax.clamp(max=torch.finfo(torch.float32).max)
    scale = amax / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x32 / safe).clamp(-128, 127)
    q = torch.where(scale > 0, q, torch.zeros_like(q)).to(torch.int8)
    return q, scale
