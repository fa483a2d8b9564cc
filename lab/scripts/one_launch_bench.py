"""Issue 22: the activation quantization and the GEMM in ONE launch, split by a grid barrier.

Every fused kernel measured so far put the producer's work inside the GEMM's programs (each program
recomputing its rows' statistics, or quantizing in the K loop) and paid more than the launch it
saved (docs/scaled-mm.md). Helion 1.5.0's ``hl.barrier()`` offers the other shape: one persistent,
cooperatively launched kernel whose first phase is the producer (here FP8_Dynamic's per-token
quantization: amax per row, scale = amax / 448, e4m3 bytes written to a workspace) spread over the
programs, a grid-wide barrier (``torch._inductor``'s ``x_grid_barrier``: a flip-bit semaphore), then
the GEMM phase on the quantized bytes, read back from L2. What it can save per linear layer: one
launch and its ramp; what it costs: the barrier, a persistent GEMM without split-K (each
program's N tiles in turn), and the semaphore Helion allocates per call (``torch.zeros(1)``: a fill
kernel in a CUDA graph).

Modes:

* ``--codegen`` (any machine): Helion's Triton code of the kernel for one config on CPU tensors, and
  whether it compiles for sm_90 (no launch);
* two producers (``--producers``): ``quant`` (FP8_Dynamic's per-token quantization, the o and down
  layers' producer) and ``norm`` (vLLM's fused add + RMSNorm + per-token quantization, the qkv and
  gate_up layers'; the new residual written once, by phase 1), both with hlcore's device helpers,
  so their bytes, scales and residual equal hlcore's producer kernels' (checked in Helion's eager
  mode at M 1 / 3 / 8);
* the GEMM phase with ``split_k`` 1 or more (``--split-ks``): with more, K chunks are added into the
  output with bf16 atomics as in ``hlcore.scaled_mm``, and the output is zeroed by phase 1, so the
  split-K fill launch is folded in too;
* each one-launch variant also with one persistent semaphore instead of Helion's per-call
  ``torch.zeros(1)`` (``_sem``: what a patch of the generated host code would give);
* default (GPU): for Qwen3-8B's FP8_Dynamic shapes at ``--ms``, under CUDA-graph replay with the
  weight rotated past L2 (``hlcore.timing.time_graph``): the one-launch kernel against the two
  launches it replaces (``hlcore.quant_kernels.per_token_fp8_quant`` or
  ``hlcore.norm_quant.fused_add_rms_norm_fp8_quant``, then ``hlcore.scaled_mm`` with the shipped
  config, and with the same tiles and ``split_k = 1``), its error against
  ``hlcore.scaled_mm_ref`` on the two-launch bytes and whether its bytes are those. Prints one line
  per point and one JSON line.

Usage: ``python lab/scripts/one_launch_bench.py --codegen`` (CPU) /
``python lab/scripts/one_launch_bench.py [--ms 1,8] [--block-n 64] [--block-k 256]
[--producers quant,norm] [--split-ks 1,4] [--decompose]`` (GPU). ``--decompose`` adds, for the quant
producer, the GEMM phase alone on the two-launch bytes with the one-launch kernel's tiles: in flat
programs, in persistent ones, and persistent after a trivial phase 1 and the barrier (with Helion's
semaphore and with a persistent one): where the one launch's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics

import helion
import helion.language as hl
import torch

from hlcore.norm import rms_normed_rows, rms_weighted_rows
from hlcore.quant_kernels import fp8_rows

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
FP8_MAX = 448.0


def producer_gemm_body(
    x, residual, norm_w, w, scale_b, xq, scale_a, new_residual, eps: float, split_k: int, with_norm: int
):
    """One launch: phase 1 the producer, a grid barrier, phase 2 the GEMM on phase 1's bytes.

    Producer: ``with_norm`` 0: q = per-token e4m3 of x (vLLM's dynamic per-token scale,
    hlcore.quant_kernels.fp8_rows), the o / down layers'; 1: residual' = x + residual (written to
    new_residual), y = RMSNorm(residual') * norm_w with vLLM's roundings (hlcore.norm's helpers),
    q = per-token e4m3 of y, the qkv / gate_up layers'. GEMM: out[M, N] = (q @ w) * scale_a[:, None]
    * scale_b[None, :] in bf16. x, residual [M, K] bf16; norm_w [K] bf16; w [K, N] e4m3
    (column-major, vLLM's); scale_b [N] fp32; xq [M, K] e4m3, scale_a [M] fp32 and new_residual are
    workspaces this call writes (residual and norm_w are read only with the norm). ``split_k`` > 1:
    K in that many chunks added into out with bf16 atomics (as hlcore.scaled_mm), out zeroed by
    phase 1 (no fill launch)."""
    m, k = x.size()
    n = w.size(1)
    split_k = hl.specialize(split_k)
    with_norm = hl.specialize(with_norm)
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    out = torch.empty([m, n], dtype=torch.bfloat16, device=x.device)
    for tile_m in hl.tile(m, block_size=1):  # phase 1: one row per program
        row = x[tile_m, :].to(torch.float32)
        if with_norm:
            total = row + residual[tile_m, :].to(torch.float32)
            new_residual[tile_m, :] = total.to(new_residual.dtype)
            nw = norm_w[None, :].to(torch.float32)
            row = (
                rms_weighted_rows(rms_normed_rows(total, eps), nw, norm_w.dtype).to(x.dtype).to(torch.float32)
            )
        q_rows, row_scale = fp8_rows(row, torch.amax(torch.abs(row), dim=-1))
        xq[tile_m, :] = q_rows
        scale_a[tile_m] = row_scale
        if split_k > 1:  # the split-K output starts at zero: written here, not by a fill launch
            for tile_z in hl.tile(n, block_size=1024):
                out[tile_m, tile_z] = hl.zeros([tile_m, tile_z], dtype=torch.bfloat16)
    hl.barrier()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):  # phase 2
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            acc = acc + hl.dot(xq[tile_m, tile_k], w[tile_k, tile_n])
        res = acc * scale_a[tile_m][:, None] * scale_b[tile_n][None, :]
        if split_k == 1:
            out[tile_m, tile_n] = res.to(torch.bfloat16)
        else:
            hl.atomic_add(out, [tile_m, tile_n], res.to(torch.bfloat16))
    return out


def gemm_body(xq, w, scale_a, scale_b):
    """Phase 2 alone (``--decompose``): out[M, N] = (xq @ w) * scale_a[:, None] * scale_b[None, :]
    in bf16, xq [M, K] e4m3, w [K, N] e4m3, scale_a [M], scale_b [N] fp32, the whole K per tile."""
    m, k = xq.size()
    n = w.size(1)
    out = torch.empty([m, n], dtype=torch.bfloat16, device=xq.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + hl.dot(xq[tile_m, tile_k], w[tile_k, tile_n])
        out[tile_m, tile_n] = (acc * scale_a[tile_m][:, None] * scale_b[tile_n][None, :]).to(torch.bfloat16)
    return out


def barrier_gemm_body(xq, w, scale_a, scale_b, scale_a_copy):
    """A trivial phase 1 (scale_a copied to scale_a_copy [M]), ``hl.barrier()``, then phase 2 as
    gemm_body on the copy (``--decompose``: the barrier's and the cooperative launch's cost)."""
    m, k = xq.size()
    n = w.size(1)
    out = torch.empty([m, n], dtype=torch.bfloat16, device=xq.device)
    for tile_m in hl.tile(m, block_size=1):
        scale_a_copy[tile_m] = scale_a[tile_m]
    hl.barrier()
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + hl.dot(xq[tile_m, tile_k], w[tile_k, tile_n])
        out[tile_m, tile_n] = (acc * scale_a_copy[tile_m][:, None] * scale_b[tile_n][None, :]).to(
            torch.bfloat16
        )
    return out


def make_decomposed(block_n: int, block_k: int) -> dict:
    """``--decompose``'s kernels, phase 2's tiles as the one-launch kernel's (M 16): ``gemm_flat``
    (one program per tile, as hlcore.scaled_mm at split_k 1), ``gemm_persistent`` (the same body in
    persistent blocked programs) and ``barrier_gemm`` (persistent, a trivial phase 1 and the barrier)."""

    def cfg(pid_type: str, sizes: list[int]) -> helion.Config:
        return helion.Config(block_sizes=sizes, pid_type=pid_type, num_warps=4, num_stages=3)

    return {
        "gemm_flat": helion.kernel(gemm_body, config=cfg("flat", [16, block_n, block_k]), static_shapes=True),
        "gemm_persistent": helion.kernel(
            gemm_body, config=cfg("persistent_blocked", [16, block_n, block_k]), static_shapes=True
        ),
        "barrier_gemm": helion.kernel(
            barrier_gemm_body, config=cfg("persistent_blocked", [16, block_n, block_k]), static_shapes=True
        ),
    }


def make_kernel(block_m: int, block_n: int, block_k: int, num_warps: int = 4, num_stages: int = 3):
    """The kernel (both producers: its with_norm argument) with one config: block_sizes = [phase-2 M, N, K]
    (phase 1's M is fixed at 1, its K the whole row, the zeroing tile 1024), persistent blocked
    programs (what hl.barrier requires)."""
    config = helion.Config(
        block_sizes=[block_m, block_n, block_k],
        pid_type="persistent_blocked",
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return helion.kernel(producer_gemm_body, config=config, static_shapes=True)


EPS = 1e-6


def inputs(m: int, n: int, k: int, device: str, seed: int = 0) -> dict:
    """Random operands of one layer (never zeros) and the workspaces phase 1 writes."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    d = {
        "x": (torch.randn(m, k, generator=g) * 2).to(torch.bfloat16),
        "residual": torch.randn(m, k, generator=g).to(torch.bfloat16),
        "norm_w": (torch.rand(k, generator=g) + 0.5).to(torch.bfloat16),
        "scale_b": torch.rand(n, generator=g) * 0.01 + 0.001,
        "xq": torch.empty(m, k, dtype=torch.float8_e4m3fn),
        "scale_a": torch.empty(m, dtype=torch.float32),
        "new_residual": torch.empty(m, k, dtype=torch.bfloat16),
    }
    d = {name: t.to(device) for name, t in d.items()}
    d["w"] = w.to(device).t()  # [K, N], column-major as vLLM passes it
    return d


def one_args(producer: str, d: dict, w: torch.Tensor, split_k: int = 1) -> tuple:
    """The one-launch kernel's arguments for ``producer`` ("quant" or "norm") with weight ``w``."""
    names = ("x", "residual", "norm_w")
    return (*(d[name] for name in names), w, d["scale_b"], d["xq"], d["scale_a"], d["new_residual"], EPS, split_k,
            int(producer == "norm"))  # fmt: skip


def two_launches(producer: str, d: dict, w: torch.Tensor, config=None) -> torch.Tensor:
    """hlcore's two launches: the producer kernel (per-token quant, or fused add + RMSNorm + quant),
    then ``scaled_mm`` (``config``: None = the shipped pick)."""
    from hlcore.norm_quant import fused_add_rms_norm_fp8_quant
    from hlcore.quant_kernels import per_token_fp8_quant
    from hlcore.scaled_mm import scaled_mm

    if producer == "norm":
        q, sa, _ = fused_add_rms_norm_fp8_quant(d["x"], d["residual"], d["norm_w"], EPS)
    else:
        q, sa = per_token_fp8_quant(d["x"])
    return scaled_mm(q, w, sa, d["scale_b"][:, None], torch.bfloat16, config=config)


def reference(producer: str, d: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 references: (q, scale [M, 1], out) of the unfused chain."""
    from hlcore.norm_quant import fused_add_rms_norm_fp8_quant_ref
    from hlcore.quant import per_token_fp8_quant_ref
    from hlcore.scaled_mm import scaled_mm_ref

    if producer == "norm":
        q, sa, _ = fused_add_rms_norm_fp8_quant_ref(d["x"], d["residual"], d["norm_w"], EPS)
    else:
        q, sa = per_token_fp8_quant_ref(d["x"])
    return q, sa, scaled_mm_ref(q, d["w"], sa, d["scale_b"][:, None], torch.bfloat16)


def codegen(block_n: int, block_k: int) -> None:
    """Helion's Triton code of both kernels for Qwen3-8B's o shape at M 8, on CPU tensors."""
    for producer in ("quant", "norm"):
        m, (n, k) = 8, SHAPES["o"]
        d = inputs(m, n, k, "cpu")
        kernel = make_kernel(16, block_n, block_k)
        bound = kernel.bind(one_args(producer, d, d["w"]))
        code = bound.to_triton_code(kernel.configs[0])
        barrier = "x_grid_barrier" in code and "launch_cooperative_grid=True" in code
        print(
            f"# {producer}: {len(code.splitlines())} lines of Triton code, grid barrier + cooperative launch: {barrier}"
        )
        print("\n".join(line for line in code.splitlines() if "_launcher(" in line))
    m, (n, k) = 8, SHAPES["o"]
    d = inputs(m, n, k, "cpu")
    sa2 = torch.empty_like(d["scale_a"])
    for name, kernel in make_decomposed(block_n, block_k).items():
        args = (d["xq"], d["w"], d["scale_a"], d["scale_b"]) + ((sa2,) if name == "barrier_gemm" else ())
        code = kernel.bind(args).to_triton_code(kernel.configs[0])
        print(
            f"# {name}: {len(code.splitlines())} lines, cooperative launch: {'launch_cooperative_grid=True' in code}"
        )


_SEM_ALLOC = re.compile(r"torch\.zeros\(\(1,\), device=\w+\.device, dtype=torch\.uint32\)")


def with_persistent_semaphore(kernel, args: tuple):
    """The kernel's host function for ``args`` with Helion's per-call ``torch.zeros(1)`` barrier
    semaphore replaced by one persistent buffer (the flip-bit barrier leaves it reusable: each call
    adds 2**31 in total), i.e. no fill kernel per call; None when the generated code has no such
    allocation."""
    from torch._inductor.codecache import PyCodeCache

    bound = kernel.bind(args)
    code = bound.to_triton_code(kernel.configs[0])
    if not _SEM_ALLOC.search(code):
        return None
    module = PyCodeCache.load(_SEM_ALLOC.sub("_HL_PERSISTENT_SEM", code))
    module._HL_PERSISTENT_SEM = torch.zeros(1, dtype=torch.uint32, device=args[0].device)
    return getattr(module, kernel.name)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of ``out`` against ``ref`` (fp32), rounded to 5 digits."""
    return round(((out.float() - ref.float()).norm() / ref.float().norm()).item(), 5)


def bench(
    ms: list[int],
    block_n: int,
    block_k: int,
    producers: list[str],
    split_ks: list[int],
    decompose: bool = False,
) -> None:
    from hlcore import timing

    same_tiles = {
        "block_sizes": [16, block_n, block_k],
        "split_k": 1,
        "swap_ab": False,
        "num_warps": 4,
        "num_stages": 3,
    }
    rows = []
    for producer in producers:
        layers = ("qkv", "gate_up") if producer == "norm" else tuple(SHAPES)
        for layer in layers:
            n, k = SHAPES[layer]
            for m in ms:
                d = inputs(m, n, k, "cuda", seed=m)
                ws = [d["w"].t().contiguous().t() for _ in range(timing.copies_for(n * k))]
                q, sa, ref = reference(producer, d)
                variants = {
                    "two_shipped": lambda w, d=d, p=producer: two_launches(p, d, w),
                    "two_same_tiles": lambda w, d=d, p=producer: two_launches(p, d, w, same_tiles),
                }
                checks = {}
                for sk in split_ks:
                    one = make_kernel(16, block_n, block_k)
                    out = one(*one_args(producer, d, d["w"], sk))
                    checks[f"err_sk{sk}"] = rel_err(out, ref)
                    checks[f"same_bytes_sk{sk}"] = bool(
                        torch.equal(d["xq"].view(torch.uint8), q.view(torch.uint8))
                    )
                    variants[f"one_sk{sk}"] = lambda w, d=d, one=one, p=producer, sk=sk: one(
                        *one_args(p, d, w, sk)
                    )
                    sem = with_persistent_semaphore(one, one_args(producer, d, d["w"], sk))
                    if sem is not None:
                        checks[f"err_sk{sk}_sem"] = rel_err(sem(*one_args(producer, d, d["w"], sk)), ref)
                        variants[f"one_sk{sk}_sem"] = lambda w, d=d, f=sem, p=producer, sk=sk: f(
                            *one_args(p, d, w, sk)
                        )
                if decompose and producer == "quant":  # the GEMM phase alone, on the two-launch bytes
                    xq, sa_flat = q.to(torch.float8_e4m3fn), sa.reshape(-1).contiguous().float()
                    sa2 = torch.empty_like(sa_flat)
                    for name, kernel in make_decomposed(block_n, block_k).items():
                        extra = (sa2,) if name == "barrier_gemm" else ()
                        got = kernel(xq, d["w"], sa_flat, d["scale_b"], *extra)
                        checks[f"err_{name}"] = rel_err(got, ref)
                        variants[name] = lambda w, kernel=kernel, xq=xq, sa=sa_flat, extra=extra, d=d: kernel(
                            xq, w, sa, d["scale_b"], *extra
                        )
                        if name == "barrier_gemm":
                            sem = with_persistent_semaphore(kernel, (xq, d["w"], sa_flat, d["scale_b"], sa2))
                            if sem is not None:
                                checks["err_barrier_gemm_sem"] = rel_err(
                                    sem(xq, d["w"], sa_flat, d["scale_b"], sa2), ref
                                )
                                variants["barrier_gemm_sem"] = (
                                    lambda w, f=sem, xq=xq, sa=sa_flat, d=d, sa2=sa2: f(
                                        xq, w, sa, d["scale_b"], sa2
                                    )
                                )
                times = {}
                for name, fn in variants.items():
                    try:
                        times[name] = timing.time_graph(
                            [lambda w=w, fn=fn: fn(w) for w in ws], repeats=50
                        ).median_us
                    except Exception as e:  # noqa: BLE001 - e.g. a cooperative launch refused in a graph
                        print(
                            f"{producer} {layer} M={m} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True
                        )
                        times[name] = float("nan")
                best_one = min(
                    (v for name, v in times.items() if name.startswith("one")), default=float("nan")
                )
                rows.append(
                    {
                        "producer": producer,
                        "layer": layer,
                        "m": m,
                        **{f"{name}_us": round(v, 2) for name, v in times.items()},
                        "best_one_vs_shipped": round(best_one / times["two_shipped"], 3),
                        **checks,
                    }
                )
                print(rows[-1], flush=True)
    ratios = [r["best_one_vs_shipped"] for r in rows if r["best_one_vs_shipped"] == r["best_one_vs_shipped"]]
    print(
        json.dumps(
            {
                "commit": os.environ.get("HL_COMMIT", "?"),
                "gpu": torch.cuda.get_device_name(),
                "block_n": block_n,
                "block_k": block_k,
                "split_ks": split_ks,
                "geomean_best_one_vs_shipped": round(statistics.geometric_mean(ratios), 3)
                if ratios
                else None,
                "rows": rows,
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--codegen", action="store_true")
    p.add_argument("--ms", default="1,8")
    p.add_argument("--block-n", type=int, default=64)
    p.add_argument("--block-k", type=int, default=256)
    p.add_argument("--producers", default="quant,norm")
    p.add_argument("--split-ks", default="1,4", help="split_k values of the one-launch kernel")
    p.add_argument(
        "--decompose",
        action="store_true",
        help="also time the GEMM phase alone: flat, persistent, and persistent after a trivial barrier",
    )
    a = p.parse_args()
    if a.codegen:
        codegen(a.block_n, a.block_k)
    else:
        ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
        bench(ints(a.ms), a.block_n, a.block_k, a.producers.split(","), ints(a.split_ks), a.decompose)


if __name__ == "__main__":
    main()
