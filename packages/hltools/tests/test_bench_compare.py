"""``hltools bench compare`` (:mod:`hltools.bench_compare`) on the CPU: the dispatch rules per layer,
the decode-step sums and ratios against hand-computed values, notes for what one run lacks, the
command's exits and markdown, and the committed 2026-12-04 Qwen2.5-7B runs recomputed from their
JSON independently."""

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hltools import bench_compare as c
from hltools.cli import app
from hltools.kernel_results import BenchResult

REPO = Path(__file__).resolve().parents[3]
TU = REPO / "lab" / "results" / "2026-12-04-g" / "raw" / "TU"
runner = CliRunner()
EXACT = 'exact {"block_sizes":[16,64,128]}'
NEAREST = 'nearest {"block_sizes":[16,64,128]}'
MARKED = 'exact (marked fallback) {"block_sizes":[16,64,128]}'


def _pair(layer, m, helion_us, vllm_us, config=EXACT, ok=True, model="tiny", fmt="fp8_dynamic"):
    return [
        BenchResult(model, layer, fmt, "helion", "helion scaled_mm", m, 64, 64, median_us=helion_us, config=config, ok=ok),
        BenchResult(model, layer, fmt, "vllm", "vllm cutlass_scaled_mm", m, 64, 64, median_us=vllm_us, ok=True),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "ok", "helion_us", "vllm_us", "path", "us"),
    [
        (EXACT, True, 10.0, 9.0, "helion", 10.0),  # an exact key runs Helion even when slower
        (MARKED, True, 8.0, 9.0, "vllm", 9.0),  # a marked key runs vLLM even when Helion is faster
        (NEAREST, True, 9.85, 10.0, "vllm", 10.0),  # a 1.5 % win is not enough (9.85 * 1.02 > 10)
        (NEAREST, True, 9.75, 10.0, "helion", 9.75),  # 2.56 %
        ("heuristic", True, 5.0, 10.0, "vllm", 10.0),  # no entry of the format: vLLM's, as hlvllm
        ("heuristic {}", True, 5.0, 10.0, "vllm", 10.0),
        (EXACT, False, 5.0, 10.0, "vllm", 10.0),  # out of tolerance
        (EXACT, True, None, 10.0, "vllm", 10.0),  # not timed
    ],
)
def test_dispatched_follows_the_routing_rules(config, ok, helion_us, vllm_us, path, us):
    h, v = _pair("qkv", 1, helion_us, vllm_us, config=config, ok=ok)
    got = c.dispatched(h, v)
    assert (got.path, got.us, got.vllm_us) == (path, us, vllm_us)


@pytest.mark.parametrize(
    ("config", "helion_us", "path", "us"),
    [
        ("heuristic {}", 9.75, "helion", 9.75),  # a 2.56 % win: Helion, as HL_UNTUNED_SHAPES=heuristic
        ("heuristic {}", 9.85, "vllm", 10.0),  # 1.5 %: the guard keeps vLLM's kernel
        (NEAREST, 9.75, "helion", 9.75),  # the other rules as with nearest
        (MARKED, 5.0, "vllm", 10.0),
    ],
)
def test_dispatched_with_untuned_shapes_heuristic_guards_the_heuristic_config(config, helion_us, path, us):
    h, v = _pair("qkv", 1, helion_us, 10.0, config=config)
    got = c.dispatched(h, v, "heuristic")
    assert (got.path, got.us) == (path, us)
    with pytest.raises(ValueError, match="untuned_shapes 'vllm'"):
        c.dispatched(h, v, "vllm")


def test_compare_cli_untuned_shapes_heuristic(tmp_path):
    """The heuristic run's layers run Helion where they win by 2 %, so its step (and the ratio) changes."""
    before = [
        *_pair("qkv", 1, 8.0, 10.0, config="heuristic {}"),
        *_pair("o", 1, 9.9, 10.0, config="heuristic {}"),
    ]
    after = [*_pair("qkv", 1, 7.0, 10.0), *_pair("o", 1, 9.0, 10.0)]
    paths = []
    for name, rows in (("b", before), ("a", after)):
        path = tmp_path / name / "kernels.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"metadata": {}, "results": [r.to_dict() for r in rows]}))
        paths.append(str(path.parent))
    md = tmp_path / "c.md"
    res = runner.invoke(
        app, ["bench", "compare", *paths, "--untuned-shapes", "heuristic", "--markdown", str(md)]
    )
    assert res.exit_code == 0, res.output
    # before: qkv Helion 8 + o vLLM 10 = 18; after: 7 + 9 = 16
    assert "1.125" in md.read_text() and "HL_UNTUNED_SHAPES=heuristic" in md.read_text()
    res = runner.invoke(app, ["bench", "compare", *paths, "--markdown", str(md)])
    assert res.exit_code == 0 and "1.250" in md.read_text()  # nearest: before 10 + 10 = 20
    res = runner.invoke(app, ["bench", "compare", *paths, "--untuned-shapes", "vllm"])
    assert res.exit_code == 2


