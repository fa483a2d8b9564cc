"""``bench e2e`` and ``bench report`` print what ``<stem>.md`` shows (:func:`hltools.e2e.summary_parts`):
the throughput table with TTFT, the repeats' spread, TTFT alone, start-up and the greedy agreement
lines, checked against the markdown written by the same run (engines faked, no GPU)."""

import json

import pytest
from typer.testing import CliRunner

from hltools import e2e, options
from hltools.cli import app

runner = CliRunner()
STEM = "e2e-qwen3-1.7b-fp8_dynamic"


def _worker_result(plugin: str, concurrency: list[int]) -> dict:
    """One engine's result: the plugin 10 % faster per token, a 25 % slower first token, one
    concurrency (8) with a noisy repeat, TTFT alone at 128 tokens, greedy tokens that differ in one
    of two prompts."""
    on = plugin == "on"
    throughput = {}
    for c in concurrency:
        tps = 100.0 * c * (1.1 if on else 1.0)
        full = [1.28, 1.30, 1.70 if c == 8 else 1.31]
        throughput[str(c)] = {"tokens_per_s": tps, "tpot_ms": 1000.0 / tps, "ttft_ms": 25.0 if on else 20.0,
                              "samples_full_s": full, "samples_one_s": [0.020, 0.021]}  # fmt: skip
    return {
        "plugin": plugin, "startup_s": 70.0 if on else 60.0, "gpu": "H200", "throughput": throughput,
        "ttft": {"128": {"samples_ms": [30.0, 31.0, 32.0] if on else [24.0, 25.0, 26.0]}},
        "greedy": [[1, 2], [3, 5] if on else [3, 4]],
    }  # fmt: skip


def _fake_run_e2e(monkeypatch):
    real = e2e.run_e2e

    def launcher(cmd, env, log, timeout):
        args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
        concurrency = [int(c) for c in args["--concurrency"].split(",")]
        with open(args["--out"], "w") as f:
            json.dump(_worker_result(args["--plugin"], concurrency), f)
        return 0

    monkeypatch.setattr(e2e, "run_e2e", lambda **kw: real(**kw, launcher=launcher))
    monkeypatch.setattr(options, "cuda_available", lambda: True)
    monkeypatch.setattr(options, "cuda_device_count", lambda: 1)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _rows(output: str) -> list[list[str]]:
    """The cells of every table row printed, the header included (rich's box lines)."""
    lines = [line.replace("┃", "│") for line in output.splitlines() if line.startswith(("│", "┃"))]
    return [[c.strip() for c in line.strip("│").split("│")] for line in lines]


def _md_rows(md: str) -> list[list[str]]:
    """The cells of every markdown table row, the header included, the separators not."""
    rows = [
        [c.strip() for c in line.strip("|").split("|")] for line in md.splitlines() if line.startswith("| ")
    ]
    return [r for r in rows if set(r) != {"---"}]


def _shows_the_markdown(output: str, md: str) -> None:
    """Every table row and every sentence of the markdown (below its heading) is on the terminal."""
    printed = _rows(output)
    for row in _md_rows(md):
        assert row in printed, row
    flat = _flat(output).replace("**", "")
    for line in md.split("\n\n")[2:]:
        if not line.startswith("|"):
            assert _flat(line.replace("**", "")).removesuffix(":") in flat, line  # a table title: no colon


@pytest.mark.parametrize("command", ["e2e", "report"])
def test_terminal_shows_ttft_spread_and_agreement_as_the_markdown(monkeypatch, tmp_path, command):
    _fake_run_e2e(monkeypatch)
    args = ["bench", "e2e", "--model", "qwen3-1.7b", "--layers", "2", "--concurrency", "1,8", "--rounds", "1"]
    result = runner.invoke(
        app, [*args, "--ttft-lens", "128", "--output", str(tmp_path)], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    md = (tmp_path / f"{STEM}.md").read_text()
    if command == "report":
        result = runner.invoke(app, ["bench", "report", str(tmp_path), "--no-plots"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        assert (tmp_path / "report" / f"{STEM}.md").read_text() == md
    _shows_the_markdown(result.output, md)
    out = _flat(result.output)
    assert "TTFT ms vLLM" in out and "TTFT ms hlvllm" in out
    assert ["1", "100", "110", "1.100", "10.00", "9.09", "20.0", "25.0"] in _rows(result.output)
    assert "Noisy (> 10 %): vLLM at concurrency 8; hlvllm at concurrency 8" in out
    assert ["128", "25.00 (23.80-26.20, n=3)", "31.00 (29.80-32.20, n=3)", "1.240"] in _rows(result.output)
    assert ["cold caches", "60.0", "70.0", "+10.0"] in _rows(result.output)
    assert "Greedy agreement with the no-plugin run (4 prompts x 16 tokens): on-r0: 1/2." in out
    assert "start-up (s): {" not in out  # the raw dict is gone
