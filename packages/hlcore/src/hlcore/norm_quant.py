"""RMS normalization fused with dynamic per-token fp8 (or int8) quantization (Helion): one launch
instead of two.

    rms_norm_fp8_quant:           y = rms_norm(x, weight, eps)              (rounded to x's dtype)
    fused_add_rms_norm_fp8_quant: residual' = x + residual;  y = rms_norm(residual', weight, eps)
    then, for each token row m:   scale[m] = max(min(amax(|y[m, :]|), scale_ub) / 448, 1 / (448 * 512)),
                                  q[m, :] = e4m3(clamp(y[m, :] / scale[m], -448, 448))

The semantics are those of the two vLLM 0.26 ops in a row, exactly as :mod:`hlcore.norm` and
:func:`hlcore.quant_kernels.per_token_fp8_quant` compute them: ``RMSNorm`` (fp32 math, the normalized
row rounded to the weight's dtype, times the weight in that dtype, cast to x's dtype) followed by
``QuantFP8(static=False, GroupShape.PER_TOKEN)`` on that rounded row. This is what vLLM's fused
CUDA op ``torch.ops._C.rms_norm_dynamic_per_token_quant`` computes (its fusion pass
``RMSNormQuantFusionPass`` replaces the pair with it), and what Inductor's fused kernel of the two
``forward_native`` computes under vLLM's default ``-O2``. The references are the two unfused
references in a row: :func:`rms_norm_fp8_quant_ref`, :func:`fused_add_rms_norm_fp8_quant_ref`.

Why: at decode (a few tokens), every launch costs a few µs whatever its bytes; a norm and the fp8
quantization of its output as two launches is one launch more than vLLM's fused path.

The int8 variants (``rms_norm_int8_quant``, ``fused_add_rms_norm_int8_quant``) quantize the same
rounded row as ``ops.scaled_int8_quant(symmetric=True)`` does (``scale = amax / 127``, round half to
even, saturating; an all-zero row: scale 0, q 0): under vLLM's default -O2 that quantization is an
opaque CUDA op, so vLLM runs the pair as two launches; fused, it is one.

One token row per program (the whole hidden dim in registers, or a looped reduction above 16384,
as :func:`hlcore.aux_configs.pick_rms_norm_config`); token count dynamic, hidden specialized;
outputs allocated inside the kernel. Any row stride works (a hidden-strided input is copied first).
A weight is required (``RMSNorm(has_weight=False)`` is left to the unfused ops).
"""

from __future__ import annotations

import functools
from typing import Any

import helion.language as hl
import torch

from hlcore import norm
from hlcore.aux_configs import aux_kernel, config_json, pick_rms_norm_config
from hlcore.norm import fused_add_rms_norm_ref, rms_norm_ref, rms_normed_rows, rms_weighted_rows
from hlcore.quant import (
    FP8_DTYPE,
    per_token_fp8_quant_ref,
    per_token_int8_quant_ref,
)
from hlcore.quant_kernels import fp8_rows, int8_rows


