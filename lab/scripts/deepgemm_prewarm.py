"""Fill DeepGEMM's JIT cache for one model's dense Block_FP8 GEMMs before an end-to-end pair.

vLLM's Block_FP8 path on the H200 is DeepGEMM, which JIT-compiles (nvcc) a kernel per (N, K, M
tiling) the first time it meets one. vLLM's own warm-up does that at start-up; the lab runs skip it
(``VLLM_DEEP_GEMM_WARMUP=skip``: minutes of start-up per engine) and share one cache
(``DG_JIT_CACHE_DIR``) between the two engines of a pair, so whichever engine runs first would
otherwise pay the compiles inside its measured generates (2026-12-01 evening: 5-20 s stalls at
concurrency 8). This script runs vLLM's warm-up function itself (``relax``: the M values where
DeepGEMM's tiling changes, up to ``--max-tokens``) on random weights of each (N, K), so both
engines then start with the same warm cache.

Usage (GPU machine, vLLM bundle env): ``DG_JIT_CACHE_DIR=/tmp/dg-jit python3
lab/scripts/deepgemm_prewarm.py --model qwen3-8b`` (prints the seconds per shape).
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--max-tokens", type=int, default=16384)
    args = ap.parse_args()
    os.environ["VLLM_DEEP_GEMM_WARMUP"] = "relax"
    from vllm.model_executor.warmup import deep_gemm_warmup as dgw  # noqa: PLC0415

    from hltools import shapes  # noqa: PLC0415 (GPU-machine script)

    for shape in shapes.linear_shapes(shapes.load_model_config(args.model)):
        n, k = shape.n, shape.k
        w = (torch.randn((n, k), device="cuda") * 0.1).to(torch.float8_e4m3fn)
        ws = torch.rand((-(-n // 128), -(-k // 128)), device="cuda", dtype=torch.float32) * 0.01
        t0 = time.perf_counter()
        try:
            dgw._deepgemm_fp8_gemm_nt_warmup(w, ws, args.max_tokens)
            torch.cuda.synchronize()
            print(f"N={n} K={k}: {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - a failed prewarm only means the engines JIT as they go
            print(f"N={n} K={k}: prewarm failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
