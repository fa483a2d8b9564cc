"""Torch-profiler traces of one prefill and a few decode steps in a real vLLM 0.26 engine (one GPU).

Two questions (lab/gpu-runs.md, "Next GPU session"): which kernels and host gaps make the
GEMM-only plugin's 1024-token prefill slower (TTFT 50 -> ~77 ms at 8 prompts x 128 tokens), and
which kernels a decode step of the HL_AUX_FUSION=1 engine runs (40 % slower at 1 sequence).

  python lab/scripts/profile_e2e.py run --plugin off --layers 8 --out off      # VLLM_PLUGINS=
  python lab/scripts/profile_e2e.py run --plugin on  --layers 8 --out on       # HL_LINEAR_BACKEND=helion
  python lab/scripts/profile_e2e.py run --plugin on  --aux-fusion --layers 8 --out fused
  python lab/scripts/profile_e2e.py summarize off on         # top-25 kernels side by side, on - off
  python lab/scripts/profile_e2e.py summarize on fused --json on-vs-fused.json

``run`` builds the same dummy-weight Qwen3-8B-dims FP8_DYNAMIC engine as ``e2e_vllm.py`` (its
``model_dir`` and env set-up; weights filled by ``hltools.e2e.fill_weights``), warms up, then
profiles two windows, each moved into its own folder under ``--out``:

  prefill/  one ``generate`` of 8 prompts x 128 tokens, max_tokens=1 (one 1024-token step)
  decode/   one ``generate`` of 1 prompt (``--decode-prompts``) x 16 tokens, max_tokens=17 (one small prefill + 16
            decode steps; ``summarize`` keeps only the kernels launched inside the pure decode
            steps' ``execute_context_0(0)_generation_1(1)`` annotations where there are any)

plus ``run.json`` (wall times of each profiled call and of unprofiled repeats, engine start-up).

vLLM 0.26's profiler (read in .venv/lib/python3.12/site-packages/vllm):
  * vllm/entrypoints/llm.py:211 ``LLM(profiler_config=dict | ProfilerConfig)``; llm.py:776/786
    ``LLM.start_profile(profile_prefix)`` / ``LLM.stop_profile()`` -> engine_core.profile(True/False)
    (v1/engine/llm_engine.py:336-340). There is no VLLM_TORCH_PROFILER_DIR env var in 0.26.
  * vllm/config/profiler.py:37-116 ProfilerConfig: ``profiler="torch"`` needs an absolute
    ``torch_profiler_dir`` (:150); ``torch_profiler_with_stack`` defaults to True (:48; turned off
    here: stack capture inflates host time), ``torch_profiler_use_gzip`` True (:56),
    ``capture_torch_profiler`` (:69, a trace of CUDA-graph capture under capture_traces/).
  * vllm/v1/worker/gpu_worker.py:1181-1233 the worker makes one TorchProfilerWrapper (activities
    CPU + CUDA) on the first start and restarts it on later starts, keeping the first trace name.
  * vllm/profiler/wrapper.py:192-196 traces go through torch.profiler.tensorboard_trace_handler
    into ``<dir>/<name>.<time_ns>.pt.trace.json.gz``; :269-273 each stop also writes
    ``profiler_out_<rank>.txt`` (key_averages table) into the same dir, so ``run`` moves each
    window's new files into its own folder after each stop.
  * gpu_worker.py:967-1076 and :1146 each engine step's ``execute_model`` (not its sampling,
    ``sample_tokens``) runs inside a ``user_annotation`` named
    ``execute_context_<reqs>(<tokens>)_generation_<reqs>(<tokens>)``.

``summarize`` needs only the stdlib: it reads the chrome traces (Kineto's: events with ``ph``
"X", ``cat`` "kernel" / "gpu_memcpy" / "gpu_memset" on the GPU, "cpu_op", "cuda_runtime",
"user_annotation" on the host; ``args.correlation`` links a kernel to its launch).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

WINDOWS = ("prefill", "decode")
#: GPU event categories counted as busy time; kernels are the ``kernel`` ones.
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: host ops whose totals ``summarize`` lists (the plugin's and vLLM's CUDA custom ops).
CPU_OP_PREFIXES = ("hlvllm::", "_C::")
#: the annotation of a step with one decoding request and no prefill (gpu_worker.py:1063-1075).
DECODE_STEP_PREFIX = "execute_context_0(0)_generation_"
STEP_PREFIX = "execute_context_"
#: host gaps: GPU idle stretches longer than this, in microseconds.
GAP_US = 10.0
TOP = 25


# --------------------------------------------------------------------------------------- run


def _engine(args, profile_dir: Path):
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import e2e_vllm  # the env defaults, model_dir and hltools.e2e import of the e2e script

    if args.plugin == "on":
        os.environ["HL_LINEAR_BACKEND"] = "helion"
    else:
        os.environ["VLLM_PLUGINS"] = ""
        os.environ.pop("HL_LINEAR_BACKEND", None)
    if args.aux_kernels is not None:
        os.environ["HL_AUX_KERNELS"] = args.aux_kernels
    if args.aux_fusion:
        os.environ["HL_AUX_FUSION"] = "1"
        if args.aux_kernels is None:
            os.environ.setdefault("HL_AUX_KERNELS", "all")
    from vllm import LLM

    profiler_config = {
        "profiler": "torch",
        "torch_profiler_dir": str(profile_dir.resolve()),
        "torch_profiler_with_stack": False,
        "torch_profiler_record_shapes": args.record_shapes,
        "torch_profiler_use_gzip": True,
        "capture_torch_profiler": args.capture_trace,
    }
    t0 = time.perf_counter()
    llm = LLM(**e2e_vllm.engine_kwargs(args), profiler_config=profiler_config)
    startup_s = time.perf_counter() - t0
    nfilled = llm.apply_model(e2e_vllm.fill_weights)[0]
    kernels = llm.apply_model(e2e_vllm.linear_kernels)[0]
    print(f"engine ready in {startup_s:.1f} s; filled {nfilled} parameters; kernels {kernels}", flush=True)
    return llm, startup_s, kernels


def _move_new_files(src: Path, dst: Path, before: set[str]) -> list[str]:
    dst.mkdir(parents=True, exist_ok=True)
    moved = []
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in before:
            shutil.move(str(f), dst / f.name)
            moved.append(f.name)
    return moved


def run(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "raw"  # the engine's torch_profiler_dir; each window's files move out of it
    raw.mkdir(exist_ok=True)
    llm, startup_s, kernels = _engine(args, raw)
    import torch
    import vllm
    from vllm import SamplingParams

    g = torch.Generator().manual_seed(1234)

    def prompts(n, length):  # fresh random tokens each call: no prefix-cache hits
        return [
            {"prompt_token_ids": torch.randint(3, 32000, (length,), generator=g).tolist()} for _ in range(n)
        ]

    calls = {
        "prefill": (args.prefill_prompts, args.prefill_len, 1),
        "decode": (args.decode_prompts, 16, args.decode_steps + 1),
    }

    def call(window):
        n, length, max_tokens = calls[window]
        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, detokenize=False)
        ps = prompts(n, length)
        t = time.perf_counter()
        outs = llm.generate(ps, sp, use_tqdm=False)
        return time.perf_counter() - t, sum(len(o.outputs[0].token_ids) for o in outs)

    unprofiled: dict[str, list[float]] = {}
    for window in WINDOWS:  # warm-up, then the unprofiled reference times
        for _ in range(2):
            call(window)
        unprofiled[window] = [call(window)[0] for _ in range(args.repeats)]
    profiled = {}
    for window in WINDOWS:
        before = {f.name for f in raw.iterdir()}
        llm.start_profile(profile_prefix="hl")
        wall_s, ntok = call(window)
        llm.stop_profile()  # in-process engine: the trace is written before this returns
        files = _move_new_files(raw, out / window, before)
        profiled[window] = {"wall_s": wall_s, "output_tokens": ntok, "files": files}
        print(
            f"{window}: profiled call {1e3 * wall_s:.1f} ms, {ntok} output tokens; files {files}", flush=True
        )
    result = {
        "plugin": args.plugin,
        "aux_fusion": args.aux_fusion,
        "aux_kernels": os.environ.get("HL_AUX_KERNELS"),
        "layers": args.layers,
        "quant": args.quant,
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "startup_s": startup_s,
        "kernels": kernels,
        "calls": {w: {"prompts": c[0], "prompt_len": c[1], "max_tokens": c[2]} for w, c in calls.items()},
        "profiled": profiled,
        "unprofiled_s": unprofiled,
    }
    (out / "run.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("plugin", "aux_fusion", "profiled", "unprofiled_s")}, indent=1))
    return 0


# --------------------------------------------------------------------------------- summarize


def load_trace(path: Path) -> list[dict]:
    """The events of one chrome trace (plain or gzipped JSON; a dict with traceEvents or a list)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    return data.get("traceEvents", []) if isinstance(data, dict) else data


def trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and ".json" in p.name and "trace" in p.name)


def _union_us(intervals: list[tuple[float, float]]) -> tuple[float, list[float]]:
    """Total length of the union of (start, end) intervals, and the idle gaps between them."""
    busy, gaps, end = 0.0, [], None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                gaps.append(s - end)
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy, gaps


def aggregate(events: list[dict], step_prefix: str | None = None) -> dict:
    """Kernel totals by name (count, µs), GPU busy / span / idle / host gaps, host-op totals of the
    ``hlvllm::`` and ``_C::`` ops and the steps (``execute_context_...`` annotations, their host
    µs). With ``step_prefix``, only GPU work launched inside steps whose annotation starts with it
    counts (matched through ``args.correlation`` to the launching host call); ``None`` keeps all."""
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e]
    steps = [
        e for e in xs if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(STEP_PREFIX)
    ]
    kept = None
    if step_prefix is not None:
        windows = sorted(
            (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in steps
            if e["name"].startswith(step_prefix)
        )
        kept = set()
        for e in xs:
            corr = (e.get("args") or {}).get("correlation")
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and corr is not None:
                ts = float(e["ts"])
                if any(s <= ts <= t for s, t in windows):
                    kept.add(corr)
    gpu = []
    for e in xs:
        if str(e.get("cat", "")).lower() not in GPU_CATS:
            continue
        if kept is not None and (e.get("args") or {}).get("correlation") not in kept:
            continue
        gpu.append(e)
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in gpu:
        if str(e.get("cat", "")).lower() == "kernel":
            k = kernels[e["name"]]
            k[0] += 1
            k[1] += float(e["dur"])
    intervals = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu]
    busy, gaps = _union_us(intervals)
    span = (max(e for _, e in intervals) - min(s for s, _ in intervals)) if intervals else 0.0
    cpu_ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in xs:
        if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith(CPU_OP_PREFIXES):
            c = cpu_ops[e["name"]]
            c[0] += 1
            c[1] += float(e["dur"])
    step_us: dict[str, list[float]] = defaultdict(list)
    for e in steps:
        step_us[e["name"]].append(float(e["dur"]))
    big = [g for g in gaps if g > GAP_US]
    return {
        "kernels": {n: {"count": c, "us": us} for n, (c, us) in kernels.items()},
        "kernel_us": sum(us for _, us in kernels.values()),
        "gpu_busy_us": busy,
        "gpu_span_us": span,
        "gpu_idle_us": span - busy,
        "gaps_over_us": GAP_US,
        "gap_count": len(big),
        "gap_us": sum(big),
        "max_gap_us": max(gaps, default=0.0),
        "cpu_ops": {n: {"count": c, "us": us} for n, (c, us) in cpu_ops.items()},
        "steps": {
            n: {"count": len(d), "us": sum(d), "min_us": min(d), "max_us": max(d)} for n, d in step_us.items()
        },
        "step_filter": step_prefix,
        "kept_steps": sum(
            len(d) for n, d in step_us.items() if step_prefix is None or n.startswith(step_prefix)
        ),
    }


