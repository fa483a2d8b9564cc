"""Pure-torch quantization references (fp32 math) used to build GEMM inputs and check kernels.

Semantics follow vLLM 0.26: ``QuantFP8(static=False, GroupShape.PER_TOKEN).forward_native`` and
``torch.ops._C.dynamic_per_token_scaled_fp8_quant``:

    scale[m] = max(amax(|x[m, :]|) / 448, 1 / (448 * 512)),   q = clamp(x / scale, -448, 448) -> e4m3

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
