"""The GPU phase scripts (``ci/gpu/runs/*.sh``): every ``e2e`` and ``kb`` call there expands to a
``hltools bench e2e`` / ``bench kernels`` command line (``ci/gpu/runs/phase-lib.sh``) that the CLI
parses, with known models, formats and plugin settings. A typo there costs a device session."""

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from hltools import bench_cli, e2e, shapes

RUNS = Path(__file__).resolve().parents[3] / "ci" / "gpu" / "runs"
FORMATS = {"fp8_dynamic", "w8a8_int8", "block_fp8"}


def _calls(kind):
    """(script, line, words after ``kind``) of each non-comment ``kind`` call, env prefixes dropped."""
    call = re.compile(rf"(?:^|;;|;|\)\s)\s*(?:[A-Z_]+=\S*\s+)*{kind}\s+([^;)&|]*)")
    out = []
    for script in sorted(RUNS.glob("*.sh")):
        for ln in script.read_text().splitlines():
            code = ln.strip()
            if code.startswith("#") or code.startswith(f"{kind}()"):
                continue
            out += [(script.name, code, shlex.split(m.group(1))) for m in call.finditer(code)]
    return out


def _parse(command, argv):
    group = typer.main.get_command(bench_cli.bench_app)
    return group.commands[command].make_context(command, argv).params


def test_the_scripts_have_calls():
    assert len(_calls("e2e")) >= 8 and len(_calls("kb")) >= 2


@pytest.mark.parametrize("script,line,args", _calls("e2e"), ids=lambda v: v if isinstance(v, str) else None)
def test_e2e_calls_parse(script, line, args):
    _name, model, fmt, rounds, *rest = args
    argv = ["--model", model, "--format", fmt, "--rounds", rounds, "--repeats", "5", "--output", "x"]
    params = _parse("e2e", [*argv, "--timeout", "240", *rest])
    assert params["model"] in shapes.list_models(), line
    assert params["fmt"] in FORMATS, line
    assert set(params["plugins"].split(",")) <= set(e2e.PLUGINS), line
    assert params["timeout"] >= 240 and params["rounds"] >= 1, line


@pytest.mark.parametrize("script,line,args", _calls("kb"), ids=lambda v: v if isinstance(v, str) else None)
def test_kb_calls_parse(script, line, args):
    _name, models, formats = args
    params = _parse("kernels", ["--model", models, "--formats", formats, "--no-plots", "--jobs", "8"])
    assert set(params["model"].split(",")) <= set(shapes.list_models()), line
    assert set(params["formats"].split(",")) <= FORMATS, line