def test_the_commands_choices_are_the_librarys():
    """The command lists its choices itself (it imports the library lazily): the same values."""
    from hltools.commands.bench_compare import UntunedShapes

    assert tuple(UntunedShapes) == c.UNTUNED_SHAPES


def test_dispatched_without_a_helion_row_and_without_a_vllm_time():
    _, v = _pair("o", 1, 1.0, 7.0)
    assert c.dispatched(None, v).path == "vllm"
    v.median_us = None
    with pytest.raises(ValueError, match="o M=1: vLLM's row has no time"):
        c.dispatched(None, v)


def test_guard_margin_is_the_plugins():
    guard = pytest.importorskip("hlvllm.guard")
    assert c.GUARD_MARGIN == guard.MARGIN


def _runs():
    before = [
        *_pair("qkv", 1, 10.0, 10.0, config=NEAREST),  # -> vLLM 10
        *_pair("down", 1, 18.0, 20.0, config=NEAREST),  # -> Helion 18
        *_pair("qkv", 8, 12.0, 11.0, config=NEAREST),  # -> vLLM 11
        *_pair("down", 8, 30.0, 22.0, config=NEAREST),  # -> vLLM 22
        *_pair("o", 8, 5.0, 6.0, config=NEAREST),  # only before: left out with a note
        *_pair("qkv", 16, 1.0, 2.0),  # step only before
    ]
    after = [
        *_pair("qkv", 1, 9.0, 11.0),  # Helion 9 (vLLM drifted to 11)
        *_pair("down", 1, 19.0, 22.0, config=MARKED),  # vLLM 22
        *_pair("qkv", 8, 10.0, 11.0),  # Helion 10
        *_pair("down", 8, 20.0, 22.0),  # Helion 20
    ]
    return before, after


def test_compare_sums_each_step_and_notes_what_one_run_lacks():
    rows, notes = c.compare(*_runs())
    assert [r.m for r in rows] == [1, 8]
    r1, r8 = rows
    assert r1.layers == ("down", "qkv")
    assert (r1.before_us, r1.after_us, r1.vllm_before_us, r1.vllm_after_us) == (28.0, 31.0, 30.0, 33.0)
    assert (r1.helion_before, r1.helion_after) == (1, 1)
    assert r1.gain == pytest.approx(28 / 31)
    assert r1.gain_normalized == pytest.approx((28 / 30) / (31 / 33))
    assert (r8.before_us, r8.after_us, r8.helion_before, r8.helion_after) == (33.0, 30.0, 0, 2)
    assert notes == [
        "tiny fp8_dynamic tp1 M=8: layers of one run only left out",
        "tiny fp8_dynamic tp1 M=16: only in the before run",
    ]
    summary = c.summary_table(rows, "a", "b")
    (row,) = summary.rows
    gains = sorted([28 / 31, 33 / 30])
    assert row[3:7] == ["2", f"{gains[0]:.3f}", f"{statistics.median(gains):.3f}", f"{gains[1]:.3f}"]
    assert row[-1] == f"{(28 + 33) / (31 + 30):.3f}"


def test_slower_layers_lists_a_layer_slower_both_plainly_and_normalized():
    """M=1 down: Helion 18 before, vLLM's 22 after (marked): slower both ways, listed. A layer slower
    only plainly (vLLM drifted as much) or by less than the margin is not."""
    before, after = _runs()
    before += [*_pair("qkv", 2, 10.0, 10.0), *_pair("o", 2, 10.0, 10.0)]
    after += [*_pair("qkv", 2, 10.5, 11.0), *_pair("o", 2, 10.15, 10.0)]  # drift; 1.5 %
    (row,) = c.slower_layers(before, after)
    assert (row.m, row.before.layer, row.before.path, row.after[0].path) == (1, "down", "helion", "vllm")
    assert row.gain == pytest.approx(18 / 22) and row.gain_normalized == pytest.approx((18 / 20) / (22 / 22))
    assert [r.before.layer for r in c.slower_layers(before, after, margin=0.01)] == ["down", "o"]
    assert c.slower_layers(after, after) == []
    # several after processes: their median decides (down M=1 faster in two of three: not listed)
    quick = [*_pair("down", 1, 17.0, 20.0), *_pair("qkv", 1, 9.0, 11.0)]
    assert [r.before.layer for r in c.slower_layers(before, after, quick, quick)] == []
    (row,) = c.slower_layers(before, after, after, quick)
    assert row.after_us == 22.0 and row.gain_normalized == pytest.approx((18 / 20) / (22 / 22))


