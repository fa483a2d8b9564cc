"""Block_FP8 linear with the activation quantization inside the GEMM: one Helion kernel.

``out = sum_kb (Q(x)[:, kb] @ B[kb, :]) * s_x[:, kb] * scale_b[nb, kb] (+ bias)``, where
``Q(x), s_x`` is vLLM's ``per_token_group_quant_fp8`` of the bf16/fp16/fp32 activations in 1 x 128
groups along K (``s = max(min(amax, f32 max), 1e-10) / 448``, ``q = e4m3(clamp(x / s, -448, 448))``,
:func:`hlcore.quant_kernels.fp8_group_rows`) and ``scale_b`` the 128 x 128 block scales of the fp8
weight (vLLM's ``weight_scale_inv``). Every K tile of the GEMM is one 128-wide group, so each program
quantizes the groups of x it reads, in registers: no quantized copy of x, no scale tensor, no
second launch (vLLM runs the quantization as its own kernel before the GEMM). Programs that share
rows of x (other N tiles, other K splits) quantize the same groups again, which costs arithmetic,
not memory traffic, at decode sizes (M <= 32).

The result equals :func:`hlcore.quant_kernels.per_token_group_fp8_quant` followed by
:func:`hlcore.scaled_mm.scaled_mm` with ``block_size=(128, 128)`` and the same config (same
quantized bytes, same tiles and accumulation order; bitwise for ``split_k == 1``). Tunables: the
scaled GEMM's ``block_sizes[:2]`` (M and N tiles; the K tile is the 128-wide group), ``split_k``,
``swap_ab`` and Triton's knobs, so a shipped ``scaled_mm`` block_fp8 config applies
(:func:`config_from_scaled_mm`). Part of "The decode linear layer as one kernel": hlvllm's Block_FP8
layers use it with ``HL_FUSED_QUANT=1`` (off by default until measured). The block loop is
:func:`hlcore.scaled_mm`'s block branch with the group quantization in front: Helion 1.5.0 compiles
the group math as a device helper (``fp8_group_rows``) but not the scaled ``hl.dot`` step
(``InductorLoweringError`` on the sliced scales), so that step is written out in both kernels.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import helion
import helion.language as hl
import torch
from helion.autotuner import BooleanFragment, PowerOfTwoFragment

from hlcore import kernel_pool
from hlcore.arg_checks import check_fp8_weight, check_one_device, check_out_dtype_and_bias, describe
from hlcore.aux_configs import config_json
from hlcore.helion_compat import config_kernel
from hlcore.quant_kernels import fp8_group_rows

FP8_DTYPE = torch.float8_e4m3fn
GROUP = 128
X_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _block_fp8_linear_body(
    x: torch.Tensor,  # [M, K] bf16/fp16/fp32, K contiguous
    b_t: torch.Tensor,  # [N, K] fp8, K contiguous (= B.t() of the [K, N] column-major weight)
    scale_b: torch.Tensor,  # fp32 [ceil(N/128), ceil(K/128)]
    bias: torch.Tensor | None,  # [N] out dtype
    out_dtype: torch.dtype,
) -> torch.Tensor:
    m = x.size(0)
    k = hl.specialize(x.size(1))
    n = hl.specialize(b_t.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=x.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(helion.cdiv(k, GROUP), split_k)) * GROUP  # whole groups
    if split_k > 1:  # the split-K programs add into `out`; it starts as the bias (or zero)
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        res = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        res_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_kb in hl.tile(outer_k.begin, outer_k.end, block_size=GROUP):
            kb = tile_kb.begin // GROUP
            a_q, a_s = fp8_group_rows(x[tile_m, tile_kb].to(torch.float32))  # this group of every row
            if swap_ab:
                part_t = hl.dot(b_t[tile_n, tile_kb], a_q.t(), out_dtype=torch.float32)
                res_t = res_t + part_t * scale_b[tile_n.index // GROUP, kb][:, None] * a_s[None, :]
            else:
                part = hl.dot(a_q, b_t[tile_n, tile_kb].t(), out_dtype=torch.float32)
                res = res + part * a_s[:, None] * scale_b[tile_n.index // GROUP, kb][None, :]
        if swap_ab:
            res = res_t.t()
        if split_k == 1:  # one program per output tile writes it once
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out


def config_from_scaled_mm(config: Any) -> dict:
    """This kernel's config from a ``scaled_mm`` block_fp8 config (dict, JSON or ``helion.Config``):
    ``block_sizes[:2]`` (the K tile is the 128-wide group here), every other knob as it is."""
    cfg = dict(json.loads(config_json(config, "block_fp8_linear")))
    cfg["block_sizes"] = list(cfg.get("block_sizes", [16, 64]))[:2]
    return cfg


@functools.cache
def _kernel_for(config_text: str):
    """One ``helion.Kernel`` per config (:func:`hlcore.helion_compat.config_kernel`), the same in
    compiled and both interpret modes."""
    config = dict(helion.Config.from_json(config_text))
    return config_kernel(
        _block_fp8_linear_body,
        config_text,
        lambda: helion.Config(**{"split_k": 1, "swap_ab": False, **config}),
    )


def _check(x, b, scale_b, out_dtype, bias) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in X_DTYPES or x.shape[1] == 0:
        raise ValueError(
            f"block_fp8_linear: x must be a 2-D [M, K] tensor (K > 0) of dtype bfloat16, float16 or float32; "
            f"got {describe(x)}"
        )
    m, k = x.shape
    n = check_fp8_weight("block_fp8_linear", b, k)
    want = (-(-n // GROUP), -(-k // GROUP))
    if (
        not isinstance(scale_b, torch.Tensor)
        or scale_b.dtype != torch.float32
        or tuple(scale_b.shape) != want
    ):
        raise ValueError(
            f"block_fp8_linear: scale_b must be float32 [ceil(N/128), ceil(K/128)] = {list(want)} "
            f"(128 x 128 weight blocks); got {describe(scale_b)}"
        )
    check_out_dtype_and_bias("block_fp8_linear", out_dtype, bias, n, OUT_DTYPES)
    check_one_device("block_fp8_linear", x=x, b=b, scale_b=scale_b, bias=bias)


def block_fp8_linear(
    x: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> torch.Tensor:
    """Block_FP8 linear ``out = Q(x) @ dequant(B) (+ bias)`` with the 1 x 128 activation quantization
    inside the GEMM (see the module docstring for the formula).

    Args:
        x: ``[M, K]`` bfloat16, float16 or float32 activations; any row stride, K contiguous (a
            K-strided x is copied first); K need not be a multiple of 128 (the last group is partial).
        b: ``[K, N]`` float8_e4m3fn weight, column-major (the ``weight.t()`` view of a row-major
            ``[N, K]`` tensor); never copied.
        scale_b: float32 ``[ceil(N/128), ceil(K/128)]`` 128 x 128 block scales.
        out_dtype: bfloat16 (default), float16 or float32.
        bias: optional ``[N]`` tensor of ``out_dtype``, added after scaling.
        config: this kernel's config (``block_sizes = [block_m, block_n]``, ``split_k``, ``swap_ab``,
            Triton knobs) or a ``scaled_mm`` block_fp8 config (3 block sizes: the third is dropped);
            default: the ``scaled_mm`` pick for (block_fp8, M, N, K)
            (:func:`hlcore.scaled_mm_config.pick_scaled_mm_config`).

    Returns:
        ``[M, N]`` tensor of ``out_dtype``; M = 0 returns an empty ``[0, N]`` without a launch.

    Raises:
        ValueError: a tensor has the wrong dtype, rank, shape, layout or device (the message names it).

    Determinism: bitwise repeatable for ``split_k == 1``; with ``split_k > 1`` the order of the
    atomic adds varies.
    """
    _check(x, b, scale_b, out_dtype, bias)
    m, k = x.shape
    n = b.shape[1]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=x.device)
    if x.stride(1) != 1:
        x = x.contiguous()
    if config is None:
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        config = pick_scaled_mm_config("block_fp8", m, n, k, device=x.device).config_json
    text = json.dumps(config_from_scaled_mm(config), sort_keys=True)
    args = (x, b.t(), scale_b, bias, out_dtype)
    jobs = kernel_pool.recorder()
    if jobs is not None:  # compiled elsewhere first (hlcore.kernel_pool.recording): no launch here
        kernel_pool.record("block_fp8_linear", _kernel_for(text), text, args, jobs)
        return torch.empty((m, n), dtype=out_dtype, device=x.device)
    return _kernel_for(text)(*args)


def block_fp8_linear_ref(
    x: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp32 reference: :mod:`hlcore.quant`'s 1 x 128 group quantization of x, then
    :func:`hlcore.scaled_mm.scaled_mm_ref` (dequantized math in fp32, rounded once)."""
    from hlcore.formats import get_format
    from hlcore.scaled_mm import scaled_mm_ref

    a, scale_a = get_format("block_fp8").quantize_activation(x)
    return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias, block_size=(GROUP, GROUP))
