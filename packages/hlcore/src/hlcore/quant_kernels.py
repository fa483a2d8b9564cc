"""Dynamic activation quantization kernels (Helion): per-token fp8, per-token int8, 1x128-group fp8.

    per-token fp8:   scale[m] = max(min(amax(|x[m, :]|), scale_ub) / 448, 1 / (448 * 512)),
                     q[m, k] = e4m3(clamp(x[m, k] / scale[m], -448, 448))
    per-token int8:  scale[m] = amax(|x[m, :]|) / 127,  q[m, k] = clamp(rint(x[m, k] / scale[m]), -128, 127)
                     (round half to even; an all-zero row gets scale 0 and q 0)
    group fp8 (128): scale[m, g] = max(amax(|x[m, 128 g : 128 g + 128]|), 1e-10) / 448,
                     q = e4m3(clamp(x / scale[m, k // 128], -448, 448))

Semantics of vLLM 0.26: ``QuantFP8(static=False, GroupShape.PER_TOKEN)`` /
``torch.ops._C.dynamic_per_token_scaled_fp8_quant`` (with ``scale_ub``), ``ops.scaled_int8_quant``
(``torch.ops._C.dynamic_scaled_int8_quant``, symmetric) and ``fp8_utils.per_token_group_quant_fp8``
(``torch.ops._C.per_token_group_fp8_quant``, eps 1e-10, row-major or column-major scales). The
references are :mod:`hlcore.quant`'s (fp32 math): ``per_token_fp8_quant_ref``,
``per_token_int8_quant_ref`` and ``per_token_group_fp8_quant_ref``.

Inputs are finite-safe: an all-zero row or group quantizes to zero bytes with a finite scale, +-inf
and huge values saturate (+-448 / +-127), never a NaN byte. The amax is clamped to float32's max so
an inf amax gives a finite scale (as the references do).

Token count is dynamic (one compile per hidden size and config), the hidden size is specialized
(``hl.specialize``); outputs are allocated inside the kernel from the input's symbolic sizes (Helion
1.5.0 mis-broadcasts a separately passed output whose dynamic M is 1). Any row stride works; a
hidden-strided input is copied first. Not done yet: the TMA-aligned scale layout
(``tma_aligned_scales``), UE8M0 (power-of-two) scales and ``num_token_padding``; asymmetric int8.
"""

from __future__ import annotations

import functools
from typing import Any

import helion
import helion.language as hl
import torch

from hlcore.arg_checks import describe as _describe
from hlcore.aux_configs import (
    aux_kernel,
    config_json,
    pick_per_token_fp8_quant_config,
    pick_per_token_group_fp8_quant_config,
    pick_per_token_int8_quant_config,
)
from hlcore.quant import (
    FP8_DTYPE,
    FP8_MAX,
    FP8_MIN_SCALE,
    INT8_MAX,
    per_token_fp8_quant_ref,
    per_token_group_fp8_quant_ref,
    per_token_int8_quant_ref,
)

INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
GROUP_SIZE = 128
GROUP_EPS = 1e-10
F32_MAX = float(torch.finfo(torch.float32).max)
_RNE_MAGIC = 12582912.0  # 1.5 * 2**23

__all__ = [
    "GROUP_SIZE",
    "INPUT_DTYPES",
    "generate_quant_inputs",
    "per_token_fp8_quant",
    "per_token_fp8_quant_ref",
    "per_token_group_fp8_quant",
    "per_token_group_fp8_quant_ref",
    "per_token_int8_quant",
    "per_token_int8_quant_ref",
]


