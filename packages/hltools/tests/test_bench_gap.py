"""``hltools bench gap`` (:mod:`hltools.bench_gap`) on the CPU: verdicts, needed µs, geomeans, the
linear fit on exact synthetic data, reading ``.json.gz``, and the command on the committed night run."""

import gzip
import json
import math
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hltools import bench_gap as g
from hltools.cli import app
from hltools.kernel_results import BenchResult, read_results

REPO = Path(__file__).resolve().parents[3]
NIGHT_TP2 = REPO / "lab" / "results" / "2026-11-30-night" / "kernels-tp2" / "kernels.json"
runner = CliRunner()

# fp8_dynamic, M=1, N=K=4096: A 4096 + B 16777216 + fp32 scales 4*(1+4096) + bf16 out 2*4096 bytes
BYTES_4096 = 4096 + 4096 * 4096 + 4 * (1 + 4096) + 2 * 4096
COPY_GBS = BYTES_4096 / (10.0 * 1e3)  # so that the floor of that shape is exactly 10 µs


def _rows(fmt, layer, n, k, m, t_helion, t_vllm, model="tiny", config="exact", vllm_kernel=None):
    kernel = vllm_kernel or (
        "vllm block deep_gemm fp8_gemm_nt" if fmt == "block_fp8" else "vllm cutlass_scaled_mm"
    )
    return [
        BenchResult(model, layer, fmt, "helion", "helion scaled_mm", m, n, k, median_us=t_helion, config=config, ok=True),
        BenchResult(model, layer, fmt, "vllm", kernel, m, n, k, median_us=t_vllm, ok=True),
    ]  # fmt: skip


def _three_points():
    """Same bytes (floor 10 µs), need 16 / 16 / 8 µs: met, needs 2 µs (6 above the floor), beyond."""
    return [
        *_rows("fp8_dynamic", "qkv", 4096, 4096, 1, 15.0, 20.0),
        *_rows("fp8_dynamic", "o", 4096, 4096, 1, 18.0, 20.0),
        *_rows("fp8_dynamic", "down", 4096, 4096, 1, 12.0, 10.0),
        BenchResult("tiny", "qkv", "fp8_dynamic", "torch", "torch._scaled_mm", 1, 4096, 4096, median_us=30.0),
    ]


def _write(path: Path, results, copy_gbs=COPY_GBS, gz=False):
    payload = {
        "metadata": {
            "gpu": "NVIDIA H200",
            "copy_bandwidth_gbs": copy_gbs,
            "command": "hltools bench kernels",
        },
        "results": [r.to_dict() for r in results],
    }
    text = json.dumps(payload).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def test_verdicts_needed_us_and_floor():
    rows, skipped = g.gap_rows(_three_points(), COPY_GBS, 1.25, "f")
    assert skipped == 0 and len(rows) == 3  # the torch row is not a partner
    met, needs, beyond = rows
    for r in rows:
        assert r.bytes == BYTES_4096 and r.t_floor == pytest.approx(10.0)
    assert (met.verdict, met.t_need, met.gap_us, met.verdict_text) == ("met", 16.0, 0.0, "met")
    assert needs.verdict == "needs" and needs.t_need == pytest.approx(16.0)
    assert needs.gap_us == pytest.approx(2.0) and needs.budget_us == pytest.approx(6.0)
    assert needs.verdict_text == "needs 2.00 µs less fixed cost (6.00 µs above the floor)"
    assert beyond.verdict == "beyond" and beyond.t_need == pytest.approx(8.0)
    assert beyond.floor_speedup == pytest.approx(1.0)
    assert beyond.verdict_text == "beyond copy bandwidth (floor allows 1.000×)"
    assert needs.pct_copy_bw(needs.t_helion) == pytest.approx(100 * 10 / 18)
    # target 1.0: the first two are met, the third needs 2 µs with nothing left above the floor
    rows, _ = g.gap_rows(_three_points(), COPY_GBS, 1.0)
    assert [r.verdict for r in rows] == ["met", "met", "needs"]
    assert rows[2].gap_us == pytest.approx(2.0) and rows[2].budget_us == pytest.approx(0.0, abs=1e-9)


