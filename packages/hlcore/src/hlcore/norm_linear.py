"""FP8_Dynamic linear layer with its producer inside: (residual add +) RMSNorm, dynamic per-token fp8
quantization and the scaled GEMM as one Helion kernel.

    h = x + residual            (fp32 sum; the new residual stream h, rounded to x's dtype, is returned)
    y = rms_norm(h, norm_weight, eps)           as vLLM's RMSNorm: h / sqrt(mean(h^2) + eps) rounded
                                                to the weight's dtype, times the weight, cast to x's dtype
    scale_a[m] = max(min(amax(|y[m, :]|), f32 max) / 448, 1 / (448 * 512))
    q = e4m3(clamp(y / scale_a, -448, 448))
    out[M, N] = (q @ B) * scale_a[:, None] * scale_b[None, :] (+ bias)

This is the chain vLLM 0.26 runs before a decode GEMM of an FP8_Dynamic model
(``fused_add_rms_norm`` or ``rms_norm``, then ``QuantFP8(static=False, GroupShape.PER_TOKEN)``,
then ``cutlass_scaled_mm``), and what :func:`hlcore.norm_quant.fused_add_rms_norm_fp8_quant`
followed by :func:`hlcore.scaled_mm.scaled_mm` computes (the reference:
:func:`rms_norm_fp8_linear_ref`): the same quantized bytes and scales up to the fp32 order in which
the row's sum of squares is taken (here tile by tile), the same GEMM tiles and accumulation. No
quantized copy of the activation, no scale tensor and no second launch.

Per program (one output tile ``[block_m, block_n]`` and one K chunk): two passes over the full rows
of ``x`` (and ``residual``) for the row statistics (sum of squares, then the amax of the rounded
normalized row), then the K loop, which recomputes each ``[block_m, block_k]`` slice of ``y``,
quantizes it in registers and multiplies it with the weight tile. Every program of a row block
recomputes the statistics: activation bytes read from L2 grow with the number of programs
(``ceil(N / block_n) * split_k`` times ``2 * M * K`` elements per pass), weight bytes do not. The
programs of the first N tile write the new residual for their K chunk (each element once).

Tunables: the scaled GEMM's (``block_sizes = [block_m, block_n, block_k]``, ``split_k``,
``swap_ab``, Triton's knobs) plus ``block_sizes[3]``, the statistics passes' K tile. With
``split_k > 1`` the output is filled with the bias (or zeros) first and each chunk adds its tile
atomically, as in :func:`hlcore.scaled_mm.scaled_mm`.

Part of "The decode linear layer as one kernel" (FP8_Dynamic first); not yet used by hlvllm.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import helion
import helion.language as hl
import torch
from helion.autotuner import BooleanFragment, PowerOfTwoFragment

from hlcore.arg_checks import (
    check_fp8_weight,
    check_one_device,
    check_out_dtype_and_bias,
    check_per_channel_scale,
    describe,
)
from hlcore.aux_configs import config_json
from hlcore.helion_compat import config_kernel
from hlcore.norm import rms_weighted_rows
from hlcore.quant import FP8_MAX, FP8_MIN_SCALE
from hlcore.quant_kernels import F32_MAX

FP8_DTYPE = torch.float8_e4m3fn
X_DTYPES = (torch.bfloat16, torch.float16)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: The W8A16 kernel's dot takes bf16/fp16 operands on the GPU; under Triton's CPU interpreter they are
#: widened to fp32 first (the same exact products, summed in fp32): Triton 3.6's interpreter computes
#: a bf16 x bf16 ``tl.dot`` wrongly (garbage of ~1e11 relative). Helion 1.5.0's eager mode cannot run
#: that kernel on the CPU at all (its ``hl.dot`` of non-fp8 operands is ``torch.mm(out_dtype=...)``,
#: which has no CPU kernel in torch 2.11).
CPU_FP32_DOT = os.environ.get("TRITON_INTERPRET") == "1"
DEFAULT_CONFIG = {
    "block_sizes": [16, 64, 128, 512],
    "split_k": 1,
    "swap_ab": False,
    "num_warps": 4,
    "num_stages": 3,
}


def _rms_norm_fp8_linear_body(
    x: torch.Tensor,  # [M, K] bf16/fp16, K contiguous
    residual: torch.Tensor | None,  # [M, K] x's dtype, K contiguous, or None (plain RMSNorm)
    norm_weight: torch.Tensor,  # [K] the RMSNorm weight (bf16/fp16)
    eps: float,
    b_t: torch.Tensor,  # [N, K] fp8, K contiguous (= B.t() of the [K, N] column-major weight)
    scale_b: torch.Tensor,  # fp32 [N, 1] per output channel
    bias: torch.Tensor | None,  # [N] out dtype
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    n = hl.specialize(b_t.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=x.device)
    new_residual = torch.empty([m, k], dtype=x.dtype, device=x.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    stats_block_k = hl.register_block_size(k)
    if split_k > 1:  # the split-K programs add into `out`; it starts as the bias (or zero)
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        # Pass 1: mean of squares of h over the whole row.
        sum_sq = hl.zeros([tile_m], dtype=torch.float32)
        for tile_s in hl.tile(k, block_size=stats_block_k):
            h_s = x[tile_m, tile_s].to(torch.float32)
            if residual is not None:
                h_s = h_s + residual[tile_m, tile_s].to(torch.float32)
            sum_sq = sum_sq + torch.sum(h_s * h_s, dim=-1)
        rms = torch.sqrt(sum_sq / k + eps)
        # Pass 2: amax of y as vLLM's RMSNorm rounds it.
        amax = hl.zeros([tile_m], dtype=torch.float32)
        for tile_a in hl.tile(k, block_size=stats_block_k):
            h_a = x[tile_m, tile_a].to(torch.float32)
            if residual is not None:
                h_a = h_a + residual[tile_m, tile_a].to(torch.float32)
            w_a = norm_weight[tile_a].to(torch.float32)[None, :]
            y_a = rms_weighted_rows(h_a / rms[:, None], w_a, norm_weight.dtype).to(x.dtype)
            amax = torch.maximum(amax, torch.amax(torch.abs(y_a.to(torch.float32)), dim=-1))
        scale_a = torch.clamp(torch.clamp(amax, max=F32_MAX) / FP8_MAX, min=FP8_MIN_SCALE)
        # The K loop: y's slice, quantized in registers, times the weight tile.
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            h_k = x[tile_m, tile_k].to(torch.float32)
            if residual is not None:
                h_k = h_k + residual[tile_m, tile_k].to(torch.float32)
                if tile_n.begin == 0:
                    new_residual[tile_m, tile_k] = h_k.to(x.dtype)
            w_k = norm_weight[tile_k].to(torch.float32)[None, :]
            y_k = rms_weighted_rows(h_k / rms[:, None], w_k, norm_weight.dtype).to(x.dtype)
            q_k = torch.clamp(y_k.to(torch.float32) / scale_a[:, None], -FP8_MAX, FP8_MAX).to(FP8_DTYPE)
            # `acc = acc + dot` (not `acc=`): fp32-promoted fp8 accumulation on sm90
            if swap_ab:
                acc_t = acc_t + hl.dot(b_t[tile_n, tile_k], q_k.t(), out_dtype=torch.float32)
            else:
                acc = acc + hl.dot(q_k, b_t[tile_n, tile_k].t(), out_dtype=torch.float32)
        if swap_ab:
            acc = acc_t.t()
        res = acc * scale_a[:, None] * scale_b[tile_n, 0][None, :]
        if split_k == 1:  # one program per output tile writes it once
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out, new_residual


def _rms_norm_w8a16_linear_body(
    x: torch.Tensor,  # [M, K] bf16/fp16, K contiguous
    residual: torch.Tensor | None,  # [M, K] x's dtype, K contiguous, or None (plain RMSNorm)
    norm_weight: torch.Tensor,  # [K] the RMSNorm weight (bf16/fp16)
    eps: float,
    b_t: torch.Tensor,  # [N, K] fp8, K contiguous (= B.t() of the [K, N] column-major weight)
    scale_b: torch.Tensor,  # fp32 [N, 1] per output channel
    bias: torch.Tensor | None,  # [N] out dtype
    out_dtype: torch.dtype,
    dot_dtype: torch.dtype,  # the dot's operands: x's dtype on the GPU, fp32 in the CPU modes (CPU_FP32_DOT)
) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    n = hl.specialize(b_t.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=x.device)
    new_residual = torch.empty([m, k], dtype=x.dtype, device=x.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    stats_block_k = hl.register_block_size(k)
    if split_k > 1:  # the split-K programs add into `out`; it starts as the bias (or zero)
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        sum_sq = hl.zeros([tile_m], dtype=torch.float32)
        if split_k > 1:  # this program sees one K chunk: the row's sum of squares in its own pass
            for tile_s in hl.tile(k, block_size=stats_block_k):
                h_s = x[tile_m, tile_s].to(torch.float32)
                if residual is not None:
                    h_s = h_s + residual[tile_m, tile_s].to(torch.float32)
                sum_sq = sum_sq + torch.sum(h_s * h_s, dim=-1)
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            h_k = x[tile_m, tile_k].to(torch.float32)
            if residual is not None:
                h_k = h_k + residual[tile_m, tile_k].to(torch.float32)
                if tile_n.begin == 0:
                    new_residual[tile_m, tile_k] = h_k.to(x.dtype)
            if split_k == 1:  # the whole row passes through this loop: its sum of squares too
                sum_sq = sum_sq + torch.sum(h_k * h_k, dim=-1)
            # the norm's weight folded in; 1 / rms is a per-row factor, applied after the dot
            a_k = (h_k * norm_weight[tile_k].to(torch.float32)[None, :]).to(x.dtype).to(dot_dtype)
            w_k = b_t[tile_n, tile_k].to(dot_dtype)  # e4m3 values are exact in bf16 / fp16
            if swap_ab:
                acc_t = acc_t + hl.dot(w_k, a_k.t(), out_dtype=torch.float32)
            else:
                acc = acc + hl.dot(a_k, w_k.t(), out_dtype=torch.float32)
        if swap_ab:
            acc = acc_t.t()
        rms = torch.sqrt(sum_sq / k + eps)  # (rsqrt: Triton's CPU interpreter has no libdevice rsqrt)
        res = acc / rms[:, None] * scale_b[tile_n, 0][None, :]
        if split_k == 1:  # one program per output tile writes it once
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out, new_residual


_BODIES = {"fp8": _rms_norm_fp8_linear_body, "w8a16": _rms_norm_w8a16_linear_body}


@functools.cache
def _kernel_for(activation: str, config_text: str):
    """One ``helion.Kernel`` per (activation kind, config) (:func:`hlcore.helion_compat.config_kernel`)."""
    config = dict(helion.Config.from_json(config_text))
    return config_kernel(
        _BODIES[activation],
        config_text,
        lambda: helion.Config(**{"split_k": 1, "swap_ab": False, **config}),
    )


def _check(x, residual, norm_weight, b, scale_b, out_dtype, bias) -> None:
    name = "rms_norm_fp8_linear"
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in X_DTYPES or x.shape[1] == 0:
        raise ValueError(
            f"{name}: x must be a 2-D [M, K] tensor (K > 0) of bfloat16 or float16; got {describe(x)}"
        )
    m, k = x.shape
    if residual is not None and (
        not isinstance(residual, torch.Tensor) or residual.shape != x.shape or residual.dtype != x.dtype
    ):
        raise ValueError(
            f"{name}: residual must be [M, K] = [{m}, {k}] of x's dtype {x.dtype}; got {describe(residual)}"
        )
    if (
        not isinstance(norm_weight, torch.Tensor)
        or norm_weight.shape != (k,)
        or norm_weight.dtype not in X_DTYPES
    ):
        raise ValueError(
            f"{name}: norm_weight must be a 1-D [K] = [{k}] bfloat16/float16 tensor; got {describe(norm_weight)}"
        )
    n = check_fp8_weight(name, b, k)
    check_per_channel_scale(name, scale_b, n)
    check_out_dtype_and_bias(name, out_dtype, bias, n, OUT_DTYPES)
    check_one_device(name, x=x, residual=residual, norm_weight=norm_weight, b=b, scale_b=scale_b, bias=bias)


def config_from_scaled_mm(config: Any, stats_block_k: int = 512) -> dict:
    """This kernel's config from a ``scaled_mm`` fp8_dynamic config (``helion.Config``, dict or JSON):
    the GEMM's knobs as they are, ``stats_block_k`` appended as the statistics passes' K tile."""
    cfg = json.loads(config_json(config, "rms_norm_linear"))
    cfg["block_sizes"] = [*list(cfg.get("block_sizes", [16, 64, 128]))[:3], stats_block_k]
    return cfg


def _in_helion_order(cfg: dict) -> dict:
    """``cfg`` with its ``block_sizes`` in the order Helion numbers the kernels' block sizes: the
    statistics tile is registered (``hl.register_block_size``) before the tile loop creates
    block_m, block_n and block_k, so Helion reads ``[stats_block_k, block_m, block_n, block_k]``;
    the documented order puts the GEMM's three first, as in ``scaled_mm``."""
    block_m, block_n, block_k, stats_block_k = cfg["block_sizes"]
    return {**cfg, "block_sizes": [stats_block_k, block_m, block_n, block_k]}


