"""ci/gpu/e2e_vllm.py's command line, on the CPU: every invocation the GPU phase scripts make parses,
and every ``args.<name>`` the script reads exists on the parsed namespace (a missing option once cost a
whole GPU compile-mode run: AttributeError before the engine started)."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ci" / "gpu" / "e2e_vllm.py"
PHASES = ROOT / "ci" / "gpu" / "runs" / "2026-12-01.sh"


@pytest.fixture(scope="module")
def e2e():
    spec = importlib.util.spec_from_file_location("e2e_vllm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _phase_modes():
    """The (plugin-setting, compile-mode) pairs of the phase script's compile-mode matrix."""
    text = PHASES.read_text()
    modes = re.search(r"local modes=\(([^)]*)\)", text).group(1).split()
    assert len(modes) >= 8, modes
    return [tuple(m.split(":")) for m in modes]


@pytest.mark.parametrize("name,mode", _phase_modes())
def test_phase_script_invocations_parse_and_cover_what_run_reads(e2e, name, mode, tmp_path):
    argv = ["run", "--plugin", "on" if name == "fused" else name, "--compile", mode]
    argv += ["--aux-fusion"] if name == "fused" else []
    argv += ["--layers", "4", "--kv-cache-gib", "2", "--gpu-memory-utilization", "0.2"]
    args = e2e.parser().parse_args([*argv, "--out", str(tmp_path / "r.json")])
    assert args.compile == mode and args.aux_fusion is (name == "fused")
    read = set(re.findall(r"\bargs\.([a-z_]+)", SCRIPT.read_text()))
    compare_only = {"on", "off", "control", "repeat"}
    missing = sorted(a for a in read - compare_only if not hasattr(args, a))
    assert not missing, f"e2e_vllm.py reads args.{missing} that its run parser does not define"


def test_compare_parses(e2e):
    args = e2e.parser().parse_args(["compare", "a.json", "b.json", "--repeat", "c.json"])
    assert (args.on, args.off, args.repeat, args.control) == ("a.json", "b.json", ["c.json"], None)