# --------------------------------------------------------------------------------------------
# Helion kernels
# --------------------------------------------------------------------------------------------
def _rms_norm_fp8_quant_body(
    x: torch.Tensor,  # [M, H] bf16/fp16/fp32, H contiguous
    weight: torch.Tensor,  # [H]
    eps: float,
    scale_ub: torch.Tensor | None,  # [1] fp32 upper bound of amax, or None
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    h = hl.specialize(x.size(1))
    q = torch.empty([m, h], dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        w = weight[None, :].to(torch.float32)
        # the norm's output as vLLM's RMSNorm returns it (weight dtype, then x's dtype), in fp32
        y = rms_weighted_rows(rms_normed_rows(row, eps), w, weight.dtype).to(x.dtype).to(torch.float32)
        amax = torch.amax(torch.abs(y), dim=-1)
        if scale_ub is not None:
            amax = torch.minimum(amax, scale_ub[0])
        q_rows, row_scale = fp8_rows(y, amax)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale


def _fused_add_rms_norm_fp8_quant_body(
    x: torch.Tensor,  # [M, H] bf16/fp16/fp32, H contiguous
    residual: torch.Tensor,  # [M, H] x's dtype, H contiguous
    weight: torch.Tensor,  # [H]
    eps: float,
    scale_ub: torch.Tensor | None,  # [1] fp32 upper bound of amax, or None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m = x.size(0)
    h = hl.specialize(x.size(1))
    q = torch.empty([m, h], dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    new_residual = torch.empty([m, h], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        total = x[tile_m, :].to(torch.float32) + residual[tile_m, :].to(torch.float32)
        new_residual[tile_m, :] = total.to(new_residual.dtype)
        w = weight[None, :].to(torch.float32)
        # the norm's output as vLLM's RMSNorm returns it (weight dtype, then x's dtype), in fp32
        y = rms_weighted_rows(rms_normed_rows(total, eps), w, weight.dtype).to(x.dtype).to(torch.float32)
        amax = torch.amax(torch.abs(y), dim=-1)
        if scale_ub is not None:
            amax = torch.minimum(amax, scale_ub[0])
        q_rows, row_scale = fp8_rows(y, amax)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale, new_residual


def _rms_norm_int8_quant_body(
    x: torch.Tensor,  # [M, H] bf16/fp16/fp32, H contiguous
    weight: torch.Tensor,  # [H]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    h = hl.specialize(x.size(1))
    q = torch.empty([m, h], dtype=torch.int8, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        w = weight[None, :].to(torch.float32)
        # the norm's output as vLLM's RMSNorm returns it (weight dtype, then x's dtype), in fp32
        y = rms_weighted_rows(rms_normed_rows(row, eps), w, weight.dtype).to(x.dtype).to(torch.float32)
        q_rows, row_scale = int8_rows(y)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale


def _fused_add_rms_norm_int8_quant_body(
    x: torch.Tensor,  # [M, H] bf16/fp16/fp32, H contiguous
    residual: torch.Tensor,  # [M, H] x's dtype, H contiguous
    weight: torch.Tensor,  # [H]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    m = x.size(0)
    h = hl.specialize(x.size(1))
    q = torch.empty([m, h], dtype=torch.int8, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    new_residual = torch.empty([m, h], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        total = x[tile_m, :].to(torch.float32) + residual[tile_m, :].to(torch.float32)
        new_residual[tile_m, :] = total.to(new_residual.dtype)
        w = weight[None, :].to(torch.float32)
        # the norm's output as vLLM's RMSNorm returns it (weight dtype, then x's dtype), in fp32
        y = rms_weighted_rows(rms_normed_rows(total, eps), w, weight.dtype).to(x.dtype).to(torch.float32)
        q_rows, row_scale = int8_rows(y)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale, new_residual


_BODIES = {
    "rms_norm_fp8_quant": _rms_norm_fp8_quant_body,
    "fused_add_rms_norm_fp8_quant": _fused_add_rms_norm_fp8_quant_body,
    "rms_norm_int8_quant": _rms_norm_int8_quant_body,
    "fused_add_rms_norm_int8_quant": _fused_add_rms_norm_int8_quant_body,
}


@functools.cache
def _kernel_for(name: str, has_scale_ub: bool, one_row: bool, config_json_text: str):
    """One ``helion.Kernel`` per (kernel, scale_ub or None, M == 1, config): Helion 1.5.0's
    dynamic-shape cache key does not tell None from a tensor, and compiles a second ``[M, H]``
    input seen first with M == 1 as a broadcast row (see :mod:`hlcore.norm`)."""
    del has_scale_ub, one_row  # part of the cache key only
    return aux_kernel(_BODIES[name], config_json_text)


# --------------------------------------------------------------------------------------------
# References (the unfused references in a row, fp32 math)
# --------------------------------------------------------------------------------------------
def rms_norm_fp8_quant_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, scale_ub: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_token_fp8_quant_ref(rms_norm_ref(x, weight, eps), scale_ub)``: ``(q [M, H] e4m3, scale [M, 1] fp32)``."""
    return per_token_fp8_quant_ref(rms_norm_ref(x, weight, eps), scale_ub)


def fused_add_rms_norm_fp8_quant_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    scale_ub: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``out, residual' = fused_add_rms_norm_ref(...)``, then ``per_token_fp8_quant_ref(out)``:
    ``(q [M, H] e4m3, scale [M, 1] fp32, residual' [M, H] x's dtype)``. Does not mutate."""
    out, new_residual = fused_add_rms_norm_ref(x, residual, weight, eps)
    q, scale = per_token_fp8_quant_ref(out, scale_ub)
    return q, scale, new_residual


def rms_norm_int8_quant_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_token_int8_quant_ref(rms_norm_ref(x, weight, eps))``: ``(q [M, H] int8, scale [M, 1] fp32)``."""
    return per_token_int8_quant_ref(rms_norm_ref(x, weight, eps))


def fused_add_rms_norm_int8_quant_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, scale)`` of ``per_token_int8_quant_ref`` of the normalized ``x + residual``, and ``residual'``."""
    out, new_residual = fused_add_rms_norm_ref(x, residual, weight, eps)
    q, scale = per_token_int8_quant_ref(out)
    return q, scale, new_residual


# --------------------------------------------------------------------------------------------
# Host wrappers
# --------------------------------------------------------------------------------------------
def _launch(
    name: str,
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    scale_ub: torch.Tensor | None,
    config: Any,
    q_dtype: torch.dtype,
) -> tuple[torch.Tensor, ...]:
    """Check the arguments (naming ``name`` in errors), then run kernel ``name`` on ``[M, H]`` rows:
    ``(q, scale)`` or, with ``residual``, ``(q, scale, residual')``; zero tokens: empty, no launch."""
    h = norm._check(name, x, weight, eps)
    if x.dim() != 2 or weight is None:
        raise ValueError(
            f"{name}: x must be a [M, H] tensor and weight a [H] tensor; got x {norm._describe(x)}, "
            f"weight {norm._describe(weight)}"
        )
    if scale_ub is not None and (
        not isinstance(scale_ub, torch.Tensor)
        or scale_ub.numel() != 1
        or scale_ub.dtype != torch.float32
        or scale_ub.device != x.device
    ):
        raise ValueError(
            f"{name}: scale_ub must be None or a one-element float32 tensor on {x.device}; "
            f"got {norm._describe(scale_ub)}"
        )
    if residual is not None:
        norm.check_residual(name, x, residual)
    x2 = norm._rows(x, h)
    m = x2.shape[0]
    if m == 0:
        empty = (
            torch.empty((0, h), dtype=q_dtype, device=x.device),
            torch.empty((0, 1), dtype=torch.float32, device=x.device),
        )
        return empty if residual is None else (*empty, torch.empty((0, h), dtype=x.dtype, device=x.device))
    if config is None:
        config = pick_rms_norm_config(m, h)
    kernel = _kernel_for(
        name, scale_ub is not None, residual is not None and m == 1, config_json(config, name, h)
    )
    rows = (x2,) if residual is None else (x2, norm._rows(residual, h))
    ub = (scale_ub,) if q_dtype == FP8_DTYPE else ()
    return kernel(*rows, weight.contiguous(), float(eps), *ub)


def rms_norm_fp8_quant(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    scale_ub: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``rms_norm`` then dynamic per-token fp8 quantization of its output, in one launch.

    Args:
        x: ``[M, H]`` bfloat16, float16 or float32; any row stride.
        weight: ``[H]`` bf16/fp16/fp32 (usually x's dtype); made contiguous.
        eps: the variance epsilon.
        scale_ub: None or a one-element float32 tensor capping each row's amax (vLLM's ``scale_ub``).
        config: a ``helion.Config`` / dict / JSON; default :func:`hlcore.aux_configs.pick_rms_norm_config`.

    Returns:
        ``(q, scale)``: ``q`` ``[M, H]`` float8_e4m3fn, ``scale`` ``[M, 1]`` float32 (per token) with
        ``rms_norm(x) ~= q * scale``; zero tokens: empty outputs, no launch.

    Raises:
        ValueError: x, weight, eps or scale_ub is not as above.

    Deterministic (one program per row).
    """
    return _launch("rms_norm_fp8_quant", x, None, weight, eps, scale_ub, config, FP8_DTYPE)


def fused_add_rms_norm_fp8_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    scale_ub: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's ``fused_add_rms_norm`` then dynamic per-token fp8 quantization of the normalized row,
    in one launch.

    Args:
        x: ``[M, H]`` bfloat16, float16 or float32; any row stride.
        residual: same shape, dtype and device as x; any row stride. Not modified.
        weight: ``[H]``; eps, scale_ub, config: as :func:`rms_norm_fp8_quant`.

    Returns:
        ``(q, scale, residual')``: ``q`` ``[M, H]`` float8_e4m3fn and ``scale`` ``[M, 1]`` float32 of
        ``rms_norm(x + residual)``, and ``residual' = x + residual`` ``[M, H]`` of x's dtype (new
        tensors; vLLM's in-place op writes it into ``residual``); zero tokens: no launch.

    Raises:
        ValueError: an argument is not as above.

    Deterministic.
    """
    return _launch("fused_add_rms_norm_fp8_quant", x, residual, weight, eps, scale_ub, config, FP8_DTYPE)


def rms_norm_int8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, config: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``rms_norm`` then dynamic symmetric per-token int8 quantization of its output
    (``scaled_int8_quant``: ``scale = amax / 127``, round half to even, saturating; a zero row gets
    scale 0 and q 0), in one launch.

    Args:
        x: ``[M, H]`` bfloat16, float16 or float32; any row stride.
        weight: ``[H]``; eps, config: as :func:`rms_norm_fp8_quant`.

    Returns:
        ``(q [M, H] int8, scale [M, 1] float32)``; zero tokens: empty outputs, no launch.

    Raises:
        ValueError: an argument is not as above.
    """
    return _launch("rms_norm_int8_quant", x, None, weight, eps, None, config, torch.int8)


def fused_add_rms_norm_int8_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, config: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's ``fused_add_rms_norm`` then per-token int8 quantization (as :func:`rms_norm_int8_quant`)
    of the normalized row, in one launch: returns ``(q [M, H] int8, scale [M, 1] fp32, residual' =
    x + residual [M, H])``; residual is not modified.

    Raises:
        ValueError: an argument is not as in :func:`fused_add_rms_norm_fp8_quant`.
    """
    return _launch("fused_add_rms_norm_int8_quant", x, residual, weight, eps, None, config, torch.int8)
