"""`hltools bench aux-configs`: the aux config sweep's analysis from a saved sweep file, on the CPU,
with hand-made timings whose answer is known."""

import gzip
import json
import math

from typer.testing import CliRunner

from hltools.aux_sweep import picked_name
from hltools.cli import app


def _records():
    """rms_norm at two sizes: the picked config is 2x the other one's time at (1, 1024) and the best
    at (1, 4096); so picked/best has geomean sqrt(2) and max 2 at (1, 1024)."""
    from hlcore import aux_configs

    out = []
    for (m, h), slow in (((1, 1024), True), ((1, 4096), False)):
        pick = picked_name("rms_norm", m, h)
        other = next(name for name in aux_configs.ALL_CONFIGS["rms_norm"] if name != pick)
        times = {pick: 2.0, other: 1.0} if slow else {pick: 1.0, other: 2.0}
        for config, us in [*times.items(), (None, 4.0)]:
            out.append(
                {"kernel": "rms_norm", "num_tokens": m, "hidden": h, "provider": "vllm" if config is None else "helion",
                 "config": config, "median_us": us, "wrong": False, "error": None, "vs_vllm": 0.0}
            )  # fmt: skip
    return out


def test_aux_configs_reports_picked_over_best(tmp_path):
    path = tmp_path / "sweep_aux_configs.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"_metadata": {}, "results": _records()}, f)
    result = CliRunner().invoke(app, ["bench", "aux-configs", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("rms_norm ")]
    fields = line.split()
    assert fields[1] == "2"  # cases
    assert fields[2] == f"{math.sqrt(2):.3f}x" and fields[3] == "2.00x" and fields[4] == "1,1024"
    assert fields[5] == "1/2"  # the pick is the best at one of the two sizes
    # vs vLLM (4 us): picked 2 and 4x -> geomean sqrt(8); best 4x at both
    assert fields[6] == f"{math.sqrt(8):.2f}x" and fields[7] == "4.00x"


def test_aux_configs_rejects_a_file_without_timings(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"results": []}))
    result = CliRunner().invoke(app, ["bench", "aux-configs", str(path)])
    assert result.exit_code == 1 and "no timings" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    result = CliRunner().invoke(app, ["bench", "aux-configs", str(bad)])
    assert result.exit_code == 1 and "not a sweep_aux_configs.json" in result.output
