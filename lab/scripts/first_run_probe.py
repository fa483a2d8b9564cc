"""Where the "first runs" of kernels loaded from hlcore's kernel cache go (issue 20, start-up).

In an engine whose Helion kernels were compiled by hlcore.kernel_pool's worker processes, the
first call of each kernel loaded from the cache took 0.17-0.5 s (2026-12-04, fourth session:
4.0 s for 24 Block_FP8 kernels, 5.6 s for 25 FP8_Dynamic ones), against ~2 ms each when the same
engine restarts on its own caches. Two causes read in the sources, both after the workers were
spawned and before the engine's first runs: Inductor's first compile switches Triton to torch's
ptxas (``TRITON_PTXAS_PATH``; Triton's cache key holds the ptxas version), and, when
``TRITON_CACHE_DIR`` is unset, points ``TRITON_CACHE_DIR`` at its own folder. This probe repeats
that outside vLLM: the Helion GEMM calls of Qwen3-8B's FP8_Dynamic shapes at M 1 / 8 / 32 recorded
(hlcore.kernel_pool.recording) and compiled by a Pool of worker processes into a fresh
``HL_KERNEL_CACHE_DIR`` with ``TRITON_CACHE_DIR`` unset; then, as Inductor would, torch's ptxas
and a new ``TRITON_CACHE_DIR``; then every kernel called once here with Triton instrumented:

* ``triton.compiler.compile`` through ``knobs.compilation.listener``: cache hit or not;
* ``triton.runtime.build._build``: C-compiler builds (Triton's launcher stubs) and their seconds;
* the launcher's construction and ``load_binary``, each timed.

Then every kernel is called a second time (the steady cost). By default with hlcore's two fixes
(``hlcore.kernel_cache.use_inductors_ptxas`` before the pool, as ``hlvllm.plugin`` calls it, and
``triton_cache_scope`` at every first call); ``--late-ptxas``: without the first, ``--no-scope``:
without the second (each run a fresh process and folder). Usage (GPU machine, helion importable):
``python3 lab/scripts/first_run_probe.py --dir /tmp/frp [--processes 4] [--late-ptxas] [--no-scope]``;
prints one table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
MS = (1, 8, 32)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--no-scope", action="store_true", help="first runs without hlcore's Triton cache scope")
    p.add_argument(
        "--late-ptxas", action="store_true", help="torch's ptxas only after the pool (no early call)"
    )
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    os.environ["HL_KERNEL_CACHE_DIR"] = str(a.dir / "hl")
    os.environ.pop("TRITON_CACHE_DIR", None)
    os.environ.pop("TRITON_PTXAS_PATH", None)

    import torch
    import triton
    import triton.runtime.build as build
    from triton import knobs

    from hlcore import kernel_pool
    from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm

    inputs = {
        (layer, m): generate_scaled_mm_inputs(m, n, k, device="cuda", seed=m)
        for layer, (n, k) in SHAPES.items()
        for m in MS
    }

    def call(d):
        return scaled_mm(d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16)

    from hlcore import kernel_cache

    if not a.late_ptxas:
        kernel_cache.use_inductors_ptxas()  # what hlvllm.plugin.register does, before the pool
    with kernel_pool.recording() as jobs:
        for d in inputs.values():
            call(d)
    t0 = time.perf_counter()
    report = kernel_pool.Pool(jobs, a.processes).start().wait(400)
    pool_s = time.perf_counter() - t0
    print(
        f"pool: {len(jobs)} jobs in {a.processes} processes, {pool_s:.1f} s: {report.get('errors')}",
        flush=True,
    )
    # what Inductor does at vLLM's first compile, after the workers were spawned: torch's ptxas
    # (compile_tasks._set_triton_ptxas_path) and, TRITON_CACHE_DIR being unset, its own folder
    from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path

    _set_triton_ptxas_path()
    os.environ["TRITON_CACHE_DIR"] = str(a.dir / "inductor-triton")
    if a.no_scope:  # the behaviour before hlcore kept Triton's files of its kernels in <dir>/triton
        import contextlib

        kernel_cache.triton_cache_scope = lambda cache_dir: contextlib.nullcontext()
    triton_files_before = sum(1 for _ in a.dir.rglob("*"))

    events: list[dict] = []

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        events.append({"what": "compile", "hit": cache_hit, "name": getattr(src, "name", "?")})

    knobs.compilation.listener = listener

    def timed(what, real):
        def wrapper(*args, **kwargs):
            s = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                events.append({"what": what, "s": time.perf_counter() - s})

        return wrapper

    build._build = timed("cc", build._build)  # Triton's launcher stubs, compiled by the C compiler
    from triton.runtime import driver

    drv = driver.active
    drv.launcher_cls = timed("launcher", drv.launcher_cls)
    drv.utils.load_binary = timed("load_binary", drv.utils.load_binary)

    rows = []
    for (layer, m), d in inputs.items():
        events.clear()
        torch.cuda.synchronize()
        s = time.perf_counter()
        call(d)
        torch.cuda.synchronize()
        first = time.perf_counter() - s
        s = time.perf_counter()
        call(d)
        torch.cuda.synchronize()
        second = time.perf_counter() - s
        ev = list(events)
        rows.append(
            {
                "layer": layer,
                "m": m,
                "first_ms": round(first * 1e3, 2),
                "second_ms": round(second * 1e3, 3),
                "compiles": sum(e["what"] == "compile" for e in ev),
                "hits": sum(e["what"] == "compile" and e["hit"] for e in ev),
                "cc_builds": sum(e["what"] == "cc" for e in ev),
                "cc_ms": round(sum(e.get("s", 0) for e in ev if e["what"] == "cc") * 1e3, 1),
                "launcher_ms": round(sum(e.get("s", 0) for e in ev if e["what"] == "launcher") * 1e3, 1),
                "load_ms": round(sum(e.get("s", 0) for e in ev if e["what"] == "load_binary") * 1e3, 1),
            }
        )
    triton_files_after = sum(1 for _ in a.dir.rglob("*"))

    print(
        f"{'layer':8} {'M':>3} {'first ms':>9} {'2nd ms':>7} {'compiles':>8} {'hits':>4} {'cc':>3} {'cc ms':>7} {'launcher ms':>11} {'load ms':>7}"
    )
    for r in rows:
        print(
            f"{r['layer']:8} {r['m']:>3} {r['first_ms']:>9} {r['second_ms']:>7} {r['compiles']:>8} {r['hits']:>4} "
            f"{r['cc_builds']:>3} {r['cc_ms']:>7} {r['launcher_ms']:>11} {r['load_ms']:>7}"
        )
    print(
        json.dumps(
            {
                "commit": os.environ.get("HL_COMMIT", "?"),
                "gpu": torch.cuda.get_device_name(),
                "triton": triton.__version__,
                "pool_s": round(pool_s, 1),
                "jobs": len(jobs),
                "no_scope": a.no_scope,
                "late_ptxas": a.late_ptxas,
                "ptxas": os.environ.get("TRITON_PTXAS_PATH"),
                "files_under_dir": [triton_files_before, triton_files_after],
                "kernel_cache": kernel_cache.stats(),
                "load_seconds": kernel_cache.load_seconds(),
                "rows": rows,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
