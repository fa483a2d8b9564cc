# ruff: noqa: B023  (closures are called within their loop iteration)
"""GPU sweep of hand-designed scaled_mm configs (dev tool for the tuning issue, one H200 call).

For each (format, N, K) of SWEEP_SHAPES and each M of SWEEP_MS: every candidate config of
``candidates()`` (plus the heuristic default) is checked against the fp32 reference and timed under
CUDA-graph replay rotating over weight copies > 4x L2, next to vLLM's default kernel for the format.
Compilation runs first in SWEEP_JOBS parallel worker processes (they fill Triton's on-disk cache),
so the timing pass only loads binaries. Writes $OUT/sweep.json, prints a table (best per key) last.

  SWEEP_FORMATS=fp8_dynamic SWEEP_SHAPES=6144x4096,4096x4096 SWEEP_MS=1,8,32 python lab/scripts/sweep_scaled_mm.py
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import sys
import time

BUDGET_S = float(os.environ.get("SWEEP_BUDGET_S", "420"))
SHAPES = [
    tuple(int(v) for v in s.split("x"))
    for s in os.environ.get("SWEEP_SHAPES", "6144x4096,4096x4096,24576x4096,4096x12288").split(",")
]
FORMATS = os.environ.get("SWEEP_FORMATS", "fp8_dynamic").split(",")
MS = [int(x) for x in os.environ.get("SWEEP_MS", "1,8,32").split(",")]
JOBS = int(os.environ.get("SWEEP_JOBS", "12"))
ONLY = os.environ.get("SWEEP_ONLY")  # comma-separated candidate names
# JSON object {name: config}: more candidates, always kept (SWEEP_ONLY filters the built-in ones)
EXTRA = json.loads(os.environ.get("SWEEP_CONFIGS", "{}"))
# comma-separated variant names of default_variants() without the _m<M> suffix (default: all)
VARIANTS = os.environ.get("SWEEP_VARIANTS")
# 1: every timed call (Helion's and vLLM's) first rewrites A with a small copy kernel, as a decode
# step's quant kernel produces A right before the GEMM: a PDL launch then follows a non-PDL producer
# instead of the previous GEMM of the graph.
PRODUCER = os.environ.get("SWEEP_PRODUCER") == "1"


def candidates(fmt: str) -> dict[str, dict]:
    """Named configs: split_k=1 narrow tiles (no atomics, no zero-fill launch), split-K, TMA, warps."""
    c = {}

    def add(name, bm, bn, bk, sk, swap, st, nw=4, ix=None, pid=None):
        cfg = {"block_sizes": [bm, bn, bk], "split_k": sk, "swap_ab": swap, "num_stages": st, "num_warps": nw}
        if ix:
            cfg["indexing"] = ix
        if pid:
            cfg["pid_type"] = pid
        c[name] = cfg

    for bn in (16, 32, 64):
        for bk in (256, 512):
            add(f"s1_n{bn}_k{bk}", 16, bn, bk, 1, False, 4 if bk == 256 else 3)
    add("s1_n64_k128_sw", 16, 64, 128, 1, True, 6)
    add("s1_n128_k256_sw", 16, 128, 256, 1, True, 4)
    add("s1_n32_k256_w2", 16, 32, 256, 1, False, 4, nw=2)
    add("s1_n32_k256_tma", 16, 32, 256, 1, False, 4, ix="tensor_descriptor")
    add("s1_n64_k256_sw_tma", 16, 64, 256, 1, True, 4, ix="tensor_descriptor")
    for sk in (2, 4, 8):
        add(f"s{sk}_n64_k128_sw", 16, 64, 128, sk, True, 4)
        add(f"s{sk}_n128_k256_sw", 16, 128, 256, sk, True, 3)
        add(f"s{sk}_n32_k256", 16, 32, 256, sk, False, 4)
    add("s8_n128_k128_sw", 16, 128, 128, 8, True, 4)
    add("s16_n128_k128_sw", 16, 128, 128, 16, True, 3)
    add("s16_n64_k128_sw", 16, 64, 128, 16, True, 3)
    add("s4_n64_k128_sw_tma", 16, 64, 128, 4, True, 4, ix="tensor_descriptor")
    for sk in (2, 4, 8, 16):  # self-cleaning workspace split-K (no fill launch)
        add(f"s{sk}_n64_k128_sw_ws", 16, 64, 128, sk, True, 4)
        c[f"s{sk}_n64_k128_sw_ws"]["split_k_workspace"] = True
    add("s4_n128_k128_sw_tma", 16, 128, 128, 4, True, 4, ix="tensor_descriptor")
    add("s2_n32_k256_tma", 16, 32, 256, 2, False, 4, ix="tensor_descriptor")
    # persistent programs (one per SM, looping over tiles): no partial last wave. GPU only (Helion
    # asks the device for its SM count; they do not run in the CPU interpreters), untimed so far.
    for pid, tag in (("persistent_interleaved", "pi"), ("persistent_blocked", "pb")):
        add(f"s1_n64_k128_sw_{tag}", 16, 64, 128, 1, True, 6, pid=pid)
        add(f"s1_n32_k256_{tag}", 16, 32, 256, 1, False, 4, pid=pid)
        add(f"s4_n64_k128_sw_{tag}", 16, 64, 128, 4, True, 4, pid=pid)
    if ONLY:
        c = {k: v for k, v in c.items() if k in ONLY.split(",")}
    c.update(EXTRA)
    if fmt == "block_fp8":  # the inner K tile is the 128 block: block_k is unused, drop duplicates
        seen, out = set(), {}
        for name, cfg in c.items():
            key = json.dumps({**cfg, "block_sizes": cfg["block_sizes"][:2]}, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out[name] = cfg
        c = out
    return c


def _inputs(fmt, n, k, m_max, device, copies):
    import torch

    from hlcore.scaled_mm import generate_scaled_mm_inputs

    d = generate_scaled_mm_inputs(m_max, n, k, fmt=fmt, device=device, seed=0)
    ws = [(d["b"], d["scale_b"])]
    for i in range(copies - 1):  # more weight copies, drawn on the GPU (never zeros)
        g = torch.Generator(device=device).manual_seed(100 + i)
        from hlcore import quant

        w = (torch.randn((n, k), generator=g, device=device) * 0.05).to(torch.bfloat16)
        if fmt == "fp8_dynamic":
            wq, sb = quant.per_channel_fp8_quant_ref(w)
        elif fmt == "w8a8_int8":
            wq, sb = quant.per_token_int8_quant_ref(w)
        else:
            wq, sb = quant.per_block_fp8_quant_ref(w, (128, 128))
        ws.append((wq.t(), sb))
    return d, ws


def _compile_job(job):
    """Worker: compile (fmt, n, k, cfg) for Triton's M specializations (1, other, multiple of 16)."""
    fmt, n, k, cfg = job
    try:
        import torch

        from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm

        for m in (1, 8, 32):
            d = generate_scaled_mm_inputs(m, n, k, fmt=fmt, device="cuda", seed=0)
            scaled_mm(
                d["a"],
                d["b"],
                d["scale_a"],
                d["scale_b"],
                torch.bfloat16,
                block_size=d["block_size"],
                config=cfg,
            )
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def default_variants(m: int, n: int, k: int, fmt: str | None = None) -> dict[str, dict]:
    """The heuristic default for M and its TMA / workspace-split-K / PDL variants (same tiles); with
    ``fmt``, also the config hlcore picks on this GPU (the shipped key or its nearest) and its PDL
    variant."""
    from hlcore.scaled_mm_config import default_scaled_mm_config, pick_scaled_mm_config

    base = default_scaled_mm_config(m, n, k)
    out = {f"default_m{m}": base, f"default_tma_m{m}": {**base, "indexing": "tensor_descriptor"}}
    if base["split_k"] > 1:
        out[f"default_ws_m{m}"] = {**base, "split_k_workspace": True}
    out[f"default_pdl_m{m}"] = {**base, "pdl": True}
    if fmt is not None:
        picked = json.loads(pick_scaled_mm_config(fmt, m, n, k, device="cuda").config_json)
        out[f"picked_m{m}"] = picked
        out[f"picked_pdl_m{m}"] = {**picked, "pdl": True}
    if VARIANTS:
        out = {k: v for k, v in out.items() if k.rsplit("_m", 1)[0] in VARIANTS.split(",")}
    return out


