"""RMS normalization kernels (Helion): rms_norm and fused_add_rms_norm.

    rms_norm:           out = x * rsqrt(mean(x^2, over hidden) + eps) * weight
    fused_add_rms_norm: residual' = x + residual;  out = rms_norm(residual');  returns (out, residual')

Semantics of vLLM 0.26's IR ops ``vllm.ir.ops.rms_norm`` / ``fused_add_rms_norm`` (``RMSNorm``'s
dispatch; CUDA: ``torch.ops._C.rms_norm`` / ``fused_add_rms_norm``), as their ``native`` impls compute:
fp32 math, the normalized row rounded to the weight's dtype, multiplied by the weight in that dtype,
then cast to x's dtype; ``weight`` may be None (no scaling). In ``fused_add_rms_norm`` the variance
and the normalization use the fp32 sum ``x + residual``, and ``residual'`` is that sum rounded to x's
dtype (vLLM's CUDA kernel normalizes the rounded residual instead: at most one output rounding apart).

In-place: vLLM's CUDA op overwrites x with out and residual with residual'; its IR op is declared
``allow_inplace``. The Helion kernel itself never mutates its inputs (it writes two new tensors);
``fused_add_rms_norm(..., inplace=True)`` copies the results into x and residual and returns them,
matching the CUDA op's contract at the cost of two extra copies (an in-kernel in-place store is left
for the GPU work, see docs/aux-kernels.md).

Token count is dynamic, the hidden size specialized; outputs are allocated inside the kernel. Any
row stride works (a hidden-strided input is copied first); leading dims are flattened.
"""

from __future__ import annotations

import functools
from typing import Any

import helion.language as hl
import torch

from hlcore.arg_checks import describe as _describe
from hlcore.aux_configs import aux_kernel, config_json, pick_fused_add_rms_norm_config, pick_rms_norm_config

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


# --------------------------------------------------------------------------------------------
# Row math shared by the norm kernels here and in hlcore.norm_quant (device functions Helion
# inlines where a kernel body calls them; own local names, no host tensor arguments)
# --------------------------------------------------------------------------------------------
def rms_normed_rows(rows_f32: torch.Tensor, eps: float) -> torch.Tensor:
    """``rows / sqrt(mean(rows^2) + eps)`` per row of ``rows_f32 [tile_m, H]`` fp32 (vLLM's
    ``RMSNorm`` before its weight)."""
    rms_variance = torch.mean(rows_f32 * rows_f32, dim=-1)
    return rows_f32 / torch.sqrt(rms_variance + eps).unsqueeze(-1)


def rms_weighted_rows(
    normed_f32: torch.Tensor, weight_f32: torch.Tensor, weight_dtype: torch.dtype
) -> torch.Tensor:
    """The normalized rows times the weight as vLLM's ``RMSNorm`` does it: rounded to the weight's
    dtype, multiplied (bf16 x bf16 / fp16 x fp16 products are exact in fp32: one rounding, as
    torch's), rounded to the weight's dtype again."""
    return (normed_f32.to(weight_dtype).to(torch.float32) * weight_f32).to(weight_dtype)


