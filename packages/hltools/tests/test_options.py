"""hltools.options: the option parsers every command shares (bad input: exit 2 naming the option),
and `--formats all` the same in validate, autotune and bench kernels."""

import pytest
import typer
from typer.testing import CliRunner

from hltools import options
from hltools.cli import app
from hltools.format_names import FORMATS

runner = CliRunner()


def _flat(output: str) -> str:
    return " ".join(output.split())


def test_parse_formats_takes_all_and_names_the_bad_ones():
    assert options.parse_formats("all") == list(FORMATS) == ["fp8_dynamic", "w8a8_int8", "block_fp8"]
    assert options.parse_formats(" block_fp8, fp8_dynamic,block_fp8 ") == ["block_fp8", "fp8_dynamic"]
    with pytest.raises(
        typer.BadParameter, match=r"unknown format\(s\) \['fp4'\]; choose from .* or all"
    ) as exc:
        options.parse_formats("fp8_dynamic,fp4")
    assert exc.value.param_hint == "--formats"
    with pytest.raises(typer.BadParameter, match="no format given"):
        options.parse_formats(" , ")
    assert options.parse_format("w8a8_int8") == "w8a8_int8"
    with pytest.raises(typer.BadParameter, match="unknown format") as exc:
        options.parse_format("all")  # one format: not a list
    assert exc.value.param_hint == "--format"


def test_parse_ints_and_models():
    assert options.parse_ints("8, 1,8", "--num-tokens") == [8, 1]
    with pytest.raises(typer.BadParameter, match="comma-separated integers"):
        options.parse_ints("1,x", "--num-tokens")
    with pytest.raises(typer.BadParameter, match="positive integers"):
        options.parse_ints("0", "--concurrency")
    models = options.load_models("qwen3-8b, Qwen/Qwen3-1.7B")
    assert [name for name, _ in models] == ["qwen3-8b", "Qwen/Qwen3-1.7B"]
    assert models[1][1]["hidden_size"] == 2048
    with pytest.raises(typer.BadParameter, match="no model given"):
        options.load_models(",")
    with pytest.raises(typer.BadParameter) as exc:
        options.load_model("no-such-model")
    assert exc.value.param_hint == "--model"


def test_formats_all_in_bench_kernels_and_autotune(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("HL_MAX_HELION_SIZE", raising=False)
    every = ",".join(FORMATS)
    for command, count in (
        (["bench", "kernels", "--list"], "12 shapes, 84 points"),
        (["autotune", "--model", "qwen3-8b", "--list"], "84 keys, 0 done"),
    ):
        named = runner.invoke(app, [*command, "--formats", every])
        shorthand = runner.invoke(app, [*command, "--formats", "all"])
        assert named.exit_code == shorthand.exit_code == 0, shorthand.output
        assert shorthand.output == named.output and count in _flat(shorthand.output)
    bad = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--list", "--formats", "int4"])
    assert bad.exit_code == 2 and "--formats" in bad.output and "int4" in bad.output


def test_help_markup_is_rich_on_a_terminal_and_plain_when_piped(monkeypatch):
    class Stdout:
        def __init__(self, tty: bool):
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    monkeypatch.setattr("sys.stdout", Stdout(True))
    assert options.help_markup() == "markdown"
    monkeypatch.setattr("sys.stdout", Stdout(False))
    assert options.help_markup() is None


@pytest.mark.parametrize("command", [["autotune"], ["bench", "e2e"], ["configs", "from-bench"]])
def test_piped_help_is_plain_and_keeps_every_word_at_80_columns(command):
    """Piped, rich's four-column table left the help column ~20 characters wide and cut words
    ("HL_MAX_HELION_SI…"); click's plain help wraps each option's help whole under 80 columns."""
    if app.rich_markup_mode is not None:
        pytest.skip("stdout was a terminal when hltools.cli was imported (pytest -s): rich help")
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert not [line for line in lines if "…" in line or "│" in line or len(line) > 80], result.output
    if command == ["autotune"]:
        assert "HL_MAX_HELION_SIZE" in result.output
        assert "--compile-alongside / --compile-first" in result.output
