# ruff: noqa: B023  (closures are called within their loop iteration)
"""Sweep every generic config of each Helion aux kernel over the model zoo's sizes (issue 5, one H200 call).

For each aux kernel (the six of ``bench_aux.py``), hidden {1024, 2048, 2560, 4096, 5120, 7168, 8192}
x num_tokens {1, 4, 16, 32, 128, 1024, 8192}, times EVERY config of the kernel's family in
``hlcore.aux_configs.ALL_CONFIGS`` (not only the one the pick rule chooses) and vLLM's CUDA op, as
CUDA-graph replay with rotating input copies (``bench_aux.py``'s inputs, vLLM ops, output check and
byte counts, imported from it; ``hltools.timing``). Each config's output is checked against vLLM's
first; configs that disagree are marked wrong (``hltools.aux_sweep.mark_wrong``) and never count
as best. ``hltools.aux_sweep.analyze`` then reports per (kernel, num_tokens, hidden) the best and the
picked config and picked / best; per kernel geomean and max of picked / best, how often each config
is best, the smallest config subset within ``--tolerance`` of the per-shape best everywhere, a
suggested rule (num_tokens range, hidden range) -> config, and the speedup vs vLLM of the pick.

Method: one job per (kernel, hidden) runs in a worker process (``--jobs`` in parallel): it compiles
every config at one num_tokens of each Triton specialization class (M == 1, M % 16 == 0, other; the
hidden size is specialized, M dynamic: one Helion compile per (kernel, hidden, config), plus
fused_add_rms_norm's separate M == 1 kernel, see docs/aux-kernels.md), then takes a GPU lock shared by
all workers and times its cases; so compiles of other jobs overlap the (serialized) timing, and no
kernel is compiled twice. ``--budget-s`` (default 200): no compile and no case starts after it (each
is listed as skipped); the main process stops waiting ``--grace-s`` later. ``$OUT/sweep_aux_configs.json``
(or ``./``) is rewritten after every finished job (a hard time limit still leaves results): GPU,
versions, every timing, the analysis. A short table is printed last.

Usage (GPU machine, vLLM bundle env + the project's wheels, see lab/README.md):
    python3 lab/scripts/sweep_aux_configs.py [--quick] [--dist] [--kernels a,b] [--hidden 4096,8192]
        [--tokens 1,16,8192] [--budget-s 200] [--jobs 12] [--tolerance 0.05] [--dry-run] [--cpu-smoke]
``--dist``: a one-rank torch.distributed group in every worker first (as in vLLM's workers, see
bench_aux.py). ``--dry-run``: print the plan and exit (no torch, no GPU). ``--cpu-smoke``: the whole
pipeline on the CPU with stand-ins for vLLM and the timer (plumbing only), e.g.
``--cpu-smoke --kernels rms_norm,silu_and_mul --hidden 256 --tokens 1,4,16 --jobs 2``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_aux as ba  # noqa: E402  (lab/scripts is not a package)

TOKENS = [1, 4, 16, 32, 128, 1024, 8192]
HIDDEN = list(ba.DECODE_HIDDEN)  # model zoo hidden sizes
QUICK_HIDDEN = [1024, 4096, 8192]
# job order: spread hidden sizes first, so a budget cut still leaves a spread of sizes per kernel
HIDDEN_ORDER = [4096, 1024, 8192, 2048, 5120, 2560, 7168]
OUT_NAME = "sweep_aux_configs.json"

_LOCK = None  # the GPU lock of a worker process (set by _worker_init)
_BROKEN: list[str] = []  # a CUDA error this worker's context cannot recover from
_TIMER = None  # hltools.timing.time_graph unless --cpu-smoke


def helion_call(kernel: str, config: dict):
    """``fn(x, residual, weight)`` running the hlcore kernel with ``config`` (bench_aux's calls)."""
    from hlcore import activation, norm, quant_kernels

    eps = ba.EPS
    return {
        "per_token_fp8_quant": lambda x, r, w: quant_kernels.per_token_fp8_quant(x, config=config),
        "per_token_int8_quant": lambda x, r, w: quant_kernels.per_token_int8_quant(x, config=config),
        "per_token_group_fp8_quant": lambda x, r, w: quant_kernels.per_token_group_fp8_quant(
            x, 128, config=config
        ),
        "silu_and_mul": lambda x, r, w: activation.silu_and_mul(x, config=config),
        "rms_norm": lambda x, r, w: norm.rms_norm(x, w, eps, config=config),
        "fused_add_rms_norm": lambda x, r, w: norm.fused_add_rms_norm(x, r, w, eps, config=config),
    }[kernel]


def compile_tokens(tokens: list[int]) -> list[int]:
    """One num_tokens per Triton specialization class (== 1, % 16 == 0, other), ascending (the
    first call of a Helion kernel decides its code: M == 1 first, as bench_aux and the tests do)."""
    seen, out = set(), []
    for m in sorted(tokens):
        cls = (m == 1, m % 16 == 0)
        if cls not in seen:
            seen.add(cls)
            out.append(m)
    return out


def _worker_init(lock, dist_flag: bool, cpu_smoke: bool = False) -> None:
    global _LOCK
    _LOCK = lock
    try:  # an initializer that raises makes Pool respawn workers forever: report through the jobs
        if cpu_smoke:
            cpu_smoke_patch()
        if dist_flag:
            ba._init_dist()
    except Exception as exc:  # noqa: BLE001
        _BROKEN.append(f"worker set-up failed: {_err(exc)}")


def cpu_smoke_patch() -> None:
    """``--cpu-smoke``: run the whole pipeline on the CPU (Triton's interpreter, small sizes): hlcore's
    pure-torch references stand in for vLLM's ops and the time of one eager call for the graph
    timing. Checks the plumbing only; the numbers mean nothing."""
    global _TIMER
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    from hlcore import activation, norm, quant
    from hltools.timing import Timing

    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None
    ba.DEVICE = "cpu"
    refs = {
        "per_token_fp8_quant": lambda x, r, w: quant.per_token_fp8_quant_ref(x),
        "per_token_int8_quant": lambda x, r, w: quant.per_token_int8_quant_ref(x),
        "per_token_group_fp8_quant": lambda x, r, w: quant.per_token_group_fp8_quant_ref(x, 128),
        "silu_and_mul": lambda x, r, w: activation.silu_and_mul_ref(x),
        "rms_norm": lambda x, r, w: norm.rms_norm_ref(x, w, ba.EPS),
        "fused_add_rms_norm": lambda x, r, w: norm.fused_add_rms_norm_ref(x, r, w, ba.EPS),
    }
    ba.vllm_fn = refs.__getitem__

    def timer(calls, repeats, warmup):
        t = time.perf_counter()
        calls[0]()
        us = (time.perf_counter() - t) * 1e6
        return Timing(us, us, us)

    _TIMER = timer


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:400]}"


