"""``hltools bench`` on the CPU: exit 2 with a clear message without a GPU, ``--list`` and
``--dry-run`` (no GPU needed), argument errors, ``report`` from saved results."""

import pytest
from typer.testing import CliRunner

from hltools import kernel_results, options
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


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(options, "cuda_available", lambda: False)


def _flat(output: str) -> str:
    return " ".join(output.split())


def test_kernels_without_gpu_exits_2(no_gpu, tmp_path):
    result = runner.invoke(app, ["bench", "kernels", "--model", "qwen3-8b", "--output", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "hltools bench kernels needs a CUDA GPU" in _flat(result.output) and "--list" in result.output
    assert not any(tmp_path.iterdir())


def test_e2e_without_gpu_exits_2(no_gpu, tmp_path):
    result = runner.invoke(
        app, ["bench", "e2e", "--model", "qwen3-8b", "--layers", "2", "--output", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "hltools bench e2e needs a CUDA GPU" in _flat(result.output) and "--dry-run" in result.output


def test_kernels_list_needs_no_gpu(no_gpu, dispatch_at):
    dispatch_at(None)
    result = runner.invoke(
        app, ["bench", "kernels", "--model", "qwen3-8b,Qwen/Qwen3-1.7B", "--formats", "block_fp8", "--list"]
    )
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "8 shapes, 56 points" in out
    assert "vllm block deep_gemm fp8_gemm_nt > vllm block cutlass_scaled_mm" in out
    assert "24576" in out and "12288" in out and "torch._scaled_mm" not in out
    # --block-scale-a auto (the default): the layout of the default dispatch mode, capture (tma)
    assert "helion scaled_mm (block scale_a tma)" in out
    per_token = runner.invoke(
        app, ["bench", "kernels", "--model", "qwen3-8b", "--formats", "w8a8_int8", "--list"]
    )
    assert per_token.exit_code == 0 and "block scale_a" not in per_token.output  # no block scales there


def test_kernels_block_scale_a_row_with_the_op_design(no_gpu, dispatch_at):
    dispatch_at("op")
    result = runner.invoke(
        app, ["bench", "kernels", "--model", "qwen3-8b", "--formats", "block_fp8", "--list"]
    )
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "helion scaled_mm" in out and "block scale_a tma" not in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--formats", "fp4"], "unknown format"),
        (["--model", "no-such-model"], "unknown model"),
        (["--num-tokens", "0,1"], "positive integers"),
        (["--block-providers", "flashinfer"], "unknown block provider"),
        (["--tp", "3"], "does not divide"),
        (["--block-scale-a", "column"], "block scale_a layout must be auto or one of ['row', 'tma']"),
    ],
)
def test_kernels_argument_errors(no_gpu, args, message):
    result = runner.invoke(app, ["bench", "kernels", *args])
    assert result.exit_code == 2 and message in _flat(result.output), result.output


def test_e2e_dry_run_prints_the_engine_runs(no_gpu, tmp_path):
    result = runner.invoke(
        app,
        ["bench", "e2e", "--model", "qwen3-1.7b", "--format", "w8a8_int8", "--layers", "4",
         "--concurrency", "1,4", "--output", str(tmp_path), "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "hltools.e2e worker" in ln]
    assert len(lines) == 5  # default off,on,control: the untimed control in round 1 only
    assert (
        "VLLM_PLUGINS='' " in lines[0] and "--plugin off" in lines[0] and "HL_LINEAR_BACKEND" not in lines[0]
    )
    assert "HL_LINEAR_BACKEND=helion" in lines[1] and "--plugin on" in lines[1]
    assert "--plugin control" in lines[2] and "VLLM_PLUGINS='' " in lines[2]
    assert "VLLM_DISABLED_KERNELS=CutlassFP8ScaledMMLinearKernel,CutlassInt8ScaledMMLinearKernel," in lines[2]
    assert not any("VLLM_DISABLED_KERNELS" in ln for ln in lines[:2] + lines[3:])
    assert all("--concurrency 1,4" in ln and "cache-" in ln for ln in lines)
    assert "off-r1 (warm caches)" in result.output and "4 layers, w8a8_int8" in result.output
    assert not any(tmp_path.iterdir())  # nothing written


def test_e2e_dry_run_with_gemm_setting(no_gpu, tmp_path, monkeypatch):
    """`--plugins off,on,gemm`: three engine runs per round, gemm with HL_AUX_KERNELS=none."""
    monkeypatch.delenv("HL_AUX_KERNELS", raising=False)
    monkeypatch.delenv("HL_LINEAR_BACKEND", raising=False)
    result = runner.invoke(
        app,
        ["bench", "e2e", "--model", "qwen3-1.7b", "--layers", "2", "--concurrency", "1,4",
         "--plugins", "off,on,gemm", "--output", str(tmp_path), "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "hltools.e2e worker" in ln]
    assert len(lines) == 6 and "6 engine runs" in _flat(result.output)
    plugins = [ln.split("--plugin ")[1].split()[0] for ln in lines]
    assert plugins == ["off", "on", "gemm", "gemm", "on", "off"]  # round 2 in reverse
    for off, on, gemm in (lines[:3], lines[3:][::-1]):
        assert "VLLM_PLUGINS='' " in off and "HL_LINEAR_BACKEND" not in off and "HL_AUX_KERNELS" not in off
        assert "HL_LINEAR_BACKEND=helion" in on and "HL_AUX_KERNELS" not in on and "cache-on/" in on
        assert "HL_LINEAR_BACKEND=helion" in gemm and "HL_AUX_KERNELS=none" in gemm
        assert "VLLM_PLUGINS" not in gemm and "cache-gemm/" in gemm
    out = result.output
    assert out.index("# gemm-r0 (cold caches)") < out.index("# gemm-r1 (warm caches)") < out.index("# off-r1")
    assert not any(tmp_path.iterdir())
    bad = runner.invoke(
        app, ["bench", "e2e", "--plugins", "off,maybe", "--dry-run", "--output", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "plugins must be among" in _flat(bad.output)


def test_e2e_dry_run_with_five_settings(no_gpu, tmp_path, monkeypatch):
    """`--plugins off,on,gemm,aux,fused`: five engine runs per round; on (the plugin's defaults) sets
    no HL_AUX_KERNELS, gemm none, aux all; only fused has HL_AUX_FUSION=1, each setting its own
    compile caches."""
    for var in ("HL_AUX_KERNELS", "HL_LINEAR_BACKEND", "HL_AUX_FUSION"):
        monkeypatch.delenv(var, raising=False)
    result = runner.invoke(
        app,
        ["bench", "e2e", "--model", "qwen3-1.7b", "--layers", "2", "--concurrency", "1,4",
         "--plugins", "off,on,gemm,aux,fused", "--output", str(tmp_path), "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "hltools.e2e worker" in ln]
    assert len(lines) == 10 and "10 engine runs" in _flat(result.output)
    plugins = [ln.split("--plugin ")[1].split()[0] for ln in lines]
    assert plugins == ["off", "on", "gemm", "aux", "fused", "fused", "aux", "gemm", "on", "off"]
    for off, on, gemm, aux, fused in (lines[:5], lines[5:][::-1]):
        assert "VLLM_PLUGINS='' " in off and "HL_LINEAR_BACKEND" not in off
        assert "HL_LINEAR_BACKEND=helion" in on and "HL_AUX_KERNELS" not in on and "cache-on/" in on
        assert "HL_AUX_KERNELS=none" in gemm and "cache-gemm/" in gemm
        assert "HL_LINEAR_BACKEND=helion" in aux and "HL_AUX_KERNELS=all" in aux and "cache-aux/" in aux
        assert "HL_LINEAR_BACKEND=helion" in fused and "HL_AUX_FUSION=1" in fused
        assert "HL_AUX_KERNELS" not in fused and "VLLM_PLUGINS" not in fused and "cache-fused/" in fused
        assert [ln for ln in (off, on, gemm, aux, fused) if "HL_AUX_FUSION" in ln] == [fused]
    out = result.output
    assert (
        out.index("# fused-r0 (cold caches)") < out.index("# fused-r1 (warm caches)") < out.index("# off-r1")
    )
    assert not any(tmp_path.iterdir())


def test_e2e_dry_run_tensor_parallel(no_gpu, tmp_path):
    result = runner.invoke(
        app,
        ["bench", "e2e", "--model", "qwen3-8b", "--layers", "2", "--concurrency", "1,8", "--rounds", "1",
         "--tensor-parallel-size", "2", "--output", str(tmp_path), "--dry-run"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if "hltools.e2e worker" in ln]
    assert len(lines) == 3 and all("--tensor-parallel-size 2" in ln for ln in lines)
    assert all(
        "NCCL_NVLS_ENABLE=0" in ln
        and "TORCH_SYMM_MEM_DISABLE_MULTICAST=1" in ln
        and "NVSHMEM_DISABLE_NVLS=1" in ln
        for ln in lines
    )
    assert "e2e-qwen3-8b-fp8_dynamic-tp2" in lines[0] and "TP 2" in _flat(result.output)
    one = runner.invoke(app, ["bench", "e2e", "--rounds", "1", "--dry-run", "--output", str(tmp_path)])
    assert (
        one.exit_code == 0
        and "NCCL_NVLS_ENABLE" not in one.output
        and "--tensor-parallel-size 1" in one.output
    )


def test_e2e_tensor_parallel_needs_that_many_gpus(monkeypatch, tmp_path):
    monkeypatch.setattr(options, "cuda_available", lambda: True)
    monkeypatch.setattr(options, "cuda_device_count", lambda: 1)
    result = runner.invoke(app, ["bench", "e2e", "--tp", "2", "--output", str(tmp_path)])
    assert result.exit_code == 2 and "needs 2 GPUs; 1 visible" in _flat(result.output), result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tensor-parallel-size", "0"], "tensor_parallel_size must be a positive integer"),
        (["--tensor-parallel-size", "two"], "--tensor-parallel-size"),
        (["--format", "nvfp4"], "unknown format"),
        (["--concurrency", "1,64"], "exceeds max_num_seqs"),
        (["--layers", "99"], "--layers must be in 1..36"),
        (["--plugins", "on,maybe"], "plugins must be among"),
    ],
)
def test_e2e_argument_errors(no_gpu, args, message):
    result = runner.invoke(app, ["bench", "e2e", "--dry-run", *args])
    assert result.exit_code == 2 and message in _flat(result.output), result.output


def test_report_redraws_tables_and_plots(tmp_path):
    results = []
    for m, ratio in ((1, 1.2), (8, 0.9)):
        results.append(
            BenchResult(
                "qwen3-8b",
                "o",
                "fp8_dynamic",
                "helion",
                "helion scaled_mm",
                m,
                4096,
                4096,
                median_us=10.0,
                **META,
            )
        )
        results.append(
            BenchResult(
                "qwen3-8b",
                "o",
                "fp8_dynamic",
                "vllm",
                "vllm cutlass_scaled_mm",
                m,
                4096,
                4096,
                median_us=10 * ratio,
                **META,
            )
        )
    kernel_results.write_results(tmp_path, results, META)  # fmt: skip
    (tmp_path / kernel_results.SUMMARY_MD).unlink()
    result = runner.invoke(app, ["bench", "report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "geomean speedup of Helion vs vLLM's default kernel: fp8_dynamic 1.039x" in out
    report = tmp_path / "report"  # the default --output; nothing written beside the results
    assert (report / "kernels-fp8_dynamic.png").is_file() and (report / kernel_results.SUMMARY_MD).is_file()
    assert (
        not (tmp_path / kernel_results.SUMMARY_MD).exists()
        and not (tmp_path / "kernels-fp8_dynamic.png").exists()
    )


def test_report_without_results_exits_1(tmp_path):
    result = runner.invoke(app, ["bench", "report", str(tmp_path)])
    assert result.exit_code == 1 and "no kernels.json" in _flat(result.output)


def test_repro_command():
    r = BenchResult("qwen3-8b", "o/down", "block_fp8", "helion", "-", 3, 4096, 4096, tp=2, out_dtype="fp16")
    # Block_FP8: the layout always (the default follows HL_DISPATCH_AT); older results ran row-major
    assert kernel_results.repro_command(r, {"seed": 5}) == (
        "hltools bench kernels --model qwen3-8b --formats block_fp8 --tp 2 --layer o --layer down "
        "--num-tokens 3 --out-dtype fp16 --seed 5 --block-scale-a row"
    )
    assert kernel_results.repro_command(r, {"seed": 5, "block_scale_a": "tma"}).endswith(
        "--seed 5 --block-scale-a tma"
    )
    fp8 = BenchResult("qwen3-8b", "o", "fp8_dynamic", "helion", "-", 3, 4096, 4096)
    assert "--block-scale-a" not in kernel_results.repro_command(fp8, {"seed": 5, "block_scale_a": "tma"})


def _off_on_runs(off_tps, on_tps):
    """Two round-0 engine runs (plugin off, on) at concurrency 1 with these tokens/s."""
    return [
        {"plugin": p, "round": 0, "startup_s": 50.0, "throughput": {"1": {"tokens_per_s": v, "tpot_ms": 9.0, "ttft_ms": 30.0}}}
        for p, v in (("off", off_tps), ("on", on_tps))
    ]  # fmt: skip


def test_report_reads_e2e_results(tmp_path):
    from hltools import e2e

    runs = _off_on_runs(100.0, 125.0)
    e2e.write_e2e(
        tmp_path, "e2e-qwen3-8b-fp8_dynamic", {**META, "model": "qwen3-8b", "format": "fp8_dynamic"}, runs
    )
    result = runner.invoke(app, ["bench", "report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1.250" in result.output
    report = tmp_path / "report"
    assert (report / "e2e-qwen3-8b-fp8_dynamic.png").is_file()
    assert (report / "e2e-qwen3-8b-fp8_dynamic.md").read_text() == (
        tmp_path / "e2e-qwen3-8b-fp8_dynamic.md"
    ).read_text()


def test_report_reads_gzipped_results_as_committed(tmp_path):
    """lab/results/ keeps results as .json.gz: report reads them and writes the .md/.png into report/."""
    import gzip

    from hltools import e2e

    runs = _off_on_runs(100.0, 80.0)
    e2e.write_e2e(
        tmp_path, "e2e-m-1.7b-fp8_dynamic", {**META, "model": "m-1.7b", "format": "fp8_dynamic"}, runs
    )
    results = [
        BenchResult("m", "o", "fp8_dynamic", prov, kern, 1, 4096, 4096, median_us=us, **META)
        for prov, kern, us in (("helion", "helion scaled_mm", 10.0), ("vllm", "vllm cutlass_scaled_mm", 15.0))
    ]
    kernel_results.write_results(tmp_path, results, META)
    for name in ("e2e-m-1.7b-fp8_dynamic.json", kernel_results.RESULTS_JSON):
        src = tmp_path / name
        (tmp_path / (name + ".gz")).write_bytes(gzip.compress(src.read_bytes()))
        src.unlink()
    for name in ("e2e-m-1.7b-fp8_dynamic.md", "e2e-m-1.7b-fp8_dynamic.png", kernel_results.SUMMARY_MD):
        (tmp_path / name).unlink(missing_ok=True)
    result = runner.invoke(app, ["bench", "report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "0.800" in out and "fp8_dynamic 1.500x" in out
    # a dot in the model name (1.7b) must not be taken for a suffix
    report = tmp_path / "report"
    assert (report / "e2e-m-1.7b-fp8_dynamic.md").is_file() and (
        report / "e2e-m-1.7b-fp8_dynamic.png"
    ).is_file()
    assert (report / kernel_results.SUMMARY_MD).is_file()


def test_report_shows_gemm_columns_only_with_gemm_runs(tmp_path):
    from hltools import e2e

    def runs(plugins):
        values = {"off": 100.0, "on": 125.0, "gemm": 140.0}
        return [
            {"plugin": p, "round": 0, "startup_s": 50.0,
             "throughput": {"1": {"tokens_per_s": values[p], "tpot_ms": 1000.0 / values[p], "ttft_ms": 30.0}}}
            for p in plugins
        ]  # fmt: skip

    meta = {**META, "model": "qwen3-8b", "format": "fp8_dynamic"}
    e2e.write_e2e(tmp_path, "e2e-qwen3-8b-fp8_dynamic", meta, runs(("off", "on", "gemm")))
    result = runner.invoke(app, ["bench", "report", str(tmp_path), "--no-plots"])
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "speedup GEMM only" in out and "1.250" in out and "1.400" in out and "140" in out
    md = (tmp_path / "report" / "e2e-qwen3-8b-fp8_dynamic.md").read_text()
    assert "| 1 | 100 | 125 | 1.250 | 10.00 | 8.00 | 30.0 | 30.0 | 140 | 1.400 | 7.14 | 30.0 |" in md

    plain = tmp_path / "plain"
    e2e.write_e2e(plain, "e2e-qwen3-8b-fp8_dynamic", meta, runs(("off", "on")))
    result = runner.invoke(app, ["bench", "report", str(plain), "--no-plots"])
    assert result.exit_code == 0 and "1.250" in result.output and "GEMM" not in result.output
    assert "GEMM only" not in (plain / "report" / "e2e-qwen3-8b-fp8_dynamic.md").read_text()
    table = e2e.throughput_table(e2e.summarize(runs(("off", "on", "gemm"))), "t").rich()
    assert [c.header for c in table.columns][-3:] == [
        "tok/s GEMM only",
        "speedup GEMM only",
        "TPOT ms GEMM only",
    ]
    assert list(table.columns[-2].cells) == ["1.400"] and list(table.columns[3].cells) == ["1.250"]
    assert len(e2e.throughput_table(e2e.summarize(runs(("off", "on"))), "t").rich().columns) == 6


def test_report_shows_fused_columns_only_with_fused_runs(tmp_path):
    from hltools import e2e

    def runs(plugins):
        values = {"off": 100.0, "on": 125.0, "gemm": 140.0, "aux": 110.0, "fused": 160.0}
        return [
            {"plugin": p, "round": 0, "startup_s": 50.0,
             "throughput": {"1": {"tokens_per_s": values[p], "tpot_ms": 1000.0 / values[p], "ttft_ms": 30.0}}}
            for p in plugins
        ]  # fmt: skip

    meta = {**META, "model": "qwen3-8b", "format": "fp8_dynamic"}
    e2e.write_e2e(tmp_path, "e2e-qwen3-8b-fp8_dynamic", meta, runs(("off", "on", "gemm", "aux", "fused")))
    result = runner.invoke(app, ["bench", "report", str(tmp_path), "--no-plots"])
    assert result.exit_code == 0, result.output
    out = _flat(result.output)  # 15 columns: the headers wrap (they are checked on e2e_table below)
    assert "1.400" in out and "1.100" in out and "1.600" in out and "160" in out
    md = (tmp_path / "report" / "e2e-qwen3-8b-fp8_dynamic.md").read_text()
    assert (
        "| 1 | 100 | 125 | 1.250 | 10.00 | 8.00 | 30.0 | 30.0 | 140 | 1.400 | 7.14 | 30.0 "
        "| 110 | 1.100 | 9.09 | 30.0 | 160 | 1.600 | 6.25 | 30.0 |"
    ) in md
    csv = (tmp_path / "e2e-qwen3-8b-fp8_dynamic.csv").read_text().splitlines()
    cells = dict(zip(csv[0].split(","), csv[1].split(","), strict=True))
    assert float(cells["speedup_fused"]) == 1.6 and float(cells["speedup_gemm"]) == 1.4
    assert float(cells["speedup_aux"]) == 1.1
    assert csv[0].split(",")[-14:] == [
        *(
            f"{k}_{name}"
            for name in ("aux", "fused")
            for k in ("tokens_per_s", "speedup", "tpot_ms", "tpot_speedup", "ttft_ms")
        ),
        "spread_pct_off",
        "spread_pct_on",
        "ttft_spread_pct_off",
        "ttft_spread_pct_on",
    ]

    table = e2e.throughput_table(e2e.summarize(runs(("off", "on", "gemm", "aux", "fused"))), "t").rich()
    assert [c.header for c in table.columns][6:] == [
        "tok/s GEMM only",
        "speedup GEMM only",
        "TPOT ms GEMM only",
        "tok/s GEMM+aux",
        "speedup GEMM+aux",
        "TPOT ms GEMM+aux",
        "tok/s fused aux",
        "speedup fused aux",
        "TPOT ms fused aux",
    ]
    assert list(table.columns[-2].cells) == ["1.600"] and list(table.columns[-1].cells) == ["6.25"]
    table = e2e.throughput_table(e2e.summarize(runs(("off", "on", "fused"))), "t").rich()
    assert [c.header for c in table.columns][6:] == [
        "tok/s fused aux",
        "speedup fused aux",
        "TPOT ms fused aux",
    ]

    plain = tmp_path / "plain"
    e2e.write_e2e(plain, "e2e-qwen3-8b-fp8_dynamic", meta, runs(("off", "on", "gemm")))
    result = runner.invoke(app, ["bench", "report", str(plain), "--no-plots"])
    out = _flat(
        result.output
    )  # the legend says what each runs ("... fused by Inductor"): no fused aux column
    assert (
        result.exit_code == 0 and "GEMM only" in out and "fused aux" not in out and "HL_AUX_FUSION" not in out
    )
    assert "fused aux" not in (plain / "report" / "e2e-qwen3-8b-fp8_dynamic.md").read_text()


def test_merge_e2e_joins_runs_of_separate_commands(tmp_path):
    """Two `bench e2e` commands (plugin off, plugin on) joined give the summary of one command with
    both: checked on a committed H200 result split in two."""
    import gzip
    import json
    from pathlib import Path

    from hltools import e2e

    src = Path(__file__).resolve().parents[3] / "lab/results/2026-12-01-afternoon/1.7b-e2e"
    whole = json.loads(gzip.decompress((src / "e2e-qwen3-1.7b-fp8_dynamic.json.gz").read_bytes()))
    parts = []
    for plugin in ("off", "on"):
        part = {
            "metadata": {**whole["metadata"], "plugins": [plugin]},
            "runs": [r for r in whole["runs"] if r["plugin"] == plugin],
        }
        parts.append(tmp_path / f"{plugin}.json")
        parts[-1].write_text(json.dumps(part))
    out = tmp_path / "merged"
    result = runner.invoke(app, ["bench", "merge-e2e", *map(str, parts), "--output", str(out), "--no-plots"])
    assert result.exit_code == 0, result.output
    merged = json.loads((out / "e2e-qwen3-1.7b-fp8_dynamic.json").read_text())
    assert merged["summary"]["rows"] == e2e.summarize(whole["runs"])["rows"]
    assert merged["summary"]["rows"][1]["tokens_per_s_on"] == whole["summary"]["rows"][1]["tokens_per_s_on"]
    assert merged["metadata"]["plugins"] == ["off", "on"]
    assert merged["metadata"]["command"] != whole["metadata"]["command"]  # the merge's, not the first part's
    assert [m["command"] for m in merged["metadata"]["merged_from"]] == [whole["metadata"]["command"]] * 2
    assert "| 8 | 2184 | 3277 | 1.500 |" in (out / "e2e-qwen3-1.7b-fp8_dynamic.md").read_text()
    again = runner.invoke(app, ["bench", "merge-e2e", str(parts[0]), str(parts[0]), "--output", str(out)])
    assert again.exit_code == 2 and "the same (plugin, round)" in _flat(again.output)
    other = json.loads(parts[1].read_text())
    other["metadata"]["layers"] = 8
    parts[1].write_text(json.dumps(other))
    bad = runner.invoke(app, ["bench", "merge-e2e", *map(str, parts), "--output", str(out)])
    assert bad.exit_code == 2 and "disagree on layers" in _flat(bad.output)
