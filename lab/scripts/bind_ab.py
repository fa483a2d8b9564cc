"""Cold first calls of the GEMM in the engine's capture order: one helion.Kernel per config (``old``:
hlcore's design) against every config over one shared binding (``new``: ``kernel.bind(args)
.compile_config(config)`` on one config-less kernel, as ``hlcore.kernel_cache.ConfiguredKernel`` did
from 3ffbe86 until this measurement removed it; the same calls are written out below).

Issue 20 (cold start-up): the 2026-12-02 day S1 engine took 29.9 s of first Helion calls for 20
kernels with the shared binding against 15.5 s in the morning without it, on a machine whose Dynamo
step was ~40 % slower; this separates the design from the machine. Each run is a fresh process with
an empty Triton cache, no hlcore kernel cache; the calls follow vLLM's capture (sizes 32 .. 1, every
shape at each size; shapes and sizes whose shipped key is marked fallback are skipped, as the engine
skips them). Prints binds (``BoundKernel`` constructions), seconds in ``Kernel.bind``,
``compile_config`` and in all first calls (bind + codegen + Triton compile + launch, synchronized).

Usage: ``python3 lab/scripts/bind_ab.py old|new [--format fp8_dynamic]``; on the CPU (int8, Triton's
interpreter, small shapes) with ``--cpu``.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import tempfile
import time

SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]  # Qwen3-8B: qkv, o, gate_up, down
SIZES = [32, 24, 16, 8, 4, 2, 1]


def _shared(kernel, config):
    """``config`` run over ``kernel``'s bindings (what ConfiguredKernel did)."""
    runs = {}

    def call(*args):
        key = tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else a for a in args)
        if key not in runs:
            runs[key] = kernel.bind(args).compile_config(config)
        return runs[key](*args)

    return call


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["old", "new"])
    p.add_argument("--format", default="fp8_dynamic")
    p.add_argument("--cpu", action="store_true")
    args = p.parse_args()
    os.environ.pop("HL_KERNEL_CACHE_DIR", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-ab-")
    import torch

    hk = importlib.import_module("helion.runtime.kernel")
    from hlcore import scaled_mm as sm
    from hlcore.helion_compat import gemm_kernel, local_kernel
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    counts = collections.Counter()
    for cls, name, key in (
        (hk.BoundKernel, "__init__", "bind"),
        (hk.BoundKernel, "compile_config", "codegen"),
    ):
        orig = getattr(cls, name)

        def timed(self, *a, _orig=orig, _key=key, **k):
            counts[_key] += 1
            t = time.perf_counter()
            try:
                return _orig(self, *a, **k)
            finally:
                counts[_key + "_s"] += time.perf_counter() - t

        setattr(cls, name, timed)

    dev = "cpu" if args.cpu else "cuda"
    qdtype = torch.int8 if args.cpu else (torch.int8 if args.format == "w8a8_int8" else torch.float8_e4m3fn)
    fmt = "w8a8_int8" if args.cpu else args.format
    out_dtype = torch.float32 if args.cpu else torch.bfloat16
    weights = {}
    for n, k in SHAPES:
        nn, kk = (n // 16, k // 16) if args.cpu else (n, k)
        weights[(n, k)] = (
            (torch.randn(nn, kk, device=dev) * 20).clamp(-100, 100).to(qdtype),
            torch.rand(nn, 1, device=dev),
        )
    kernels = {}
    shared = local_kernel(gemm_kernel(sm._scaled_mm_body))  # new: the one config-less kernel
    calls = []
    t_all = time.perf_counter()
    for m in SIZES:
        for n, k in SHAPES:
            pick = pick_scaled_mm_config(fmt, m, n, k, gpu="nvidia_h200")
            if pick.fallback:
                continue
            cfg = sm.helion_config(pick.config_json)
            if pick.config_json not in kernels:
                kernels[pick.config_json] = (
                    local_kernel(gemm_kernel(sm._scaled_mm_body, cfg))
                    if args.mode == "old"
                    else _shared(shared, cfg)
                )
            b_t, sb = weights[(n, k)]
            a = (torch.randn(m, b_t.shape[1], device=dev) * 20).clamp(-100, 100).to(qdtype)
            sa = torch.rand(m, 1, device=dev)
            t = time.perf_counter()
            kernels[pick.config_json](a, b_t, sa, sb, None, out_dtype, 0)
            if dev == "cuda":
                torch.cuda.synchronize()
            calls.append((m, n, k, time.perf_counter() - t))
    total = time.perf_counter() - t_all
    per = " ".join(f"{m}/{n}x{k}:{s:.2f}" for m, n, k, s in calls)
    print(f"per call s: {per}")
    print(
        f"RESULT {args.mode} {fmt}: {len(calls)} calls, {len(kernels)} configs, {counts['bind']} binds "
        f"({counts['bind_s']:.1f} s), {counts['codegen']} compile_config ({counts['codegen_s']:.1f} s), "
        f"first calls {total:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
