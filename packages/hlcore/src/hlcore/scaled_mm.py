"""Scaled GEMM for decode-size quantized linear layers: every format of :mod:`hlcore.formats` in one
Helion kernel body.

    out[M, N] = sum_k scale_a[m, k // g] * scale_b[n // g, k // g] * A[m, k] * B[k, n]  (+ bias[n])

Tensors (per-format dtypes and scale shapes: the records of :mod:`hlcore.formats`):

* ``A [M, K]``: float8_e4m3fn (``fp8_dynamic``, ``block_fp8``) or int8 (``w8a8_int8``), K contiguous,
  any row stride;
* ``B [K, N]``: A's dtype, column-major: the ``weight.t()`` view of the row-major ``[N, K]`` weight
  vLLM holds after ``process_weights_after_loading``; the kernel reads it through ``B.t()`` (a view),
  never copied;
* ``scale_a`` fp32: ``[M, 1]`` per token, or ``[M, ceil(K/128)]`` per 1x128 group (row- or
  column-major); ``scale_b`` fp32: ``[N, 1]`` per output channel, or ``[ceil(N/128), ceil(K/128)]``
  per 128x128 weight block (g = 128 above; per-token/channel formats have one group: g = K);
* ``bias`` optional ``[N]`` of the output dtype; ``out [M, N]`` bfloat16, float16 or float32.

Accumulation: per-token/per-channel formats accumulate their whole K chunk (fp32 for fp8, exact int32
for int8) and scale once in the epilogue; block formats scale each 128-wide K tile's fp32 partial
product inside the K loop (the order of DeepGEMM). The format differences are three named pieces:
the accumulator dtype, the group size ``group_k`` (0 = one group per row/column) and the epilogue
that applies the scales. fp8 products are summed as ``acc = acc + hl.dot(...)``, not ``acc=``:
Triton then promotes each K tile's product to fp32 on sm90 instead of its imprecise fp8 wgmma
accumulation.

Knobs (``hl.register_tunable``; picked per shape by :mod:`hlcore.scaled_mm_config`, one validity
predicate :func:`hlcore.scaled_mm_config.check_scaled_mm_config`):

* ``block_sizes = [block_m, block_n, block_k]``: the output tile and the inner K tile (block formats
  step through K in their 128-wide groups);
* ``split_k`` (power of two, 1..256): K is cut into chunks of whole K tiles (whole groups) that run
  as separate programs; each adds its tile into the output with ``hl.atomic_add`` in the output
  dtype, after the kernel's host code has filled the output with the bias (or zeros). Small K gives
  fewer chunks than ``split_k`` (K = 96, ``split_k`` = 4: 3 chunks of 32);
* ``swap_ab`` (bool): computes the transposed tile ``B^T @ A^T`` so the tiny M sits on the MMA's
  narrow side and N fills the 64-row wgmma side (the usual decode "swap-AB" kernel);
* ``prefetch_scales`` (bool, block formats only): each K step loads the next group's ``scale_a``
  and ``scale_b`` (loop-carried values) so their latency overlaps the step before (Triton
  pipelines the A and B tiles' loads, not these); same math, same order. Meant for column-major
  ``scale_a`` (what vLLM's group quantization writes for DeepGEMM), where each group's scales sit
  in another cache line, while a row-major row of scales is one line;
* Helion's own: ``num_warps``, ``num_stages``, ``indexing`` (pointers or tensor descriptors), ...

Determinism: with ``split_k == 1`` every output element is written once by one program, bitwise
repeatable; with ``split_k > 1`` the order of the atomic adds varies (one output rounding per chunk,
within the format's tolerance).

Errors: :func:`check_scaled_mm_args` raises ``ValueError`` naming the tensor, its shape, dtype,
strides and device and what is supported; an invalid config raises ``ValueError`` with the reason.

Semantics source: vLLM 0.26's ``cutlass_scaled_mm`` (fp8 and int8, per token x per channel) and
``w8a8_triton_block_scaled_mm`` / DeepGEMM ``fp8_gemm_nt`` (block FP8); the reference is
:func:`scaled_mm_ref` (fp32 dequantized math).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch

from hlcore import kernel_pool
from hlcore.arg_checks import describe as _describe
from hlcore.aux_configs import config_json
from hlcore.formats import FORMATS, OUT_DTYPE_NAMES, ScaledMMFormat, get_format
from hlcore.helion_compat import config_kernel, gemm_kernel, local_kernel

FP8_DTYPE = torch.float8_e4m3fn
OUT_DTYPES = tuple(getattr(torch, name) for name in OUT_DTYPE_NAMES)
INPUT_DTYPES = tuple(dict.fromkeys(getattr(torch, f.operand_dtype) for f in FORMATS.values()))
BLOCK_SIZE = FORMATS["block_fp8"].block_size  # (N, K) weight block of block_fp8, as vLLM's weight_block_size
USER_TUNABLE_DEFAULTS = {"split_k": 1, "swap_ab": False, "prefetch_scales": False}

# Helion, imported on first need (:func:`_import_helion`: making a kernel, a ``helion.Config``):
# a process whose GEMM calls all load from the kernel cache never imports it (hlcore.helion_free).
# The kernel body reads these module globals when Helion traces it.
helion: Any = None
hl: Any = None
BooleanFragment: Any = None
PowerOfTwoFragment: Any = None


def _import_helion() -> None:
    global helion, hl, BooleanFragment, PowerOfTwoFragment
    if helion is None:
        import helion as helion_module
        import helion.language as language
        from helion.autotuner import BooleanFragment as boolean
        from helion.autotuner import PowerOfTwoFragment as power_of_two

        hl, BooleanFragment, PowerOfTwoFragment = language, boolean, power_of_two
        helion = helion_module  # last: the others are set once this is


# --------------------------------------------------------------------------------------------
# Helion kernel
# --------------------------------------------------------------------------------------------
def _scaled_mm_body(
    a: torch.Tensor,  # [M, K] fp8 or int8, K contiguous
    b_t: torch.Tensor,  # [N, K] same dtype, K contiguous (= B.t() of the [K, N] column-major weight)
    scale_a: torch.Tensor,  # fp32 [M, 1] (per token) or [M, ceil(K/g)] (group_k = g), any strides
    scale_b: torch.Tensor,  # fp32 [N, 1] (per channel) or [ceil(N/g), ceil(K/g)] (group_k = g)
    bias: torch.Tensor | None,  # [N] out dtype
    out: torch.Tensor,  # [M, N] bf16/fp16/fp32, row-major: written in place
    group_k: int,  # 0: per-token x per-channel scales; g (128): 1 x g / g x g block scales
) -> torch.Tensor:
    # The tiles run over out's rows, not A's: Helion 1.5.0 indexes a size-1 dim of a tensor that
    # does not own the tile as a broadcast, so at M = 1 a tile over A's rows would store every row
    # of the tile into out's one row; over out's rows, A's one row is the one broadcast (read).
    m = out.size(0)
    k = hl.specialize(a.size(1))
    n = hl.specialize(b_t.size(0))
    group_k = hl.specialize(group_k)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    prefetch_scales = hl.register_tunable("prefetch_scales", BooleanFragment())
    acc_dtype = torch.int32 if a.dtype == torch.int8 else torch.float32
    # Both branches below are traced, so the group arithmetic must not divide by zero when g = 0.
    kg = max(group_k, 1)
    groups = helion.cdiv(k, kg)  # 1 x g groups along K (block scales)
    k_chunk = helion.next_power_of_2(helion.cdiv(helion.cdiv(k, kg), split_k)) * kg  # whole groups
    if split_k > 1:
        # The split-K programs add into `out`; it starts as the bias (or zero).
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        if group_k == 0:  # one scale per row of A and per column of B: scale once, at the end
            acc = hl.zeros([tile_m, tile_n], dtype=acc_dtype)
            acc_t = hl.zeros([tile_n, tile_m], dtype=acc_dtype)
            for tile_k in hl.tile(outer_k.begin, outer_k.end):
                # `acc = acc + dot` (not `acc=`): fp32-promoted fp8 accumulation on sm90
                if swap_ab:
                    acc_t = acc_t + hl.dot(b_t[tile_n, tile_k], a[tile_m, tile_k].t(), out_dtype=acc_dtype)
                else:
                    acc = acc + hl.dot(a[tile_m, tile_k], b_t[tile_n, tile_k].t(), out_dtype=acc_dtype)
            if swap_ab:
                acc = acc_t.t()
            res = acc.to(torch.float32) * scale_a[tile_m, 0][:, None] * scale_b[tile_n, 0][None, :]
        else:  # block scales: scale every g-wide K tile's partial product inside the loop
            res = hl.zeros([tile_m, tile_n], dtype=torch.float32)
            res_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
            # prefetch_scales: each group's scales are loaded one K step ahead (loop-carried values),
            # so their latency overlaps the step before (Triton pipelines the A and B tiles' loads
            # but not these); the last step's loads (group kb + 1 mod groups: in bounds) go unused.
            sa_next = scale_a[tile_m, outer_k.begin // kg]
            sb_next = scale_b[tile_n.index // kg, outer_k.begin // kg]
            for tile_kb in hl.tile(outer_k.begin, outer_k.end, block_size=kg):
                kb = tile_kb.begin // kg
                if prefetch_scales:
                    sa = sa_next
                    sb = sb_next
                    sa_next = scale_a[tile_m, (kb + 1) % groups]
                    sb_next = scale_b[tile_n.index // kg, (kb + 1) % groups]
                else:
                    sa = scale_a[tile_m, kb]
                    sb = scale_b[tile_n.index // kg, kb]
                if swap_ab:
                    part_t = hl.dot(b_t[tile_n, tile_kb], a[tile_m, tile_kb].t(), out_dtype=torch.float32)
                    res_t = res_t + part_t * sb[:, None] * sa[None, :]
                else:
                    part = hl.dot(a[tile_m, tile_kb], b_t[tile_n, tile_kb].t(), out_dtype=torch.float32)
                    res = res + part * sa[:, None] * sb[None, :]
            if swap_ab:
                res = res_t.t()
        if split_k == 1:  # constexpr branch: one program per output tile writes it once
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
    return out


def helion_config(config_text: str) -> helion.Config:
    """The ``helion.Config`` for a scaled_mm config JSON: the kernel's own tunables that it leaves
    out take the plain algorithm (:data:`USER_TUNABLE_DEFAULTS`: ``split_k = 1``, no ``swap_ab``,
    no ``prefetch_scales``)."""
    _import_helion()
    config = dict(helion.Config.from_json(config_text))
    return helion.Config(**{**USER_TUNABLE_DEFAULTS, **config})


@functools.cache
def check_config_text(config_text: str) -> None:
    """Raise ``ValueError`` when the config JSON is not a valid scaled_mm config
    (:func:`hlcore.scaled_mm_config.check_scaled_mm_config`, e.g. a removed knob such as ``pdl``)."""
    from hlcore.scaled_mm_config import check_scaled_mm_config

    reason = check_scaled_mm_config(json.loads(config_text))
    if reason:
        raise ValueError(f"scaled_mm: invalid config {config_text}: {reason}")


@functools.cache
def _kernel_for(config_text: str):
    """One ``helion.Kernel`` per config (:func:`hlcore.helion_compat.config_kernel`), the same in
    compiled and both interpret modes."""
    return config_kernel(_scaled_mm_body, config_text, lambda: helion_config(config_text))


def scaled_mm_kernel():
    """The bare Helion kernel (no config), for autotuning: ``kernel.autotune(kernel_args(...))``."""
    _import_helion()
    return local_kernel(gemm_kernel(_scaled_mm_body))


# --------------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------------
def scaled_mm_ref(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    block_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Dequantized reference: ``(A * scale_a) @ (B * scale_b) + bias`` in fp32 on the tensors'
    device (int8 products summed exactly in float64 first, then scaled), rounded once to
    ``out_dtype``. Shapes and ``block_size`` as in :func:`scaled_mm`."""
    m, k = a.shape
    n = b.shape[1]
    if block_size is None:
        sa = scale_a.reshape(m, 1).to(torch.float32)
        sb = scale_b.reshape(1, n).to(torch.float32)
        if a.dtype == torch.int8:  # exact integer dot products (|sum| < 2^53), then scale
            out = (a.double() @ b.double()).to(torch.float32) * sa * sb
        else:
            out = (a.to(torch.float32) * sa) @ (b.to(torch.float32) * sb)
    else:
        bn, bk = block_size
        sa = scale_a.to(torch.float32).repeat_interleave(bk, dim=1)[:, :k]  # [M, K]
        sb = (
            scale_b.to(torch.float32).repeat_interleave(bn, dim=0).repeat_interleave(bk, dim=1)[:n, :k]
        )  # [N, K]
        out = (a.to(torch.float32) * sa) @ (b.to(torch.float32) * sb.t())
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out.to(out_dtype)