# --------------------------------------------------------------------------------------------
# Helion kernels
# --------------------------------------------------------------------------------------------
def _rms_norm_body(
    x: torch.Tensor,  # [M, H] bf16/fp16/fp32, H contiguous
    weight: torch.Tensor | None,  # [H] or None
    eps: float,
) -> torch.Tensor:
    m = x.size(0)
    h = hl.specialize(x.size(1))
    out = torch.empty([m, h], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        normed = rms_normed_rows(x[tile_m, :].to(torch.float32), eps)
        if weight is not None:
            w = weight[None, :].to(torch.float32)
            out[tile_m, :] = rms_weighted_rows(normed, w, weight.dtype).to(out.dtype)
        else:
            out[tile_m, :] = normed.to(out.dtype)
    return out


def _fused_add_rms_norm_body(
    x: torch.Tensor,  # [M, H] bf16/fp16/fp32, H contiguous
    residual: torch.Tensor,  # [M, H] x's dtype, H contiguous
    weight: torch.Tensor | None,  # [H] or None
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    h = hl.specialize(x.size(1))
    out = torch.empty([m, h], dtype=x.dtype, device=x.device)
    new_residual = torch.empty([m, h], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        total = x[tile_m, :].to(torch.float32) + residual[tile_m, :].to(torch.float32)
        new_residual[tile_m, :] = total.to(new_residual.dtype)
        normed = rms_normed_rows(total, eps)
        if weight is not None:
            w = weight[None, :].to(torch.float32)
            out[tile_m, :] = rms_weighted_rows(normed, w, weight.dtype).to(out.dtype)
        else:
            out[tile_m, :] = normed.to(out.dtype)
    return out, new_residual


_BODIES = {"rms_norm": _rms_norm_body, "fused_add_rms_norm": _fused_add_rms_norm_body}


@functools.cache
def _kernel_for(name: str, has_weight: bool, one_row: bool, config_json_text: str):
    """One ``helion.Kernel`` per (kernel, weight or None, M == 1, config). Helion 1.5.0's dynamic-shape
    cache key does not tell a None argument from a tensor, and it compiles a second ``[M, H]`` input
    (``residual``) whose M is 1 at the first call as a broadcast row (stride dropped), then reuses
    that code for every M: so M == 1 gets its own kernel (where the broadcast is right)."""
    del has_weight, one_row  # part of the cache key only
    return aux_kernel(_BODIES[name], config_json_text)


# --------------------------------------------------------------------------------------------
# References (vLLM's IR ``native`` impls, fp32 math)
# --------------------------------------------------------------------------------------------
def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    """``vllm.ir.ops.rms_norm`` native: fp32 ``x * rsqrt(mean(x^2) + eps)``, then ``* weight`` in
    the weight's dtype, cast to x's dtype."""
    orig = x.dtype
    x32 = x.to(torch.float32)
    y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y.to(weight.dtype) * weight
    return y.to(orig)


def fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``vllm.ir.ops.fused_add_rms_norm`` native: returns ``(rms_norm(x + residual), x + residual)``
    with the sum in fp32 (rounded to x's dtype for the returned residual). Does not mutate."""
    orig = x.dtype
    total = x.to(torch.float32) + residual.to(torch.float32)
    y = total * torch.rsqrt(total.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y.to(weight.dtype) * weight
    return y.to(orig), total.to(orig)


# --------------------------------------------------------------------------------------------
# Host wrappers
# --------------------------------------------------------------------------------------------


def check_residual(name: str, x: torch.Tensor, residual: object) -> None:
    """``ValueError`` naming kernel ``name`` unless ``residual`` is a tensor of x's shape, dtype and
    device."""
    if (
        not isinstance(residual, torch.Tensor)
        or residual.shape != x.shape
        or residual.dtype != x.dtype
        or residual.device != x.device
    ):
        raise ValueError(
            f"{name}: residual must match x ({_describe(x)}) in shape, dtype and device; got {_describe(residual)}"
        )


def _check(who: str, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> int:
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.dtype not in DTYPES or x.shape[-1] == 0:
        raise ValueError(
            f"{who}: x must be a [..., H] tensor (H > 0) of dtype bfloat16, float16 or float32; got {_describe(x)}"
        )
    h = x.shape[-1]
    if weight is not None and (
        not isinstance(weight, torch.Tensor)
        or weight.dim() != 1
        or weight.shape[0] != h
        or weight.dtype not in DTYPES
        or weight.device != x.device
    ):
        raise ValueError(
            f"{who}: weight must be None or a 1-D [H] = [{h}] bfloat16/float16/float32 tensor on {x.device}; "
            f"got {_describe(weight)}"
        )
    if not isinstance(eps, float | int) or not eps >= 0:
        raise ValueError(f"{who}: eps must be a non-negative float; got {eps!r}")
    return h


def _rows(t: torch.Tensor, h: int) -> torch.Tensor:
    t2 = t.reshape(-1, h)
    return t2 if t2.stride(1) == 1 or t2.shape[0] == 0 else t2.contiguous()


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, *, config: Any = None
) -> torch.Tensor:
    """``out = x * rsqrt(mean(x^2) + eps) * weight`` over the last dim (vLLM ``rms_norm``).

    Args:
        x: ``[..., H]`` bfloat16, float16 or float32; any row stride.
        weight: ``[H]`` (bf16/fp16/fp32, usually x's dtype) or None for no scaling; made contiguous.
        eps: the variance epsilon (vLLM's default 1e-6).
        config: a ``helion.Config`` / dict / JSON; default :func:`hlcore.aux_configs.pick_rms_norm_config`.

    Returns:
        ``[..., H]`` of x's dtype, contiguous (a new tensor); zero tokens: empty, no launch.

    Raises:
        ValueError: x, weight or eps is not as above.

    Deterministic (one program reduces each row).
    """
    h = _check("rms_norm", x, weight, eps)
    x2 = _rows(x, h)
    m = x2.shape[0]
    if m == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if config is None:
        config = pick_rms_norm_config(m, h)
    w = None if weight is None else weight.contiguous()
    out = _kernel_for("rms_norm", weight is not None, False, config_json(config, "rms_norm", h))(
        x2, w, float(eps)
    )
    return out.reshape(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    *,
    inplace: bool = False,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual' = x + residual; out = rms_norm(residual')`` (vLLM ``fused_add_rms_norm``).

    Args:
        x: ``[..., H]`` bfloat16, float16 or float32; any row stride.
        residual: same shape and dtype as x; any row stride.
        weight: ``[H]`` or None, as in :func:`rms_norm`.
        eps: the variance epsilon.
        inplace: False (default): x and residual are not touched, new tensors are returned. True:
            like vLLM's CUDA op, x is overwritten with out and residual with residual', and
            ``(x, residual)`` are returned (done by copies after the kernel).
        config: a ``helion.Config`` / dict / JSON; default
            :func:`hlcore.aux_configs.pick_fused_add_rms_norm_config`.

    Returns:
        ``(out, residual')``, both ``[..., H]`` of x's dtype; zero tokens: no launch.

    Raises:
        ValueError: x, residual, weight or eps is not as above.

    Deterministic.
    """
    h = _check("fused_add_rms_norm", x, weight, eps)
    check_residual("fused_add_rms_norm", x, residual)
    x2, r2 = _rows(x, h), _rows(residual, h)
    m = x2.shape[0]
    if m == 0:
        if inplace:
            return x, residual
        return torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(
            x.shape, dtype=x.dtype, device=x.device
        )
    if config is None:
        config = pick_fused_add_rms_norm_config(m, h)
    w = None if weight is None else weight.contiguous()
    kernel = _kernel_for(
        "fused_add_rms_norm", weight is not None, m == 1, config_json(config, "fused_add_rms_norm", h)
    )
    out, new_residual = kernel(x2, r2, w, float(eps))
    if inplace:
        x.copy_(out.reshape(x.shape))
        residual.copy_(new_residual.reshape(x.shape))
        return x, residual
    return out.reshape(x.shape), new_residual.reshape(x.shape)


# --------------------------------------------------------------------------------------------
# Inputs for tests, tuning and benchmarks
# --------------------------------------------------------------------------------------------
def generate_norm_inputs(
    m: int,
    h: int,
    *,
    dtype: torch.dtype = torch.bfloat16,
    row_stride: int | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """``dict(x, residual, weight)``: ``x``, ``residual ~ N(0, 1)`` ``[M, H]`` (views with
    ``row_stride`` if given) and ``weight ~ 1 + 0.1 N(0, 1)`` ``[H]``, all of ``dtype``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    stride = h if row_stride is None else row_stride
    if stride < h:
        raise ValueError(f"generate_norm_inputs: row_stride must be >= H = {h}; got {row_stride}")
    x = torch.randn((m, stride), generator=gen).to(dtype).to(device)[:, :h]
    residual = torch.randn((m, stride), generator=gen).to(dtype).to(device)[:, :h]
    weight = (1 + 0.1 * torch.randn((h,), generator=gen)).to(dtype).to(device)
    return {"x": x, "residual": residual, "weight": weight}
