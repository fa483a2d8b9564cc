"""Unified scaled GEMM for decode-size quantized linear layers, three formats in one kernel body.

    out[M, N] = sum_k scale_a[m, k // g] * scale_b[n // g, k // g] * A[m, k] * B[k, n]  (+ bias[n])

| format | A [M, K] | B [K, N] | scale_a | scale_b | g | semantics of |
| --- | --- | --- | --- | --- | --- | --- |
| ``fp8_dynamic`` | fp8 e4m3, per token | fp8 e4m3 | [M, 1] | [N, 1] | K (one group) | vLLM ``cutlass_scaled_mm`` (compressed-tensors FP8_DYNAMIC) |
| ``w8a8_int8`` | int8, per token (symmetric) | int8 | [M, 1] | [N, 1] | K | vLLM ``cutlass_scaled_mm`` (compressed-tensors W8A8 int8) |
| ``block_fp8`` | fp8 e4m3, 1x128 groups | fp8 e4m3 | [M, ceil(K/128)] | [ceil(N/128), ceil(K/128)] | 128 | vLLM ``w8a8_triton_block_scaled_mm`` / DeepGEMM ``fp8_gemm_nt`` (DeepSeek-V3 block scaling) |

Per-token/per-channel formats accumulate the whole K chunk (fp32 for fp8, exact int32 for int8) and
scale once in the epilogue; ``block_fp8`` scales each 128-wide K tile's fp32 partial product inside
the K loop (the 128x128 weight blocks and 1x128 activation groups), as DeepGEMM does.
The format differences are three named pieces: the accumulator dtype (``int32`` for int8), the
group size ``group_k`` (0 = one group per row/column) and which epilogue applies the scales.

One Helion kernel body holds every algorithm variant as tunables:

* ``split_k`` (power of two, 1..256): K is cut into ``split_k`` chunks that run as separate
  programs; two reductions, chosen by the ``split_k_workspace`` tunable:

  - ``False`` (default): each program adds its tile into the output with ``hl.atomic_add`` in the
    output dtype; the kernel's own host code first fills the output with the bias (or zeros), which
    is one extra memset/copy launch. One output rounding per chunk.
  - ``True``: one launch, no fill: each program adds its fp32
  partial tile into a persistent fp32 workspace with ``hl.atomic_add`` and takes a ticket from a
  per-tile counter; the program that draws the last ticket reads the sum back (an atomic add of
  zero, so from L2), re-zeroes that workspace tile and the counter, adds the bias and writes the
  output tile once. The partial sums are relaxed atomics; a CTA barrier before one acquire-release
  ticket orders them (the CUTLASS split-K semaphore pattern). The workspace and counters are therefore zero again after every
  launch (a "self-cleaning" semaphore split-K, as in stream-K fix-up kernels). The fp32 sum rounds
  to the output dtype once. A first version with release/acquire-ordered atomics on every element
  measured slower than the default on the H200 (lab/gpu-runs.md); this relaxed + barrier version
  measured 1.03x the default's time in geomean (0.99x at M = 1, 1.09x at M = 32; 21 Qwen3-8B
  points, 2026-12-01 afternoon), so the heuristic does not pick it.

  Either way the order of the atomics varies: results are not bitwise repeatable (use
  ``split_k=1`` where that matters).
* ``pdl`` (bool, default False): programmatic dependent launch (sm90+). The kernel is launched
  with Triton's ``launch_pdl`` (the Helion config key ``_triton_config_launch_pdl``, set by
  :func:`helion_config`), so its programs may be scheduled while the previous kernel in the stream is
  still finishing; every program first runs ``griddepcontrol.wait`` (``tl.extra.cuda.gdc_wait``:
  all writes of the previous kernel are visible after it), then
  ``griddepcontrol.launch_dependents`` (a following PDL kernel may start). What it can save is the
  launch gap between back-to-back kernels, part of the ~4 us fixed cost per GEMM (docs/benchmarks.md).
  Not in the Triton interpreter or Helion's eager mode (there the flag does nothing). Measured on the
  H200 (2026-12-01, after a producer kernel, CUDA-graph replay): no gain (1.008x the time without
  it in geomean), so no shipped config and no heuristic uses it.
* ``swap_ab`` (bool): computes the transposed tile ``B^T @ A^T`` so the tiny M sits on the MMA's
  narrow side and N fills the 64-row wgmma side (the usual decode trick, see the Helion/vLLM
  "swap-AB" kernels).

fp8 accumulation note (sm90): Triton hard-codes imprecise fp8 wgmma accumulation when ``acc=`` is
passed to ``tl.dot``; writing ``acc = acc + hl.dot(...)`` promotes each K tile to fp32 instead
(see docs/reference: relative error 3e-3 -> 1e-4 at K=4096).

Weight layout: B is the ``[K, N]`` column-major view vLLM holds after
``process_weights_after_loading`` (``layer.weight = weight.t()`` of a row-major ``[N, K]`` tensor);
the kernel reads it through ``B.t()`` (a view), so no copy happens per call.
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

from hlcore.aux_configs import config_json
from hlcore.helion_compat import local_kernel

FP8_DTYPE = torch.float8_e4m3fn
_HELION_REF_MODE = int(
    os.environ.get("HELION_INTERPRET") == "1"
)  # eager mode has no inline_triton (int: a bool kernel arg breaks the Triton interpreter)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INPUT_DTYPES = (FP8_DTYPE, torch.int8)
BLOCK_SIZE = (128, 128)  # (N, K) weight block of block_fp8, as vLLM's weight_block_size
FORMATS = ("fp8_dynamic", "w8a8_int8", "block_fp8")
USER_TUNABLE_DEFAULTS = {"split_k": 1, "swap_ab": False, "split_k_workspace": False}
#: griddepcontrol (PDL) instructions are emitted only for real GPU code: neither interpreter runs them
_GDC = int(os.environ.get("TRITON_INTERPRET") != "1" and os.environ.get("HELION_INTERPRET") != "1")
#: Helion passes config keys with this prefix to Triton's launcher as keyword arguments
PDL_LAUNCH_KEY = "_triton_config_launch_pdl"


# --------------------------------------------------------------------------------------------
# Helion kernel
# --------------------------------------------------------------------------------------------
def _scaled_mm_body(
    a: torch.Tensor,  # [M, K] fp8 or int8, K contiguous
    b_t: torch.Tensor,  # [N, K] same dtype, K contiguous (= B.t() of the [K, N] column-major weight)
    scale_a: torch.Tensor,  # fp32 [M, 1] (per token) or [M, ceil(K/g)] (group_k = g), any strides
    scale_b: torch.Tensor,  # fp32 [N, 1] (per channel) or [ceil(N/g), ceil(K/g)] (group_k = g)
    bias: torch.Tensor | None,  # [N] out dtype
    workspace: torch.Tensor,  # fp32 [>= M, N] zeros (split_k > 1; left zero), else unused
    tickets: torch.Tensor,  # int32 [>= cdiv(M, 16), >= cdiv(N, 16)] zeros (split_k > 1; left zero)
    out_dtype: torch.dtype,  # bf16/fp16/fp32
    group_k: int,  # 0: per-token x per-channel scales; g (128): 1 x g / g x g block scales
) -> torch.Tensor:
    m = a.size(0)
    k = hl.specialize(a.size(1))
    n = hl.specialize(b_t.size(0))
    group_k = hl.specialize(group_k)
    # Allocated here (not passed in) so its rows share A's symbolic M: Helion 1.5.0 mis-broadcasts
    # a separately passed [1, N] output when M is dynamic and equals 1.
    out = torch.empty([m, n], dtype=out_dtype, device=a.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    use_workspace = hl.register_tunable("split_k_workspace", BooleanFragment())
    # Helion hands config keys named _triton_config_<x> to Triton's launcher as <x>=value, so this one
    # tunable both emits the griddepcontrol code and launches with launch_pdl (config key "pdl" in our files)
    pdl = hl.register_tunable(PDL_LAUNCH_KEY, BooleanFragment())
    acc_dtype = torch.int32 if a.dtype == torch.int8 else torch.float32
    # Both branches below are traced, so the group arithmetic must not divide by zero when g = 0.
    kg = max(group_k, 1)
    k_chunk = helion.next_power_of_2(helion.cdiv(helion.cdiv(k, kg), split_k)) * kg  # whole groups
    # programs per output tile: can be fewer than split_k (K = 96, split_k = 4 -> 3 chunks of 32)
    num_chunks = helion.cdiv(k, k_chunk)
    if split_k > 1 and not use_workspace:
        # The split-K programs add into `out`; it starts as the bias (or zero).
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        # pdl: wait for the previous kernel's writes (A, scales, split-K fill), then let the next start
        if pdl and _GDC == 1:
            hl.inline_triton(
                "tl.extra.cuda.gdc_wait()\ntl.extra.cuda.gdc_launch_dependents()", args=[], output_like=None
            )
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
            for tile_kb in hl.tile(outer_k.begin, outer_k.end, block_size=kg):
                kb = tile_kb.begin // kg
                if swap_ab:
                    part_t = hl.dot(b_t[tile_n, tile_kb], a[tile_m, tile_kb].t(), out_dtype=torch.float32)
                    res_t = (
                        res_t
                        + part_t * scale_b[tile_n.index // kg, kb][:, None] * scale_a[tile_m, kb][None, :]
                    )
                else:
                    part = hl.dot(a[tile_m, tile_kb], b_t[tile_n, tile_kb].t(), out_dtype=torch.float32)
                    res = res + part * scale_a[tile_m, kb][:, None] * scale_b[tile_n.index // kg, kb][None, :]
            if swap_ab:
                res = res_t.t()
        if split_k == 1:  # constexpr branches (num_chunks is a runtime value)
            if bias is not None:
                res = res + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = res.to(out.dtype)
        elif not use_workspace:
            hl.atomic_add(out, [tile_m, tile_n], res.to(out.dtype))
        else:  # self-cleaning split-K: the last of the split_k programs of this tile writes it
            # relaxed reductions (fire-and-forget), then a CTA barrier so one released ticket orders
            # every thread's partial sums (the CUTLASS semaphore pattern: __syncthreads + fence + atomic)
            hl.atomic_add(workspace, [tile_m, tile_n], res, sem="relaxed")
            if _HELION_REF_MODE == 0:  # eager reference mode runs programs one at a time: no barrier
                hl.inline_triton("tl.debug_barrier()", args=[], output_like=None)
            ticket = hl.atomic_add(tickets, [tile_m.id, tile_n.id], 1, sem="acq_rel")
            if ticket == num_chunks - 1:
                # read the sum from L2 (an atomic, never a stale L1 line), then clear it for the next launch
                total = hl.atomic_add(workspace, [tile_m, tile_n], hl.zeros([tile_m, tile_n]), sem="relaxed")
                workspace[tile_m, tile_n] = hl.zeros([tile_m, tile_n])
                hl.atomic_xchg(tickets, [tile_m.id, tile_n.id], 0, sem="relaxed")
                if bias is not None:
                    total = total + bias[tile_n][None, :].to(torch.float32)
                out[tile_m, tile_n] = total.to(out.dtype)
    return out


def helion_config(config_text: str, *, gdc: int | None = None) -> helion.Config:
    """The ``helion.Config`` for a scaled_mm config JSON: the kernel's own tunables that it leaves
    out take the plain algorithm (:data:`USER_TUNABLE_DEFAULTS`), and our ``pdl`` key becomes the
    kernel's ``_triton_config_launch_pdl`` tunable (griddepcontrol code + ``launch_pdl``), true only
    where that code can run (``gdc``; default: not under an interpreter)."""
    config = dict(helion.Config.from_json(config_text))
    config = {**{k: v for k, v in USER_TUNABLE_DEFAULTS.items() if k not in config}, **config}
    pdl = bool(config.pop("pdl", False)) | bool(config.pop(PDL_LAUNCH_KEY, False))
    config[PDL_LAUNCH_KEY] = pdl and bool(_GDC if gdc is None else gdc)
    return helion.Config(**config)


@functools.cache
def _kernel_for(config_text: str):
    """One ``helion.Kernel`` per config: works the same in compiled and both interpret modes."""
    config = helion_config(config_text)
    return local_kernel(
        helion.kernel(
            _scaled_mm_body,
            config=config,
            static_shapes=False,
            ignore_warnings=[helion.exc.TensorOperationInWrapper],
        )
    )


def scaled_mm_kernel():
    """The bare Helion kernel (no config), for autotuning: ``kernel.autotune(args)``."""
    return local_kernel(
        helion.kernel(
            _scaled_mm_body, static_shapes=False, ignore_warnings=[helion.exc.TensorOperationInWrapper]
        )
    )


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
def _describe(t: object) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, strides {tuple(t.stride())}, device {t.device}"


def scaled_mm_format(a: torch.Tensor, block_size: tuple[int, int] | None) -> str:
    """``"fp8_dynamic"``, ``"w8a8_int8"`` or ``"block_fp8"`` for these inputs."""
    if block_size is not None:
        return "block_fp8"
    return "w8a8_int8" if a.dtype == torch.int8 else "fp8_dynamic"


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
    the format (see :func:`scaled_mm_format`)."""
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or a.dtype not in INPUT_DTYPES:
        raise ValueError(
            f"scaled_mm: A must be a 2-D [M, K] tensor of dtype {FP8_DTYPE} or torch.int8; got {_describe(a)}"
        )
    if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.dtype != a.dtype:
        raise ValueError(
            f"scaled_mm: B must be a 2-D [K, N] tensor of A's dtype {a.dtype}; got {_describe(b)}"
        )
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"scaled_mm: B must be [K, N] with K = {k} (A's K); got B {_describe(b)}")
    n = b.shape[1]
    if b.stride(0) != 1 and n > 1:
        raise ValueError(
            "scaled_mm: B must be column-major [K, N] (the weight.t() view vLLM holds, stride(0) == 1); "
            f"got B {_describe(b)}"
        )
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"scaled_mm: out_dtype must be one of {OUT_DTYPES}; got {out_dtype}")
    fmt = scaled_mm_format(a, block_size)
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise ValueError(f"scaled_mm: {name} must be a float32 tensor; got {_describe(t)}")
    if fmt == "block_fp8":
        if tuple(block_size) != BLOCK_SIZE:
            raise ValueError(f"scaled_mm: block_size must be {BLOCK_SIZE} (or None); got {block_size}")
        if a.dtype != FP8_DTYPE:
            raise ValueError(f"scaled_mm: block scales need fp8 A and B ({FP8_DTYPE}); got A {_describe(a)}")
        gk, gn = -(-k // BLOCK_SIZE[1]), -(-n // BLOCK_SIZE[0])
        if tuple(scale_a.shape) != (m, gk):
            raise ValueError(
                f"scaled_mm: scale_a must be [M, ceil(K/128)] = [{m}, {gk}] (1x128 activation groups, "
                f"row- or column-major); got {_describe(scale_a)}"
            )
        if tuple(scale_b.shape) != (gn, gk):
            raise ValueError(
                f"scaled_mm: scale_b must be [ceil(N/128), ceil(K/128)] = [{gn}, {gk}] (128x128 weight blocks); "
                f"got {_describe(scale_b)}"
            )
    else:
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
    return fmt


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
            block_k]`` (block_k is fixed to 128 for block_fp8), ``split_k``, ``swap_ab`` and Triton
            knobs; default :func:`hlcore.scaled_mm_config.pick_scaled_mm_config` (the tuned config
            for this GPU and shape, else :func:`hlcore.scaled_mm_config.default_scaled_mm_config`).

    Returns:
        ``[M, N]`` tensor of ``out_dtype``; M = 0 returns an empty ``[0, N]`` without a launch.

    Raises:
        ValueError: a tensor has the wrong dtype, rank, shape, layout or device, or ``block_size`` is
            not (128, 128) (the message names the tensor and what is supported).

    Determinism: bitwise repeatable for ``split_k == 1``; with ``split_k > 1`` the order of the
    atomic adds varies (within the tolerance of ``split_k`` output roundings).
    """
    fmt = check_scaled_mm_args(a, b, scale_a, scale_b, out_dtype, bias, block_size)
    m, k = a.shape
    n = b.shape[1]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=a.device)
    if a.stride(1) != 1:
        a = a.contiguous()
    if k == 1 or n == 1:  # Helion 1.5.0 compiles a size-1 dim as a broadcast (no mask): pad it
        a, b, scale_b, bias = _pad_unit_dims(a, b, scale_b, bias, block_size)
        out = scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size=block_size, config=config)
        return out[:, :n].contiguous()
    if config is None:  # tuned config for this GPU and shape, else the heuristic default
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        config = pick_scaled_mm_config(fmt, m, n, k, device=a.device).config_json
    text = config_json(config, "scaled_mm")
    kernel = _kernel_for(text)
    args = kernel_args(a, b, scale_a, scale_b, bias, out_dtype, block_size, workspace=_uses_workspace(text))
    return kernel(*args)


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


# --------------------------------------------------------------------------------------------
# Split-K workspace: fp32 [rows, N] sums + int32 tickets, zero between launches
# --------------------------------------------------------------------------------------------
WORKSPACE_ROWS = 64  # persistent workspaces cover M <= 64 (decode); larger M gets a fresh one per call
_workspaces: dict[tuple[torch.device, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _new_workspace(rows: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # Every dim >= 2: Helion 1.5.0 treats a size-1 dim as a broadcast and drops its index.
    rows, n = max(rows, 2), max(n, 2)
    return (
        torch.zeros((rows, n), dtype=torch.float32, device=device),
        torch.zeros(
            (max(2, helion.cdiv(rows, 16)), max(2, helion.cdiv(n, 16))), dtype=torch.int32, device=device
        ),
    )


def split_k_workspace(m: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(workspace fp32 [>= M, N], tickets int32 [>= cdiv(M, 16), >= cdiv(N, 16)])``, all zeros.

    The kernel leaves both zero again, so one pair per (device, N, current stream) is reused by every
    launch with M <= ``WORKSPACE_ROWS`` (launches on one stream never overlap). It is created on the
    first call outside CUDA-graph capture; during a capture with none cached (or for larger M) a
    fresh zeroed pair is made for that call (its zero fill is then part of the graph)."""
    if m > WORKSPACE_ROWS or device.type != "cuda":
        return _new_workspace(max(m, 1), n, device)
    stream = torch.cuda.current_stream(device).cuda_stream
    key = (device, n, stream)
    ws = _workspaces.get(key)
    if ws is None:
        ws = _new_workspace(WORKSPACE_ROWS, n, device)
        if not torch.cuda.is_current_stream_capturing():
            _workspaces[key] = ws
    return ws


