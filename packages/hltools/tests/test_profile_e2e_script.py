"""lab/scripts/profile_e2e.py on the CPU: ``summarize`` of small hand-written chrome traces (one plain,
one gzipped) with known kernel events, its decode-step filter, and the command lines that the phase
script and the module docstring document."""

import gzip
import inspect
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "lab" / "scripts" / "profile_e2e.py"
PHASES = ROOT / "lab" / "runs" / "2026-12-02.sh"


@pytest.fixture(scope="module")
def prof(lab_script):
    return lab_script("profile_e2e")


def X(cat, name, ts, dur, corr=None):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 0}
    if corr is not None:
        e["args"] = {"correlation": corr}
    return e


# Run "off": gemm twice (30 + 20 us), norm once (10 us), a memcpy overlapping norm; GPU intervals
# [20, 50] [60, 80] [100, 110] [105, 115]: busy 30 + 20 + 15 = 65, span 95, idle 30, gaps 10 and
# 20 us (only the 20 is > 10 us).
OFF = [
    X("user_annotation", "execute_context_8(1024)_generation_0(0)", 0, 100),
    X("cuda_runtime", "cudaLaunchKernel", 10, 5, 1),
    X("cpu_op", "_C::cutlass_scaled_mm", 11, 4),
    X("cpu_op", "aten::empty", 12, 1),
    X("kernel", "gemm", 20, 30, 1),
    X("cuda_runtime", "cudaLaunchKernel", 15, 5, 2),
    X("cpu_op", "_C::cutlass_scaled_mm", 16, 4),
    X("kernel", "gemm", 60, 20, 2),
    X("kernel", "norm", 100, 10, 3),
    X("gpu_memcpy", "Memcpy DtoH", 105, 10, 4),
    {"ph": "i", "cat": "kernel", "name": "instant, ignored", "ts": 0},
]
# Run "on" (gzipped, traceEvents in a dict): gemm once (80 us), helion twice (25 us each).
ON = [
    X("kernel", "gemm", 0, 80, 1),
    X("kernel", "helion_scaled_mm", 100, 25, 2),
    X("kernel", "helion_scaled_mm", 130, 25, 3),
    X("cpu_op", "hlvllm::scaled_mm", 1, 7),
    X("cpu_op", "hlvllm::scaled_mm", 9, 7),
]


@pytest.fixture
def two_runs(tmp_path):
    off, on = tmp_path / "off", tmp_path / "on"
    (off / "prefill").mkdir(parents=True)
    (on / "prefill").mkdir(parents=True)
    (off / "prefill" / "hl_rank0.1.pt.trace.json").write_text(json.dumps(OFF))
    (on / "prefill" / "hl_rank0.2.pt.trace.json.gz").write_bytes(
        gzip.compress(json.dumps({"traceEvents": ON, "schemaVersion": 1}).encode())
    )
    (off / "prefill" / "profiler_out_0.txt").write_text("not a trace")
    (off / "run.json").write_text(
        json.dumps(
            {"plugin": "off", "profiled": {"prefill": {"wall_s": 0.05}}, "unprofiled_s": {"prefill": [0.04]}}
        )
    )
    return off, on


def test_aggregate_plain_trace(prof):
    agg = prof.aggregate(OFF)
    assert agg["kernels"] == {"gemm": {"count": 2, "us": 50.0}, "norm": {"count": 1, "us": 10.0}}
    assert agg["kernel_us"] == 60.0
    assert (agg["gpu_busy_us"], agg["gpu_span_us"], agg["gpu_idle_us"]) == (65.0, 95.0, 30.0)
    assert (agg["gap_count"], agg["gap_us"], agg["max_gap_us"]) == (1, 20.0, 20.0)
    assert agg["cpu_ops"] == {"_C::cutlass_scaled_mm": {"count": 2, "us": 8.0}}
    assert agg["steps"] == {
        "execute_context_8(1024)_generation_0(0)": {"count": 1, "us": 100.0, "min_us": 100.0, "max_us": 100.0}
    }


