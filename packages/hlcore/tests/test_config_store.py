"""hlcore.config_store: file format, validation, merge, atomic writes, canonical GPU names."""

import json
import logging
import os
import stat

import pytest

from hlcore import config_store as cs
from hlcore.config_store import ConfigEntry

CFG = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 2, "split_k": 4, "swap_ab": True}
META = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 0}


def _entry(n, k, m, fmt="fp8_dynamic", **config):
    return ConfigEntry(cs.scaled_mm_key(fmt, n, k, m), {**CFG, **config})


def _warnings(caplog):
    return [r for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("NVIDIA H200", "nvidia_h200"),
        ("nvidia_h200", "nvidia_h200"),
        ("NVIDIA H100 80GB HBM3", "nvidia_h100_sxm"),
        ("NVIDIA H100 SXM5 80GB", "nvidia_h100_sxm"),
        ("NVIDIA H100 PCIe", "nvidia_h100_pcie"),
        ("NVIDIA H100 NVL", "nvidia_h100_nvl"),
        ("NVIDIA A100-SXM4-80GB", "nvidia_a100_sxm"),
        ("NVIDIA H200 NVL", "nvidia_h200_nvl"),
    ],
)
def test_canonical_gpu_name(raw, canonical):
    assert cs.canonical_gpu_name(raw) == canonical


def test_gpu_name_candidates_exact_variant_then_family():
    assert cs.gpu_name_candidates("NVIDIA H100 80GB HBM3") == ["nvidia_h100_sxm", "nvidia_h100"]
    assert cs.gpu_name_candidates("NVIDIA H100 PCIe") == ["nvidia_h100_pcie", "nvidia_h100"]
    assert cs.gpu_name_candidates("NVIDIA H200") == ["nvidia_h200"]
    with pytest.raises(ValueError, match="empty"):
        cs.canonical_gpu_name("  ")


def test_known_gpu_names_are_the_sm90_parts_and_the_config_files(tmp_path):
    names = cs.known_gpu_names()
    for name in ("nvidia_h200", "nvidia_h100", "nvidia_h100_sxm", "nvidia_h100_pcie", "nvidia_gh200"):
        assert name in names
    assert names == sorted(names) and "nvidia_a100_sxm" not in names
    (tmp_path / "scaled_mm").mkdir()
    for stem in ("nvidia_a100_sxm", "nvidia_a100_sxm.stats"):
        (tmp_path / "scaled_mm" / f"{stem}.json").write_text("[]")
    assert "nvidia_a100_sxm" in cs.known_gpu_names([tmp_path])
    assert "nvidia_a100_sxm" not in cs.known_gpu_names([tmp_path], kernel="other_kernel")
    assert not any("stats" in n for n in cs.known_gpu_names([tmp_path]))


def test_round_trip_and_file_layout(tmp_path):
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    default = ConfigEntry({}, CFG)
    tuned = [_entry(6144, 4096, m) for m in (32, 1, 8)]
    marked = ConfigEntry(cs.scaled_mm_key("w8a8_int8", 4096, 4096, 1), CFG, True, {"helion_us": 9.5})
    column = ConfigEntry(cs.scaled_mm_key("block_fp8", 4096, 4096, 1), CFG, block_scale_a="tma")
    cs.save_config_file(path, [*tuned, default, marked, column], META)

    text = path.read_text()
    assert text.endswith("}\n]\n")
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"  # sorted keys, indent 2
    assert data[0] == {"_metadata": META}
    assert data[1] == {"key": {}, "config": CFG}  # default first, then keys in numeric order
    assert [d["key"].get("m") for d in data[3:6]] == [1, 8, 32]
    assert data[-1]["fallback"] is True and data[-1]["stats"] == {"helion_us": 9.5}
    assert data[2] == {"key": column.key, "config": CFG, "block_scale_a": "tma"}  # block_fp8 sorts first
    assert "fallback" not in data[3] and "block_scale_a" not in data[3]  # row-major: the field left out

    cf = cs.read_config_file(path)
    assert cf.metadata == META
    assert cf.default == default
    assert cf.get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 8)) == tuned[2]
    assert cf.get(cs.scaled_mm_key("w8a8_int8", 4096, 4096, 1)).fallback
    assert cf.get(column.key).block_scale_a == "tma" and cf.get(tuned[0].key).block_scale_a == "row"
    assert len(cf.entries) == 6
    # what the loader accepts for this GPU and helion version
    loaded = cs.load_config_file(path, helion_version="1.5.0")
    assert loaded is not None and loaded.entries == cf.entries


