"""FP8_Dynamic MLP of a decoder layer with no kernel between its two GEMMs: SiLU-and-mul goes into the
gate_up GEMM's epilogue and the per-token fp8 quantization into the down GEMM's K loop.

vLLM's chain (FP8_Dynamic, per-token activation scales, per-channel weight scales)::

    gu = bf16(A @ B_gu * scale_a * scale_gu)        [M, 2 d]   (CUTLASS, bf16 output)
    h = silu_and_mul(gu)                            [M, d]     (silu rounded to bf16, product to bf16)
    q, s = per_token_fp8_quant(h)                   s = max(amax(|h|) / 448, 1 / (448 * 512))
    out = q @ B_down * s * scale_down               [M, N]

Here it is two launches:

* :func:`gate_up_silu`: each program computes the gate and the up columns of one ``block_n`` tile of
  ``d`` (two dots over the same A rows, swap-AB), rounds both to bf16 as vLLM's GEMM does, writes
  ``h`` for its tile and the per-row amax of its tile into ``amax_parts [P, M]`` (``P = ceil(d /
  block_n)``, one row per N tile: every element is written by exactly one program, so the buffer
  needs no zeroing and no atomics). No split-K: the epilogue needs the whole sum.
* :func:`silu_down`: each program reduces ``amax_parts[:, rows]`` to the rows' scale ``s`` (vLLM's
  formula above), quantizes each K slice of ``h`` to e4m3 in registers (``clamp(h / s, ±448)``, the
  bytes of :func:`hlcore.quant.per_token_fp8_quant_ref`) and runs the down GEMM; split-K (adding
  into a zeroed output, as :func:`hlcore.scaled_mm.scaled_mm`) and swap-AB as tunables.

A second pair trades FP8_Dynamic's exact bytes for a lighter down GEMM: :func:`gate_up_silu` with
``quantize=True`` writes h as e4m3 quantized per 1 x ``block_n`` group with the tile's own amax
(vLLM's ``per_token_group_fp8_quant`` arithmetic), and :func:`group_down` runs the down GEMM on those
bytes like a Block_FP8 GEMM (each group's partial product scaled in the K loop, the per-channel
weight scale at the end): no quantization in the down GEMM's loop, finer scales than per token.
Another quantization, so not within FP8_Dynamic's tolerance of vLLM's chain: as close to the
unquantized MLP as vLLM's per-token bytes are, but as far from those bytes again (two independent
fp8 roundings of h; relative Frobenius ~0.02-0.035 against a tolerance of 0.015).

So the ``silu_and_mul`` + quantization kernel of vLLM's decode step (one per layer) is not
launched. Same arithmetic as vLLM's chain; references :func:`gate_up_silu_ref`, :func:`silu_down_ref`
(fp32 math with vLLM's roundings), :func:`group_down_ref`. A candidate for "The decode linear layer
as one kernel" (docs/scaled-mm.md), measured by ``lab/scripts/mlp_fp8_bench.py``; not used by hlvllm.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import helion
import helion.language as hl
import torch
from helion.autotuner import BooleanFragment, PowerOfTwoFragment

from hlcore.activation import silu_and_mul_ref
from hlcore.arg_checks import check_fp8_weight, check_one_device, check_per_channel_scale, describe
from hlcore.aux_configs import config_json
from hlcore.helion_compat import config_kernel
from hlcore.quant import FP8_DTYPE, FP8_MAX, FP8_MIN_SCALE, per_token_fp8_quant_ref
from hlcore.quant_kernels import F32_MAX, GROUP_EPS
from hlcore.scaled_mm import scaled_mm_ref

#: ``block_sizes = [block_m, block_n, block_k]``; ``block_n`` tiles ``d`` (gate_up) or ``N`` (down).
GATE_UP_CONFIG = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 4}
DOWN_CONFIG = {"block_sizes": [16, 64, 128], "split_k": 4, "swap_ab": True, "num_warps": 4, "num_stages": 4}


def _gate_up_silu_body(
    a: torch.Tensor,  # [M, K] fp8, K contiguous
    w_gate: torch.Tensor,  # [d, K] fp8, K contiguous (rows 0..d-1 of vLLM's [2 d, K] weight)
    w_up: torch.Tensor,  # [d, K] fp8 (rows d..2d-1)
    scale_a: torch.Tensor,  # fp32 [M, 1]
    scale_gate: torch.Tensor,  # fp32 [d, 1]
    scale_up: torch.Tensor,  # fp32 [d, 1]
    out_dtype: torch.dtype,  # the GEMM's and SiLU-and-mul's rounding
    h_dtype: torch.dtype,  # e4m3: h quantized with its tile's row amax (1 x block_n groups); else out_dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    m = a.size(0)
    k = hl.specialize(a.size(1))
    d = hl.specialize(w_gate.size(0))
    # registered first, so Helion numbers it block_sizes[0] (gate_up_silu passes the documented
    # [block_m, block_n, block_k] in that order); the kernel sizes amax_parts itself, so it holds one
    # row per N tile in every mode (Helion's eager interpreter runs a loop as one tile)
    block_n = hl.register_block_size(d)
    h = torch.empty([m, d], dtype=h_dtype, device=a.device)
    amax_parts = torch.empty([helion.cdiv(d, block_n), m], dtype=torch.float32, device=a.device)
    for tile_m, tile_n in hl.tile([m, d], block_size=[None, block_n]):
        # swap-AB always (the decode case: the weight's rows fill the MMA's M); a swap_ab tunable with
        # four accumulators trips Helion 1.5.0's masked-value analysis of the amax below
        acc_gt = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        acc_ut = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(k):
            a_k = a[tile_m, tile_k]
            acc_gt = acc_gt + hl.dot(w_gate[tile_n, tile_k], a_k.t(), out_dtype=torch.float32)
            acc_ut = acc_ut + hl.dot(w_up[tile_n, tile_k], a_k.t(), out_dtype=torch.float32)
        acc_g = acc_gt.t()
        acc_u = acc_ut.t()
        row_scale = scale_a[tile_m, 0][:, None]
        gate = (acc_g * row_scale * scale_gate[tile_n, 0][None, :]).to(out_dtype).to(torch.float32)
        up = (acc_u * row_scale * scale_up[tile_n, 0][None, :]).to(out_dtype).to(torch.float32)
        silu = (gate * torch.sigmoid(gate)).to(out_dtype)  # F.silu rounds to the input dtype
        h_tile = (silu.to(torch.float32) * up).to(out_dtype).to(torch.float32)
        amax = torch.amax(torch.abs(h_tile), dim=1)
        amax_parts[tile_n.id, tile_m] = amax
        if (
            h_dtype == FP8_DTYPE
        ):  # vLLM's per_token_group_fp8_quant of the tile (hlcore.quant_kernels.fp8_group_rows)
            group_scale = torch.clamp(torch.clamp(amax, max=F32_MAX), min=GROUP_EPS) / FP8_MAX
            h[tile_m, tile_n] = torch.clamp(h_tile / group_scale[:, None], -FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        else:
            h[tile_m, tile_n] = h_tile.to(out_dtype)
    return h, amax_parts


def _silu_down_body(
    h: torch.Tensor,  # [M, d] bf16/fp16, d contiguous
    amax_parts: torch.Tensor,  # fp32 [P, M]
    w_down: torch.Tensor,  # [N, d] fp8, d contiguous
    scale_down: torch.Tensor,  # fp32 [N, 1]
    out_dtype: torch.dtype,
) -> torch.Tensor:
    m = h.size(0)
    k = hl.specialize(h.size(1))
    n = hl.specialize(w_down.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=h.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    if split_k > 1:  # the split-K programs add into `out`
        out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        amax = torch.amax(amax_parts[:, tile_m], dim=0)  # [tile_m]
        row_scale = torch.clamp(torch.clamp(amax, max=F32_MAX) / FP8_MAX, min=FP8_MIN_SCALE)
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            x = h[tile_m, tile_k].to(torch.float32)
            q = torch.clamp(x / row_scale[:, None], -FP8_MAX, FP8_MAX).to(FP8_DTYPE)
            w_k = w_down[tile_n, tile_k]
            if swap_ab:
                acc_t = acc_t + hl.dot(w_k, q.t(), out_dtype=torch.float32)
            else:
                acc = acc + hl.dot(q, w_k.t(), out_dtype=torch.float32)
        if swap_ab:
            acc = acc_t.t()
        res = acc * (row_scale[:, None] * scale_down[tile_n, 0][None, :])  # scales first: no fp32 overflow
        if split_k == 1:
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out


def _group_down_body(
    q: torch.Tensor,  # [M, d] e4m3, d contiguous
    amax_parts: torch.Tensor,  # fp32 [P, M]: row amax of each 1 x (d / P) group of h
    w_down: torch.Tensor,  # [N, d] fp8, d contiguous
    scale_down: torch.Tensor,  # fp32 [N, 1]
    out_dtype: torch.dtype,
) -> torch.Tensor:
    m = q.size(0)
    k = hl.specialize(q.size(1))
    n = hl.specialize(w_down.size(0))
    group = k // hl.specialize(amax_parts.size(0))
    out = torch.empty([m, n], dtype=out_dtype, device=q.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(helion.cdiv(k, group), split_k)) * group  # whole groups
    if split_k > 1:  # the split-K programs add into `out`
        out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        res = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        res_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_kb in hl.tile(outer_k.begin, outer_k.end, block_size=group):
            amax = amax_parts[tile_kb.begin // group, tile_m]
            group_scale = torch.clamp(torch.clamp(amax, max=F32_MAX), min=GROUP_EPS) / FP8_MAX
            if swap_ab:
                part_t = hl.dot(w_down[tile_n, tile_kb], q[tile_m, tile_kb].t(), out_dtype=torch.float32)
                res_t = res_t + part_t * group_scale[None, :]
            else:
                part = hl.dot(q[tile_m, tile_kb], w_down[tile_n, tile_kb].t(), out_dtype=torch.float32)
                res = res + part * group_scale[:, None]
        if swap_ab:
            res = res_t.t()
        res = res * scale_down[tile_n, 0][None, :]
        if split_k == 1:
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out


_BODIES = {"gate_up_silu": _gate_up_silu_body, "silu_down": _silu_down_body, "group_down": _group_down_body}
OUT_DTYPES = (torch.bfloat16, torch.float16)


@functools.cache
def _kernel_for(kind: str, config_text: str):
    config = dict(helion.Config.from_json(config_text))
    extra = {} if kind == "gate_up_silu" else {"split_k": 1, "swap_ab": False}
    return config_kernel(_BODIES[kind], config_text, lambda: helion.Config(**{**extra, **config}))


def _block_n(config: dict) -> int:
    return int(config["block_sizes"][1])


def gate_up_silu(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    *,
    quantize: bool = False,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = silu_and_mul(bf16(A @ B * scale_a * scale_b))`` and its per-tile row amax, one launch;
    with ``quantize``, h leaves the kernel as e4m3 in 1 x ``block_n`` groups (:func:`group_down`).

    Args:
        a: ``[M, K]`` float8_e4m3fn activations, K contiguous (vLLM's per-token quantized input).
        b: ``[K, 2 d]`` float8_e4m3fn gate_up weight, column-major (vLLM's ``weight.t()``; gate in
            columns ``0..d-1``, up in ``d..2 d-1``, as ``MergedColumnParallelLinear`` stacks them).
        scale_a: float32 per-token scales, ``M`` elements. scale_b: float32 per-channel, ``2 d``.
        out_dtype: bfloat16 or float16 (the dtype vLLM's GEMM writes and SiLU-and-mul rounds to).
        quantize: return h quantized per 1 x ``block_n`` group instead (vLLM's
            ``per_token_group_fp8_quant`` arithmetic: ``scale = max(amax, 1e-10) / 448``, ``q =
            e4m3(clamp(h / scale, ±448))``, amax of the group's bf16 values); d must be a multiple of
            ``block_n``.
        config: ``{"block_sizes": [block_m, block_n, block_k], "num_warps", "num_stages", ...}``;
            default :data:`GATE_UP_CONFIG`. Always swap-AB; no split-K.

    Returns:
        ``(h [M, d], amax_parts [ceil(d / block_n), M] float32)``: h in ``out_dtype`` (``quantize``:
        e4m3); row ``p`` of ``amax_parts`` is ``max |h[:, p * block_n : (p + 1) * block_n]|`` (of the
        bf16 values) per row; inputs of :func:`silu_down` (:func:`group_down` with ``quantize``).

    Raises:
        ValueError: a tensor of the wrong shape, dtype, layout or device (named), or a config with
            ``split_k`` other than 1.
    """
    name = "gate_up_silu"
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or a.dtype != FP8_DTYPE:
        raise ValueError(f"{name}: a must be a 2-D [M, K] float8_e4m3fn tensor; got {describe(a)}")
    m, k = a.shape
    n2 = check_fp8_weight(name, b, k)
    if n2 % 2:
        raise ValueError(
            f"{name}: b must have an even number of columns [K, 2 d] (gate, up); got {describe(b)}"
        )
    check_per_channel_scale(name, scale_b, n2)
    if not isinstance(scale_a, torch.Tensor) or scale_a.dtype != torch.float32 or scale_a.numel() != m:
        raise ValueError(f"{name}: scale_a must be float32 with M={m} elements; got {describe(scale_a)}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"{name}: out_dtype must be bfloat16 or float16; got {out_dtype}")
    check_one_device(name, a=a, b=b, scale_a=scale_a, scale_b=scale_b)
    cfg = dict(GATE_UP_CONFIG if config is None else _json_config(config, name))
    if cfg.get("split_k", 1) != 1:
        raise ValueError(f"{name}: split_k must be 1 (the epilogue needs whole sums); got {cfg['split_k']}")
    cfg.pop("split_k", None)
    cfg.pop("swap_ab", None)  # always swapped
    d = n2 // 2
    if quantize and d % _block_n(cfg):
        raise ValueError(f"{name}: quantize needs d={d} to be a multiple of block_n={_block_n(cfg)}")
    if m == 0:
        parts = torch.empty((-(-d // _block_n(cfg)), 0), dtype=torch.float32, device=a.device)
        return torch.empty((0, d), dtype=FP8_DTYPE if quantize else out_dtype, device=a.device), parts
    a = a if a.stride(1) == 1 else a.contiguous()
    w = b.t()  # [2 d, K], K contiguous
    sb = scale_b.reshape(n2, 1)
    block_m, block_n, block_k = cfg["block_sizes"]
    text = config_json({**cfg, "block_sizes": [block_n, block_m, block_k]}, name)  # Helion's order
    h, parts = _kernel_for(name, text)(
        a,
        w[:d],
        w[d:],
        scale_a.reshape(m, 1),
        sb[:d],
        sb[d:],
        out_dtype,
        FP8_DTYPE if quantize else out_dtype,
    )
    return h, parts


def silu_down(
    h: torch.Tensor,
    amax_parts: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    *,
    config: Any = None,
) -> torch.Tensor:
    """``out = per_token_fp8(h) @ B * s * scale_b`` with the quantization in the K loop, one launch.

    Args:
        h: ``[M, d]`` bfloat16/float16, d contiguous (:func:`gate_up_silu`'s output).
        amax_parts: float32 ``[P, M]``, ``max`` over its rows is each row's ``max |h|``
            (:func:`gate_up_silu`'s second output; any ``P >= 1``).
        b: ``[d, N]`` float8_e4m3fn down weight, column-major. scale_b: float32 per-channel, N.
        out_dtype: bfloat16, float16 or float32.
        config: ``scaled_mm``-style (``block_sizes`` of 3, ``split_k``, ``swap_ab``); default
            :data:`DOWN_CONFIG`.

    Returns: ``[M, N]`` of ``out_dtype``; ``s = max(amax / 448, 1 / (448 * 512))`` per row, as
    vLLM's dynamic per-token fp8 quantization. Raises ``ValueError`` naming a wrong tensor.
    """
    name = "silu_down"
    if not isinstance(h, torch.Tensor) or h.dim() != 2 or h.dtype not in OUT_DTYPES:
        raise ValueError(f"{name}: h must be a 2-D [M, d] bfloat16/float16 tensor; got {describe(h)}")
    return _down(name, h, amax_parts, b, scale_b, out_dtype, config)


def group_down(
    q: torch.Tensor,
    amax_parts: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    *,
    config: Any = None,
) -> torch.Tensor:
    """``out = Σ_g (q_g @ B_g) * s_g * scale_b``: the down GEMM on :func:`gate_up_silu`'s
    ``quantize`` output, one launch, no quantization inside.

    Args:
        q: ``[M, d]`` float8_e4m3fn, d contiguous, quantized in ``P`` groups of ``d / P`` columns.
        amax_parts: float32 ``[P, M]``, each group's row amax; its scale is ``max(amax, 1e-10) / 448``.
        b: ``[d, N]`` float8_e4m3fn down weight, column-major. scale_b: float32 per-channel, N.
        out_dtype: bfloat16, float16 or float32.
        config: ``{"block_sizes": [block_m, block_n] (a third entry is ignored: the K tile is the
            group), "split_k", "swap_ab", ...}``; default :data:`DOWN_CONFIG`.

    Not FP8_Dynamic's bytes (per-token scales): 1 x (d / P) groups, as near the unquantized MLP as
    vLLM's chain, outside FP8_Dynamic's tolerance of it (see the module docstring).
    Raises ``ValueError`` naming a wrong tensor, or when P does not divide d.
    """
    name = "group_down"
    if not isinstance(q, torch.Tensor) or q.dim() != 2 or q.dtype != FP8_DTYPE:
        raise ValueError(f"{name}: q must be a 2-D [M, d] float8_e4m3fn tensor; got {describe(q)}")
    return _down(name, q, amax_parts, b, scale_b, out_dtype, config)


def _down(name: str, x, amax_parts, b, scale_b, out_dtype, config) -> torch.Tensor:
    """Checks and launch shared by :func:`silu_down` (``x`` = h) and :func:`group_down` (``x`` = q,
    whose groups must divide d)."""
    m, d = x.shape
    n = check_fp8_weight(name, b, d)
    check_per_channel_scale(name, scale_b, n)
    grouped = name == "group_down"
    if (
        not isinstance(amax_parts, torch.Tensor)
        or amax_parts.dim() != 2
        or amax_parts.dtype != torch.float32
        or amax_parts.shape[1] != m
        or amax_parts.shape[0] < 1
        or (grouped and d % amax_parts.shape[0])
    ):
        need = f"[P, M={m}] with P dividing d={d}" if grouped else f"[P >= 1, M={m}]"
        raise ValueError(f"{name}: amax_parts must be float32 {need}; got {describe(amax_parts)}")
    if out_dtype not in (*OUT_DTYPES, torch.float32):
        raise ValueError(f"{name}: out_dtype must be bfloat16, float16 or float32; got {out_dtype}")
    check_one_device(name, x=x, amax_parts=amax_parts, b=b, scale_b=scale_b)
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=x.device)
    cfg = _json_config(DOWN_CONFIG if config is None else config, name)
    if grouped:  # the K tile is the group
        cfg["block_sizes"] = list(cfg["block_sizes"])[:2]
    x = x if x.stride(1) == 1 else x.contiguous()
    return _kernel_for(name, config_json(cfg, name))(
        x, amax_parts.contiguous(), b.t(), scale_b.reshape(n, 1), out_dtype
    )


def group_down_ref(
    q: torch.Tensor,
    amax_parts: torch.Tensor,
    b: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype=torch.bfloat16,
) -> torch.Tensor:
    """fp32 reference of :func:`group_down`: ``q`` dequantized with each group's scale, times the
    dequantized weight, rounded once."""
    group = q.shape[1] // amax_parts.shape[0]
    scale = amax_parts.t().clamp(max=F32_MAX).clamp(min=GROUP_EPS) / FP8_MAX  # [M, P]
    a32 = q.to(torch.float32) * scale.repeat_interleave(group, dim=1)
    return (a32 @ (b.to(torch.float32) * scale_b.reshape(1, -1))).to(out_dtype)


def _json_config(config: Any, who: str) -> dict:
    """``config`` (a ``helion.Config``, a dict or its JSON) as a dict."""
    return json.loads(config_json(config, who))


def gate_up_silu_ref(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out_dtype=torch.bfloat16
) -> torch.Tensor:
    """vLLM's chain up to ``h``: :func:`hlcore.scaled_mm.scaled_mm_ref` (fp32, rounded once to
    ``out_dtype``), then :func:`hlcore.activation.silu_and_mul_ref`."""
    return silu_and_mul_ref(scaled_mm_ref(a, b, scale_a, scale_b, out_dtype))


def silu_down_ref(h: torch.Tensor, b: torch.Tensor, scale_b: torch.Tensor, out_dtype=torch.bfloat16):
    """vLLM's chain from ``h``: :func:`hlcore.quant.per_token_fp8_quant_ref`, then the fp32
    dequantized GEMM rounded once."""
    q, s = per_token_fp8_quant_ref(h)
    return scaled_mm_ref(q, b, s, scale_b, out_dtype)
