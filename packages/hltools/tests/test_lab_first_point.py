"""lab/scripts/first_point.py on the CPU: the first Helion layer's M1/M2 ratio (same config only),
vLLM's at the same points, and the later layers' range, from rows like bench kernels writes."""

import gzip
import json

import pytest


@pytest.fixture(scope="module")
def script(lab_script):
    return lab_script("first_point")


def _row(layer, m, provider, us, config="c1", model="m", fmt="fp8_dynamic"):
    return {
        "model": model,
        "tp": 1,
        "format": fmt,
        "layer": layer,
        "n": 8,
        "k": 16,
        "m": m,
        "provider": provider,
        "median_us": us,
        "config": config,
    }


ROWS = [
    _row("qkv", 1, "helion", 10.8),
    _row("qkv", 1, "vllm", 10.0),
    _row("qkv", 2, "helion", 10.0),
    _row("qkv", 2, "vllm", 10.0),
    _row("o", 1, "helion", 9.7),
    _row("o", 2, "helion", 10.0),
    _row("down", 1, "helion", 5.0, config="a"),
    _row("down", 2, "helion", 4.0, config="b"),  # not comparable
    _row("up", 1, "helion", 10.2),
    _row("up", 2, "helion", 10.0),
    _row("up", 4, "helion", 1.0),
]


def test_first_point_ratios(script):
    fp = script.first_point(ROWS)
    assert fp["layer"][3] == "qkv"
    assert fp["helion"] == pytest.approx(1.08) and fp["vllm"] == pytest.approx(1.0)
    assert fp["later"] == pytest.approx((0.97, 1.02))  # o and up; down's two configs differ


def test_main_reads_json_and_gz(script, tmp_path, capsys):
    plain, packed = tmp_path / "kernels.json", tmp_path / "k.json.gz"
    plain.write_text(json.dumps({"results": ROWS}))
    with gzip.open(packed, "wt") as f:
        json.dump({"results": ROWS[4:]}, f)
    assert script.main([str(plain), str(packed)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "Helion M1/M2 1.080, vLLM 1.000; later layers' Helion M1/M2 0.970-1.020" in out[0]
    assert "first point m tp1 fp8_dynamic o: Helion M1/M2 0.970, vLLM -" in out[1]
    assert script.main([]) == 2