def test_merge_on_save_replaces_same_keys_keeps_others(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    cs.save_config_file(path, [_entry(6144, 4096, 1), _entry(6144, 4096, 2)], {**META, "seed": 1})
    cs.save_config_file(path, [_entry(6144, 4096, 2, num_warps=8), _entry(4096, 4096, 1)], {"seed": 7})
    cf = cs.read_config_file(path)
    assert len(cf.entries) == 3
    assert cf.get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 2)).config["num_warps"] == 8
    assert cf.get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1)).config["num_warps"] == 4
    assert cf.metadata == {**META, "seed": 7}
    cs.save_config_file(path, [_entry(1, 1, 1)], merge=False)
    assert list(cs.read_config_file(path).entries) == [_entry(1, 1, 1).id]
    # drop_metadata: those fields of the file go first; metadata's own (and the others) stay
    cs.save_config_file(path, [_entry(2, 2, 1)], {**META, "seed": 3, "note": "a"})
    cs.save_config_file(path, [_entry(3, 3, 1)], {"note": "b"}, drop_metadata=("seed", "note", "absent"))
    cf = cs.read_config_file(path)
    kept = {k: v for k, v in META.items() if k != "seed"}
    assert cf.metadata == {**kept, "note": "b"} and len(cf.entries) == 3


def test_atomic_write_leaves_old_file_and_no_temp_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "nvidia_h200.json"
    cs.save_config_file(path, [_entry(6144, 4096, 1)], META)
    before = path.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cs.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        cs.save_config_file(path, [_entry(6144, 4096, 2)], META)
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["nvidia_h200.json"]  # the temporary file was removed
    # a value JSON cannot hold is refused before anything is written
    monkeypatch.undo()
    with pytest.raises(ValueError):
        cs.save_config_file(path, [_entry(6144, 4096, 2, x=float("nan"))], META)
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["nvidia_h200.json"]


def test_save_refuses_to_merge_into_a_corrupt_file(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    path.write_text("{not json")
    with pytest.raises(cs.ConfigFileError, match="not valid JSON"):
        cs.save_config_file(path, [_entry(1, 1, 1)])
    assert path.read_text() == "{not json"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"key": {}, "config": {}}', "expected a JSON list"),
        ("[1]", "entry 0 is int"),
        ('[{"key": {}}]', "entry 0 must be"),
        ('[{"key": {"n": 1.5}, "config": {}}]', "key must be an object of int or string"),
        ('[{"key": {"n": true}, "config": {}}]', "key must be an object of int or string"),
        ('[{"key": {}, "config": []}]', "config must be an object"),
        ('[{"key": {}, "config": {}, "fallback": "yes"}]', "fallback must be"),
        ('[{"key": {}, "config": {}, "block_scale_a": "col"}]', "block_scale_a must be one of"),
        ('[{"key": {}, "config": {}}, {"key": {}, "config": {}}]', "duplicate key"),
        ('[{"_metadata": {}}, {"_metadata": {}}]', "second"),
        ('[{"_metadata": {"gpu": "nvidia_h100"}}]', "tuned on GPU 'nvidia_h100', not 'nvidia_h200'"),
        ('[{"_metadata": {"helion": "0.9.0"}}]', "tuned with helion 0.9.0, installed helion is 1.5.0"),
    ],
)
def test_bad_file_rejected_with_exactly_one_warning(tmp_path, caplog, content, reason):
    path = tmp_path / "nvidia_h200.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        assert cs.load_config_file(path, helion_version="1.5.0") is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1, [w.getMessage() for w in warnings]
    message = warnings[0].getMessage()
    assert str(path) in message and reason in message


def test_family_file_accepts_variant_metadata_and_missing_file_is_silent(tmp_path, caplog):
    path = tmp_path / "nvidia_h100.json"
    cs.save_config_file(path, [_entry(1, 1, 1)], {"gpu": "nvidia_h100_sxm", "helion": "1.5.0"})
    with caplog.at_level(logging.WARNING):
        assert cs.load_config_file(path, helion_version="1.5.0") is not None
        assert cs.load_config_file(tmp_path / "nvidia_b200.json") is None
    assert _warnings(caplog) == []


def test_find_configs_exact_variant_then_family(tmp_path):
    family = cs.config_file_path("scaled_mm", "nvidia_h100", tmp_path)
    cs.save_config_file(family, [_entry(1, 1, 1)], {"gpu": "nvidia_h100"})
    found = cs.find_configs("scaled_mm", "NVIDIA H100 80GB HBM3", tmp_path)
    assert found is not None and found.path == family
    exact = cs.config_file_path("scaled_mm", "nvidia_h100_sxm", tmp_path)
    cs.save_config_file(exact, [_entry(2, 2, 2)], {"gpu": "nvidia_h100_sxm"})
    assert cs.find_configs("scaled_mm", "NVIDIA H100 80GB HBM3", tmp_path).path == exact
    assert cs.find_configs("scaled_mm", "NVIDIA H100 PCIe", tmp_path).path == family
    assert cs.find_configs("scaled_mm", "NVIDIA H200", tmp_path) is None