# --------------------------------------------------------------------------------------------
# Host wrapper
# --------------------------------------------------------------------------------------------


def scaled_mm_format(a: torch.Tensor, block_size: tuple[int, int] | None) -> str:
    """The name of the :mod:`hlcore.formats` format of these inputs: a format with block scales when
    ``block_size`` is given (else one with per-token/channel scales), of A's dtype where one is."""
    blocked = [f for f in FORMATS.values() if (f.block_size is not None) == (block_size is not None)]
    same_dtype = [f for f in blocked if getattr(torch, f.operand_dtype) == a.dtype]
    return (same_dtype or blocked)[0].name


def _check_operands(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> None:
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or a.dtype not in INPUT_DTYPES:
        raise ValueError(
            f"scaled_mm: A must be a 2-D [M, K] tensor of dtype {' or '.join(map(str, INPUT_DTYPES))}; "
            f"got {_describe(a)}"
        )
    if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.dtype != a.dtype:
        raise ValueError(
            f"scaled_mm: B must be a 2-D [K, N] tensor of A's dtype {a.dtype}; got {_describe(b)}"
        )
    k, n = a.shape[1], b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"scaled_mm: B must be [K, N] with K = {k} (A's K); got B {_describe(b)}")
    if b.stride(0) != 1 and n > 1:
        raise ValueError(
            "scaled_mm: B must be column-major [K, N] (the weight.t() view vLLM holds, stride(0) == 1); "
            f"got B {_describe(b)}"
        )
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"scaled_mm: out_dtype must be one of {OUT_DTYPES}; got {out_dtype}")