def test_block_bytes_come_from_gemm_bytes():
    rows, _ = g.gap_rows(_rows("block_fp8", "qkv", 256, 384, 2, 5.0, 6.0), 1000.0)
    # A 2*384 + B 256*384 + fp32 scales 4*(2*3 + 2*3) (128x128 blocks) + bf16 out 2*2*256
    assert rows[0].bytes == 768 + 98304 + 48 + 1024
    assert rows[0].t_floor == pytest.approx(rows[0].bytes / 1e6)


def test_summary_geomeans_counts_and_big_weights():
    results = _three_points() + _rows("fp8_dynamic", "gate_up", 1024, 1024, 1, 5.0, 5.5)
    results += _rows("w8a8_int8", "qkv", 4096, 4096, 1, 10.0, 20.0)
    results += [
        BenchResult("tiny", "lm", "fp8_dynamic", "helion", "helion scaled_mm", 1, 64, 64, median_us=None)
    ]
    rows, skipped = g.gap_rows(results, COPY_GBS, 1.25, "f")
    assert skipped == 1
    fp8, int8 = g.summarize(rows)
    assert (fp8.file, fp8.format, fp8.points, int8.points) == ("f", "fp8_dynamic", 4, 1)
    speedups = [20 / 15, 20 / 18, 10 / 12, 5.5 / 5.0]
    assert fp8.geomean == pytest.approx(math.prod(speedups) ** 0.25)
    assert fp8.dispatched == pytest.approx(math.prod(max(s, 1.0) for s in speedups) ** 0.25)
    floor_small = (1 * 1024 + 1024 * 1024 + 4 * 1025 + 2 * 1024) / (COPY_GBS * 1e3)
    assert fp8.floor_best == pytest.approx((2.0 * 2.0 * 1.0 * 5.5 / floor_small) ** 0.25)
    assert fp8.slower == 1
    assert fp8.big_points == 3  # 4096 x 4096 = 16 MiB counts, 1024 x 1024 does not
    assert fp8.helion_big_pct == pytest.approx(100 * 10 / 15)  # median of 10/15, 10/18, 10/12
    assert fp8.vllm_big_pct == pytest.approx(100 * 10 / 20)
    small = next(r for r in rows if r.layer == "gate_up")
    assert small.verdict == "needs"
    assert fp8.counts == {"met": 1, "needs": 2, "beyond": 1}
    assert fp8.median_gap_us == pytest.approx(statistics.median([2.0, small.gap_us]))
    assert fp8.max_gap_us == pytest.approx(max(2.0, small.gap_us))
    assert fp8.min_budget_us == pytest.approx(min(6.0, small.budget_us))
    assert int8.counts == {"met": 1, "needs": 0, "beyond": 0} and int8.geomean == pytest.approx(2.0)
    assert int8.median_gap_us is None and int8.min_budget_us is None
    table = g.summary_table([fp8, int8])
    assert table[0]["met / needs / beyond"] == "1 / 2 / 1" and table[1]["geomean"] == "2.000×"


def test_fit_recovers_bandwidth_and_fixed_cost():
    pts = [(b, b / (4250.0 * 1e3) + 4.0) for b in (1e6, 5e6, 2e7, 5e7, 1.2e8)]
    fit = g.fit_linear(pts)
    assert fit.n == 5 and fit.bw_gbs == pytest.approx(4250.0) and fit.c_us == pytest.approx(4.0)
    assert fit.rms_us == pytest.approx(0.0, abs=1e-9) and fit.predict(4.25e7) == pytest.approx(14.0)
    assert g.fit_linear([(1e6, 5.0), (1e6, 6.0)]) is None  # one byte count: no slope
    assert g.fit_linear([(1e6, 6.0), (2e6, 5.0)]) is None  # negative slope


