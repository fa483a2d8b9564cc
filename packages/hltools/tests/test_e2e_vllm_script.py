"""lab/scripts/e2e_vllm.py's command line, on the CPU: every invocation the GPU phase scripts make parses,
and every ``args.<name>`` the script reads exists on the parsed namespace (a missing option once cost a
whole GPU compile-mode run: AttributeError before the engine started)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "lab" / "scripts" / "e2e_vllm.py"
PHASES = ROOT / "lab" / "runs" / "2026-12-01.sh"


@pytest.fixture(scope="module")
def e2e(lab_script):
    return lab_script("e2e_vllm")


def _phase_modes():
    """The (plugin-setting, compile-mode) pairs of the phase script's compile-mode matrix."""
    text = PHASES.read_text()
    modes = re.search(r"local modes=\(([^)]*)\)", text).group(1).split()
    assert len(modes) >= 8, modes
    return [tuple(m.split(":")) for m in modes]


@pytest.mark.parametrize("name,mode", _phase_modes())
def test_phase_script_invocations_parse_and_cover_what_run_reads(e2e, name, mode, tmp_path, args_missing):
    argv = ["run", "--plugin", "on" if name == "fused" else name, "--compile", mode]
    argv += ["--aux-fusion"] if name == "fused" else []
    argv += ["--layers", "4", "--kv-cache-gib", "2", "--gpu-memory-utilization", "0.2"]
    args = e2e.parser().parse_args([*argv, "--out", str(tmp_path / "r.json")])
    assert args.compile == mode and args.aux_fusion is (name == "fused")
    missing = args_missing(args, SCRIPT.read_text(), ignore={"on", "off", "control", "repeat"})  # compare's
    assert not missing, f"e2e_vllm.py reads args.{missing} that its run parser does not define"


def test_compare_parses(e2e):
    args = e2e.parser().parse_args(["compare", "a.json", "b.json", "--repeat", "c.json"])
    assert (args.on, args.off, args.repeat, args.control) == ("a.json", "b.json", ["c.json"], None)


def _run(plugin, shift, kernel):
    """A fake e2e_vllm.py result: 2 prompts x 3 greedy steps per batch, logprobs moved by ``shift``."""
    steps = [{"1": -1.0 + shift, "2": -2.0}, {"3": -1.5 + shift, "4": -2.5}, {"5": -0.5, "6": -3.0 + shift}]
    prompts = [{"tokens": [1, 3, 5], "logprobs": steps} for _ in range(2)]
    helion = plugin == "on"
    return {
        "gpu": "H200", "vllm": "0.26.0", "torch": "2.11.0", "layers": 4, "plugin": plugin, "compile": "O2",
        "kernels": {"l0": "HelionFP8ScaledMMLinearKernel" if helion else kernel},
        "captured": {"helion": {"1": 1, "8": 1}, "fallback": {"64": 1}} if helion else {},
        "dispatch": {}, "aux_captured": {}, "startup_s": 60.0,
        "logprobs": {"4": prompts, "64": prompts},
        "throughput": {b: {"tokens_per_s": 100.0} for b in ("1", "8")},
    }  # fmt: skip


@pytest.mark.parametrize(
    "on_shift,expect_ok",
    [(0.05, True), (0.3, True), (-0.5, False), (2.0, False)],
    ids=["near-vllm", "near-control", "beyond-noise", "wrong-kernel"],
)
def test_compare_takes_the_control_as_noise_floor(e2e, tmp_path, on_shift, expect_ok):
    """The control (another correct vLLM setup) sits 0.4 from plugin-off: a plugin run passes when it
    is within max(0.25, that noise) of either vLLM run, and fails beyond it."""
    import json

    files = {}
    for name, run in {
        "off": _run("off", 0.0, "CutlassFP8ScaledMMLinearKernel"),
        "ctrl": _run("off", 0.4, "CutlassFP8ScaledMMLinearKernel"),
        "on": _run("on", on_shift, ""),
    }.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(run))
    argv = ["compare", str(files["on"]), str(files["off"]), "--control", str(files["ctrl"])]
    assert (e2e.compare(e2e.parser().parse_args(argv)) == 0) is expect_ok
    without_control = e2e.compare(e2e.parser().parse_args(argv[:3]))
    assert (without_control == 0) is (abs(on_shift) < e2e.LOGPROB_TOL)
