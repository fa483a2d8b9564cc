"""Weight-only fp8 linear layers ("W8A16") with their producer inside: the activation stays in
bf16/fp16, so no producer has to quantize it, and the producer's elementwise work runs in the
GEMM's K loop.

    silu_and_mul_w8a16_linear:  out = (silu(g) * u) @ dequant(B) (+ bias)   g, u = x[:, :d], x[:, d:]
    w8a16_linear:               out = x @ dequant(B) (+ bias)
    dequant(B)[k, n] = B[k, n] * scale_b[n]   (fp8 e4m3 weight, per-output-channel fp32 scales)

(the RMSNorm variant, whose 1/rms is a per-row factor applied after the dot, is
:func:`hlcore.norm_linear.rms_norm_w8a16_linear`). ``silu(g) * u`` is computed as vLLM's
``SiluAndMul.forward_native`` rounds it (``F.silu`` in x's dtype, then the product in x's dtype),
one K slice at a time in registers: the down projection of an MLP needs neither the
``silu_and_mul`` kernel nor a quantization kernel before it. The operands of the dot are x's dtype
(e4m3 weights are exact there; fp32 under Triton's CPU interpreter, see
:data:`hlcore.norm_linear.CPU_FP32_DOT`), accumulated in fp32.

This is not FP8_Dynamic's arithmetic (vLLM quantizes the activation per token to fp8 first): the
result is nearer the unquantized layer. References: :func:`silu_and_mul_w8a16_linear_ref`,
:func:`w8a16_linear_ref` (fp32, no intermediate rounding but vLLM's silu rounding).

Tunables: ``block_sizes = [block_m, block_n, block_k]``, ``split_k`` (chunks add into an output
filled with the bias or zeros first, as :func:`hlcore.scaled_mm.scaled_mm`), ``swap_ab`` and Triton's
knobs: a ``scaled_mm`` fp8_dynamic config applies as it is. Part of "The decode linear layer as one
kernel": candidates measured by ``lab/scripts/norm_linear_bench.py``, not used by hlvllm yet.
"""

from __future__ import annotations

import functools
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
from hlcore.norm_linear import CPU_FP32_DOT, OUT_DTYPES, X_DTYPES

DEFAULT_CONFIG = {
    "block_sizes": [16, 64, 128],
    "split_k": 1,
    "swap_ab": True,
    "num_warps": 4,
    "num_stages": 4,
}


