"""The next GPU session's phase script (the newest ``lab/runs/<date>.sh``, with the older scripts
it runs phases of; the others are the record of what ran then): every ``e2e`` and ``kb`` call there expands to a ``hltools bench e2e`` /
``bench kernels`` command line (``lab/runs/phase-lib.sh``) that the CLI parses, with known
models, formats and plugin settings, and so does every direct ``python3 -m hltools`` call. A typo
there costs a device session."""

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from hltools import e2e, shapes
from hltools.cli import bench_app

RUNS = Path(__file__).resolve().parents[3] / "lab" / "runs"
FORMATS = {"fp8_dynamic", "w8a8_int8", "block_fp8"}
#: Options whose value must exist when parsed (a variable there is read as the current directory).
EXISTING = {"--config-dir"}


def _scripts():
    """The newest script and those it names, and those they name (``bash "$here/2026-12-09.sh" S1``:
    phases run from there)."""
    newest = max(RUNS.glob("20*.sh"))
    seen, todo = [newest.name], [newest]
    while todo:
        for name in sorted(set(re.findall(r"\b(20\d\d-\d\d-\d\d\.sh)\b", todo.pop().read_text()))):
            if name not in seen:
                seen.append(name)
                todo.append(RUNS / name)
    return [RUNS / name for name in seen]


SCRIPTS = _scripts()


def _calls(kind):
    """(script, line, words after ``kind``) of each non-comment ``kind`` call, env prefixes dropped,
    line continuations joined."""
    call = re.compile(rf"(?:^|;;|;|\)\s)\s*(?:[A-Z_]+=\S*\s+)*{kind}\s+([^;)&|]*)")
    out = []
    for script in SCRIPTS:
        for ln in script.read_text().replace("\\\n", " ").splitlines():
            code = ln.strip()
            if code.startswith("#") or code.startswith(f"{kind}()"):
                continue
            out += [(script.name, code, shlex.split(m.group(1))) for m in call.finditer(code)]
    return out


def _parse(command, argv):
    group = typer.main.get_command(bench_app)
    return group.commands[command].make_context(command, argv).params


def test_the_scripts_have_calls():
    assert all(path.is_file() for path in SCRIPTS), SCRIPTS
    assert _calls("e2e") or _calls("kb") or _hltools_calls()


@pytest.mark.parametrize("script,line,args", _calls("e2e"), ids=lambda v: v if isinstance(v, str) else None)
def test_e2e_calls_parse(script, line, args):
    _name, model, fmt, rounds, *rest = args
    argv = ["--model", model, "--format", fmt, "--rounds", rounds, "--repeats", "5", "--output", "x"]
    params = _parse("e2e", [*argv, "--timeout", "240", *rest])
    assert params["model"] in shapes.list_models(), line
    assert params["fmt"] in FORMATS, line
    assert set(params["plugins"].split(",")) <= set(e2e.PLUGINS), line
    assert params["timeout"] >= 240 and params["rounds"] >= 1, line


def test_kb_calls_parse():
    """Every ``kb`` call (the scripts of a session may hold none; test_the_scripts_have_calls asks
    for some call)."""
    for _script, line, args in _calls("kb"):
        _name, models, formats = args
        params = _parse("kernels", ["--model", models, "--formats", formats, "--no-plots", "--jobs", "8"])
        assert set(params["model"].split(",")) <= set(shapes.list_models()), line
        assert set(params["formats"].split(",")) <= FORMATS | {"all"}, line


def _hltools_calls():
    """(script, words after ``python3 -m hltools``) of each direct call, line continuations joined,
    shell arithmetic read as 7, ``${NAME:-default}`` as its default, ``$MODEL8B`` as qwen3-8b and
    other variables as a path (``.`` after an option of :data:`EXISTING`)."""
    out = []
    for script in SCRIPTS:
        text = script.read_text().replace("\\\n", " ")
        for ln in text.splitlines():
            if ln.strip().startswith("#") or "python3 -m hltools" not in ln:
                continue
            cmd = ln.split("python3 -m hltools", 1)[1].split(";")[0].split("&&")[0].split(">")[0]
            cmd = re.sub(r"\$\(\(.*?\)\)+", "7", cmd)
            cmd = re.sub(r"\$\{\w+:-([^}$]*)\}", r"\1", cmd)
            cmd = cmd.replace("$MODEL8B", "qwen3-8b")
            words = shlex.split(cmd)  # a variable: "x"; after an option that must exist: "."
            words = [
                w if "$" not in w else "." if i and words[i - 1] in EXISTING else "x"
                for i, w in enumerate(words)
            ]
            out.append((script.name, words))
    return out


@pytest.mark.parametrize("script,words", _hltools_calls(), ids=lambda v: v if isinstance(v, str) else None)
def test_direct_hltools_calls_parse(script, words):
    from hltools.cli import app

    group = typer.main.get_command(app)
    name, *rest = words
    command = group.commands[name]
    if name in ("bench", "configs"):
        name, *rest = rest
        command = command.commands[name]
    params = command.make_context(name, rest).params
    if params.get("model") is not None:  # "x": a variable, the path of a config.json the script writes
        assert set(params["model"].split(",")) - {"x"} <= set(shapes.list_models())