def summarize_window(folder: Path, window: str) -> dict:
    events = []
    for f in trace_files(folder):
        events += load_trace(f)
    prefix = None
    if window == "decode" and any(
        e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(DECODE_STEP_PREFIX)
        for e in events
    ):
        prefix = DECODE_STEP_PREFIX
    return aggregate(events, prefix)


def windows_of(d: Path) -> dict[str, Path]:
    """The profiled windows under a ``run --out`` folder (``prefill/``, ``decode/``), or the folder
    itself as one window ``trace`` when it holds trace files directly."""
    found = {w: d / w for w in WINDOWS if (d / w).is_dir() and trace_files(d / w)}
    if not found and trace_files(d):
        found["trace"] = d
    return found


def _fmt(x: float) -> str:
    return f"{x:,.1f}"


def table(a: dict, b: dict | None, top: int = TOP) -> list[list[str]]:
    """Rows of the top ``top`` kernels by the larger total of the two runs: name, count and µs of
    each, and µs of b - a."""
    names = set(a["kernels"]) | set(b["kernels"] if b else ())
    zero = {"count": 0, "us": 0.0}

    def key(n):
        return (-max(a["kernels"].get(n, zero)["us"], b["kernels"].get(n, zero)["us"] if b else 0.0), n)

    rows = []
    for n in sorted(names, key=key)[:top]:
        ka = a["kernels"].get(n, zero)
        row = [n[:90], str(ka["count"]), _fmt(ka["us"])]
        if b is not None:
            kb = b["kernels"].get(n, zero)
            row += [str(kb["count"]), _fmt(kb["us"]), f"{kb['us'] - ka['us']:+,.1f}"]
        rows.append(row)
    return rows


def _print_rows(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )


def _run_json(d: Path) -> dict:
    p = d / "run.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def summarize(args) -> int:
    dirs = [Path(args.dir), *([Path(args.dir2)] if args.dir2 else [])]
    labels = [d.name or str(d) for d in dirs]
    if len(set(labels)) < len(labels):  # e.g. a/on vs b/on
        labels = [str(d) for d in dirs]
    runs = [_run_json(d) for d in dirs]
    wins = [windows_of(d) for d in dirs]
    if not wins[0]:
        print(f"no trace files under {dirs[0]}", file=sys.stderr)
        return 1
    out = {}
    for window in wins[0]:
        aggs = [summarize_window(w[window], window) if window in w else None for w in wins]
        out[window] = dict(zip(labels, aggs, strict=True))
        a, b = aggs[0], aggs[1] if len(aggs) > 1 else None
        print(f"\n=== {window} ===")
        for label, r, agg in zip(labels, runs, aggs, strict=True):
            if agg is None:
                print(f"{label}: no {window} trace")
                continue
            wall = (r.get("profiled") or {}).get(window, {}).get("wall_s")
            ref = (r.get("unprofiled_s") or {}).get(window)
            steps = ", ".join(
                f"{n} x{s['count']} host {_fmt(s['us'] / s['count'])} us (min {_fmt(s['min_us'])}, max {_fmt(s['max_us'])})"
                for n, s in sorted(agg["steps"].items())
            )
            print(
                f"{label}: plugin {r.get('plugin', '?')}, aux_fusion {r.get('aux_fusion', '?')}; "
                + (f"profiled call {1e3 * wall:.1f} ms; " if wall is not None else "")
                + (f"unprofiled {', '.join(f'{1e3 * s:.1f}' for s in ref)} ms; " if ref else "")
                + f"GPU span {_fmt(agg['gpu_span_us'])} us, busy {_fmt(agg['gpu_busy_us'])} us, "
                f"idle {_fmt(agg['gpu_idle_us'])} us ({agg['gap_count']} gaps > {agg['gaps_over_us']:g} us: "
                f"{_fmt(agg['gap_us'])} us, max {_fmt(agg['max_gap_us'])} us); kernels {_fmt(agg['kernel_us'])} us "
                f"in {sum(k['count'] for k in agg['kernels'].values())} launches"
            )
            filt = agg["step_filter"]
            print(
                f"  steps: {steps or 'none annotated'}"
                + (f"; kernels of the {agg['kept_steps']} steps {filt}* only" if filt else "")
            )
        if b is None and len(aggs) > 1:
            b = {"kernels": {}}
        header = ["kernel", f"n {labels[0]}", f"us {labels[0]}"]
        if len(aggs) > 1:
            header += [f"n {labels[1]}", f"us {labels[1]}", f"us {labels[1]}-{labels[0]}"]
        print()
        _print_rows(header, table(a, b, args.top))
        ops = sorted(set(a["cpu_ops"]) | set(b["cpu_ops"] if b and "cpu_ops" in b else ()))
        if ops:
            print("\nhost ops (cpu_op events):")
            zero = {"count": 0, "us": 0.0}
            rows = []
            for n in ops:
                row = [n, str(a["cpu_ops"].get(n, zero)["count"]), _fmt(a["cpu_ops"].get(n, zero)["us"])]
                if len(aggs) > 1:
                    ob = (b.get("cpu_ops") or {}).get(n, zero)
                    row += [
                        str(ob["count"]),
                        _fmt(ob["us"]),
                        f"{ob['us'] - a['cpu_ops'].get(n, zero)['us']:+,.1f}",
                    ]
                rows.append(row)
            _print_rows(["op", *header[1:]], rows)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="profile one prefill and a few decode steps")
    r.add_argument("--plugin", choices=["on", "off"], required=True)
    r.add_argument("--aux-fusion", action="store_true", help="HL_AUX_FUSION=1 (and HL_AUX_KERNELS=all)")
    r.add_argument("--aux-kernels", default=None, help="HL_AUX_KERNELS for this run")
    r.add_argument("--layers", type=int, default=8)
    r.add_argument("--quant", choices=["fp8-dynamic", "int8", "block-fp8"], default="fp8-dynamic")
    r.add_argument("--out", required=True, help="folder for prefill/, decode/, raw/ and run.json")
    r.add_argument("--prefill-prompts", type=int, default=8)
    r.add_argument("--prefill-len", type=int, default=128)
    r.add_argument("--decode-steps", type=int, default=16)
    r.add_argument(
        "--decode-prompts", type=int, default=1, help="sequences in the decode window (M of its steps)"
    )
    r.add_argument("--repeats", type=int, default=3, help="unprofiled timed calls per window")
    r.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    r.add_argument("--kv-cache-gib", type=float, default=None)
    r.add_argument("--record-shapes", action="store_true", help="ProfilerConfig.torch_profiler_record_shapes")
    r.add_argument(
        "--capture-trace",
        action="store_true",
        help="ProfilerConfig.capture_torch_profiler (CUDA-graph capture)",
    )
    s = sub.add_parser("summarize", help="kernel tables of one run, or of two side by side")
    s.add_argument("dir")
    s.add_argument("dir2", nargs="?")
    s.add_argument("--top", type=int, default=TOP)
    s.add_argument("--json", default=None, help="also write the aggregates here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run(args) if args.cmd == "run" else summarize(args)


if __name__ == "__main__":
    sys.exit(main())
