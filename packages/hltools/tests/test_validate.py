"""hltools validate: the CLI end to end on the CPU interpreter, failure reporting, repro commands."""

import json
import math
import os

import pytest
import torch
from typer.testing import CliRunner

from hltools.cli import app
from hltools.validate import Row, cross_check_tolerance, repro_command, scaled_down

TINY = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
# model (N, K) -> run (N, K) with --cpu-scale 4
TINY_SHAPES = {
    "qkv": ((512, 256), (128, 64)),
    "o": ((256, 256), (64, 64)),
    "gate_up": ((1024, 256), (256, 64)),
    "down": ((256, 512), (64, 128)),
}

runner = CliRunner()


@pytest.fixture
def tiny_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return path


def _run(config, tmp_path, tokens):
    out = tmp_path / "rows.json"
    args = [
        "validate",
        "--model",
        str(config),
        "--num-tokens",
        tokens,
        "--cpu-scale",
        "4",
        "--output",
        str(out),
    ]
    result = runner.invoke(app, args)
    payload = json.loads(out.read_text()) if out.exists() else None
    return result, payload


def _cells(output):
    """Table rows of the rich output as lists of stripped cells."""
    return [[c.strip() for c in ln.split("│")[1:-1]] for ln in output.splitlines() if ln.startswith("│")]


def _check_passing_run(result, payload, ms):
    """Exit 0, one PASS row per (layer, M) in the table and the JSON, errors within tolerance.
    Under HL_TEST_GPU=1 the CLI runs the compiled kernels on full shapes and also times them."""
    assert result.exit_code == 0, result.output
    assert payload["metadata"]["model_source"].endswith("config.json")  # where --model resolved to
    gpu = payload["metadata"]["mode"] == "gpu"
    if not gpu:
        assert "interpret mode" in result.output and "divided by 4" in result.output
        assert payload["metadata"]["cpu_scale"] == 4
    assert f"{4 * len(ms)}/{4 * len(ms)} rows passed" in result.output
    rows = payload["rows"]
    assert [(r["layer"], r["m"]) for r in rows] == [(name, m) for name in TINY_SHAPES for m in ms]
    table = _cells(result.output)
    for r in rows:
        (model_n, model_k), (n, k) = TINY_SHAPES[r["layer"]]
        if gpu:
            n, k = model_n, model_k
            assert r["helion_us"] > 0 and r["roofline_pct"] > 0
            assert r["fallback_rel_err"] <= r["fallback_tolerance"] == 1.5e-2
        else:
            assert r["helion_us"] is None  # no timing on the CPU
        assert (r["model_n"], r["model_k"], r["n"], r["k"]) == (model_n, model_k, n, k)
        assert r["passed"] is True
        assert r["rel_err"] <= r["tolerance"] == 1.5e-2
        assert [r["layer"], str(n), str(k), str(r["m"])] in [c[:4] for c in table]
        assert [c[-1] for c in table if c[:4] == [r["layer"], str(n), str(k), str(r["m"])]] == ["PASS"]


def test_cli_tiny_config_passes(tiny_config, tmp_path):
    ms = [1, 3]
    result, payload = _run(tiny_config, tmp_path, ",".join(map(str, ms)))
    _check_passing_run(result, payload, ms)
    # the Triton interpreter rounds to bf16, so the error is that of a real bf16 result, not zero
    if payload["metadata"]["mode"] == "triton-interpret":
        assert all(r["rel_err"] > 0 for r in payload["rows"])


def test_cli_tiny_config_passes_awkward_m(tiny_config, tmp_path):
    result, payload = _run(tiny_config, tmp_path, "2,17,33")
    _check_passing_run(result, payload, [2, 17, 33])


def test_cli_wrong_kernel_fails_with_repro(tiny_config, tmp_path, monkeypatch):
    import hlcore.scaled_mm as sm

    real = sm.scaled_mm

    def off_by_ten_percent(*args, **kwargs):
        return (real(*args, **kwargs).float() * 1.1).to(
            kwargs.get("out_dtype", args[4] if len(args) > 4 else None)
        )

    monkeypatch.setattr(sm, "scaled_mm", off_by_ten_percent)
    result, payload = _run(tiny_config, tmp_path, "2,3")
    assert result.exit_code == 1, result.output
    assert "0/8 rows passed" in result.output
    assert result.output.count("FAIL") == 8
    rows = payload["rows"]
    assert all(not r["passed"] and r["rel_err"] == pytest.approx(0.1, rel=0.1) for r in rows)
    repro = [ln.strip() for ln in result.output.splitlines() if "hltools validate --model" in ln]
    assert len(repro) == 8
    assert f"--model {tiny_config}" in repro[0] and "--layer qkv --num-tokens 2 " in repro[0]
    assert ("--cpu-scale 4" in repro[0]) == (payload["metadata"]["mode"] != "gpu")


def test_cli_kernel_exception_is_a_failing_row(tiny_config, tmp_path, monkeypatch):
    import hlcore.scaled_mm as sm

    def boom(*_args, **_kwargs):
        raise RuntimeError("no kernel today")

    monkeypatch.setattr(sm, "scaled_mm", boom)
    result, payload = _run(tiny_config, tmp_path, "2")
    assert result.exit_code == 1
    assert all(
        not r["passed"] and "no kernel today" in r["note"] and math.isnan(r["rel_err"])
        for r in payload["rows"]
    )


