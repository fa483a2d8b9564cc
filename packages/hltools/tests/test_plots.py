"""hltools.plots: the PNGs are written (matplotlib's Agg backend) from fake results."""

import pytest

from hltools.kernel_results import BenchResult
from hltools.plots import PlotsUnavailable, plot_e2e, plot_kernel_speedups, provenance_line

META = {
    "gpu": "NVIDIA H200",
    "torch": "2.11",
    "triton": "3.6",
    "helion": "1.5",
    "vllm": "0.26",
    "commit": "0123456789abcdef",
}
PNG = b"\x89PNG\r\n\x1a\n"


def _results():
    out = []
    for model in ("a", "b"):
        for layer, n, k in (("qkv", 64, 128), ("o", 32, 128)):
            for m, ratio in ((1, 1.3), (8, 0.9), (32, 1.1)):
                out.append(
                    BenchResult(
                        model,
                        layer,
                        "fp8_dynamic",
                        "vllm",
                        "vllm cutlass_scaled_mm",
                        m,
                        n,
                        k,
                        median_us=10 * ratio,
                        **META,
                    )
                )
                out.append(
                    BenchResult(
                        model,
                        layer,
                        "fp8_dynamic",
                        "helion",
                        "helion scaled_mm",
                        m,
                        n,
                        k,
                        median_us=10,
                        **META,
                    )
                )
    out.append(
        BenchResult("a", "o", "w8a8_int8", "helion", "helion scaled_mm", 1, 32, 128, median_us=10, **META)
    )
    return out  # fmt: skip


def test_kernel_speedup_plot_per_format(tmp_path):
    paths = plot_kernel_speedups(_results(), tmp_path / "out")
    assert [p.name for p in paths] == ["kernels-fp8_dynamic.png"]  # int8 has no baseline: no plot
    assert paths[0].read_bytes().startswith(PNG) and paths[0].stat().st_size > 10_000
    assert plot_kernel_speedups([], tmp_path / "empty") == []


def test_e2e_plot(tmp_path):
    rows = [
        {"concurrency": c, "tokens_per_s_off": 100.0 * c, "tokens_per_s_on": 110.0 * c, "speedup": 1.1,
         "tpot_ms_off": 5.0, "tpot_ms_on": None}
        for c in (1, 2, 4, 32)
    ]  # fmt: skip
    path = plot_e2e(
        rows, tmp_path / "e2e.png", metadata={**META, "model": "qwen3-8b", "format": "fp8_dynamic"}
    )
    assert path.read_bytes().startswith(PNG)


def _drawn(monkeypatch, rows, path):
    """plot_e2e's figure: the labels and y values of each axis's lines (plt.close recorded)."""
    import matplotlib.pyplot as plt

    figs = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figs.append(fig), real_close(fig)))
    out = plot_e2e(rows, path, metadata={**META, "model": "qwen3-8b", "format": "fp8_dynamic"})
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 10_000
    (fig,) = figs
    return [  # labelled lines only (not the y = 1 reference line)
        {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines() if not ln.get_label().startswith("_")}
        for ax in fig.axes
    ]


def test_e2e_plot_draws_a_gemm_series_when_present(tmp_path, monkeypatch):
    rows = [
        {"concurrency": c, "tokens_per_s_off": 100.0 * c, "tokens_per_s_on": 110.0 * c, "speedup": 1.1,
         "tpot_ms_off": 5.0, "tpot_ms_on": 4.0, "tokens_per_s_gemm": 120.0 * c, "speedup_gemm": 1.2,
         "tpot_ms_gemm": 2.5}
        for c in (1, 2, 4, 32)
    ]  # fmt: skip
    left, right = _drawn(monkeypatch, rows, tmp_path / "gemm.png")
    assert left["hlvllm GEMM only (HL_AUX_KERNELS=none)"] == [120.0, 240.0, 480.0, 3840.0]
    assert left["vLLM (no plugin)"] == [100.0, 200.0, 400.0, 3200.0]
    assert right["tokens/s ratio (GEMM only / vLLM)"] == [1.2] * 4
    assert right["tokens/s ratio (hlvllm / vLLM)"] == [1.1] * 4
    assert right["per-token latency ratio (off / gemm)"] == [2.0] * 4
    # without gemm values: the off/on series alone
    for r in rows:
        r["tokens_per_s_gemm"] = r["speedup_gemm"] = r["tpot_ms_gemm"] = None
    left, right = _drawn(monkeypatch, rows, tmp_path / "plain.png")
    assert set(left) == {"vLLM (no plugin)", "hlvllm"}
    assert set(right) == {"tokens/s ratio", "per-token latency ratio (off / on)"}


