"""hltools.aux_sweep: the analysis of lab/scripts/sweep_aux_configs.py, on fake timings (no GPU)."""

import json
import math

import pytest

from hltools import aux_sweep


def rec(m, h, config, us, *, kernel="rms_norm", wrong=False, error=None):
    provider = "vllm" if config is None else "helion"
    return {
        "kernel": kernel,
        "num_tokens": m,
        "hidden": h,
        "provider": provider,
        "config": config,
        "median_us": us,
        "wrong": wrong,
        "error": error,
        "vs_vllm": 0.5 if wrong else 1e-3,
    }


def fake_pick(kernel, m, h):
    return "a"


# times per (num_tokens, hidden): config a is best for few tokens, b for many, c never
GRID = {
    (1, 1024): {"a": 2.0, "b": 3.0, "c": 4.0},
    (1, 4096): {"a": 3.0, "b": 3.3, "c": 5.0},
    (1024, 1024): {"a": 10.0, "b": 5.0, "c": 5.1},
    (1024, 4096): {"a": 40.0, "b": 20.0, "c": 30.0},
}


def grid_records(grid=GRID, vllm=6.0):
    out = []
    for (m, h), times in grid.items():
        out += [rec(m, h, name, us) for name, us in times.items()]
        out.append(rec(m, h, None, vllm))
    return out


def test_picked_over_best_and_counts():
    a = aux_sweep.analyze(grid_records(), pick=fake_pick)["rms_norm"]
    p = a["picked_vs_best"]
    assert p["compared"] == 4 and p["picked_is_best"] == 2
    assert p["max"] == pytest.approx(2.0) and p["max_at"] == {"num_tokens": 1024, "hidden": 1024}
    assert p["geomean"] == pytest.approx((1 * 1 * 2 * 2) ** 0.25)
    assert p["within_tolerance"] == 2
    assert a["best_counts"] == {"a": 2, "b": 2}
    case = next(c for c in a["cases"] if (c["num_tokens"], c["hidden"]) == (1024, 4096))
    assert case["best"] == "b" and case["picked"] == "a" and case["picked_over_best"] == pytest.approx(2.0)
    assert case["picked_vs_vllm"] == pytest.approx(6 / 40) and case["best_vs_vllm"] == pytest.approx(6 / 20)
    assert list(case["times_us"]) == ["b", "c", "a"]  # fastest first
    s = a["speedup_vs_vllm"]
    assert s["picked_geomean"] == pytest.approx(aux_sweep.geomean([3, 2, 0.6, 0.15]))
    assert s["picked_slower_than_vllm"] == 2
    json.dumps(a)  # the GPU script writes it as JSON


def test_derived_set_and_rule():
    a = aux_sweep.analyze(grid_records(), pick=fake_pick)["rms_norm"]
    d = a["derived_set"]
    assert d["configs"] == ["a", "b"] and d["reached"] and d["max_loss"] == pytest.approx(1.0)
    assert d["method"] == "exhaustive"
    size1 = d["by_size"][0]  # best single config: b (worst case 1.5 at (1, 1024))
    assert size1["configs"] == ["b"] and size1["max_loss"] == pytest.approx(1.5)
    assert [row["configs"] for row in d["by_size"]] == [["b"], ["a", "b"], ["a", "b", "c"]]
    assert a["rule"] == [
        {"num_tokens": [1, 1], "hidden": [1024, 4096], "config": "a"},
        {"num_tokens": [1024, 1024], "hidden": [1024, 4096], "config": "b"},
    ]


def test_tolerance_lets_a_single_config_cover():
    # b within 11 % of a where a is best: with a 15 % tolerance b alone is the set
    grid = {(1, 1024): {"a": 1.0, "b": 1.1}, (64, 1024): {"a": 2.0, "b": 1.0}}
    d = aux_sweep.analyze(grid_records(grid), pick=fake_pick, tolerance=0.15)["rms_norm"]["derived_set"]
    assert d["configs"] == ["b"] and d["max_loss"] == pytest.approx(1.1) and d["reached"]
    d = aux_sweep.analyze(grid_records(grid), pick=fake_pick, tolerance=0.05)["rms_norm"]["derived_set"]
    assert d["configs"] == ["a", "b"]


def test_greedy_matches_exhaustive_here():
    cases = {case: times for case, times in GRID.items()}
    greedy = aux_sweep.derive_set(cases, exhaustive_max=0)
    assert greedy["method"] == "greedy" and greedy["configs"] == ["b", "a"] and greedy["reached"]