def _write(path: Path, results, command: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    payload = {
        "metadata": {"gpu": "NVIDIA H200", "command": command},
        "results": [r.to_dict() for r in results],
    }
    (path / "kernels.json").write_text(json.dumps(payload))
    return path


def test_cli_prints_and_writes_markdown_and_exits_on_bad_input(tmp_path):
    before, after = _runs()
    a, b = _write(tmp_path / "a", before, "bench a"), _write(tmp_path / "b", after, "bench b")
    md = tmp_path / "cmp.md"
    res = runner.invoke(
        app, ["bench", "compare", str(a), str(b), "--names", "nearest,tuned", "--markdown", str(md)]
    )
    assert res.exit_code == 0, res.output
    text = md.read_text()
    assert "- nearest: gpu NVIDIA H200; `bench a`" in text and "- tuned: gpu NVIDIA H200; `bench b`" in text
    assert f"| tiny | fp8_dynamic | tp1 | 8 | 33.0 | 30.0 | 33.0 / 33.0 | 0/2 → 2/2 | {33 / 30:.3f} |" in text
    m1 = f"| 1 | 28.0 | 31.0 | 30.0 / 33.0 | 1/2 → 1/2 | {28 / 31:.3f} | {(28 / 30) / (31 / 33):.3f} | {30 / 28:.3f} | {33 / 31:.3f} |"
    assert m1 in text
    assert "only in the before run" in res.output
    assert "## layers slower in tuned than in nearest by more than 2 %" in text
    assert (
        f"| tiny | fp8_dynamic | tp1 | 1 | down | 18.00 (helion) | 22.00 (vllm) | {18 / 22:.3f} | 0.900 |"
        in text
    )
    # three after processes: a summary row each, named after1..3; the step table is after1's
    c2 = _write(tmp_path / "c2", after, "bench c2")
    many = runner.invoke(app, ["bench", "compare", str(a), str(b), str(b), str(c2), "--markdown", str(md)])
    assert many.exit_code == 0, many.output
    text = md.read_text()
    assert "- after3: gpu NVIDIA H200; `bench c2`" in text and "vs before, over M" in text
    for run in ("after1", "after2", "after3"):
        assert f"| {run} | tiny | fp8_dynamic | tp1 | 2 |" in text
    assert "## decode step: the GEMMs of one decoder layer as dispatched, after1 vs before" in text
    same = runner.invoke(app, ["bench", "compare", str(b), str(b), "--markdown", str(md)])
    assert (
        same.exit_code == 0 and "No layer slower in after than in before by more than 2 %." in md.read_text()
    )
    missing = runner.invoke(app, ["bench", "compare", str(a), str(tmp_path / "none")])
    assert missing.exit_code == 1 and "AFTER:" in missing.output and "bench kernels" in missing.output
    assert runner.invoke(app, ["bench", "compare", str(a), str(b), "--names", "x"]).exit_code == 2
    other = _write(tmp_path / "c", _pair("qkv", 1, 1.0, 2.0, model="other"), "bench c")
    disjoint = runner.invoke(app, ["bench", "compare", str(a), str(other)])
    assert disjoint.exit_code == 1 and "share no" in disjoint.output


def _independent_steps(path: Path) -> dict[int, float]:
    """Per M, the step as dispatched, straight from the JSON (exact unmarked or a 2 % win: Helion)."""
    res = json.loads((path / "kernels.json").read_text())["results"]
    vllm = {(r["layer"], r["m"]): r["median_us"] for r in res if r["provider"] == "vllm"}
    steps: dict[int, float] = {}
    for r in res:
        if r["provider"] != "helion":
            continue
        v, h, cfg = vllm[(r["layer"], r["m"])], r["median_us"], r["config"]
        helion = ("marked fallback" not in cfg) if cfg.startswith("exact") else h * 1.02 <= v
        t = h if helion else v
        steps[r["m"]] = steps.get(r["m"], 0.0) + (t if r["ok"] else v)
    return steps


@pytest.mark.skipif(not TU.is_dir(), reason="committed 2026-12-04 TU results absent")
def test_committed_qwen25_7b_runs_recomputed(tmp_path):
    near, tuned = _independent_steps(TU / "kb-nearest"), _independent_steps(TU / "kb-tuned")
    md = tmp_path / "cmp.md"
    res = runner.invoke(
        app,
        [
            "bench",
            "compare",
            str(TU / "kb-nearest"),
            str(TU / "kb-tuned"),
            "--names",
            "nearest,tuned",
            "--markdown",
            str(md),
        ],
    )
    assert res.exit_code == 0, res.output
    step_part = md.read_text().split("\n## tuned vs nearest, over M")[0]
    lines = [ln for ln in step_part.splitlines() if "| fp8_dynamic | tp1 |" in ln]
    assert len(lines) == 7
    for ln in lines:
        cells = [x.strip() for x in ln.strip("|").split("|")]
        m = int(cells[3])
        assert cells[4] == f"{near[m]:.1f}" and cells[5] == f"{tuned[m]:.1f}"
        assert cells[8] == f"{near[m] / tuned[m]:.3f}"
