"""``hltools autotune`` end to end on a CUDA GPU (``nox -s gpu_tests``): Helion's quick-effort
autotuner on the four linear shapes of a tiny model at one M, each tuned config checked against the
fp32 reference and timed against the default config and vLLM's kernel, saved, and a rerun resumes."""

import json

import pytest
from typer.testing import CliRunner

from hltools.cli import app

pytestmark = pytest.mark.gpu


def test_autotune_quick_tiny_model(tmp_path, tiny_model_config):
    import torch

    from hlcore import scaled_mm as sm
    from hlcore.config_store import load_config_file
    from hlcore.scaled_mm_config import check_scaled_mm_config
    from hlcore.testing import rel_error, tolerance

    config = tiny_model_config
    out = tmp_path / "configs"
    args = ["autotune", "--model", str(config), "--formats", "fp8_dynamic", "--num-tokens", "8"]
    args += ["--effort", "quick", "--budget-minutes", "2", "--seed", "3", "--output", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    files = list((out / "scaled_mm").glob("*.json"))
    assert len(files) == 1, files
    raw = json.loads(files[0].read_text())
    (meta,) = [item["_metadata"] for item in raw if "_metadata" in item]  # the file is a list
    assert meta["seed"] == 3 and meta["helion"], meta
    loaded = load_config_file(files[0], gpu=files[0].stem)
    assert loaded is not None
    shapes = {(e.key["n"], e.key["k"]) for e in loaded.entries.values() if e.key}
    assert shapes == {(512, 256), (256, 256), (1024, 256), (256, 512)}
    for entry in loaded.entries.values():
        if not entry.key:
            continue
        assert check_scaled_mm_config(entry.config) is None, entry
        n, k, m = entry.key["n"], entry.key["k"], entry.key["m"]
        assert m == 8
        inputs = sm.generate_scaled_mm_inputs(m, n, k, fmt="fp8_dynamic", device="cuda", seed=11)
        err = rel_error(sm.scaled_mm(**inputs, config=entry.config), sm.scaled_mm_ref(**inputs))
        assert err <= tolerance("fp8_dynamic", torch.bfloat16), (entry.key, err)
        stats = entry.stats
        # the saved config is the faster of the tuned and the default one, both timed in one run
        assert 0 < stats["helion_us"] <= stats["default_us"], stats
        if "fallback_us" in stats:  # the fallback mark follows the side-by-side timing
            assert entry.fallback == (stats["helion_us"] > stats["fallback_us"]), stats
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "skipped" in again.output or "already tuned" in again.output, again.output
