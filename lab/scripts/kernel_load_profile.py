"""Where a warm start's Helion seconds go (issue 20): the first call of each FP8 GEMM from hlcore's
kernel cache, timed and profiled.

An engine's warm start-up spends ~2.2 s in "first Helion calls" for 20 kernels loaded from the kernel
cache (2026-12-02 morning, ``hlvllm.startup``'s line), i.e. ~110 ms per kernel. This script runs
Qwen3-8B's four GEMM shapes at M = 1..32 (28 kernels, the shipped configs) in a fresh process:
``fill`` compiles them into ``--cache`` (Helion's normal path), ``load`` runs them again in a new
process from that cache under cProfile and prints the per-call seconds, the cache counters and the
functions the time went to.

Usage (GPU machine, bundle env): ``python3 lab/scripts/kernel_load_profile.py fill --cache DIR``,
then ``python3 lab/scripts/kernel_load_profile.py load --cache DIR``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]  # Qwen3-8B: qkv, o, gate_up, down
MS = [1, 2, 4, 8, 16, 24, 32]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["fill", "load"])
    p.add_argument("--cache", required=True)
    p.add_argument("--format", default="fp8_dynamic")
    args = p.parse_args()
    os.environ["HL_KERNEL_CACHE_DIR"] = args.cache
    t0 = time.perf_counter()
    import torch

    t1 = time.perf_counter()
    import hlcore.scaled_mm as sm
    from hlcore import kernel_cache

    t2 = time.perf_counter()
    print(f"[{args.mode}] import torch {t1 - t0:.2f} s, hlcore.scaled_mm (helion) {t2 - t1:.2f} s")
    calls = []
    for n, k in SHAPES:
        d = sm.generate_scaled_mm_inputs(32, n, k, fmt=args.format, device="cuda")
        for m in MS:
            calls.append(((m, n, k), {**d, "a": d["a"][:m], "scale_a": d["scale_a"][:m]}))
    torch.cuda.synchronize()
    prof = cProfile.Profile() if args.mode == "load" else None
    first, second = [], []
    for key, d in calls:
        t = time.perf_counter()
        if prof:
            prof.enable()
        sm.scaled_mm(**d)
        torch.cuda.synchronize()
        if prof:
            prof.disable()
        first.append((key, time.perf_counter() - t))
    for _key, d in calls:
        t = time.perf_counter()
        sm.scaled_mm(**d)
        torch.cuda.synchronize()
        second.append(time.perf_counter() - t)
    total = sum(s for _, s in first)
    print(
        f"[{args.mode}] {len(first)} first calls: {total:.2f} s ({1e3 * total / len(first):.0f} ms each); "
        f"second calls {1e3 * sum(second) / len(second):.2f} ms each; cache {kernel_cache.stats()}"
    )
    print(" ".join(f"{m}x{n}x{k}:{1e3 * s:.0f}" for (m, n, k), s in first))
    if prof:
        for sort, lines in (("cumulative", 45), ("tottime", 25)):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(sort).print_stats(lines)
            print("\n".join(buf.getvalue().splitlines()[4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
