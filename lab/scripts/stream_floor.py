"""The time floor of a decode GEMM on this GPU: how long a kernel that only reads the weight once takes
(dev tool for issue 4, one device call, ~30 s on an H200).

A decode GEMM at M <= 32 must at least stream its [N, K] weight from HBM once. This script times, with
the timer of `hltools bench kernels` (hltools.timing.time_graph: CUDA-graph replay of calls rotating
over weight copies > 4x L2; tilings compared at 20 replays, the best re-timed at 30):

* ``read``: a Triton kernel that reads every byte of an [N, K] int8 weight (as int32 words) and
  XOR-folds it into one int32 per program (no MMA, no scales, no A, no output tile), best of a grid of
  tiles / K splits / warps / stages, at every (N, K) of FLOOR_SHAPES (default: the 25 shapes of the
  committed kernel benchmarks). A GEMM must read its weight too: one that streams it no faster
  than the best of these kernels cannot be faster in the same timing setup (a better read kernel,
  e.g. TMA bulk copies, would lower this floor);
* ``empty``: an empty kernel (1 and 264 programs) and a ``zero_`` of a [32, 4096] bf16 output (the
  split-K fill launch), per graph node: the launch floor of any kernel.

Weights are random bytes (never zeros). Writes $OUT/stream_floor.json; the table is printed last.

  FLOOR_SHAPES=4096x4096,6144x4096 python lab/scripts/stream_floor.py
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

from hltools.timing import copies_for, copy_bandwidth_gbs, time_graph

BENCH_SHAPES = (
    "2048x2048,2048x6144,2560x4096,2560x9728,3072x4096,4096x2048,4096x4096,4096x6144,4096x12288,"
    "4096x14336,5120x5120,5120x8192,5120x17408,5120x25600,6144x2560,6144x4096,7168x5120,10240x5120,"
    "12288x2048,12288x4096,19456x2560,24576x4096,28672x4096,34816x5120,51200x5120"
)
SHAPES = [
    tuple(int(v) for v in s.split("x")) for s in os.environ.get("FLOOR_SHAPES", BENCH_SHAPES).split(",")
]
BUDGET_S = float(os.environ.get("FLOOR_BUDGET_S", "300"))
# (rows per program, bytes of K per step, K splits, warps, stages)
CONFIGS = [
    (bn, bk, sk, nw, st)
    for bn, bk, sk, nw, st in itertools.product((16, 32, 64), (256, 512), (1, 2, 4, 8), (4, 8), (3, 4))
    if bn * bk <= 32768
]


@triton.jit
def _read_kernel(w_ptr, out_ptr, n, kw, stride_w, kw_per_split, BN: tl.constexpr, BKW: tl.constexpr):
    """Program (pid_n, pid_k) XOR-folds rows [pid_n*BN, +BN) x int32 words [pid_k*kw_per_split, +)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros([BN, BKW], dtype=tl.int32)
    k0 = pid_k * kw_per_split
    for kk in range(k0, k0 + kw_per_split, BKW):
        rk = kk + tl.arange(0, BKW)
        x = tl.load(
            w_ptr + rn[:, None] * stride_w + rk[None, :], mask=(rn[:, None] < n) & (rk[None, :] < kw), other=0
        )
        acc = acc ^ x
    tl.store(out_ptr + pid_n * tl.num_programs(1) + pid_k, tl.xor_sum(tl.xor_sum(acc, axis=1), axis=0))


@triton.jit
def _empty_kernel(x_ptr):
    pass


def read_call(w: torch.Tensor, out: torch.Tensor, cfg) -> callable:
    bn, bk, sk, nw, st = cfg
    n, k = w.shape
    w32 = w.view(torch.int32)  # [N, K/4] words
    kw = k // 4
    bkw = bk // 4
    kw_per_split = triton.cdiv(triton.cdiv(kw, sk), bkw) * bkw
    grid = (triton.cdiv(n, bn), triton.cdiv(kw, kw_per_split))
    return lambda: _read_kernel[grid](
        w32, out, n, kw, w32.stride(0), kw_per_split, BN=bn, BKW=bkw, num_warps=nw, num_stages=st
    )


def check_read(dev) -> None:
    """The read kernel really reads every word: its fold equals torch's XOR over the weight."""
    w = torch.randint(-128, 128, (96, 1024), dtype=torch.int8, device=dev)
    out = torch.zeros(4096, dtype=torch.int32, device=dev)
    for cfg in [(32, 256, 2, 4, 3), (64, 512, 1, 8, 4), (16, 256, 8, 4, 3)]:
        out.zero_()
        read_call(w, out, cfg)()
        got = 0
        for v in out.tolist():
            got ^= v
        ref = 0
        for v in w.view(torch.int32).flatten().tolist():
            ref ^= v
        if got != ref:
            raise SystemExit(f"read kernel {cfg}: fold {got} != torch {ref}")


def main() -> int:
    dev = "cuda"
    t_start = time.time()
    check_read(dev)
    gpu = torch.cuda.get_device_name()
    bw = copy_bandwidth_gbs()
    res: dict = {
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_bandwidth_gbs": bw,
    }
    out = torch.zeros(1 << 16, dtype=torch.int32, device=dev)
    buf = torch.zeros(32, 4096, dtype=torch.bfloat16, device=dev)
    empty = {
        "empty_1_program": [lambda: _empty_kernel[(1,)](out)] * 64,
        "empty_264_programs": [lambda: _empty_kernel[(264,)](out)] * 64,
        "zero_32x4096_bf16": [buf.zero_] * 64,
        "zero_then_empty_264": [lambda: (buf.zero_(), _empty_kernel[(264,)](out))] * 64,
    }
    res["empty_us"] = {name: time_graph(calls).median_us for name, calls in empty.items()}
    res["read"] = []
    for n, k in SHAPES:
        if time.time() - t_start > BUDGET_S:
            print(f"budget: stopped before {n}x{k}", file=sys.stderr)
            break
        copies = copies_for(n * k)
        ws = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev) for _ in range(copies)]
        times = {}
        for cfg in CONFIGS:
            calls = [read_call(w, out, cfg) for w in ws]
            times["x".join(map(str, cfg))] = time_graph(calls, repeats=20).median_us
        best = min(times, key=times.get)
        # re-time the best afresh (30 replays), so picking the minimum of noisy timings does not bias it low
        bcfg = tuple(int(v) for v in best.split("x"))
        t_best = time_graph([read_call(w, out, bcfg) for w in ws]).median_us
        res["read"].append(
            {
                "n": n,
                "k": k,
                "bytes": n * k,
                "copies": copies,
                "best_us": t_best,
                "best_cfg": best,
                "pct_copy_bw": 100 * n * k / (t_best * 1e-6) / 1e9 / bw,
                "all_us": times,
            }
        )
        del ws
        torch.cuda.empty_cache()
    res["configs"] = "BN x BK(bytes) x split_k x warps x stages"
    path = os.path.join(os.environ.get("OUT", "."), "stream_floor.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(
        f"GPU {gpu}, copy bandwidth {bw:.0f} GB/s; per graph node: "
        + ", ".join(f"{k} {v:.2f} us" for k, v in res["empty_us"].items())
    )
    print("| N x K | MiB | read floor us | % copy BW | best cfg |")
    for r in res["read"]:
        print(
            f"| {r['n']}x{r['k']} | {r['bytes'] / 2**20:.1f} | {r['best_us']:.2f} | {r['pct_copy_bw']:.0f} | {r['best_cfg']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
