"""silu_and_mul fused with dynamic per-token fp8 (or int8: :func:`silu_and_mul_int8_quant`)
quantization (Helion): one launch instead of two.

    y[m, j]  = silu(x[m, j]) * x[m, d + j]            (rounded to x's dtype, as vLLM's SiluAndMul)
    scale[m] = max(min(amax(|y[m, :]|), scale_ub) / 448, 1 / (448 * 512))
    q[m, j]  = e4m3(clamp(y[m, j] / scale[m], -448, 448))

The semantics are those of the two vLLM 0.26 ops in a row, as :mod:`hlcore.activation` and
:func:`hlcore.quant_kernels.per_token_fp8_quant` compute them: ``SiluAndMul.forward_native`` (silu
in fp32 rounded to x's dtype, the product rounded again) then ``QuantFP8(static=False,
GroupShape.PER_TOKEN)`` of that rounded row: what Inductor's fused kernel of the two
``forward_native`` computes under vLLM's default ``-O2`` (the down_proj input of an FP8 model). The
reference is the two unfused references in a row, :func:`silu_and_mul_fp8_quant_ref`.

One token row per program (the per-token amax needs the whole row): the row rule of
:func:`hlcore.aux_configs.pick_rms_norm_config` on ``d`` (whole row in registers up to 16384, a
looped reduction above). Token count dynamic, ``d`` specialized; outputs allocated in the kernel.
"""

from __future__ import annotations

import functools
from typing import Any

import helion.language as hl
import torch

from hlcore.activation import DTYPES, silu_and_mul_ref
from hlcore.arg_checks import describe as _describe
from hlcore.aux_configs import aux_kernel, config_json, pick_rms_norm_config
from hlcore.quant import (
    FP8_DTYPE,
    per_token_fp8_quant_ref,
    per_token_int8_quant_ref,
)
from hlcore.quant_kernels import fp8_rows, int8_rows


