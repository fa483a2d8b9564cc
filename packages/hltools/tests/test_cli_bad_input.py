"""Each bad input of the ``hltools`` commands: exit code 2 and one message naming the option and what
is wrong (issue 24, "commands that agree"), the same in every command that takes the option."""

import json

import pytest
import torch
from typer.testing import CliRunner

from hltools.cli import app
from hltools.options import NO_GPU_EXIT
from hltools.shapes import load_model_config

runner = CliRunner()

#: Every command that takes --model, in a form that needs no GPU.
MODEL_COMMANDS = [
    ["validate"],
    ["autotune", "--list"],
    ["bench", "kernels", "--list"],
    ["bench", "e2e", "--dry-run"],
]


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("HL_CONFIG_DIR", raising=False)
    monkeypatch.delenv("HL_MAX_HELION_SIZE", raising=False)


def invoke(args: list[str]):
    """``hltools ARGS`` in-process, on a terminal wide enough that typer does not wrap its message."""
    return runner.invoke(app, args, env={"COLUMNS": "1000"})


def _message(result) -> str:
    """The one line of a bad input's message (exit code 2): click's ``Error: ...`` line when the help is
    plain (stdout not a terminal, as under pytest's capture), else the one line of typer's error box."""
    assert result.exit_code == 2, result.output
    lines = [
        line.removeprefix("Error: ") for line in result.output.splitlines() if line.startswith("Error: ")
    ]
    lines = lines or [line.strip("│ ") for line in result.output.splitlines() if line.startswith("│")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: " ".join(c))
def test_config_json_missing_a_field_names_the_field_and_the_file(command, tmp_path, monkeypatch):
    config = load_model_config("qwen3-8b")
    del config["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    cwd = tmp_path / "cwd"  # where bench's default output (bench-results) would go
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    message = _message(invoke([*command, "--model", str(tmp_path)]))
    assert (
        f"Invalid value for --model: {tmp_path / 'config.json'}: missing field 'intermediate_size'" in message
    )
    assert "--tp" not in message
    assert list(cwd.iterdir()) == []  # nothing written


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: " ".join(c))
def test_a_model_path_that_does_not_exist_says_so(command, tmp_path):
    missing = tmp_path / "no-such-model"
    message = _message(invoke([*command, "--model", str(missing)]))
    assert f"Invalid value for --model: path '{missing}' does not exist" in message
    assert "unknown model" not in message


@pytest.mark.parametrize("listing", [["--list"], []], ids=["list", "tune"])
def test_an_unknown_gpu_names_the_known_ones(listing):
    message = _message(invoke(["autotune", "--model", "qwen3-8b", *listing, "--gpu", "bogus_gpu"]))
    assert message.startswith("Invalid value for --gpu: unknown GPU 'bogus_gpu'; known: nvidia_")
    assert "nvidia_h200" in message and "nvidia_h100_sxm" in message


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "--layer", "bogus"],
        ["autotune", "--model", "qwen3-8b", "--list"],
        ["bench", "kernels", "--list"],
    ],
    ids=["validate", "autotune", "bench kernels"],
)
def test_formats_all_everywhere_and_a_bad_format_named(command):
    """``all`` passes the --formats check of each command (validate then stops at its bad --layer,
    before running anything); a bad name is named, with the choices."""
    result = invoke([*command, "--formats", "all"])
    if command[0] == "validate":
        assert _message(result).startswith("Invalid value for --layer: unknown layer(s) ['bogus']")
    else:
        assert result.exit_code == 0, result.output
    message = _message(invoke([*command, "--formats", "fp8_dynamic,int4"]))
    assert message.startswith("Invalid value for --formats: unknown format(s) ['int4']; choose from")
    assert message.endswith("or all")


@pytest.mark.parametrize("command", MODEL_COMMANDS[1:3], ids=lambda c: " ".join(c))
def test_a_tp_the_model_cannot_be_split_by_names_tp_alone(command):
    message = _message(invoke([*command, "--model", "qwen3-8b", "--tp", "3"]))
    assert (
        message == "Invalid value for --tp: tensor parallel size 3 does not divide num_attention_heads = 32"
    )


@pytest.mark.parametrize(
    "command",
    [["autotune", "--list"], ["bench", "kernels", "--list"]],
    ids=["autotune", "bench kernels"],
)
def test_layer_takes_commas_or_repeats_and_a_bad_name_names_the_option(command):
    """``--layer gate_up,down`` selects what ``--layer gate_up --layer down`` does; a name the model
    lacks exits 2 naming --layer and the model's layers, in each command that takes it (validate:
    test_formats_all_everywhere_and_a_bad_format_named)."""
    args = [*command, "--model", "qwen3-4b", "--formats", "fp8_dynamic", "--num-tokens", "8"]
    commas, repeated = (
        invoke([*args, "--layer", "gate_up,down"]),
        invoke([*args, "--layer", "gate_up", "--layer", "down"]),
    )
    assert commas.exit_code == 0, commas.output
    assert commas.output == repeated.output
    assert "19456" in commas.output and "6144" not in commas.output  # gate_up's N, not qkv's
    message = _message(invoke([*args, "--layer", "gate_up,mlp"]))
    assert (
        message
        == "Invalid value for --layer: unknown layer(s) ['mlp']; choose from ['qkv', 'o', 'gate_up', 'down']"
    )


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (
            ["autotune", "--model", "qwen3-1.7b", "--num-tokens", "8"],
            NO_GPU_EXIT,
            "hltools autotune needs a CUDA GPU",
        ),
        (
            ["bench", "kernels", "--model", "qwen3-1.7b"],
            NO_GPU_EXIT,
            "hltools bench kernels needs a CUDA GPU",
        ),
        (["bench", "compare", "a", "b", "--names", "x"], 2, "--names takes two names"),
        (["bench", "report", "."], 1, "no kernels.json or e2e-*.json results in ."),
    ],
    ids=["autotune-no-gpu", "bench-kernels-no-gpu", "bench-compare-names", "bench-report-empty"],
)
def test_a_run_that_cannot_start_says_why_on_stderr_and_leaves_stdout_empty(
    args, code, words, tmp_path, monkeypatch
):
    """Errors go to stderr, as typer's own bad-option errors do, so that ``--list > keys.txt`` or a
    report piped elsewhere never holds one."""
    monkeypatch.chdir(tmp_path)
    result = invoke(args)
    assert result.exit_code == code, result.output
    assert words in " ".join(result.stderr.split())
    assert result.stdout == ""