def test_rejected_file_warning_names_the_fix(tmp_path, caplog):
    """A rejected config file's one warning says what runs instead and how to fix it."""
    import logging

    bad = tmp_path / "nvidia_h200.json"
    bad.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert cs.load_config_file(bad) is None
    text = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert str(bad) in text and "treated as no file" in text
    assert "hltools configs from-bench" in text and "HL_CONFIG_DIR" in text


# --------------------------------------------------------------------------------------------
# Stats sidecar
# --------------------------------------------------------------------------------------------
def _kid(n, k, m, fmt="fp8_dynamic"):
    return cs.key_id(cs.scaled_mm_key(fmt, n, k, m))


def test_stats_sidecar_round_trip_merge_and_layout(tmp_path):
    path = cs.stats_file_path("scaled_mm", "NVIDIA H200", tmp_path)
    assert path == tmp_path / "scaled_mm" / "nvidia_h200.stats.json"
    first = {_kid(6144, 4096, 32): {"helion_us": 3.0}, _kid(6144, 4096, 1): {"helion_us": 1.0}}
    cs.save_stats_file(path, first, {"config_file": "configs/scaled_mm/nvidia_h200.json"})
    text = path.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert data[0] == {"_metadata": {"config_file": "configs/scaled_mm/nvidia_h200.json"}}
    assert [d["key"]["m"] for d in data[1:]] == [1, 32]  # numeric key order, as config files
    assert data[1] == {
        "key": {"format": "fp8_dynamic", "k": 4096, "m": 1, "n": 6144},
        "stats": {"helion_us": 1.0},
    }
    # merge: same key replaced, others kept, metadata fields updated
    cs.save_stats_file(path, {_kid(6144, 4096, 1): {"helion_us": 9.0}, (): {"x": 1}}, {"gpu": "nvidia_h200"})
    meta, stats = cs.read_stats_file(path)
    assert meta == {"config_file": "configs/scaled_mm/nvidia_h200.json", "gpu": "nvidia_h200"}
    assert stats == {
        _kid(6144, 4096, 1): {"helion_us": 9.0},
        _kid(6144, 4096, 32): {"helion_us": 3.0},
        (): {"x": 1},
    }
    cs.save_stats_file(path, {_kid(1, 1, 1): {}}, merge=False)
    assert cs.read_stats_file(path) == ({}, {_kid(1, 1, 1): {}})


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{}", "expected a JSON list"),
        ('[{"key": {"m": 1}}]', r'entry 0 must be \{"key"'),
        ('[{"key": {"m": 1}, "stats": 3}]', r'entry 0 must be \{"key"'),
        ('[{"key": {"m": 1.5}, "stats": {}}]', "key must be an object of int or string values"),
        ('[{"key": {"m": 1}, "stats": {}}, {"key": {"m": 1}, "stats": {}}]', "entry 1: duplicate key"),
        ("[", "not valid JSON"),
    ],
)
def test_stats_sidecar_rejects_bad_files_naming_them(tmp_path, content, reason):
    path = tmp_path / "nvidia_h200.stats.json"
    path.write_text(content)
    with pytest.raises(cs.ConfigFileError, match=reason) as exc:
        cs.read_stats_file(path)
    assert str(path) in str(exc.value)
    with pytest.raises(cs.ConfigFileError):  # merging into it leaves it untouched
        cs.save_stats_file(path, {_kid(1, 1, 1): {}})
    assert path.read_text() == content
    with pytest.raises(FileNotFoundError):
        cs.read_stats_file(tmp_path / "missing.stats.json")


def test_written_files_get_the_mode_of_a_plainly_written_file(tmp_path):
    """mkstemp creates 0600 files; a config file (or kernel-cache entry) moved into place must be
    readable as a plain open() would have made it: 0666 less the umask (a server reading
    HL_CONFIG_DIR may run as another user)."""
    from hlcore import kernel_cache

    old = os.umask(0o027)
    cs.new_file_mode.cache_clear()
    try:
        assert cs.new_file_mode() == 0o640
        cs.write_text_atomic(tmp_path / "a.json", "{}\n")
        path = tmp_path / "cfg" / "nvidia_h200.json"
        cs.save_config_file(path, [], {"gpu": "nvidia_h200"})
        entry = tmp_path / "kc" / "k" / "e.py"
        kernel_cache.write_entry(entry, "key", "k", "x = 1\n")
        with open(tmp_path / "plain", "w") as f:
            f.write("")
        for p in (tmp_path / "a.json", path, entry, tmp_path / "plain"):
            assert stat.S_IMODE(p.stat().st_mode) == 0o640, p
    finally:
        os.umask(old)
        cs.new_file_mode.cache_clear()