def _cuda_ok() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


def _measure_case(kernel, m, h, configs, compile_errors, timer):
    """Records (aux_sweep's format) for every config and vLLM's op at (m, h)."""
    import torch

    from hltools.aux_sweep import mark_wrong
    from hltools.timing import copies_for

    nbytes = ba.op_bytes(kernel, m, h)
    copies = copies_for(nbytes, rotate_bytes=2 * ba.L2_BYTES, max_copies=32)
    repeats = 20 if nbytes < 64 * 1024**2 else 10
    inputs, w = ba.make_inputs(kernel, m, h, copies, seed=m + h)
    theirs = ba.vllm_fn(kernel)
    x0, r0 = inputs[0]
    # vLLM's fused_add_rms_norm works in place: reference on clones, and timed after every check
    ref = theirs(x0.clone(), None if r0 is None else r0.clone(), w)
    base = {
        "kernel": kernel,
        "num_tokens": m,
        "hidden": h,
        "dtype": "bfloat16",
        "copies": copies,
        "bytes": nbytes,
    }
    recs = {}
    for name, cfg in configs.items():
        rec = {
            **base,
            "provider": "helion",
            "config": name,
            "median_us": None,
            "vs_vllm": None,
            "error": None,
        }
        recs[name] = rec
        if name in compile_errors:
            rec["error"] = f"compile: {compile_errors[name]}"
            continue
        try:
            rec["vs_vllm"] = ba.check(kernel, helion_call(kernel, cfg)(x0, r0, w), ref)
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"check: {_err(exc)}"
    wrong = mark_wrong(kernel, {n: r["vs_vllm"] for n, r in recs.items() if not r["error"]})
    for name, rec in recs.items():
        rec["wrong"] = name in wrong
    for name, rec in recs.items():
        if rec["error"]:
            continue
        fn = helion_call(kernel, configs[name])
        try:
            tm = timer([lambda x=x, r=r: fn(x, r, w) for x, r in inputs], repeats=repeats, warmup=3)
            rec.update(median_us=tm.median_us, p20_us=tm.p20_us, p80_us=tm.p80_us)
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"time: {_err(exc)}"
            if not _cuda_ok():
                _BROKEN.append(rec["error"])
                break
    out = list(recs.values())
    vrec = {**base, "provider": "vllm", "config": None, "median_us": None, "vs_vllm": 0.0, "error": None}
    if not _BROKEN:
        try:
            tm = timer([lambda x=x, r=r: theirs(x, r, w) for x, r in inputs], repeats=repeats, warmup=3)
            vrec.update(median_us=tm.median_us, p20_us=tm.p20_us, p80_us=tm.p80_us)
        except Exception as exc:  # noqa: BLE001
            vrec["error"] = f"time: {_err(exc)}"
    out.append(vrec)
    del inputs, ref
    torch.cuda.empty_cache()
    return out


