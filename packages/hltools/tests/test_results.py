"""hltools.results: the one writer/reader and table of every result (kernels, e2e, gap, validate)."""

import gzip
import json
import math
from dataclasses import dataclass

import pytest

from hltools import results
from hltools.results import ResultTable


@dataclass
class Point:
    name: str
    m: int
    us: float | None = None
    ok: bool = False


def test_cell_formats_numbers_and_dashes_missing_ones():
    assert results.cell(1.23456, ".2f") == "1.23" and results.cell(1.5, ".3f", "×") == "1.500×"
    assert [results.cell(v, ".1f") for v in (None, math.nan, math.inf)] == ["-"] * 3
    assert results.cell(3, "d") == "3"


def test_json_and_csv_writers(tmp_path):
    payload = {"b": [1.0, math.nan], "a": {"x": math.inf}}
    results.write_json(tmp_path / "d" / "p.json", payload)
    text = (tmp_path / "d" / "p.json").read_text()
    assert text.endswith("}\n") and text.index('"a"') < text.index('"b"')  # sorted, trailing newline
    assert json.loads(text) == {"a": {"x": None}, "b": [1.0, None]}
    results.write_json(tmp_path / "nan.json", payload, keep_nan=True)
    assert math.isnan(json.loads((tmp_path / "nan.json").read_text())["b"][1])
    results.write_csv(
        tmp_path / "p.csv", [{"m": 1, "us": None, "x": 9}, {"m": 2, "us": math.nan}], ["m", "us"]
    )
    assert (tmp_path / "p.csv").read_text() == "m,us\n1,\n2,\n"


def test_read_json_plain_and_gzipped(tmp_path):
    data = {"metadata": {"gpu": "H200"}, "rows": [{"name": "o", "m": 2}]}
    (tmp_path / "r.json").write_text(json.dumps(data))
    (tmp_path / "g.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    assert results.read_json(tmp_path / "r.json") == results.read_json(tmp_path / "g.json.gz") == data
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"bad\.json: not a sweep file \(JSONDecodeError"):
        results.read_json(tmp_path / "bad.json", "sweep file")
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="not a JSON file"):
        results.read_json(tmp_path / "bad.json.gz")
    with pytest.raises(FileNotFoundError):
        results.read_json(tmp_path / "missing.json")


def test_find_result_and_read_rows(tmp_path):
    rows = [{"name": "o", "m": 2, "us": 1.5, "ok": True, "future": 1}, {"name": "qkv", "m": 4}]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x.json.gz").write_bytes(gzip.compress(json.dumps({"rows": rows}).encode()))
    path = results.find_result(tmp_path / "run", "x.json")
    assert path == tmp_path / "run" / "x.json.gz"
    meta, back = results.read_rows(path, Point, rows_key="rows", what="point file")
    assert meta == {} and back == [Point("o", 2, 1.5, True), Point("qkv", 4)]
    results.write_csv(
        tmp_path / "x.csv", [{"name": "o", "m": 2, "us": None, "ok": False}], ["name", "m", "us", "ok"]
    )
    assert results.read_rows(tmp_path / "x.csv", Point, rows_key="rows", what="point file") == (
        {},
        [Point("o", 2, None, False)],
    )
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match=r"other\.json: not a point file \(KeyError"):
        results.read_rows(tmp_path / "other.json", Point, rows_key="rows", what="point file")


def test_result_table_prints_and_writes_the_same_cells():
    table = ResultTable.of_dicts(
        "t", [{"format": "fp8", "layer": "o", "µs": "1.5"}, {"format": "fp8", "layer": "qkv", "µs": "-"}],
        drop=("format",), left=("layer",),
    )  # fmt: skip
    assert table.markdown() == ["| layer | µs |", "| --- | --- |", "| o | 1.5 |", "| qkv | - |"]
    rich = table.rich()
    assert rich.title == "t" and [c.header for c in rich.columns] == ["layer", "µs"]
    assert [c.justify for c in rich.columns] == ["left", "right"] and list(rich.columns[1].cells) == [
        "1.5",
        "-",
    ]
    assert ResultTable.of_dicts("empty", []).markdown() == ["(none)"]
    assert ResultTable("no rows", ["a", "b"], []).markdown() == ["| a | b |", "| --- | --- |"]


def test_provenance_text_and_geomean():
    meta = {"date": "d", "gpu": "H200", "vllm": "", "commit": "abc", "torch": "2.11"}
    assert results.provenance_text(meta) == "gpu H200 · torch 2.11 · commit abc · date d"
    assert results.geomean([2.0, 0.5, None, -1.0, math.nan]) == pytest.approx(1.0)
    assert results.geomean([]) is None