def _check_scales(
    fmt: ScaledMMFormat, a: torch.Tensor, n: int, scale_a: torch.Tensor, scale_b: torch.Tensor, block_size
) -> None:
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise ValueError(f"scaled_mm: {name} must be a float32 tensor; got {_describe(t)}")
    m, k = a.shape
    if fmt.block_size is None:
        if scale_a.numel() != m:
            raise ValueError(
                f"scaled_mm: scale_a must be a per-token tensor of M = {m} elements ([M, 1] or [M]); "
                f"got {_describe(scale_a)}"
            )
        if scale_b.numel() != n:
            raise ValueError(
                f"scaled_mm: scale_b must be a per-channel tensor of N = {n} elements ([N, 1], [1, N] or [N]); "
                f"got {_describe(scale_b)}"
            )
        return
    if tuple(block_size) != fmt.block_size:
        raise ValueError(f"scaled_mm: block_size must be {fmt.block_size} (or None); got {block_size}")
    if a.dtype != getattr(torch, fmt.operand_dtype):
        raise ValueError(f"scaled_mm: block scales need fp8 A and B ({FP8_DTYPE}); got A {_describe(a)}")
    want_a, want_b = fmt.scale_a_shape(m, k), fmt.scale_b_shape(n, k)
    if tuple(scale_a.shape) != want_a:
        raise ValueError(
            f"scaled_mm: scale_a must be {fmt.scale_a_layout} = {list(want_a)} (1x{fmt.group_size} activation "
            f"groups, row- or column-major); got {_describe(scale_a)}"
        )
    if tuple(scale_b.shape) != want_b:
        bn, bk = fmt.block_size
        raise ValueError(
            f"scaled_mm: scale_b must be {fmt.scale_b_layout} = {list(want_b)} ({bn}x{bk} weight blocks); "
            f"got {_describe(scale_b)}"
        )