def main() -> int:
    import torch

    from hlcore.formats import scaled_mm_bytes
    from hlcore.scaled_mm import scaled_mm, scaled_mm_ref
    from hlcore.testing import rel_error, tolerance
    from hltools.providers import vllm_default
    from hltools.timing import copies_for, copy_bandwidth_gbs, time_graph

    t0 = time.time()
    jobs = []
    for fmt in FORMATS:
        for n, k in SHAPES:
            cfgs = list(candidates(fmt).values())
            cfgs += [cfg for m in MS for cfg in default_variants(m, n, k, fmt).values()]
            seen = set()
            for cfg in cfgs:
                key = json.dumps(cfg, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    jobs.append((fmt, n, k, cfg))
    compile_errors = {}
    with mp.get_context("spawn").Pool(JOBS) as pool:
        for job, err in zip(jobs, pool.map(_compile_job, jobs, chunksize=1), strict=True):
            if err:
                compile_errors[json.dumps([job[0], job[1], job[2], job[3]], sort_keys=True)] = err
    print(
        f"compiled {len(jobs)} (fmt, shape, config) in {time.time() - t0:.0f} s; {len(compile_errors)} failed",
        flush=True,
    )
    for key, err in list(compile_errors.items())[:8]:
        print("  compile fail", key, err, flush=True)

    bw = copy_bandwidth_gbs()
    print(f"GPU {torch.cuda.get_device_name()} copy bandwidth {bw:.0f} GB/s", flush=True)
    results, rows = [], []
    for fmt in FORMATS:
        tol = tolerance(fmt, torch.bfloat16)
        for n, k in SHAPES:
            if time.time() - t0 > BUDGET_S:
                print("budget reached", flush=True)
                break
            copies = copies_for(n * k)
            d, ws = _inputs(fmt, n, k, max(MS), "cuda", copies)
            try:  # vLLM's default kernel for this shape, each weight copy processed once as at load time
                vllm = vllm_default(fmt, torch.bfloat16, n, k)
                provider, prepared = vllm.name, [vllm.prepare_weight(b, s) for b, s in ws]
            except Exception as exc:  # noqa: BLE001
                vllm, provider, prepared = None, "-", []
                print("  no vLLM kernel", fmt, n, k, str(exc)[:200], flush=True)
            bsz = d["block_size"]
            named = dict(candidates(fmt))
            for m in MS:
                named.update(default_variants(m, n, k, fmt))
            for m in MS:
                a, sa = d["a"][:m], d["scale_a"][:m]
                a_src = a.clone()

                def produce(a=a, a_src=a_src):
                    if PRODUCER:
                        a.copy_(a_src)

                ref = scaled_mm_ref(a, ws[0][0], sa, ws[0][1], torch.bfloat16, block_size=bsz)
                v_us = None
                try:
                    if vllm is not None:
                        v_calls = vllm.calls(a, vllm.prepare_scale_a(sa), prepared)
                        v_us = time_graph(
                            [lambda c=c: (produce(), c())[1] for c in v_calls], repeats=15
                        ).median_us
                except Exception as exc:  # noqa: BLE001
                    print("  provider fail", provider, str(exc)[:200], flush=True)
                timed = {}
                for name, cfg in named.items():
                    if name.startswith("default_") and not name.endswith(f"_m{m}"):
                        continue
                    if json.dumps([fmt, n, k, cfg], sort_keys=True) in compile_errors:
                        continue
                    try:
                        out = scaled_mm(a, ws[0][0], sa, ws[0][1], torch.bfloat16, block_size=bsz, config=cfg)
                        err = rel_error(out, ref)
                        if not err <= tol:
                            print(f"  inaccurate {name} m={m}: {err:.2e}", flush=True)
                            continue
                        us = time_graph(
                            [
                                lambda b=b, s=s: (
                                    produce(),
                                    scaled_mm(a, b, sa, s, torch.bfloat16, block_size=bsz, config=cfg),
                                )[1]
                                for b, s in ws
                            ],
                            repeats=15,
                        ).median_us
                    except Exception as exc:  # noqa: BLE001
                        print(f"  fail {name} m={m}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                        continue
                    timed[name] = us
                    results.append(
                        {
                            "fmt": fmt,
                            "n": n,
                            "k": k,
                            "m": m,
                            "name": name,
                            "config": cfg,
                            "us": us,
                            "err": err,
                        }
                    )
                if not timed:
                    continue
                best = min(timed, key=timed.get)
                gb = scaled_mm_bytes(fmt, m, n, k) / 1e9
                pct = 100 * gb / (timed[best] * 1e-6) / bw
                row = {
                    "fmt": fmt,
                    "n": n,
                    "k": k,
                    "m": m,
                    "provider": provider,
                    "provider_us": v_us,
                    "default_us": timed.get(f"default_m{m}"),
                    "default_tma_us": timed.get(f"default_tma_m{m}"),
                    "default_ws_us": timed.get(f"default_ws_m{m}"),
                    "default_pdl_us": timed.get(f"default_pdl_m{m}"),
                    "picked_us": timed.get(f"picked_m{m}"),
                    "picked_pdl_us": timed.get(f"picked_pdl_m{m}"),
                    "producer": PRODUCER,
                    "best": best,
                    "best_us": timed[best],
                    "best_pct_bw": pct,
                    "best_config": named[best],
                    "top5": sorted(timed.items(), key=lambda kv: kv[1])[:5],
                }
                rows.append(row)
                print(
                    json.dumps(
                        {
                            kk: row[kk]
                            for kk in (
                                "fmt",
                                "n",
                                "k",
                                "m",
                                "provider_us",
                                "default_us",
                                "default_tma_us",
                                "default_ws_us",
                                "default_pdl_us",
                                "picked_us",
                                "picked_pdl_us",
                                "best",
                                "best_us",
                            )
                        }
                    ),
                    flush=True,
                )
    out_dir = os.environ.get("OUT", ".")
    with open(os.path.join(out_dir, "sweep.json"), "w") as f:
        json.dump(
            {
                "bw": bw,
                "gpu": torch.cuda.get_device_name(),
                "rows": rows,
                "results": results,
                "compile_errors": compile_errors,
            },
            f,
            indent=1,
        )
    print(
        f"\n{'fmt':<11} {'N':>6} {'K':>6} {'M':>3} {'vLLM':>6} {'dflt':>6} {'best':>6} {'%bw':>4} {'x vLLM':>6}  best"
    )
    speedups = []
    for r in rows:

        def f(v):
            return "-" if v is None else f"{v:.1f}"

        sp = r["provider_us"] / r["best_us"] if r["provider_us"] else None
        if sp:
            speedups.append(sp)
        print(
            f"{r['fmt']:<11} {r['n']:6d} {r['k']:6d} {r['m']:3d} {f(r['provider_us']):>6} {f(r['default_us']):>6} "
            f"{f(r['best_us']):>6} {r['best_pct_bw']:4.0f} {f(sp):>6}  {r['best']}"
        )
    if speedups:
        print(f"geomean best/vLLM {statistics.geometric_mean(speedups):.3f} over {len(speedups)} keys")
    wins = {}
    for r in rows:
        wins[r["best"]] = wins.get(r["best"], 0) + 1
    print("best-config counts:", dict(sorted(wins.items(), key=lambda kv: -kv[1])))
    print(f"sweep took {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
