"""hltools.kernel_results on the CPU: the result schema and its files, speedups and geomeans (the
rows ``hltools bench kernels`` writes and ``bench report`` / ``bench gap`` / ``configs from-bench``
read)."""

import csv
import json
import math

import pytest

from hltools import kernel_results
from hltools.kernel_results import BenchResult
from hltools.results import geomean

META = {"gpu": "cpu", "torch": "t", "triton": "tr", "helion": "h", "vllm": "v", "commit": "abc", "date": "d"}


def _results():
    out = []
    for fmt, ratios in (("fp8_dynamic", (2.0, 0.5, 1.0)), ("block_fp8", (1.5,))):
        for m, ratio in zip((1, 2, 4), ratios, strict=False):
            v = BenchResult(
                "tiny", "o", fmt, "vllm", "vllm k", m, 64, 128, median_us=10.0 * ratio, ok=True, **META
            )
            h = BenchResult(
                "tiny", "o", fmt, "helion", "helion scaled_mm", m, 64, 128, median_us=10.0, ok=True, **META
            )
            h.speedup_vs_vllm = ratio
            out += [h, v]
    out.append(
        BenchResult(
            "tiny", "o", "fp8_dynamic", "torch", "torch._scaled_mm", 1, 64, 128, median_us=40.0, **META
        )
    )
    out[0].note = "a, b"  # commas and quotes survive CSV
    out[1].p20_us = math.nan
    return out


def test_geomean_and_speedups():
    results = _results()
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([]) is None and geomean([0.0, -1.0, math.inf]) is None
    assert kernel_results.geomean_by_format(results) == pytest.approx({"fp8_dynamic": 1.0, "block_fp8": 1.5})
    assert kernel_results.geomean_by_format(results, "torch") == pytest.approx({"fp8_dynamic": 4.0})
    s = kernel_results.speedups(results)
    assert [(x.format, x.m, x.value) for x in s] == [
        ("fp8_dynamic", 1, 2.0),
        ("fp8_dynamic", 2, 0.5),
        ("fp8_dynamic", 4, 1.0),
        ("block_fp8", 1, 1.5),
    ]
    assert {x.baseline for x in s} == {"vllm k"}


def test_schema_round_trip_and_files(tmp_path):
    results = _results()
    for r in results:
        assert BenchResult.from_dict(r.to_dict()) == r or math.isnan(r.p20_us or 0)
    meta = {**META, "command": "hltools bench kernels", "copy_bandwidth_gbs": 4000.0}
    paths = kernel_results.write_results(tmp_path / "out", results, meta)
    assert {p.name for p in paths.values()} == {"kernels.json", "kernels.csv", "kernels.md"}
    payload = json.loads(paths["json"].read_text())
    assert (
        paths["json"].read_text().endswith("}\n")
        and payload["metadata"]["command"] == "hltools bench kernels"
    )
    assert payload["geomean_speedup"]["vllm"] == pytest.approx({"fp8_dynamic": 1.0, "block_fp8": 1.5})
    assert payload["results"][1]["p20_us"] is None  # NaN is written as null
    meta_back, back = kernel_results.read_results(tmp_path / "out")
    assert meta_back == meta
    results[1].p20_us = None
    assert back == results
    with paths["csv"].open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == kernel_results.FIELDS and rows[0]["note"] == "a, b" and rows[0]["ok"] == "True"
    assert kernel_results.read_results(paths["csv"]) == ({}, results)
    md = paths["md"].read_text()
    assert "| fp8_dynamic | 1.000× | 4.000× | 3 |" in md and "| block_fp8 | 1.500× | - | 1 |" in md
    assert "4000 GB/s" in md and "## Notes" in md
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a kernel benchmark result"):
        kernel_results.read_results(bad)


def test_from_dict_ignores_unknown_keys_and_reads_csv_strings():
    r = BenchResult.from_dict(
        {"model": "m", "layer": "o", "format": "fp8_dynamic", "provider": "helion", "kernel": "k", "m": "2",
         "n": "64", "k": "128", "median_us": "", "gbps": "1.5", "ok": "False", "future_field": 1}
    )  # fmt: skip
    assert (r.m, r.n, r.median_us, r.gbps, r.ok) == (2, 64, None, 1.5, False)


@pytest.mark.parametrize(
    ("model", "label"),
    [
        ("/tmp/gpu-runs/TU/qwen2.5-7b/config.json", "qwen2.5-7b"),
        ("./models/mistral-7b", "mistral-7b"),
        ("~/ckpt/llama/", "llama"),
        ("qwen3-8b", "qwen3-8b"),
        ("RedHatAI/Qwen3-8B-FP8-dynamic", "RedHatAI/Qwen3-8B-FP8-dynamic"),
    ],
)
def test_model_label_shows_a_config_path_as_its_folder(model, label):
    assert kernel_results.model_label(model) == label
