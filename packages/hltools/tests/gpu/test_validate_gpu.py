"""hltools validate on a CUDA GPU (``nox -s gpu_tests``): compiled kernels on full shapes, the
cross-check against the fallback kernel and the timing columns."""

import json

import pytest
from typer.testing import CliRunner

from hltools.cli import app

pytestmark = pytest.mark.gpu


def _run(args, out):
    result = CliRunner().invoke(app, ["validate", *args, "--output", str(out)])
    return result, json.loads(out.read_text())


@pytest.mark.parametrize("out_dtype", ["bf16", "fp16"])
def test_validate_gpu_tiny_config(tmp_path, tiny_model_config, out_dtype):
    config = tiny_model_config
    result, payload = _run(
        ["--model", str(config), "--num-tokens", "1,3,32", "--out-dtype", out_dtype], tmp_path / "rows.json"
    )
    assert result.exit_code == 0, result.output
    meta = payload["metadata"]
    assert meta["mode"] == "gpu" and meta["copy_bandwidth_gbs"] > 100
    assert "copy bandwidth" in result.output and meta["fallback"] in result.output
    rows = payload["rows"]
    assert [(r["layer"], r["n"], r["k"]) for r in rows[::3]] == [
        ("qkv", 512, 256),
        ("o", 256, 256),
        ("gate_up", 1024, 256),
        ("down", 256, 512),
    ]
    for r in rows:
        assert r["passed"] and r["rel_err"] <= r["tolerance"], r
        assert r["fallback_rel_err"] <= r["fallback_tolerance"], r
        assert r["helion_us"] > 0 and 0 < r["roofline_pct"] < 200, r
        assert (r["fallback_us"] is not None and r["speedup"] > 0) or r["note"], r


def test_validate_gpu_real_shape(tmp_path):
    result, payload = _run(
        ["--model", "qwen3-8b", "--layer", "down", "--num-tokens", "1,32"], tmp_path / "r.json"
    )
    assert result.exit_code == 0, result.output
    assert [(r["n"], r["k"], r["m"]) for r in payload["rows"]] == [(4096, 12288, 1), (4096, 12288, 32)]
    assert all(r["passed"] and r["helion_us"] > 0 for r in payload["rows"])