def rms_norm_fp8_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    residual: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(Residual add +) RMSNorm, per-token fp8 quantization and the FP8_Dynamic GEMM in one launch
    (the formula is in the module docstring).

    Args:
        x: ``[M, K]`` bfloat16/float16 activations (the hidden states entering the norm); K
            contiguous (a K-strided x is copied first).
        norm_weight: ``[K]`` RMSNorm weight, bfloat16/float16.
        eps: the RMSNorm epsilon.
        b: ``[K, N]`` float8_e4m3fn weight, column-major (the ``weight.t()`` view of the row-major
            ``[N, K]`` tensor vLLM holds); never copied.
        scale_b: float32 per-output-channel weight scales, ``N`` elements.
        residual: optional ``[M, K]`` residual stream of x's dtype (vLLM's ``fused_add_rms_norm``);
            ``h = x + residual`` is normalized and returned as the new residual.
        out_dtype: bfloat16 (default), float16 or float32.
        bias: optional ``[N]`` tensor of ``out_dtype``.
        config: ``block_sizes = [block_m, block_n, block_k, stats_block_k]``, ``split_k``, ``swap_ab``
            and Triton's knobs (a 3-size ``scaled_mm`` config gets :func:`config_from_scaled_mm`'s
            statistics tile); default :data:`DEFAULT_CONFIG`.

    Returns:
        ``(out [M, N] of out_dtype, new_residual [M, K] of x's dtype)``; ``new_residual`` is None
        when ``residual`` is None.

    Raises:
        ValueError: a tensor has the wrong dtype, rank, shape, layout or device (the message names it).
    """
    return _launch("fp8", x, norm_weight, eps, b, scale_b, residual, out_dtype, bias, config)


def _launch(activation, x, norm_weight, eps, b, scale_b, residual, out_dtype, bias, config):
    _check(x, residual, norm_weight, b, scale_b, out_dtype, bias)
    m, k = x.shape
    n = b.shape[1]
    if m == 0:
        empty = torch.empty((0, n), dtype=out_dtype, device=x.device)
        return empty, (torch.empty_like(x) if residual is not None else None)
    x = x if x.stride(1) == 1 else x.contiguous()
    if residual is not None and residual.stride(1) != 1:
        residual = residual.contiguous()
    cfg = json.loads(config_json(DEFAULT_CONFIG if config is None else config, "rms_norm_linear"))
    if len(cfg.get("block_sizes", [])) == 3:
        cfg = config_from_scaled_mm(cfg)
    text = json.dumps(_in_helion_order(cfg), sort_keys=True)
    args = [x, residual, norm_weight, float(eps), b.t(), scale_b.reshape(n, 1), bias, out_dtype]
    if activation == "w8a16":
        args.append(torch.float32 if CPU_FP32_DOT else x.dtype)
    out, new_residual = _kernel_for(activation, text)(*args)
    return out, (new_residual if residual is not None else None)


def rms_norm_w8a16_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    residual: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(Residual add +) RMSNorm and the GEMM with the fp8 weight, the activation kept in x's dtype
    (weight-only fp8, "W8A16"): no activation quantization, one launch.

    ``h = x + residual``; ``out = ((h * norm_weight) @ dequant(B)) * (1 / sqrt(mean(h^2) + eps))``
    per row (the norm's 1/rms is a per-row factor, applied after the dot), ``dequant(B) = B *
    scale_b`` per output channel, ``(+ bias)``. The operand ``h * norm_weight`` is rounded to x's
    dtype for the bf16/fp16 MMA (e4m3 weights are exact there). This is not FP8_Dynamic's
    arithmetic: the activation is never quantized, so the result is nearer the unquantized layer
    than vLLM's W8A8 chain (reference: :func:`rms_norm_w8a16_linear_ref`). With ``split_k == 1`` the
    row's sum of squares is taken in the K loop itself; with ``split_k > 1`` each program takes it in
    one pass over the row first. Arguments, returns and errors as :func:`rms_norm_fp8_linear`
    (``block_sizes[3]``: the statistics tile, used with ``split_k > 1``).
    """
    return _launch("w8a16", x, norm_weight, eps, b, scale_b, residual, out_dtype, bias, config)


def rms_norm_fp8_linear_ref(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    residual: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The unfused chain's reference: :func:`hlcore.norm_quant.fused_add_rms_norm_fp8_quant_ref` (or
    :func:`~hlcore.norm_quant.rms_norm_fp8_quant_ref`), then :func:`hlcore.scaled_mm.scaled_mm_ref`
    (dequantized math in fp32, rounded once)."""
    from hlcore.norm_quant import fused_add_rms_norm_fp8_quant_ref, rms_norm_fp8_quant_ref
    from hlcore.scaled_mm import scaled_mm_ref

    if residual is not None:
        q, scale_a, new_residual = fused_add_rms_norm_fp8_quant_ref(x, residual, norm_weight, eps)
    else:
        (q, scale_a), new_residual = rms_norm_fp8_quant_ref(x, norm_weight, eps), None
    return scaled_mm_ref(q, b, scale_a, scale_b.reshape(-1), out_dtype, bias), new_residual


def rms_norm_w8a16_linear_ref(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    residual: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fp32 reference of (residual add +) RMSNorm then the dequantized fp8 weight, no activation
    quantization and no intermediate rounding: ``y = h / sqrt(mean(h^2) + eps) * norm_weight``,
    ``out = y @ (B * scale_b) (+ bias)``, rounded once; ``new_residual = h`` rounded to x's dtype."""
    h = x.to(torch.float32) + (residual.to(torch.float32) if residual is not None else 0.0)
    y = h / torch.sqrt(torch.mean(h * h, dim=-1, keepdim=True) + eps) * norm_weight.to(torch.float32)
    out = y @ (b.to(torch.float32) * scale_b.reshape(1, -1).to(torch.float32))
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out.to(out_dtype), (h.to(x.dtype) if residual is not None else None)
