"""hltools bench kernels on a CUDA GPU (``nox -s gpu_tests``): the CLI end to end on a tiny model,
and each of vLLM's block-FP8 kernels alone (which of them runs here, and correctly)."""

import pytest
import torch
from typer.testing import CliRunner

from hltools import bench, kernel_results
from hltools.cli import app

pytestmark = pytest.mark.gpu


def test_bench_kernels_cli_tiny_model(tmp_path, tiny_model_config):
    config = tiny_model_config
    out = tmp_path / "out"
    args = ["bench", "kernels", "--model", str(config), "--num-tokens", "1,3,16", "--repeats", "5"]
    result = CliRunner().invoke(app, [*args, "--jobs", "2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    meta, results = kernel_results.read_results(out)
    assert meta["copy_bandwidth_gbs"] > 100 and meta["precompile_s"] >= 0
    assert len([r for r in results if r.provider == "helion"]) == 3 * 4 * 3
    for r in results:
        assert r.ok and r.median_us > 0 and r.gbps > 0 and r.gpu == torch.cuda.get_device_name(), r
    kernels = {(r.format, r.provider): r.kernel for r in results}
    assert kernels[("fp8_dynamic", "vllm")] == kernels[("w8a8_int8", "vllm")] == "vllm cutlass_scaled_mm"
    assert kernels[("block_fp8", "vllm")].startswith("vllm block ")
    assert kernels[("fp8_dynamic", "torch")] == "torch._scaled_mm"
    assert set(kernel_results.geomean_by_format(results)) == set(bench.FORMATS)
    assert "geomean speedup of Helion vs vLLM's default kernel" in result.output


@pytest.mark.parametrize("provider", bench.BLOCK_CANDIDATES)
def test_each_vllm_block_kernel(provider):
    from hlcore.testing import tolerance
    from hltools.timing import time_graph

    shape = bench.BenchShape("tiny", "block_fp8", "qkv", 512, 256, (1, 5, 32))
    candidates = {"vllm": [bench.VLLM_BLOCK[provider]]}
    results = bench.run_kernel_bench(
        [shape],
        candidates=candidates,
        timer=lambda calls: time_graph(calls, repeats=5),
        inputs_for=lambda s, c: bench.make_inputs(s.fmt, s.n, s.k, max(s.ms), c, device="cuda"),
        copies_for=lambda n, k: 2,
        bandwidth_gbs=None,
        tolerance=tolerance,
    )
    if all("unavailable" in r.note for r in results):
        pytest.skip(results[0].note)
    for r in results:
        assert r.ok and r.rel_err <= bench.SANITY_REL_ERR and r.median_us > 0, r