@functools.cache
def _uses_workspace(config_text: str) -> bool:
    cfg = json.loads(config_text)
    return bool(cfg.get("split_k_workspace")) and cfg.get("split_k", 1) > 1


@functools.cache
def _placeholder(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Unused workspace/tickets arguments (every dim >= 2, see :func:`_new_workspace`)."""
    return _new_workspace(2, 2, device)


def kernel_args(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    block_size: tuple[int, int] | None = None,
    *,
    workspace: bool = True,
) -> tuple:
    """The Helion kernel's arguments for checked :func:`scaled_mm` inputs (also what
    ``scaled_mm_kernel().autotune(...)`` takes). ``workspace=False`` (a config without
    ``split_k_workspace``) passes a 2x2 placeholder instead of the ``[64, N]`` split-K workspace."""
    m, n = a.shape[0], b.shape[1]
    workspace, tickets = split_k_workspace(m, n, a.device) if workspace else _placeholder(a.device)
    if block_size is not None:
        return (a, b.t(), scale_a, scale_b, bias, workspace, tickets, out_dtype, BLOCK_SIZE[1])
    return (a, b.t(), scale_a.reshape(m, 1), scale_b.reshape(n, 1), bias, workspace, tickets, out_dtype, 0)


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

    Activations ``x ~ N(0, 1)`` and a weight ``W ~ N(0, 0.05)`` ``[N, K]`` (bf16) are quantized with
    the :mod:`hlcore.quant` references: per token + per channel (fp8 or int8), or 1x128 groups +
    128x128 blocks (block_fp8); the weight is handed over as the column-major ``[K, N]`` view.
    Returns ``dict(a, b, scale_a, scale_b, out_dtype, bias, block_size)`` (``scaled_mm(**d)``).
    """
    from hlcore import quant

    if fmt not in FORMATS:
        raise ValueError(f"generate_scaled_mm_inputs: fmt must be one of {FORMATS}; got {fmt!r}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn((m, k), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    w = (torch.randn((n, k), generator=gen, dtype=torch.float32) * 0.05).to(torch.bfloat16)
    block_size = None
    if fmt == "fp8_dynamic":
        a, scale_a = quant.per_token_fp8_quant_ref(x)
        w_q, scale_b = quant.per_channel_fp8_quant_ref(w)
    elif fmt == "w8a8_int8":
        a, scale_a = quant.per_token_int8_quant_ref(x)
        w_q, scale_b = quant.per_token_int8_quant_ref(w)
    else:
        block_size = BLOCK_SIZE
        a, scale_a = quant.per_token_group_fp8_quant_ref(x, BLOCK_SIZE[1])
        w_q, scale_b = quant.per_block_fp8_quant_ref(w, BLOCK_SIZE)
    bias = (torch.randn((n,), generator=gen) * 0.5).to(out_dtype) if with_bias else None
    dev = torch.device(device)
    return {
        "a": a.to(dev),
        "b": w_q.to(dev).t(),
        "scale_a": scale_a.to(dev),
        "scale_b": scale_b.to(dev),
        "out_dtype": out_dtype,
        "bias": None if bias is None else bias.to(dev),
        "block_size": block_size,
    }