# --------------------------------------------------------------------------------------------
# Row epilogues shared by every per-token quantizing kernel (this module, hlcore.norm_quant,
# hlcore.activation_quant): plain functions of device values that Helion inlines where a kernel
# body calls them. They take no host tensor (a caller reads ``scale_ub[0]`` itself) and their
# local names are their own (a name shared with a caller's host variable would clash).
# --------------------------------------------------------------------------------------------
def fp8_rows(rows_f32: torch.Tensor, rows_amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token fp8 of ``rows_f32 [tile_m, K]`` fp32 with ``rows_amax [tile_m]`` (already capped by
    ``scale_ub``: the kernel body loads ``scale_ub[0]``, which neither a helper nor a conditional
    expression may do in Helion 1.5's Triton code generation): ``scale = max(min(amax, f32 max) /
    448, 1 / (448 * 512))``, ``q = e4m3(clamp(x / scale, -448, 448))``; returns ``(q, scale)``. An
    inf amax gives a finite scale."""
    fp8_row_scale = torch.clamp(torch.clamp(rows_amax, max=F32_MAX) / FP8_MAX, min=FP8_MIN_SCALE)
    fp8_q = torch.clamp(rows_f32 / fp8_row_scale.unsqueeze(-1), -FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return fp8_q, fp8_row_scale


def fp8_group_rows(group_f32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 of one 1 x 128 group per row, ``group_f32 [tile_m, 128]`` fp32 (vLLM's
    ``per_token_group_fp8_quant``): ``scale = max(min(amax, f32 max), 1e-10) / 448``, ``q = e4m3(clamp(x
    / scale, -448, 448))``; returns ``(q, scale [tile_m])``. Masked (past-K) columns are zeros."""
    grp_amax = torch.clamp(torch.amax(torch.abs(group_f32), dim=-1), max=F32_MAX)
    grp_scale = torch.clamp(grp_amax, min=GROUP_EPS) / FP8_MAX
    grp_q = torch.clamp(group_f32 / grp_scale.unsqueeze(-1), -FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return grp_q, grp_scale


def int8_rows(rows_f32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token int8 of ``rows_f32 [tile_m, K]`` fp32, +-inf taken as +-f32 max first (as
    the reference's ``nan_to_num``; saturates to +-127): ``scale = amax / 127``, ``q =
    clamp(rint(x / scale), -128, 127)`` rounding half to even with the fp32 magic number 1.5 * 2^23 (adding it leaves no fraction bits; the fp32 add
    rounds to nearest even) after clamping so ``|v| < 2^22``: the same bits on the GPU and both
    interpreters (Triton's interpreter has no ``libdevice.nearbyint``). A zero row: scale 0, q 0.
    Returns ``(q, scale)``."""
    rows_f32 = torch.clamp(rows_f32, -F32_MAX, F32_MAX)
    int8_row_scale = torch.amax(torch.abs(rows_f32), dim=-1) / INT8_MAX
    int8_safe = torch.where(int8_row_scale > 0, int8_row_scale, torch.ones_like(int8_row_scale))
    int8_v = torch.clamp(rows_f32 / int8_safe.unsqueeze(-1), -129.0, 128.0)
    int8_q = torch.clamp((int8_v + _RNE_MAGIC) - _RNE_MAGIC, -128.0, 127.0).to(torch.int8)
    return int8_q, int8_row_scale


# --------------------------------------------------------------------------------------------
# Helion kernels
# --------------------------------------------------------------------------------------------
def _per_token_fp8_quant_body(
    x: torch.Tensor,  # [M, K] bf16/fp16/fp32, K contiguous
    scale_ub: torch.Tensor | None,  # [1] fp32: upper bound of amax, or None
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    q = torch.empty([m, k], dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        amax = torch.amax(torch.abs(row), dim=-1)
        if scale_ub is not None:
            amax = torch.minimum(amax, scale_ub[0])
        q_rows, row_scale = fp8_rows(row, amax)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale


def _per_token_int8_quant_body(
    x: torch.Tensor,  # [M, K] bf16/fp16/fp32, K contiguous
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    q = torch.empty([m, k], dtype=torch.int8, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        q_rows, row_scale = int8_rows(x[tile_m, :].to(torch.float32))
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale


def _per_token_group_fp8_quant_body(
    x: torch.Tensor,  # [M, K] bf16/fp16/fp32, K contiguous
    column_major: int,  # 1: scales in a column-major [M, G] (stride(0) == 1), 0: row-major
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    column_major = hl.specialize(column_major)
    groups = helion.cdiv(k, GROUP_SIZE)
    q = torch.empty([m, k], dtype=FP8_DTYPE, device=x.device)
    # [M, G] either way; column-major is the transposed view of a [G, M] buffer (vLLM's layout)
    if column_major:
        scale = torch.empty([groups, m], dtype=torch.float32, device=x.device).t()
    else:
        scale = torch.empty([m, groups], dtype=torch.float32, device=x.device)
    for tile_m, tile_k in hl.tile([m, k], block_size=[None, GROUP_SIZE]):
        q_group, grp_scale = fp8_group_rows(x[tile_m, tile_k].to(torch.float32))
        q[tile_m, tile_k] = q_group
        scale[tile_m, tile_k.begin // GROUP_SIZE] = grp_scale
    return q, scale


_BODIES = {
    "per_token_fp8_quant": _per_token_fp8_quant_body,
    "per_token_int8_quant": _per_token_int8_quant_body,
    "per_token_group_fp8_quant": _per_token_group_fp8_quant_body,
}


@functools.cache
def _kernel_for(name: str, config_json_text: str, variant: object = None):
    """One ``helion.Kernel`` per (kernel, config, variant): works the same compiled and in both
    interpret modes. ``variant`` separates calls that Helion 1.5.0's dynamic-shape cache key would
    merge (a None argument vs a tensor; the scale layout)."""
    del variant  # part of the cache key only
    return aux_kernel(_BODIES[name], config_json_text)


# --------------------------------------------------------------------------------------------
# Host wrappers
# --------------------------------------------------------------------------------------------


def _check_x(who: str, x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in INPUT_DTYPES or x.shape[1] == 0:
        raise ValueError(
            f"{who}: x must be a 2-D [M, K] tensor (K > 0) of dtype bfloat16, float16 or float32; got {_describe(x)}"
        )
    return x if x.stride(1) == 1 or x.shape[0] == 0 else x.contiguous()


def per_token_fp8_quant(
    x: torch.Tensor, scale_ub: torch.Tensor | None = None, *, config: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token fp8 quantization (vLLM ``dynamic_per_token_scaled_fp8_quant``).

    Args:
        x: ``[M, K]`` bfloat16, float16 or float32; any row stride (a K-strided x is copied).
        scale_ub: optional one-element float32 tensor on x's device: upper bound on each row's amax.
        config: a ``helion.Config`` / dict / JSON; default :func:`pick_per_token_fp8_quant_config`.

    Returns:
        ``(q [M, K] float8_e4m3fn contiguous, scale [M, 1] float32)`` with ``x ~= q * scale``;
        M = 0 gives empty outputs without a launch.

    Raises:
        ValueError: x is not 2-D bf16/fp16/fp32 with K > 0, or scale_ub is not a one-element fp32
            tensor on x's device.

    Deterministic (no atomics).
    """
    x = _check_x("per_token_fp8_quant", x)
    if scale_ub is not None and (
        not isinstance(scale_ub, torch.Tensor)
        or scale_ub.numel() != 1
        or scale_ub.dtype != torch.float32
        or scale_ub.device != x.device
    ):
        raise ValueError(
            f"per_token_fp8_quant: scale_ub must be a one-element float32 tensor on {x.device}; got {_describe(scale_ub)}"
        )
    m, k = x.shape
    if m == 0:
        return torch.empty((0, k), dtype=FP8_DTYPE, device=x.device), torch.empty(
            (0, 1), dtype=torch.float32, device=x.device
        )
    if config is None:
        config = pick_per_token_fp8_quant_config(m, k)
    kernel = _kernel_for(
        "per_token_fp8_quant", config_json(config, "per_token_fp8_quant", k), scale_ub is not None
    )
    return kernel(x, None if scale_ub is None else scale_ub.reshape(1))


def per_token_int8_quant(x: torch.Tensor, *, config: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic symmetric per-token int8 quantization (vLLM ``scaled_int8_quant(x, symmetric=True)``).

    Args:
        x: ``[M, K]`` bfloat16, float16 or float32; any row stride (a K-strided x is copied).
        config: a ``helion.Config`` / dict / JSON; default :func:`pick_per_token_int8_quant_config`.

    Returns:
        ``(q [M, K] int8 contiguous, scale [M, 1] float32)``: ``q = rint(x / scale)`` (half to even),
        saturated to [-128, 127]; an all-zero row gives scale 0 and q 0. M = 0: empty, no launch.

    Raises:
        ValueError: x is not 2-D bf16/fp16/fp32 with K > 0.

    Deterministic (no atomics).
    """
    x = _check_x("per_token_int8_quant", x)
    m, k = x.shape
    if m == 0:
        return torch.empty((0, k), dtype=torch.int8, device=x.device), torch.empty(
            (0, 1), dtype=torch.float32, device=x.device
        )
    if config is None:
        config = pick_per_token_int8_quant_config(m, k)
    return _kernel_for("per_token_int8_quant", config_json(config, "per_token_int8_quant", k))(x)


def per_token_group_fp8_quant(
    x: torch.Tensor,
    group_size: int = GROUP_SIZE,
    *,
    column_major_scales: bool = False,
    tma_aligned_scales: bool = False,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic fp8 quantization in 1x128 groups along K (vLLM ``per_token_group_quant_fp8``, eps 1e-10).

    Args:
        x: ``[M, K]`` bfloat16, float16 or float32; any row stride; K need not be a multiple of 128
            (the last group is partial).
        group_size: 128 (the only size supported).
        column_major_scales: return the scales as a column-major ``[M, G]`` view (stride(0) == 1), the
            layout vLLM's CUTLASS/DeepGEMM block kernels ask for; default row-major.
        tma_aligned_scales: not supported yet (ValueError).
        config: a ``helion.Config`` / dict / JSON; default :func:`pick_per_token_group_fp8_quant_config`.

    Returns:
        ``(q [M, K] float8_e4m3fn, scale [M, ceil(K / 128)] float32)``; M = 0: empty, no launch.

    Raises:
        ValueError: x is not 2-D bf16/fp16/fp32 with K > 0, group_size is not 128, or TMA-aligned
            scales were asked for.

    Deterministic (no atomics).
    """
    x = _check_x("per_token_group_fp8_quant", x)
    if group_size != GROUP_SIZE:
        raise ValueError(f"per_token_group_fp8_quant: group_size must be {GROUP_SIZE}; got {group_size}")
    if tma_aligned_scales:
        raise ValueError(
            "per_token_group_fp8_quant: tma_aligned_scales is not supported yet (row-major or column_major_scales only)"
        )
    m, k = x.shape
    groups = -(-k // GROUP_SIZE)
    if m == 0:
        q = torch.empty((0, k), dtype=FP8_DTYPE, device=x.device)
        scale = torch.empty((groups, 0) if column_major_scales else (0, groups), device=x.device)
        return q, scale.t() if column_major_scales else scale
    if config is None:
        config = pick_per_token_group_fp8_quant_config(m, k)
    kernel = _kernel_for(
        "per_token_group_fp8_quant", config_json(config, "per_token_group_fp8_quant"), column_major_scales
    )
    return kernel(x, 1 if column_major_scales else 0)


# --------------------------------------------------------------------------------------------
# Inputs for tests, tuning and benchmarks
# --------------------------------------------------------------------------------------------
def generate_quant_inputs(
    m: int,
    k: int,
    *,
    dtype: torch.dtype = torch.bfloat16,
    row_stride: int | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> torch.Tensor:
    """Activations ``x ~ N(0, 1) * e^{N(0, 1)}`` per row (rows of different magnitude) ``[M, K]`` of
    ``dtype``; ``row_stride > K`` gives a view with that row stride (a slice of a wider buffer)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    stride = k if row_stride is None else row_stride
    if stride < k:
        raise ValueError(f"generate_quant_inputs: row_stride must be >= K = {k}; got {row_stride}")
    buf = torch.randn((m, stride), generator=gen) * torch.exp(torch.randn((m, 1), generator=gen))
    return buf.to(dtype).to(device)[:, :k]