def _silu_and_mul_w8a16_linear_body(
    x: torch.Tensor,  # [M, 2, d] view of the [M, 2 d] input (gate, up), d contiguous
    b_t: torch.Tensor,  # [N, d] fp8, d contiguous (= B.t() of the [d, N] column-major weight)
    scale_b: torch.Tensor,  # fp32 [N, 1] per output channel
    bias: torch.Tensor | None,  # [N] out dtype
    out_dtype: torch.dtype,
    dot_dtype: torch.dtype,  # x's dtype on the GPU, fp32 under Triton's CPU interpreter
) -> torch.Tensor:
    m = x.size(0)
    k = hl.specialize(x.size(2))
    n = hl.specialize(b_t.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=x.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    if split_k > 1:  # the split-K programs add into `out`; it starts as the bias (or zero)
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            g = x[tile_m, 0, tile_k].to(torch.float32)
            u = x[tile_m, 1, tile_k].to(torch.float32)
            silu = (g * torch.sigmoid(g)).to(x.dtype)  # F.silu rounds to the input dtype
            a_k = (silu.to(torch.float32) * u).to(x.dtype).to(dot_dtype)
            w_k = b_t[tile_n, tile_k].to(dot_dtype)
            if swap_ab:
                acc_t = acc_t + hl.dot(w_k, a_k.t(), out_dtype=torch.float32)
            else:
                acc = acc + hl.dot(a_k, w_k.t(), out_dtype=torch.float32)
        if swap_ab:
            acc = acc_t.t()
        res = acc * scale_b[tile_n, 0][None, :]
        if split_k == 1:  # one program per output tile writes it once
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out


def _w8a16_linear_body(
    x: torch.Tensor,  # [M, K] bf16/fp16, K contiguous
    b_t: torch.Tensor,  # [N, K] fp8, K contiguous
    scale_b: torch.Tensor,  # fp32 [N, 1]
    bias: torch.Tensor | None,  # [N] out dtype
    out_dtype: torch.dtype,
    dot_dtype: torch.dtype,
) -> torch.Tensor:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    n = hl.specialize(b_t.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=x.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    if split_k > 1:
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            a_k = x[tile_m, tile_k].to(dot_dtype)
            w_k = b_t[tile_n, tile_k].to(dot_dtype)
            if swap_ab:
                acc_t = acc_t + hl.dot(w_k, a_k.t(), out_dtype=torch.float32)
            else:
                acc = acc + hl.dot(a_k, w_k.t(), out_dtype=torch.float32)
        if swap_ab:
            acc = acc_t.t()
        res = acc * scale_b[tile_n, 0][None, :]
        if split_k == 1:
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out


_BODIES = {"silu_and_mul": _silu_and_mul_w8a16_linear_body, "plain": _w8a16_linear_body}


@functools.cache
def _kernel_for(kind: str, config_text: str):
    config = dict(helion.Config.from_json(config_text))
    return config_kernel(
        _BODIES[kind], config_text, lambda: helion.Config(**{"split_k": 1, "swap_ab": False, **config})
    )


def _check(name: str, x, k: int, b, scale_b, out_dtype, bias) -> None:
    n = check_fp8_weight(name, b, k)
    check_per_channel_scale(name, scale_b, n)
    check_out_dtype_and_bias(name, out_dtype, bias, n, OUT_DTYPES)
    check_one_device(name, x=x, b=b, scale_b=scale_b, bias=bias)


def _run(kind: str, x_view, b, scale_b, out_dtype, bias, config, m: int):
    n = b.shape[1]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=b.device)
    text = config_json(DEFAULT_CONFIG if config is None else config, f"{kind} w8a16_linear")
    dot_dtype = torch.float32 if CPU_FP32_DOT else x_view.dtype
    return _kernel_for(kind, text)(x_view, b.t(), scale_b.reshape(n, 1), bias, out_dtype, dot_dtype)


def silu_and_mul_w8a16_linear(
    x: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> torch.Tensor:
    """``(silu(x[:, :d]) * x[:, d:]) @ dequant(B) (+ bias)`` in one launch (module docstring).

    Args:
        x: ``[M, 2 d]`` bfloat16/float16, gate then up (vLLM's ``MergedColumnParallelLinear`` output),
            last dim contiguous (copied first otherwise).
        b: ``[d, N]`` float8_e4m3fn weight, column-major (``weight.t()`` of the row-major ``[N, d]``).
        scale_b: float32 per-output-channel scales, ``N`` elements.
        out_dtype, bias: as :func:`hlcore.scaled_mm.scaled_mm`.
        config: ``scaled_mm``-style config (``block_sizes`` of 3); default :data:`DEFAULT_CONFIG`.

    Returns: ``[M, N]`` of ``out_dtype``. Raises ``ValueError`` naming a wrong tensor.
    """
    name = "silu_and_mul_w8a16_linear"
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in X_DTYPES or x.shape[1] % 2:
        raise ValueError(f"{name}: x must be a 2-D [M, 2 d] bfloat16/float16 tensor; got {describe(x)}")
    d = x.shape[1] // 2
    _check(name, x, d, b, scale_b, out_dtype, bias)
    x = x if x.stride(1) == 1 else x.contiguous()
    return _run("silu_and_mul", x.view(x.shape[0], 2, d), b, scale_b, out_dtype, bias, config, x.shape[0])


def w8a16_linear(
    x: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> torch.Tensor:
    """``x @ dequant(B) (+ bias)`` with x in bfloat16/float16 (no activation quantization), one
    launch. Arguments as :func:`silu_and_mul_w8a16_linear` with ``x`` ``[M, K]`` and ``b`` ``[K, N]``."""
    name = "w8a16_linear"
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in X_DTYPES:
        raise ValueError(f"{name}: x must be a 2-D [M, K] bfloat16/float16 tensor; got {describe(x)}")
    _check(name, x, x.shape[1], b, scale_b, out_dtype, bias)
    x = x if x.stride(1) == 1 else x.contiguous()
    return _run("plain", x, b, scale_b, out_dtype, bias, config, x.shape[0])


def _dequant_ref(b: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    return b.to(torch.float32) * scale_b.reshape(1, -1).to(torch.float32)


def silu_and_mul_w8a16_linear_ref(
    x: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp32 reference: :func:`hlcore.activation.silu_and_mul_ref` (vLLM's rounding), then the
    dequantized fp32 GEMM, rounded once."""
    from hlcore.activation import silu_and_mul_ref

    out = silu_and_mul_ref(x).to(torch.float32) @ _dequant_ref(b, scale_b)
    return (out + bias.to(torch.float32) if bias is not None else out).to(out_dtype)


def w8a16_linear_ref(
    x: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp32 reference: ``x @ (B * scale_b) (+ bias)`` in fp32, rounded once."""
    out = x.to(torch.float32) @ _dequant_ref(b, scale_b)
    return (out + bias.to(torch.float32) if bias is not None else out).to(out_dtype)