def test_wrong_and_failed_configs_are_excluded():
    records = grid_records()
    for r in records:
        if r["config"] == "b" and r["num_tokens"] == 1024 and r["hidden"] == 1024:
            r["wrong"] = True
        if r["config"] == "b" and r["num_tokens"] == 1024 and r["hidden"] == 4096:
            r["error"] = "compile: boom"
            r["median_us"] = None
    records.append(rec(1, 1024, "d", None))  # not timed
    a = aux_sweep.analyze(records, pick=fake_pick)["rms_norm"]
    by_case = {(c["num_tokens"], c["hidden"]): c for c in a["cases"]}
    assert by_case[(1024, 1024)]["best"] == "c"
    assert by_case[(1024, 4096)]["best"] == "c"
    assert "b" not in by_case[(1024, 4096)]["times_us"]
    assert by_case[(1024, 1024)]["excluded"]["b"].startswith("wrong")
    assert by_case[(1024, 4096)]["excluded"]["b"] == "error: compile: boom"
    assert by_case[(1, 1024)]["excluded"]["d"] == "not timed"
    assert len(a["wrong_or_failed"]) == 3
    assert a["best_counts"] == {"a": 2, "c": 2}


def test_picked_wrong_is_reported_not_compared():
    records = grid_records()
    for r in records:
        if r["config"] == "a" and r["num_tokens"] == 1:
            r["wrong"] = True
    p = aux_sweep.analyze(records, pick=fake_pick)["rms_norm"]["picked_vs_best"]
    assert p["compared"] == 2
    assert [x[:2] for x in p["picked_wrong_or_missing"]] == [[1, 1024], [1, 4096]]


def test_mark_wrong():
    # quants: fraction of unequal bytes; a shared rounding difference is not "wrong"
    assert aux_sweep.mark_wrong("per_token_fp8_quant", {"a": 0.03, "b": 0.031, "c": 0.9}) == {"c"}
    assert aux_sweep.mark_wrong("per_token_fp8_quant", {"a": 0.001, "b": 0.05}) == {"b"}
    assert aux_sweep.mark_wrong("per_token_fp8_quant", {"a": 0.001, "b": 0.015}) == set()  # below the floor
    assert aux_sweep.mark_wrong("rms_norm", {"a": 0.004, "b": float("nan"), "c": None, "d": 0.6}) == {
        "b",
        "c",
        "d",
    }
    assert aux_sweep.mark_wrong("rms_norm", {"a": 0.004, "b": 0.3}) == {"b"}
    assert aux_sweep.mark_wrong("rms_norm", {}) == set()


def test_rule_table_gaps_and_merges():
    choice = {
        (1, 1024): "x",
        (1, 2048): "x",
        (1, 4096): "y",
        (4, 1024): "x",
        (4, 2048): "x",
        (4, 4096): "y",
        (16, 1024): "x",  # (16, 2048) missing: the x run must not span the gap
        (16, 4096): "x",
    }
    assert aux_sweep.rule_table(choice) == [
        {"num_tokens": [1, 4], "hidden": [1024, 2048], "config": "x"},
        {"num_tokens": [1, 4], "hidden": [4096, 4096], "config": "y"},
        {"num_tokens": [16, 16], "hidden": [1024, 1024], "config": "x"},
        {"num_tokens": [16, 16], "hidden": [4096, 4096], "config": "x"},
    ]


def test_subset_loss_uncovered():
    mx, gm, unc = aux_sweep.subset_loss({(1, 8): {"a": 1.0}, (2, 8): {"b": 1.0}}, ["a"])
    assert mx == math.inf and gm == pytest.approx(1.0) and unc == [(2, 8)]


def test_picked_name_follows_hlcore_rule():
    assert aux_sweep.picked_name("rms_norm", 16, 4096) == "row1_w4"
    assert aux_sweep.picked_name("rms_norm", 1024, 1024) == "row4_w4"
    assert aux_sweep.picked_name("per_token_group_fp8_quant", 8192, 8192) == "r16_w4"
    assert aux_sweep.picked_name("silu_and_mul", 1, 4096) == "r1_d1024_w4"


def test_analyze_with_real_pick_rule_and_summary():
    records = []
    for name, us in {"row1_w4": 2.0, "row1_w8": 1.5, "row4_w4": 3.0}.items():
        records.append(rec(16, 4096, name, us))
    records.append(rec(16, 4096, None, 3.0))
    a = aux_sweep.analyze(records)
    assert a["rms_norm"]["cases"][0]["picked_over_best"] == pytest.approx(2.0 / 1.5)
    lines = aux_sweep.summary_lines(a)
    assert lines[-1].startswith("rms_norm") and "1.333x" in lines[-1] and "row1_w8" in lines[-1]
    assert lines[-2].startswith("kernel")
    assert any("-> row1_w8" in line for line in lines)