def test_fit_by_format_on_rows():
    results = []
    for i, (n, k) in enumerate([(1024, 1024), (4096, 4096), (12288, 4096), (4096, 12288)]):
        for m in (1, 8, 32):
            b = g.gemm_bytes("fp8_dynamic", m, n, k)
            h, v = b / 4.0e6 + 3.0, b / 3.5e6 + 4.5  # Helion 4.0 TB/s + 3 µs, vLLM 3.5 TB/s + 4.5 µs
            results += _rows("fp8_dynamic", f"l{i}", n, k, m, h, v)
    rows, _ = g.gap_rows(results, 4250.0)
    (fit,) = g.fit_by_format(rows)
    assert fit.format == "fp8_dynamic" and fit.helion.n == 12
    assert fit.helion.bw_gbs == pytest.approx(4000.0) and fit.helion.c_us == pytest.approx(3.0)
    assert fit.vllm.bw_gbs == pytest.approx(3500.0) and fit.vllm.c_us == pytest.approx(4.5)
    reach = [r for r in rows if r.verdict != "beyond"]
    c_need = [r.t_need - r.bytes / 4.0e6 for r in reach]
    assert fit.reachable == len(reach)
    assert fit.c_need_all_us == pytest.approx(min(c_need))
    assert fit.c_need_median_us == pytest.approx(statistics.median(c_need))
    assert fit.c_floor_all_us == pytest.approx(min(r.t_need - r.t_floor for r in reach))
    assert fit.c_floor_median_us == pytest.approx(statistics.median(r.budget_us for r in reach))
    rows2, _ = g.gap_rows(results + _rows("w8a8_int8", "x", 4096, 4096, 1, 9.0, 10.0), 4250.0)
    assert [f.format for f in g.fit_by_format(rows2)] == ["fp8_dynamic", "w8a8_int8", "all"]


def test_load_reads_gz_next_to_a_missing_json(tmp_path):
    _write(tmp_path / "night" / "kernels-x" / "kernels.json.gz", _three_points(), gz=True)
    meta, results = read_results(tmp_path / "night" / "kernels-x" / "kernels.json")
    assert meta["copy_bandwidth_gbs"] == pytest.approx(COPY_GBS) and len(results) == 7
    assert read_results(tmp_path / "night" / "kernels-x")[1] == results
    assert g.file_label(tmp_path / "night" / "kernels-x" / "kernels.json") == "night/kernels-x"
    with pytest.raises(FileNotFoundError):
        read_results(tmp_path / "nothing.json")


def test_copy_bandwidth_from_rows_without_metadata():
    r = BenchResult("m", "qkv", "fp8_dynamic", "helion", "k", 1, 8, 8, gbps=2100.0, roofline_pct=50.0)
    assert g.copy_bandwidth_gbs({}, [r]) == pytest.approx(4200.0)
    assert g.copy_bandwidth_gbs({"copy_bandwidth_gbs": 4000}, [r]) == 4000.0
    assert g.copy_bandwidth_gbs({}, []) is None


def test_cli_on_synthetic_files_writes_markdown(tmp_path):
    a = _write(tmp_path / "a" / "kernels.json", _three_points())
    md = tmp_path / "gap.md"
    result = runner.invoke(app, ["bench", "gap", str(a), "--markdown", str(md), "--points"])
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert "met / needs / beyond" in text and "/a: fp8_dynamic" in text
    assert "1 / 1 / 1" in text and "needs 2.00 µs less fixed cost (6.00 µs above the floor)" in text
    assert "beyond copy bandwidth (floor allows 1.000×)" in text
    assert "needs 2.00 µs" in " ".join(result.output.split())
    b = _write(tmp_path / "b" / "kernels.json", _rows("fp8_dynamic", "qkv", 4096, 4096, 1, 10.0, 20.0))
    both = runner.invoke(app, ["bench", "gap", str(a), str(b), "--markdown", str(md)])
    assert both.exit_code == 0, both.output
    pooled = [ln for ln in md.read_text().splitlines() if ln.startswith("| all | fp8_dynamic |")]
    assert len(pooled) == 1 and "| 4 |" in pooled[0] and "| 2 / 1 / 1 |" in pooled[0]
    bad = runner.invoke(app, ["bench", "gap", str(tmp_path / "missing.json")])
    assert bad.exit_code == 1


def _independent_night_numbers():
    """Per format, straight from the committed JSON: geomean, as dispatched, median Helion % of copy
    bandwidth on weights >= 16 MiB."""
    payload = json.loads(gzip.decompress(NIGHT_TP2.with_name("kernels.json.gz").read_bytes()))
    res = payload["results"]
    out = {}
    for fmt in ("fp8_dynamic", "w8a8_int8", "block_fp8"):
        vllm = {
            (r["layer"], r["m"]): r["median_us"]
            for r in res
            if r["format"] == fmt and r["provider"] == "vllm"
        }
        hel = [r for r in res if r["format"] == fmt and r["provider"] == "helion"]
        s = [vllm[(r["layer"], r["m"])] / r["median_us"] for r in hel]
        big = [r["roofline_pct"] for r in hel if r["n"] * r["k"] >= 16 * 2**20]
        out[fmt] = (
            math.exp(sum(map(math.log, s)) / len(s)),
            math.exp(sum(math.log(max(x, 1.0)) for x in s) / len(s)),
            statistics.median(big),
            sum(x < 1 for x in s),
        )
    return out


