"""lab/scripts/k6_compare.py reads the K6 and bench logs' rich tables back (on written-out logs)."""

from __future__ import annotations

import pytest


def _row(*cells) -> str:
    return "│ " + " │ ".join(str(c) for c in cells) + " │"


def _autotune_log(ratios: dict[int, tuple[float, float]]) -> str:
    lines = [
        "tuned fp8_dynamic N=6144 K=2560 M=1 in 0 s",
        "│ fp8_dynamic │ 6144 │ 2560 │ 1 │ tuned │ 8.2 │",
        "decode step",
    ]
    for m, (heur, untuned) in ratios.items():  # format TP M tuned heuristic vLLM vs-heur vs-untuned ...
        lines.append(_row("fp8_dynamic", "tp1", m, 46.4, 47.8, 51.1, heur, untuned, 1.1, 1.0))
    return "\n".join([*lines, "└───┘", "28 tuned"])


def test_k6_means_both_ratios_over_m_of_the_step_tables_only(lab_script, tmp_path):
    k6 = lab_script("k6_compare")
    folder = tmp_path / "K6-fp8_dynamic-qwen3-4b"
    folder.mkdir()
    (folder / "grid-qwen3-4b.log").write_text(_autotune_log({1: (1.03, 1.002), 8: (1.05, 1.014)}))
    (folder / "ctl-qwen3-4b.log").write_text(_autotune_log({1: (1.02, 1.0), 8: (1.04, 1.004)}))
    row = k6.k6(folder).splitlines()[-1].split()
    # the per-key row above "decode step" is not read; means of (1.03, 1.05), (1.02, 1.04), ...
    assert row[:3] == ["qwen3-4b", "fp8_dynamic", "2"]
    assert [float(x) for x in row[3:]] == pytest.approx([1.04, 1.03, 1.008, 1.002])
    (folder / "ctl-qwen3-4b.log").write_text(_autotune_log({1: (1.02, 1.0)}))
    with pytest.raises(AssertionError, match="other M"):
        k6.k6(folder)


def test_kb_sums_helion_and_vllm_per_process(lab_script, tmp_path):
    k6 = lab_script("k6_compare")
    for side, run, helion in (("grid", 1, 10.0), ("grid", 2, 12.0), ("ctl", 1, 11.0)):
        rows = [
            _row("qwen3-4b", "qkv", 6144, 2560, m, helion, 2 * helion, "cutlass", "-", 2.0) for m in (1, 8)
        ]
        (tmp_path / f"kb-{side}-{run}.log").write_text("\n".join(["GPU x", *rows, "geomean 2.0"]))
    text = k6.kb(tmp_path)
    assert "grid: Helion 22.0 µs (20.0-24.0), vLLM / Helion 2.0000 (2.0000-2.0000)" in text
    assert "ctl: Helion 22.0 µs (22.0-22.0)" in text