def test_cli_layer_filter_and_fp16(tiny_config, tmp_path):
    out = tmp_path / "rows.json"
    args = ["validate", "--model", str(tiny_config), "--num-tokens", "5", "--layer", "down"]
    result = runner.invoke(app, [*args, "--out-dtype", "fp16", "--cpu-scale", "4", "--output", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    rows = payload["rows"]
    n, k = TINY_SHAPES["down"][0 if payload["metadata"]["mode"] == "gpu" else 1]
    assert [(r["layer"], r["n"], r["k"], r["m"]) for r in rows] == [("down", n, k, 5)]
    assert rows[0]["tolerance"] == 2e-3 and rows[0]["rel_err"] <= 2e-3


def test_cli_list_models():
    result = runner.invoke(app, ["validate", "--list-models"])
    assert result.exit_code == 0
    for name in (
        "qwen3-1.7b",
        "qwen3-4b",
        "qwen3-8b",
        "qwen3-14b",
        "qwen3-32b",
        "llama-3.1-8b",
        "llama-3.1-70b",
    ):
        assert name in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no-such-model"], "embedded models"),
        (["--tp", "3"], "does not divide"),
        (["--num-tokens", "1,x"], "comma-separated integers"),
        (["--num-tokens", "0"], "positive integers"),
        (["--layer", "lm_head"], "unknown layer"),
    ],
)
def test_cli_bad_arguments(args, message):
    result = runner.invoke(app, ["validate", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_scaled_down():
    assert [scaled_down(d, 64) for d in (4096, 6144, 12288, 9728, 1024, 100)] == [64, 96, 192, 152, 32, 32]
    assert scaled_down(1000, 1) == 1000
    with pytest.raises(ValueError):
        scaled_down(64, 0)


def test_repro_command():
    row = Row("gate_up", 384, 64, 24576, 4096, 8, 1.0, 1.0, 1.5e-2, False)
    cmd = repro_command("my dir/config.json", 2, "fp16", row, 7, 32, None)
    assert cmd == (
        "hltools validate --model 'my dir/config.json' --formats fp8_dynamic --tp 2 --out-dtype fp16 "
        "--layer gate_up --num-tokens 8 --seed 7"
    )
    block_row = Row("o", 64, 64, 4096, 4096, 3, 1.0, 1.0, 1.5e-2, False, format="block_fp8")
    assert "--formats block_fp8 " in repro_command("qwen3-8b", 1, "bf16", block_row, 0, 32, None)
    cmd = repro_command("qwen3-8b", 1, "bf16", row, 0, 64, 64)
    assert cmd.startswith("TRITON_INTERPRET=1 hltools validate") and cmd.endswith(
        "--num-tokens 8,64 --seed 0 --cpu-scale 64"
    )


def test_validate_layer_uses_first_rows_of_one_draw():
    """Row M sees the first M tokens of a max(32, max M)-token draw: a repro with --num-tokens M
    sees the same inputs, so its errors are identical."""
    from hltools.validate import validate_layer

    device = torch.device("cuda" if os.environ.get("HL_TEST_GPU") == "1" else "cpu")
    a = validate_layer("o", 64, 64, [3, 5], torch.bfloat16, device=device)
    b = validate_layer("o", 64, 64, [5], torch.bfloat16, device=device)
    assert a[1].rel_err == b[0].rel_err and a[1].max_abs_err == b[0].max_abs_err


def test_cross_check_tolerance():
    # the fallback (CUTLASS) is itself less accurate than the fp16 tolerance: use the bf16 one
    assert cross_check_tolerance(torch.bfloat16) == 1.5e-2
    assert cross_check_tolerance(torch.float16) == 1.5e-2


@pytest.mark.triton_interpret  # int8: no CPU int8 matmul in Helion's eager mode; block: exact there
@pytest.mark.parametrize("fmt", ["w8a8_int8", "block_fp8"])
def test_validate_layer_formats_against_reference(fmt):
    """Each format's rows are checked against that format's fp32 reference (partial 128-blocks: K=192)."""
    from hltools.validate import validate_layer

    rows = validate_layer("down", 96, 192, [1, 5], torch.bfloat16, device=torch.device("cpu"), fmt=fmt)
    assert [r.format for r in rows] == [fmt, fmt]
    assert all(r.passed and 0 < r.rel_err <= r.tolerance for r in rows), [r.to_dict() for r in rows]


@pytest.mark.triton_interpret  # W8A8_INT8 rows: no CPU int8 matmul in Helion's eager mode
def test_formats_option(tiny_config, tmp_path):
    out = tmp_path / "rows.json"
    args = ["validate", "--model", str(tiny_config), "--num-tokens", "2", "--cpu-scale", "4"]
    args += ["--formats", "w8a8_int8,block_fp8", "--layer", "o", "--output", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    assert [r["format"] for r in payload["rows"]] == ["w8a8_int8", "block_fp8"]
    assert payload["metadata"]["formats"] == ["w8a8_int8", "block_fp8"]
    bad = runner.invoke(app, ["validate", "--model", str(tiny_config), "--formats", "fp4"])
    assert bad.exit_code != 0 and "--formats" in bad.output and "fp4" in bad.output