def run_group(job, timer=None):
    """Worker: compile every config of ``kernel`` at ``hidden``, then (holding the GPU lock) time
    each num_tokens. Never raises: errors are returned."""
    kernel, h, tokens, configs, deadline = job
    res = {"kernel": kernel, "hidden": h, "records": [], "skipped": [], "failures": [], "compile_errors": {}}
    t_start = time.time()
    if _BROKEN:
        res["failures"].append(f"{kernel} H{h}: worker's CUDA context broken earlier: {_BROKEN[0]}")
        return res
    try:
        import torch

        timer = timer or _TIMER
        if timer is None:
            from hltools.timing import time_graph as timer
        # 1. compile (no lock: runs beside other jobs' timing)
        for name, cfg in configs.items():
            if time.time() > deadline:
                res["compile_errors"][name] = "skipped: budget exceeded before compiling"
                continue
            try:
                fn = helion_call(kernel, cfg)
                for m in compile_tokens(tokens):
                    inputs, w = ba.make_inputs(kernel, m, h, 1, seed=0)
                    fn(inputs[0][0], inputs[0][1], w)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001
                res["compile_errors"][name] = _err(exc)
                if not _cuda_ok():
                    _BROKEN.append(res["compile_errors"][name])
                    res["failures"].append(f"{kernel} H{h}: CUDA context broken compiling {name}")
                    return res
        # vLLM's op too (imports vLLM, a Triton fallback would compile here)
        m0 = compile_tokens(tokens)[0]
        inputs, w = ba.make_inputs(kernel, m0, h, 1, seed=0)
        ba.vllm_fn(kernel)(inputs[0][0], inputs[0][1], w)
        torch.cuda.synchronize()
        del inputs
        res["compile_s"] = time.time() - t_start
        # 2. time, one job at a time on the GPU
        lock = _LOCK
        if lock is not None:
            lock.acquire()
        try:
            t_lock = time.time()
            for m in tokens:
                if time.time() > deadline:
                    res["skipped"].append(f"{kernel} H{h} M{m}")
                    continue
                if _BROKEN:
                    res["failures"].append(f"{kernel} H{h} M{m}: CUDA context broken: {_BROKEN[0]}")
                    continue
                try:
                    res["records"] += _measure_case(kernel, m, h, configs, res["compile_errors"], timer)
                except Exception as exc:  # noqa: BLE001
                    res["failures"].append(f"{kernel} H{h} M{m}: {_err(exc)}")
                    if not _cuda_ok():
                        _BROKEN.append(res["failures"][-1])
            res["time_s"] = time.time() - t_lock
        finally:
            if lock is not None:
                lock.release()
    except Exception as exc:  # noqa: BLE001
        res["failures"].append(f"{kernel} H{h}: {_err(exc)}\n{traceback.format_exc()[-1500:]}")
    return res


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"hidden {QUICK_HIDDEN} only")
    ap.add_argument("--dist", action="store_true", help="one-rank torch.distributed group first (as in vLLM)")
    ap.add_argument("--kernels", default=",".join(ba.KERNELS), help="comma list (default: all six)")
    ap.add_argument("--hidden", default=None, help="comma list of hidden sizes (overrides --quick)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="comma list of num_tokens")
    ap.add_argument("--budget-s", type=float, default=float(os.environ.get("SWEEP_AUX_BUDGET_S", "200")))
    ap.add_argument("--grace-s", type=float, default=60.0, help="wait this long past the budget, then stop")
    ap.add_argument("--jobs", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--tolerance", type=float, default=0.05, help="derived set: within this of the best")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU)")
    ap.add_argument(
        "--cpu-smoke", action="store_true", help="plumbing test on the CPU (use tiny --hidden/--tokens)"
    )
    args = ap.parse_args(argv)
    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    unknown = sorted(set(args.kernels) - set(ba.KERNELS))
    if unknown:
        ap.error(f"unknown kernel(s) {unknown}; choose from {ba.KERNELS}")
    try:
        hidden = [int(v) for v in args.hidden.split(",")] if args.hidden else None
        args.tokens = sorted({int(v) for v in args.tokens.split(",") if v.strip()})
    except ValueError as exc:
        ap.error(str(exc))
    hidden = hidden or (QUICK_HIDDEN if args.quick else HIDDEN)
    args.hidden = [h for h in HIDDEN_ORDER if h in hidden] + [h for h in hidden if h not in HIDDEN_ORDER]
    if not args.tokens or min(args.tokens) < 1 or min(args.hidden) < 1:
        ap.error("--tokens and --hidden must be positive")
    return args


def plan(args, deadline: float) -> list[tuple]:
    from hlcore.aux_configs import ALL_CONFIGS

    return [
        (kernel, h, args.tokens, {n: dict(c) for n, c in ALL_CONFIGS[kernel].items()}, deadline)
        for h in args.hidden
        for kernel in args.kernels
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    deadline = t0 + args.budget_s
    jobs = plan(args, deadline)
    n_cfg = sum(len(j[3]) for j in jobs)
    print(
        f"{len(jobs)} jobs (kernel x hidden), {n_cfg} (kernel, hidden, config) compiles x "
        f"{len(compile_tokens(args.tokens))} num_tokens classes, {n_cfg * len(args.tokens)} config timings "
        f"+ {len(jobs) * len(args.tokens)} vLLM; hidden {args.hidden}, tokens {args.tokens}, "
        f"{args.jobs} workers, budget {args.budget_s:.0f} s",
        flush=True,
    )
    if args.dry_run:
        return 0

    from hltools import aux_sweep
    from hltools.provenance import versions

    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / OUT_NAME
    records, skipped, failures, compile_errors, job_times = [], [], [], {}, {}
    meta = {
        "gpu": None,
        "dist": args.dist,
        "quick": args.quick,
        "hidden": args.hidden,
        "tokens": args.tokens,
        "kernels": args.kernels,
        "tolerance": args.tolerance,
        "budget_s": args.budget_s,
        "jobs": args.jobs,
        "versions": versions(),
        "commit": ba._git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }

    def write(done: int, analysis=None):
        meta.update(elapsed_s=time.time() - t0, jobs_done=done, jobs_total=len(jobs))
        if analysis is None:
            try:
                analysis = aux_sweep.analyze(records, tolerance=args.tolerance)
            except Exception as exc:  # noqa: BLE001 - the raw timings are written anyway
                analysis = {"error": _err(exc), "traceback": traceback.format_exc()[-2000:]}
        report = {
            "_metadata": meta,
            "skipped": skipped,
            "failures": failures,
            "compile_errors": compile_errors,
            "job_times_s": job_times,
            "analysis": analysis,
            "results": records,
        }
        _write_atomic(out_path, json.dumps(report, indent=1, sort_keys=True, default=str) + "\n")
        return analysis

    ctx = mp.get_context("spawn")
    lock = ctx.Lock()
    done = 0
    with ctx.Pool(args.jobs, initializer=_worker_init, initargs=(lock, args.dist, args.cpu_smoke)) as pool:
        it = pool.imap_unordered(run_group, jobs, chunksize=1)
        try:
            import torch

            meta["gpu"] = "cpu (--cpu-smoke)" if args.cpu_smoke else torch.cuda.get_device_name()
        except Exception as exc:  # noqa: BLE001
            meta["gpu"] = f"unknown ({_err(exc)})"
        print(f"GPU {meta['gpu']}, dist={args.dist}", flush=True)
        write(0)
        reported = set()
        while done < len(jobs):
            try:
                res = it.next(timeout=max(1.0, deadline + args.grace_s - time.time()))
            except StopIteration:
                break
            except mp.TimeoutError:
                left = [f"{k} H{h}" for k, h, *_ in jobs if (k, h) not in reported]
                failures.append(
                    f"stopped waiting {args.grace_s:.0f} s past the budget; no result from {left}"
                )
                print("  " + failures[-1], flush=True)
                break
            except Exception as exc:  # noqa: BLE001 - a job that could not even report
                done += 1
                failures.append(f"a job raised: {_err(exc)}")
                print("  FAILED", failures[-1], flush=True)
                continue
            done += 1
            kernel, h = res["kernel"], res["hidden"]
            reported.add((kernel, h))
            records.extend(res["records"])
            skipped.extend(res["skipped"])
            failures.extend(res["failures"])
            job_times[f"{kernel} H{h}"] = {"compile_s": res.get("compile_s"), "time_s": res.get("time_s")}
            for name, err in res["compile_errors"].items():
                compile_errors[f"{kernel} H{h} {name}"] = err
            try:
                for line in _job_lines(res):
                    print(line, flush=True)
            except Exception as exc:  # noqa: BLE001 - progress lines only
                print(f"  (progress lines failed: {_err(exc)})", flush=True)
            for f in res["failures"]:
                print("  FAILED", f[:500], flush=True)
            write(done)
        if done < len(jobs):
            pool.terminate()
    analysis = write(done)
    print()
    if "error" in analysis:
        print("analysis failed:", analysis["error"])
    else:
        for line in aux_sweep.summary_lines(analysis):
            print(line)
    not_compiled = sum(e.startswith("skipped") for e in compile_errors.values())
    print(
        f"\n{done}/{len(jobs)} jobs, {len(skipped)} cases skipped by the budget ({not_compiled} configs not "
        f"compiled), {len(failures)} failures, {len(compile_errors) - not_compiled} compile errors; "
        f"{time.time() - t0:.0f} s; wrote {out_path}"
    )
    if skipped:
        print("skipped:", ", ".join(skipped[:40]) + (" ..." if len(skipped) > 40 else ""))
    return 1 if failures else 0


def _job_lines(res) -> list[str]:
    """One progress line per num_tokens: best config, picked config and vLLM."""
    from hltools.aux_sweep import picked_name

    by_m: dict[int, list] = {}
    for r in res["records"]:
        by_m.setdefault(r["num_tokens"], []).append(r)
    lines = [
        f"{res['kernel']} H{res['hidden']}: compile {res.get('compile_s') or 0:.0f} s, time {res.get('time_s') or 0:.1f} s"
        + (f", compile errors {sorted(res['compile_errors'])}" if res["compile_errors"] else "")
    ]
    for m, recs in sorted(by_m.items()):
        ok = {
            r["config"]: r["median_us"]
            for r in recs
            if r["provider"] == "helion" and r["median_us"] and not r["error"] and not r.get("wrong")
        }
        vllm = next((r["median_us"] for r in recs if r["provider"] == "vllm"), None)
        bad = [r["config"] for r in recs if r["provider"] == "helion" and (r["error"] or r.get("wrong"))]
        try:
            picked = picked_name(res["kernel"], m, res["hidden"])
        except Exception:  # noqa: BLE001
            picked = "?"
        best = min(ok, key=ok.get) if ok else None
        pk = ok.get(picked)
        lines.append(
            f"  M={m:5d} best {best} {ok.get(best, 0):7.2f} us | picked {picked} "
            + (f"{pk:7.2f} us x{pk / ok[best]:.2f}" if pk and best else "n/a")
            + (f" | vLLM {vllm:7.2f} us" if vllm else " | vLLM n/a")
            + (f" | bad {bad}" if bad else "")
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