def check_scaled_mm_args(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None,
    block_size: tuple[int, int] | None = None,
) -> str:
    """Raise ``ValueError`` naming the offending tensor, what it is and what is supported; return
    the format's name (see :func:`scaled_mm_format`)."""
    _check_operands(a, b, out_dtype)
    n = b.shape[1]
    fmt = get_format(scaled_mm_format(a, block_size), "scaled_mm")
    _check_scales(fmt, a, n, scale_a, scale_b, block_size)
    if bias is not None and (
        not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.numel() != n or bias.dtype != out_dtype
    ):
        raise ValueError(
            f"scaled_mm: bias must be a 1-D [N] = [{n}] tensor of out_dtype {out_dtype}; got {_describe(bias)}"
        )
    tensors = {"A": a, "B": b, "scale_a": scale_a, "scale_b": scale_b}
    if bias is not None:
        tensors["bias"] = bias
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"scaled_mm: all tensors must be on one device; got {devices}")
    return fmt.name


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    block_size: tuple[int, int] | None = None,
    config: Any = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled GEMM ``out = dequant(A) @ dequant(B) (+ bias)`` with the unified Helion kernel.

    Args:
        a: ``[M, K]`` activations: float8_e4m3fn (fp8_dynamic, block_fp8) or int8 (w8a8_int8,
            symmetric); any row stride, K contiguous (a K-strided A is copied first, as ``F.linear``
            would read it).
        b: ``[K, N]`` weight of A's dtype, column-major: the ``weight.t()`` view of a row-major
            ``[N, K]`` tensor (what vLLM's CUTLASS kernels hold, and ``weight.t()`` of its block-FP8
            weight); never copied.
        scale_a: float32. Per token ``[M, 1]`` or ``[M]``; with ``block_size``: ``[M, ceil(K/128)]``
            1x128 group scales, row- or column-major (vLLM's ``per_token_group_fp8_quant`` layouts).
        scale_b: float32. Per output channel ``[N, 1]``, ``[1, N]`` or ``[N]``; with ``block_size``:
            ``[ceil(N/128), ceil(K/128)]`` 128x128 block scales (vLLM's ``weight_scale_inv``).
        out_dtype: bfloat16 (default), float16 or float32.
        bias: optional ``[N]`` tensor of ``out_dtype``, added after scaling.
        block_size: ``(128, 128)`` for Block_FP8 (vLLM's ``weight_block_size``), else None.
        config: a ``helion.Config`` (or its dict / JSON) with ``block_sizes = [block_m, block_n,
            block_k]`` (block_k is fixed to 128 for block_fp8), ``split_k``, ``swap_ab``,
            ``prefetch_scales`` and Triton knobs; default
            :func:`hlcore.scaled_mm_config.pick_scaled_mm_config` (the tuned config for this GPU
            and shape, else :func:`hlcore.scaled_mm_config.default_scaled_mm_config`).
        out: optional ``[M, N]`` tensor of ``out_dtype`` with contiguous rows, written in place
            (the buffer of vLLM's out-variant ``cutlass_scaled_mm``); default a new tensor.

    Returns:
        ``out`` (or a new ``[M, N]`` tensor of ``out_dtype``); M = 0 launches nothing.

    Raises:
        ValueError: a tensor has the wrong dtype, rank, shape, layout or device, ``block_size`` is
            not (128, 128) (the message names the tensor and what is supported), ``config``
            fails :func:`hlcore.scaled_mm_config.check_scaled_mm_config`, or ``out`` is not a
            row-major ``[M, N]`` tensor of ``out_dtype`` on A's device.

    Determinism: bitwise repeatable for ``split_k == 1``; with ``split_k > 1`` the order of the
    atomic adds varies (within the tolerance of ``split_k`` output roundings).
    """
    fmt = check_scaled_mm_args(a, b, scale_a, scale_b, out_dtype, bias, block_size)
    m, k = a.shape
    n = b.shape[1]
    if out is not None:
        check_out(out, m, n, out_dtype, a.device)
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=a.device) if out is None else out
    if a.stride(1) != 1:
        a = a.contiguous()
    if k == 1 or n == 1:  # Helion 1.5.0 compiles a size-1 dim as a broadcast (no mask): pad it
        a, b, scale_b, bias = _pad_unit_dims(a, b, scale_b, bias, block_size)
        res = scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size=block_size, config=config)
        return res[:, :n].contiguous() if out is None else out.copy_(res[:, :n])
    if config is None:  # tuned config for this GPU and shape, else the heuristic default
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        config = pick_scaled_mm_config(fmt, m, n, k, device=a.device).config_json
    text = config_json(config, "scaled_mm")
    check_config_text(text)
    args = kernel_args(a, b, scale_a, scale_b, bias, out_dtype, block_size, out=out)
    jobs = kernel_pool.recorder()
    if jobs is not None:  # compiled elsewhere first (hlcore.kernel_pool.recording): no launch here
        kernel_pool.record("scaled_mm", _kernel_for(text), text, args, jobs)
        return args[5]
    return _kernel_for(text)(*args)


def check_out(out: torch.Tensor, m: int, n: int, out_dtype: torch.dtype, device: torch.device) -> None:
    """Raise ``ValueError`` unless ``out`` is a row-major ``[m, n]`` tensor of ``out_dtype`` on ``device``
    (rows of any stride >= n, columns contiguous: what an output buffer of vLLM's op may be)."""
    ok = (
        isinstance(out, torch.Tensor)
        and tuple(out.shape) == (m, n)
        and out.dtype == out_dtype
        and out.device == device
        and (n <= 1 or out.stride(1) == 1)
        and (m <= 1 or out.stride(0) >= n)
    )
    if not ok:
        raise ValueError(
            f"scaled_mm: out must be a [{m}, {n}] {out_dtype} tensor on {device} with contiguous rows; "
            f"got {_describe(out)}"
        )


def _pad_unit_dims(a, b, scale_b, bias, block_size):
    """K or N of 1 padded to 2 with zeros (exact: a zero K column adds 0, a zero weight channel is
    sliced off). Without it the compiled kernel sums block_k copies of the one K product."""
    if a.shape[1] == 1:
        a = torch.cat([a, torch.zeros_like(a)], dim=1)
        w = b.t()  # [N, 1] row-major
        b = torch.cat([w, torch.zeros_like(w)], dim=1).t()
    n = b.shape[1]
    if n == 1:
        w = b.t()  # [1, K] row-major
        b = torch.cat([w, torch.zeros_like(w)], dim=0).t()
        if block_size is None:  # per-channel [N, 1], [1, N] or [N]; block scales cover N = 2 already
            scale_b = torch.cat([scale_b.reshape(1), scale_b.reshape(1)])
        if bias is not None:
            bias = torch.cat([bias.reshape(1), torch.zeros_like(bias.reshape(1))])
    return a, b, scale_b, bias


def kernel_args(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    block_size: tuple[int, int] | None = None,
    *,
    out: torch.Tensor | None = None,
) -> tuple:
    """The Helion kernel's arguments ``(a, b_t, scale_a, scale_b, bias, out, group_k)`` for
    checked :func:`scaled_mm` inputs (also what ``scaled_mm_kernel().autotune(...)`` takes):
    per-token/channel scales reshaped to ``[M, 1]`` / ``[N, 1]``, ``out`` the given output or a new
    ``[M, N]`` tensor of ``out_dtype``, ``group_k`` the format's group size (0 for
    per-token/channel scales)."""
    m, n = a.shape[0], b.shape[1]
    if out is None:
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    fmt = FORMATS[scaled_mm_format(a, block_size)]
    if m == 1:  # A's one row as a stride-0 view of two: loaded as a row of the tile (masked), not
        a = a.expand(2, a.shape[1])  # broadcast (Helion broadcasts a size-1 dim the tile is not over)
    if fmt.block_size is not None:
        return (a, b.t(), scale_a, scale_b, bias, out, fmt.group_size)
    return (a, b.t(), scale_a.reshape(m, 1), scale_b.reshape(n, 1), bias, out, 0)


# --------------------------------------------------------------------------------------------
# Inputs for tests, tuning and benchmarks
# --------------------------------------------------------------------------------------------
def generate_scaled_mm_inputs(
    m: int,
    n: int,
    k: int,
    *,
    fmt: str = "fp8_dynamic",
    device: str | torch.device = "cpu",
    out_dtype: torch.dtype = torch.bfloat16,
    with_bias: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Random, non-zero inputs of format ``fmt`` as a vLLM layer sees them.

    Activations ``x ~ N(0, 1)`` ``[M, K]`` and a weight ``W ~ N(0, 0.05)`` ``[N, K]`` (bf16) are
    quantized with the format's :mod:`hlcore.quant` references
    (:meth:`hlcore.formats.ScaledMMFormat.quantize_activation` / ``quantize_weight``: per token +
    per channel for fp8 and int8, 1x128 groups + 128x128 blocks for block_fp8); the weight is handed
    over as the column-major ``[K, N]`` view. Returns ``dict(a, b, scale_a, scale_b, out_dtype,
    bias, block_size)`` (``scaled_mm(**d)``). Raises ``ValueError`` for an unknown ``fmt``.
    """
    spec = get_format(fmt, "generate_scaled_mm_inputs")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn((m, k), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    w = (torch.randn((n, k), generator=gen, dtype=torch.float32) * 0.05).to(torch.bfloat16)
    a, scale_a = spec.quantize_activation(x)
    w_q, scale_b = spec.quantize_weight(w)
    bias = (torch.randn((n,), generator=gen) * 0.5).to(out_dtype) if with_bias else None
    dev = torch.device(device)
    return {
        "a": a.to(dev),
        "b": w_q.to(dev).t(),
        "scale_a": scale_a.to(dev),
        "scale_b": scale_b.to(dev),
        "out_dtype": out_dtype,
        "bias": None if bias is None else bias.to(dev),
        "block_size": spec.block_size,
    }
