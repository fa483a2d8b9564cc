"""``hltools bench report DIR`` writes where ``--output`` says (default ``DIR/report``) and never over
the results' own files, another results folder or a committed file unless ``--in-place`` (exit 2,
one line, nothing written)."""

import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from hltools import e2e, kernel_results
from hltools.cli import app
from hltools.kernel_results import BenchResult

runner = CliRunner()
META = {
    "gpu": "NVIDIA H200",
    "torch": "2.11",
    "triton": "3.6",
    "helion": "1.5",
    "vllm": "0.26",
    "commit": "abc",
}
STEM = "e2e-qwen3-8b-fp8_dynamic"
STALE = "stale markdown, as committed\n"


def invoke(*args: str):
    return runner.invoke(app, ["bench", "report", *args, "--no-plots"], env={"COLUMNS": "1000"})


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


@pytest.fixture
def results(tmp_path):
    """A results folder (kernels and e2e) whose markdown files are stale: a rewrite would show."""
    folder = tmp_path / "results"
    rows = [
        BenchResult("qwen3-8b", "o", "fp8_dynamic", prov, kern, 1, 4096, 4096, median_us=us, **META)
        for prov, kern, us in (("helion", "helion scaled_mm", 10.0), ("vllm", "vllm cutlass_scaled_mm", 12.0))
    ]
    kernel_results.write_results(folder, rows, META)
    runs = [
        {"plugin": p, "round": 0, "startup_s": 50.0,
         "throughput": {"1": {"tokens_per_s": v, "tpot_ms": 1000.0 / v, "ttft_ms": 30.0}}}
        for p, v in (("off", 100.0), ("on", 125.0))
    ]  # fmt: skip
    e2e.write_e2e(folder, STEM, {**META, "model": "qwen3-8b", "format": "fp8_dynamic"}, runs)
    for name in (kernel_results.SUMMARY_MD, f"{STEM}.md"):
        (folder / name).write_text(STALE)
    return folder


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_report_writes_into_dir_report_and_leaves_the_results_alone(results):
    before = _files(results)
    for _ in range(2):  # a second run rewrites its own report
        result = invoke(str(results))
        assert result.exit_code == 0, result.output
    assert _files(results) == before
    report = results / "report"
    assert sorted(p.name for p in report.iterdir()) == sorted([kernel_results.SUMMARY_MD, f"{STEM}.md"])
    assert "geomean" in (report / kernel_results.SUMMARY_MD).read_text()
    assert "| 1 | 100 | 125 | 1.250 |" in (report / f"{STEM}.md").read_text()
    assert f"wrote {report / kernel_results.SUMMARY_MD}" in " ".join(result.output.split())


def test_report_output_option(results, tmp_path):
    result = invoke(str(results), "--output", str(tmp_path / "elsewhere"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "elsewhere" / f"{STEM}.md").read_text() != STALE
    assert not (results / "report").exists()


def test_report_refuses_a_folder_that_holds_results(results, tmp_path):
    before = _files(results)
    message = _message(invoke(str(results), "--output", str(results)))
    assert message == (
        f"Invalid value for --output: {results} holds bench results of its own: write the report to "
        f"another folder, or run `bench report {results} --in-place` to rewrite that folder's own tables"
    )
    other = tmp_path / "other-results"
    shutil.copytree(results, other)
    message = _message(invoke(str(results), "--output", str(other)))
    assert (
        f"{other} holds bench results of its own" in message and f"bench report {other} --in-place" in message
    )
    assert _files(results) == before and _files(other) == before


def test_report_refuses_to_write_over_a_committed_file(results, tmp_path):
    out = tmp_path / "checkout" / "notes"
    out.mkdir(parents=True)
    (out / f"{STEM}.md").write_text(STALE)
    subprocess.run(["git", "init", "-q"], cwd=out.parent, check=True)
    subprocess.run(["git", "add", "notes"], cwd=out.parent, check=True)
    message = _message(invoke(str(results), "--output", str(out)))
    assert message == (
        f"Invalid value for --output: would write over the committed file {out / f'{STEM}.md'}; "
        "choose another --output"
    )
    assert _files(out) == {f"{STEM}.md": STALE.encode()}


def test_report_in_place_rewrites_the_results_markdown(results):
    result = invoke(str(results), "--in-place")
    assert result.exit_code == 0, result.output
    assert (results / f"{STEM}.md").read_text() != STALE
    assert "geomean" in (results / kernel_results.SUMMARY_MD).read_text()
    assert not (results / "report").exists()


def test_report_in_place_with_another_output_exits_2(results, tmp_path):
    message = _message(invoke(str(results), "--in-place", "--output", str(tmp_path / "x")))
    assert message == "Invalid value for --in-place: rewrites DIR's own files; leave out --output"
    assert (results / f"{STEM}.md").read_text() == STALE and not (tmp_path / "x").exists()


def test_report_of_a_folder_that_does_not_exist_exits_2(tmp_path):
    assert (
        _message(invoke(str(tmp_path / "nope")))
        == f"Invalid value for DIR: {tmp_path / 'nope'} does not exist"
    )
    (tmp_path / "file").write_text("")
    assert (
        _message(invoke(str(tmp_path / "file")))
        == f"Invalid value for DIR: {tmp_path / 'file'} is not a folder"
    )