def test_load_trace_gzip_and_plain(prof, two_runs):
    off, on = two_runs
    assert prof.load_trace(next((on / "prefill").glob("*.gz"))) == ON
    assert prof.load_trace(off / "prefill" / "hl_rank0.1.pt.trace.json") == OFF
    assert [p.name for p in prof.trace_files(off / "prefill")] == ["hl_rank0.1.pt.trace.json"]


def test_summarize_two_runs_table_and_json(prof, two_runs, tmp_path, capsys):
    off, on = two_runs
    out = tmp_path / "cmp.json"
    assert prof.main(["summarize", str(off), str(on), "--json", str(out)]) == 0
    agg = json.loads(out.read_text())
    assert set(agg) == {"prefill"}
    assert agg["prefill"]["on"]["kernels"] == {
        "gemm": {"count": 1, "us": 80.0},
        "helion_scaled_mm": {"count": 2, "us": 50.0},
    }
    assert agg["prefill"]["on"]["gpu_busy_us"] == 130.0 and agg["prefill"]["on"]["gpu_span_us"] == 155.0
    assert agg["prefill"]["on"]["cpu_ops"] == {"hlvllm::scaled_mm": {"count": 2, "us": 14.0}}
    rows = prof.table(agg["prefill"]["off"], agg["prefill"]["on"])
    assert rows == [
        ["gemm", "2", "50.0", "1", "80.0", "+30.0"],
        ["helion_scaled_mm", "0", "0.0", "2", "50.0", "+50.0"],
        ["norm", "1", "10.0", "0", "0.0", "-10.0"],
    ]
    text = capsys.readouterr().out
    assert "=== prefill ===" in text and "profiled call 50.0 ms" in text and "unprofiled 40.0 ms" in text
    assert re.search(r"gemm\s+2\s+50\.0\s+1\s+80\.0\s+\+30\.0", text)
    assert re.search(r"helion_scaled_mm\s+0\s+0\.0\s+2\s+50\.0\s+\+50\.0", text)
    assert re.search(r"hlvllm::scaled_mm\s+0\s+0\.0\s+2\s+14\.0\s+\+14\.0", text)
    assert re.search(r"_C::cutlass_scaled_mm\s+2\s+8\.0\s+0\s+0\.0\s+-8\.0", text)
    assert "GPU span 95.0 us, busy 65.0 us, idle 30.0 us (1 gaps > 10 us: 20.0 us" in text