def _setting_rows(**settings: tuple[float, float, float]) -> list[dict]:
    """Summary rows at concurrency 1, 2, 4, 32: off 100 tok/s per sequence, on 110 (1.1x, TPOT 5 / 4
    ms), and per extra setting ``name=(tok/s per sequence, speedup, TPOT ms)``."""
    rows = []
    for c in (1, 2, 4, 32):
        row = {"concurrency": c, "tokens_per_s_off": 100.0 * c, "tokens_per_s_on": 110.0 * c, "speedup": 1.1}
        row |= {"tpot_ms_off": 5.0, "tpot_ms_on": 4.0}
        for name, (per_seq, speedup, tpot) in settings.items():
            row |= {f"tokens_per_s_{name}": per_seq * c, f"speedup_{name}": speedup, f"tpot_ms_{name}": tpot}
        rows.append(row)
    return rows


def test_e2e_plot_draws_a_fused_series_when_present(tmp_path, monkeypatch):
    rows = _setting_rows(gemm=(120.0, 1.2, 2.5), fused=(130.0, 1.3, 4.0))
    left, right = _drawn(monkeypatch, rows, tmp_path / "fused.png")
    assert list(left) == [
        "vLLM (no plugin)",
        "hlvllm",
        "hlvllm GEMM only (HL_AUX_KERNELS=none)",
        "hlvllm fused aux (HL_AUX_FUSION=1)",
    ]
    assert left["hlvllm fused aux (HL_AUX_FUSION=1)"] == [130.0, 260.0, 520.0, 4160.0]
    assert right["tokens/s ratio (fused aux / vLLM)"] == [1.3] * 4
    assert right["per-token latency ratio (off / fused)"] == [1.25] * 4
    assert right["tokens/s ratio (GEMM only / vLLM)"] == [1.2] * 4
    assert right["tokens/s ratio (hlvllm / vLLM)"] == [1.1] * 4
    # fused without gemm: the fused series alone next to off/on
    for r in rows:
        r["tokens_per_s_gemm"] = r["speedup_gemm"] = r["tpot_ms_gemm"] = None
    left, right = _drawn(monkeypatch, rows, tmp_path / "fused-only.png")
    assert set(left) == {"vLLM (no plugin)", "hlvllm", "hlvllm fused aux (HL_AUX_FUSION=1)"}
    assert set(right) == {
        "tokens/s ratio (hlvllm / vLLM)",
        "per-token latency ratio (off / on)",
        "tokens/s ratio (fused aux / vLLM)",
        "per-token latency ratio (off / fused)",
    }
    # neither: off/on alone, as before
    for r in rows:
        del r["tokens_per_s_fused"], r["speedup_fused"], r["tpot_ms_fused"]
    left, right = _drawn(monkeypatch, rows, tmp_path / "plain.png")
    assert set(left) == {"vLLM (no plugin)", "hlvllm"}
    assert set(right) == {"tokens/s ratio", "per-token latency ratio (off / on)"}


def test_e2e_plot_draws_the_aux_series_between_gemm_and_fused(tmp_path, monkeypatch):
    rows = _setting_rows(gemm=(120.0, 1.2, 2.5), aux=(105.0, 1.05, 5.0), fused=(130.0, 1.3, 4.0))
    left, right = _drawn(monkeypatch, rows, tmp_path / "aux.png")
    assert list(left) == [
        "vLLM (no plugin)",
        "hlvllm",
        "hlvllm GEMM only (HL_AUX_KERNELS=none)",
        "hlvllm GEMM+aux (HL_AUX_KERNELS=all)",
        "hlvllm fused aux (HL_AUX_FUSION=1)",
    ]
    assert left["hlvllm GEMM+aux (HL_AUX_KERNELS=all)"] == [105.0, 210.0, 420.0, 3360.0]
    assert right["tokens/s ratio (GEMM+aux / vLLM)"] == [1.05] * 4
    assert right["per-token latency ratio (off / aux)"] == [1.0] * 4


def test_provenance_line():
    assert provenance_line({**META, "date": "2026-11-30T12:00:00+00:00"}) == (
        "NVIDIA H200 · torch 2.11 · triton 3.6 · helion 1.5 · vllm 0.26 · commit 0123456789 · 2026-11-30"
    )
    assert provenance_line({}) == ""


def test_missing_matplotlib_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(PlotsUnavailable, match="hltools bench report"):
        plot_kernel_speedups(_results(), "unused")


def test_e2e_plot_of_one_setting_alone_draws_its_tokens_per_s_only(tmp_path, monkeypatch):
    # a `--plugins on` (or `off`) run alone has no ratios: the ratio panel's log axis had no data
    # and savefig raised "Data cannot be log-scaled" (H200, 2026-12-01, phases B1/B2)
    for setting in ("on", "off"):
        rows = [
            {"concurrency": c, f"tokens_per_s_{setting}": 200.0 * c, f"tpot_ms_{setting}": 4.0, "speedup": None}
            for c in (1, 8, 32)
        ]  # fmt: skip
        (left,) = _drawn(monkeypatch, rows, tmp_path / f"{setting}.png")
        label = "hlvllm" if setting == "on" else "vLLM (no plugin)"
        assert left[label] == [200.0, 1600.0, 6400.0]