def test_cli_on_the_committed_night_tp2_run(tmp_path):
    md = tmp_path / "gap.md"
    result = runner.invoke(app, ["bench", "gap", str(NIGHT_TP2), "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "2026-11-30-night/kernels-tp2" in md.read_text()
    assert "4212" in out  # the run's copy bandwidth
    expected = _independent_night_numbers()
    assert round(expected["fp8_dynamic"][0], 3) == 1.011 and round(expected["block_fp8"][0], 3) == 0.984
    summaries = {
        s.format: s for s in g.summarize(g.gap_rows(read_results(NIGHT_TP2)[1], 4212.27518521926)[0])
    }
    for fmt, (gm, disp, big_pct, slower) in expected.items():
        assert f"{gm:.3f}×" in out and f"{disp:.3f}×" in out
        s = summaries[fmt]
        assert s.geomean == pytest.approx(gm) and s.dispatched == pytest.approx(disp)
        assert s.helion_big_pct == pytest.approx(big_pct) and s.slower == slower
        assert s.points == 28 and sum(s.counts.values()) == 28
    assert "BW_eff" in out and "fp8_dynamic" in out and "block_fp8" in out


def _floor_file(path: Path, floor: dict) -> Path:
    read = [{"n": n, "k": k, "best_us": t, "best_cfg": "16x256x4x8x3"} for (n, k), t in floor.items()]
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "copy_bandwidth_gbs": 4200.0, "read": read}))
    return path


def test_read_floor_summary_counts_beyond_and_ratios(tmp_path):
    """Three points at N = K = 4096 with a read floor of 12.5 µs (need 16 / 16 / 8 µs) and one at a
    shape the floor file does not have."""
    pts = _three_points() + _rows("fp8_dynamic", "gate_up", 8192, 4096, 1, 30.0, 33.0)
    rows, _ = g.gap_rows(pts, COPY_GBS, 1.25)
    meta, floor = g.load_read_floor(_floor_file(tmp_path / "stream_floor.json", {(4096, 4096): 12.5}))
    assert meta["gpu"] == "NVIDIA H200" and floor == {(4096, 4096): 12.5}
    (s,) = g.read_floor_summary(rows, floor, 1.25)
    assert (s.format, s.points, s.missing) == ("fp8_dynamic", 3, 1)
    assert s.beyond_read == 1  # need 8 < 12.5; need 16 >= 12.5 twice
    assert s.read_best == pytest.approx((20 / 12.5 * 20 / 12.5 * 10 / 12.5) ** (1 / 3))
    assert s.helion_ratio == pytest.approx((15 / 12.5 * 18 / 12.5 * 12 / 12.5) ** (1 / 3))
    assert s.helion_ratio_needed == pytest.approx(s.read_best / 1.25)
    assert s.median_helion_over_read_us == pytest.approx(2.5)  # 2.5, 5.5, -0.5
    row = g.read_floor_table([s])[0]
    assert row["beyond a weight read"] == "1" and row["points (no floor)"] == "3 (1)"


def test_load_read_floor_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a stream_floor.json"):
        g.load_read_floor(bad)
    bad.write_text(json.dumps({"read": [{"n": 1, "k": 1, "best_us": 0.0}]}))
    with pytest.raises(ValueError, match="no positive read times"):
        g.load_read_floor(bad)
    with pytest.raises(FileNotFoundError):
        g.load_read_floor(tmp_path / "missing.json")


def test_cli_read_floor_option(tmp_path):
    a = _write(tmp_path / "a" / "kernels.json", _three_points())
    fl = _floor_file(tmp_path / "stream_floor.json", {(4096, 4096): 12.5})
    md = tmp_path / "gap.md"
    result = runner.invoke(app, ["bench", "gap", str(a), "--read-floor", str(fl), "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    text = md.read_text()
    assert "## Against a kernel that only reads the weight" in text
    assert "`stream_floor.json` (NVIDIA H200, 1 shapes)" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| fp8_dynamic | 3 (0) |"))
    assert "| 1 |" in line
    bad = runner.invoke(app, ["bench", "gap", str(a), "--read-floor", str(tmp_path / "nope.json")])
    assert bad.exit_code == 1 and "nope.json" in bad.output