def test_summarize_one_run_and_top(prof, two_runs, capsys):
    off, _ = two_runs
    assert prof.main(["summarize", str(off), "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"gemm\s+2\s+50\.0\n", text) and "norm " not in text


def test_summarize_folder_of_traces_and_empty(prof, two_runs, tmp_path, capsys):
    off, _ = two_runs
    assert prof.windows_of(off / "prefill") == {"trace": off / "prefill"}
    (tmp_path / "empty").mkdir()
    assert prof.main(["summarize", str(tmp_path / "empty")]) == 1


def test_decode_window_keeps_only_pure_decode_steps(prof, tmp_path):
    events = [
        X("user_annotation", "execute_context_1(16)_generation_0(0)", 0, 50),
        X("cuda_runtime", "cudaGraphLaunch", 10, 5, 1),
        X("kernel", "prefill_k", 20, 40, 1),
        X("user_annotation", "execute_context_0(0)_generation_1(1)", 100, 50),
        X("cuda_runtime", "cudaGraphLaunch", 110, 5, 2),
        X("kernel", "a", 120, 4, 2),
        X("kernel", "b", 125, 6, 2),
        X("user_annotation", "execute_context_0(0)_generation_1(1)", 200, 70),
        X("cuda_runtime", "cudaGraphLaunch", 210, 5, 3),
        X("kernel", "a", 220, 5, 3),
        X("cuda_runtime", "cudaLaunchKernel", 300, 5, 4),  # sampling: outside the step annotations
        X("kernel", "sample", 310, 3, 4),
    ]
    (tmp_path / "decode").mkdir()
    (tmp_path / "decode" / "t.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    agg = prof.summarize_window(tmp_path / "decode", "decode")
    assert agg["step_filter"] == prof.DECODE_STEP_PREFIX and agg["kept_steps"] == 2
    assert agg["kernels"] == {"a": {"count": 2, "us": 9.0}, "b": {"count": 1, "us": 6.0}}
    assert agg["steps"]["execute_context_0(0)_generation_1(1)"] == {
        "count": 2, "us": 120.0, "min_us": 50.0, "max_us": 70.0
    }  # fmt: skip
    # the prefill window (and any window without decode-step annotations) keeps everything
    full = prof.summarize_window(tmp_path / "decode", "prefill")
    assert full["step_filter"] is None and sorted(full["kernels"]) == ["a", "b", "prefill_k", "sample"]


def _documented_invocations():
    """Argument lists of every ``profile_e2e.py`` call in the phase script and the docstring."""
    lines = [
        ln
        for ln in PHASES.read_text().splitlines()
        if "profile_e2e.py" in ln and not ln.lstrip().startswith("#")
    ]
    lines += [
        ln
        for ln in SCRIPT.read_text().split('"""')[1].splitlines()
        if "python lab/scripts/profile_e2e.py" in ln
    ]
    out = []
    for ln in lines:
        words = shlex.split(ln.split("#")[0].split(">")[0], comments=False)
        out.append(words[words.index(next(w for w in words if w.endswith("profile_e2e.py"))) + 1 :])
    return out


def test_documented_invocations_parse(prof, lab_script, args_missing):
    calls = _documented_invocations()
    assert sum(c[0] == "run" for c in calls) >= 6 and sum(c[0] == "summarize" for c in calls) >= 4
    # what the script reads, and what e2e_vllm.engine_kwargs (which its run calls) reads
    sources = SCRIPT.read_text(), inspect.getsource(lab_script("e2e_vllm").engine_kwargs)
    for argv in calls:
        args = prof.parser().parse_args(argv)
        if args.cmd == "run":
            missing = args_missing(args, *sources, ignore={"dir", "dir2", "top", "json"})
            assert not missing, f"profile_e2e.py reads args.{missing} that its run parser does not define"
            assert args.layers == 8 and args.plugin in ("on", "off")
        else:
            assert hasattr(args, "dir2") and hasattr(args, "json") and args.top == prof.TOP
    fused = prof.parser().parse_args(["run", "--plugin", "on", "--aux-fusion", "--out", "x"])
    assert fused.aux_fusion and fused.layers == 8 and fused.decode_steps == 16 and fused.prefill_len == 128


def test_run_rejects_bad_plugin(prof):
    with pytest.raises(SystemExit):
        prof.parser().parse_args(["run", "--plugin", "maybe", "--out", "x"])


def test_summarize_reads_a_real_torch_profiler_trace(prof, tmp_path):
    """A trace written by torch.profiler itself (CPU activity, Kineto's JSON, gzipped by
    tensorboard_trace_handler as vLLM's wrapper does) parses: the step annotations and a
    ``hlvllm::`` op are found, with real durations."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, tensorboard_trace_handler

    lib = torch.library.Library("hlvllm", "FRAGMENT")
    lib.define("profile_probe(Tensor x) -> Tensor")
    lib.impl("profile_probe", lambda x: torch.nn.functional.silu(x @ x), "CompositeExplicitAutograd")
    folder = tmp_path / "run" / "prefill"
    folder.mkdir(parents=True)
    with profile(
        activities=[ProfilerActivity.CPU],
        on_trace_ready=tensorboard_trace_handler(str(folder), use_gzip=True),
    ):
        for _ in range(3):
            with record_function("execute_context_8(1024)_generation_0(0)"):
                torch.ops.hlvllm.profile_probe(torch.randn(64, 64))
    (trace,) = prof.trace_files(folder)
    assert trace.name.endswith(".pt.trace.json.gz")
    agg = prof.summarize_window(folder, "prefill")
    step = agg["steps"]["execute_context_8(1024)_generation_0(0)"]
    op = agg["cpu_ops"]["hlvllm::profile_probe"]
    assert step["count"] == 3 and op["count"] == 3
    assert 0 < op["us"] <= step["us"]  # the op runs inside the annotated steps
    assert agg["kernels"] == {} and agg["gpu_busy_us"] == 0.0  # no GPU activity on this machine