def _silu_and_mul_fp8_quant_body(
    x: torch.Tensor,  # [M, 2, d] view of the [M, 2 d] input, d contiguous
    scale_ub: torch.Tensor | None,  # [1] fp32 upper bound of amax, or None
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    d = hl.specialize(x.size(2))
    q = torch.empty([m, d], dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        a = x[tile_m, 0, :].to(torch.float32)
        b = x[tile_m, 1, :].to(torch.float32)
        silu = (a * torch.sigmoid(a)).to(x.dtype)  # F.silu rounds to the input dtype
        y = (silu.to(torch.float32) * b).to(x.dtype).to(torch.float32)
        amax = torch.amax(torch.abs(y), dim=-1)
        if scale_ub is not None:
            amax = torch.minimum(amax, scale_ub[0])
        q_rows, row_scale = fp8_rows(y, amax)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale


def _silu_and_mul_int8_quant_body(
    x: torch.Tensor,  # [M, 2, d] view of the [M, 2 d] input, d contiguous
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    d = hl.specialize(x.size(2))
    q = torch.empty([m, d], dtype=torch.int8, device=x.device)
    scale = torch.empty([m, 1], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        a = x[tile_m, 0, :].to(torch.float32)
        b = x[tile_m, 1, :].to(torch.float32)
        silu = (a * torch.sigmoid(a)).to(x.dtype)
        y = (silu.to(torch.float32) * b).to(x.dtype).to(torch.float32)
        q_rows, row_scale = int8_rows(y)
        q[tile_m, :] = q_rows
        scale[tile_m, 0] = row_scale
    return q, scale


_BODIES = {"fp8": _silu_and_mul_fp8_quant_body, "int8": _silu_and_mul_int8_quant_body}


@functools.cache
def _kernel_for(kind: str, has_scale_ub: bool, config_json_text: str):
    del has_scale_ub  # part of the cache key only (Helion 1.5.0's key does not tell None from a tensor)
    return aux_kernel(_BODIES[kind], config_json_text)


def silu_and_mul_fp8_quant_ref(
    x: torch.Tensor, scale_ub: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_token_fp8_quant_ref(silu_and_mul_ref(x), scale_ub)``: ``(q [M, d] e4m3, scale [M, 1] fp32)``."""
    return per_token_fp8_quant_ref(silu_and_mul_ref(x), scale_ub)


def silu_and_mul_int8_quant_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_token_int8_quant_ref(silu_and_mul_ref(x))``: ``(q [M, d] int8, scale [M, 1] fp32)``."""
    return per_token_int8_quant_ref(silu_and_mul_ref(x))


def _launch(
    kind: str, x: torch.Tensor, scale_ub: torch.Tensor | None, config: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the arguments (naming ``silu_and_mul_<kind>_quant`` in errors), then run that kernel on
    ``[M, 2 d]`` rows; zero tokens: empty outputs, no launch."""
    name = f"silu_and_mul_{kind}_quant"
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in DTYPES:
        raise ValueError(
            f"{name}: x must be a [M, 2 d] tensor of dtype bfloat16, float16 or float32; got {_describe(x)}"
        )
    h = x.shape[1]
    if h == 0 or h % 2:
        raise ValueError(f"{name}: x's last dim must be 2 d with d > 0; got {_describe(x)}")
    if scale_ub is not None and (
        not isinstance(scale_ub, torch.Tensor)
        or scale_ub.numel() != 1
        or scale_ub.dtype != torch.float32
        or scale_ub.device != x.device
    ):
        raise ValueError(
            f"{name}: scale_ub must be None or a one-element float32 tensor on {x.device}; got {_describe(scale_ub)}"
        )
    d, m = h // 2, x.shape[0]
    q_dtype = FP8_DTYPE if kind == "fp8" else torch.int8
    if m == 0:
        return torch.empty((0, d), dtype=q_dtype, device=x.device), torch.empty(
            (0, 1), dtype=torch.float32, device=x.device
        )
    x2 = x if x.stride(1) == 1 else x.contiguous()
    if config is None:
        config = pick_rms_norm_config(m, d)
    kernel = _kernel_for(kind, scale_ub is not None, config_json(config, name, d))
    ub = (scale_ub,) if kind == "fp8" else ()
    return kernel(x2.unflatten(1, (2, d)), *ub)


def silu_and_mul_fp8_quant(
    x: torch.Tensor, scale_ub: torch.Tensor | None = None, *, config: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``silu_and_mul`` then dynamic per-token fp8 quantization of its output, in one launch.

    Args:
        x: ``[M, 2 d]`` bfloat16, float16 or float32 (d > 0); any row stride.
        scale_ub: None or a one-element float32 tensor capping each row's amax (vLLM's ``scale_ub``).
        config: a ``helion.Config`` / dict / JSON (row kernel); default
            :func:`hlcore.aux_configs.pick_rms_norm_config` on ``d``.

    Returns:
        ``(q, scale)``: ``q`` ``[M, d]`` float8_e4m3fn and ``scale`` ``[M, 1]`` float32 with
        ``silu_and_mul(x) ~= q * scale``; zero tokens: empty outputs, no launch.

    Raises:
        ValueError: x is not 2-D with an even, non-zero last dim of a supported dtype, or scale_ub
            is not as above.

    Deterministic.
    """
    return _launch("fp8", x, scale_ub, config)


def silu_and_mul_int8_quant(x: torch.Tensor, *, config: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's ``silu_and_mul`` then dynamic symmetric per-token int8 quantization of its output
    (``scaled_int8_quant``: ``scale = amax / 127``, round half to even, saturating; a zero row gets
    scale 0 and q 0), in one launch. Under vLLM's default -O2 the int8 quantization is an opaque CUDA
    op after Inductor's silu_and_mul kernel: two launches there, one here.

    Args:
        x: ``[M, 2 d]`` bfloat16, float16 or float32 (d > 0); any row stride.
        config: as :func:`silu_and_mul_fp8_quant`.

    Returns:
        ``(q [M, d] int8, scale [M, 1] float32)``; zero tokens: empty outputs, no launch.

    Raises:
        ValueError: as :func:`silu_and_mul_fp8_quant`.
    """
    return _launch("int8", x, None, config)
