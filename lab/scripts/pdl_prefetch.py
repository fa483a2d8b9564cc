"""Can a GEMM hide the kernel that produces its activations? Programmatic dependent launch (PDL) with
the weight prefetched into L2 before the GEMM waits (issue 22, "a tiny kernel whose result the GEMM
waits for only after it has started streaming its weight").

A decode step runs producer -> GEMM pairs: a small kernel quantizes the activations (per-token fp8,
a few µs at M <= 32), then the GEMM streams its fp8 weight from HBM. Today the GEMM starts when the
producer has finished. Earlier runs (lab/gpu-runs.md, 2026-12-01 afternoon and late) measured PDL
with the GEMM waiting at its entry after a producer that never triggers its dependents: no gain.
Here the producer triggers at its entry (``gdc_launch_dependents``), so the GEMM's programs become
resident while it runs, and each GEMM program first asks L2 for the first ``PRE`` K tiles of its
weight slice (``prefetch.global.L2``, one per 128-byte line), then waits (``gdc_wait``: the
producer has finished and flushed), then runs its K loop, whose first loads now hit L2.

Kernels (plain Triton, written for this measurement; the same GEMM in every variant):
  producer   per-token fp8 quantization of x [M, K] bf16 (one program per row; vLLM's
             semantics: scale = max(amax / 448, 1 / (448 * 512)))
  gemm       out[M, N] bf16 = (A_q @ B^T) * scale_a[:, None] * scale_b[None, :], B [N, K] fp8
             K-contiguous, one program per BN columns, the whole K (no split-K, no fill);
             swap-AB (the dot as B_tile @ A_tile^T) so the N tile is the MMA's M side
mode 0 plain launch; 1 PDL, wait at entry; 2 PDL, prefetch PRE K tiles then wait.

Timed under CUDA-graph replay (hlcore.timing.time_graph) over weight copies larger than L2, per
(layer of Qwen3-8B, M): the GEMM alone, Helion's shipped GEMM alone (context), the producer alone,
and the pair in each mode. Every pair's output is checked against mode 0 (bitwise: same math).

Usage (GPU machine, hlcore + helion importable): ``python3 lab/scripts/pdl_prefetch.py [--ms 1,8]``
prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import triton
import triton.language as tl

#: Qwen3-8B's decode GEMMs (N, K) and the N tile of this script's GEMM for each
SHAPES = {
    "qkv": (6144, 4096, 32),
    "o": (4096, 4096, 32),
    "gate_up": (24576, 4096, 64),
    "down": (4096, 12288, 32),
}
BK = 256


@triton.jit
def _prefetch_l2(addr):
    return tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [addr], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _quant_rows(x_ptr, q_ptr, s_ptr, K: tl.constexpr, BLOCK: tl.constexpr, TRIGGER: tl.constexpr):
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    amax = tl.zeros((BLOCK,), tl.float32)
    for k0 in range(0, K, BLOCK):
        x = tl.load(x_ptr + row * K + k0 + offs).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax) / 448.0, 1.0 / (448.0 * 512.0))
    for k0 in range(0, K, BLOCK):
        x = tl.load(x_ptr + row * K + k0 + offs).to(tl.float32)
        q = tl.clamp(x / scale, -448.0, 448.0)
        tl.store(q_ptr + row * K + k0 + offs, q.to(tl.float8e4nv))
    tl.store(s_ptr + row, scale)


@triton.jit
def _gemm(
    a_ptr, sa_ptr, b_ptr, sb_ptr, out_ptr, M,
    N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    MODE: tl.constexpr, PRE: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    offs_n = (pid * BN + tl.arange(0, BN)).to(tl.int64)
    offs_m = tl.arange(0, BM)
    offs_k = tl.arange(0, BK)
    if MODE == 1:
        tl.extra.cuda.gdc_wait()
    if MODE == 2:
        for i in tl.static_range(PRE):
            for j in tl.static_range(BK // 128):
                _prefetch_l2((b_ptr + offs_n * K + (i * BK + j * 128)).to(tl.int64))
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros((BN, BM), tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + offs_m[:, None] * K + k0 + offs_k[None, :], mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptr + offs_n[:, None] * K + k0 + offs_k[None, :])
        acc = acc + tl.dot(b, tl.trans(a))
    sa = tl.load(sa_ptr + offs_m, mask=offs_m < M, other=0.0)
    sb = tl.load(sb_ptr + offs_n)
    res = acc * sb[:, None] * sa[None, :]
    ptrs = out_ptr + offs_m[None, :] * N + offs_n[:, None]
    tl.store(ptrs, res.to(tl.bfloat16), mask=offs_m[None, :] < M)


def producer(x, q, s, trigger: bool):
    _quant_rows[(x.shape[0],)](x, q, s, K=x.shape[1], BLOCK=1024, TRIGGER=trigger, num_warps=4)


def gemm(q, s, w, sb, out, bn: int, mode: int, pre: int):
    m, k = q.shape
    n = w.shape[0]
    kw = {"launch_pdl": True} if mode else {}
    _gemm[(n // bn,)](q, s, w, sb, out, m, N=n, K=k, BM=16, BN=bn, BK=BK, MODE=mode, PRE=pre,
                      num_warps=4, num_stages=4, **kw)  # fmt: skip


VARIANTS = [("pair_plain", False, 0, 0), ("pair_wait", True, 1, 0)]
VARIANTS += [(f"pair_pre{p}", True, 2, p) for p in (1, 2, 4)] + [("pair_pre4_notrigger", False, 2, 4)]


def measure(layer: str, m: int, ws: list, sbs: list) -> dict:
    """One (layer, M): the GEMM alone, Helion's GEMM alone, the producer alone, every pair variant."""
    from hlcore import timing
    from hlcore.scaled_mm import scaled_mm

    n, k, bn = SHAPES[layer]
    if not 1 <= m <= 16:
        raise ValueError(f"M must be 1..16 (the GEMM's row tile is 16); got {m}")
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in ws]
    q = torch.empty(m, k, device="cuda", dtype=torch.float8_e4m3fn)
    s = torch.empty(m, device="cuda", dtype=torch.float32)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    row = {"layer": layer, "M": m, "N": n, "K": k, "BN": bn}
    producer(xs[0], q, s, False)
    q0, s0 = q.clone(), s.clone()
    row["gemm"] = timing.time_graph(
        [lambda w=w, b=b: gemm(q0, s0, w, b, out, bn, 0, 0) for w, b in zip(ws, sbs, strict=True)]
    ).median_us
    calls = [
        lambda w=w, b=b: scaled_mm(q0, w.t(), s0.view(m, 1), b.view(n, 1), torch.bfloat16)
        for w, b in zip(ws, sbs, strict=True)
    ]
    row["helion_gemm"] = timing.time_graph(calls).median_us
    row["producer"] = timing.time_graph([lambda x=x: producer(x, q, s, False) for x in xs]).median_us
    ref = None
    for name, trigger, mode, pre in VARIANTS:

        def pair(x, w, b, trigger=trigger, mode=mode, pre=pre):
            producer(x, q, s, trigger)
            gemm(q, s, w, b, out, bn, mode, pre)

        calls = [lambda x=x, w=w, b=b: pair(x, w, b) for x, w, b in zip(xs, ws, sbs, strict=True)]
        row[name] = timing.time_graph(calls).median_us
        pair(xs[0], ws[0], sbs[0])
        torch.cuda.synchronize()
        if ref is None:
            ref = out.clone()
            exact = (q.float() * s[:, None]) @ (ws[0].float() * sbs[0][:, None]).t()
            row["err_vs_fp32"] = round(float((out.float() - exact).norm() / exact.norm()), 5)
        else:
            row[f"{name}_equal"] = bool(torch.equal(out, ref))
    return row


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="1,8")
    p.add_argument("--layers", default=",".join(SHAPES))
    args = p.parse_args()
    from hlcore import timing

    torch.manual_seed(0)
    rows = []
    for layer in args.layers.split(","):
        n, k, _ = SHAPES[layer]
        copies = timing.copies_for(n * k)
        ws = [(torch.randn(n, k, device="cuda") * 0.05).to(torch.float8_e4m3fn) for _ in range(copies)]
        sbs = [torch.rand(n, device="cuda") * 0.01 + 0.001 for _ in range(copies)]
        for m in (int(v) for v in args.ms.split(",")):
            rows.append(measure(layer, m, ws, sbs))
            print(json.dumps(rows[-1]), flush=True)
    cols = ["gemm", "helion_gemm", "producer"] + [v[0] for v in VARIANTS]
    print("| layer | M | " + " | ".join(cols) + " | best pre vs plain |")
    print("|" + " --- |" * (len(cols) + 3))
    for r in rows:
        best = min(r[c] for c in cols if c.startswith("pair_pre"))
        cells = " | ".join(f"{r[c]:.2f}" for c in cols)
        print(f"| {r['layer']} | {r['M']} | {cells} | {best / r['pair_plain']:.3f} |")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    print(json.dumps({**env, "commit": os.environ.get("HL_COMMIT", "?"), "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
