"""pick_scaled_mm_config: exact -> nearest (K, then N) -> smallest tuned M >= num_tokens -> the
file's default entry -> heuristic; fallback marker; memoisation; scaled_mm() uses it."""

import json
import logging

import pytest
import torch

from hlcore import config_store as cs
from hlcore import scaled_mm_config as smc
from hlcore.config_store import ConfigEntry
from hlcore.scaled_mm_config import check_scaled_mm_config, default_scaled_mm_config, pick_scaled_mm_config

GPU = "NVIDIA H200"


def _cfg(tag: int) -> dict:
    """A valid config whose num_stages identifies which entry was picked."""
    return {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": tag, "split_k": 1, "swap_ab": True}


TUNED = {  # (fmt, n, k, m) -> tag
    ("fp8_dynamic", 6144, 4096, 1): 1,
    ("fp8_dynamic", 6144, 4096, 8): 2,
    ("fp8_dynamic", 6144, 4096, 32): 3,
    ("fp8_dynamic", 4096, 4096, 4): 4,
    ("fp8_dynamic", 4096, 12288, 16): 5,
    ("fp8_dynamic", 24576, 4096, 2): 6,
    ("w8a8_int8", 6144, 4096, 1): 7,
}


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HL_CONFIG_DIR", str(tmp_path))
    smc.clear_scaled_mm_config_cache()
    yield tmp_path
    smc.clear_scaled_mm_config_cache()


def _write(root, entries, *, gpu="nvidia_h200", helion=None):
    meta = {"gpu": gpu, "helion": helion or cs.installed_helion_version()}
    cs.save_config_file(cs.config_file_path("scaled_mm", gpu, root), entries, meta)


def _tuned_entries(**marks):
    return [
        ConfigEntry(cs.scaled_mm_key(f, n, k, m), _cfg(tag), fallback=marks.get(f"t{tag}", False))
        for (f, n, k, m), tag in TUNED.items()
    ]


def _tag(fmt, m, n, k):
    pick = pick_scaled_mm_config(fmt, m, n, k, gpu=GPU)
    return pick.config["num_stages"], pick.source


@pytest.mark.parametrize(
    ("fmt", "m", "n", "k", "tag", "source"),
    [
        ("fp8_dynamic", 8, 6144, 4096, 2, "exact"),
        ("fp8_dynamic", 5, 6144, 4096, 2, "same_shape"),  # smallest tuned M >= 5 is 8
        ("fp8_dynamic", 2, 6144, 4096, 2, "same_shape"),
        ("fp8_dynamic", 24, 6144, 4096, 3, "same_shape"),
        ("fp8_dynamic", 64, 6144, 4096, 3, "same_shape"),  # none >= 64: the largest (32)
        ("fp8_dynamic", 1, 5000, 4096, 4, "nearest"),  # K 4096 exact, nearest N 4096, its only M
        ("fp8_dynamic", 1, 30000, 4096, 6, "nearest"),  # nearest N 24576
        ("fp8_dynamic", 1, 6144, 11000, 5, "nearest"),  # nearest K first (12288), even though N differs
        ("fp8_dynamic", 40, 6144, 5000, 3, "nearest"),  # nearest K 4096, N 6144, largest M
        ("w8a8_int8", 16, 4096, 4096, 7, "nearest"),  # formats never mix
    ],
)
def test_picker_rules(config_dir, fmt, m, n, k, tag, source):
    _write(config_dir, _tuned_entries())
    assert _tag(fmt, m, n, k) == (tag, source)


def test_nearest_ties_go_to_the_smaller_value():
    entries = [
        ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 1024, kk, 1), _cfg(kk // 1024)) for kk in (2048, 4096)
    ]
    entry, source = smc.select_scaled_mm_entry(entries, "fp8_dynamic", 1, 1024, 3072)
    assert (entry.config["num_stages"], source) == (2, "nearest")
    assert smc.select_scaled_mm_entry(entries, "block_fp8", 1, 1024, 3072) == (None, None)


def test_default_entry_then_heuristic(config_dir):
    _write(config_dir, [*_tuned_entries(), ConfigEntry({}, _cfg(9))])
    assert _tag("block_fp8", 4, 6144, 4096) == (9, "default")  # no block_fp8 key: the default entry
    assert _tag("fp8_dynamic", 4, 6144, 4096)[1] == "same_shape"  # the default never beats a tuned key
    smc.clear_scaled_mm_config_cache()
    _write(config_dir, [ConfigEntry({}, _cfg(9))])
    cs.save_config_file(cs.config_file_path("scaled_mm", "nvidia_h200", config_dir), [], merge=False)
    pick = pick_scaled_mm_config("block_fp8", 4, 6144, 4096, gpu=GPU)
    assert pick.source == "heuristic" and pick.config == default_scaled_mm_config(4, 6144, 4096)


def test_no_gpu_or_no_file_gives_the_heuristic(config_dir, caplog):
    _write(config_dir, _tuned_entries())
    for pick in (
        pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, device="cpu"),  # CPU tensors: no GPU
        pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, gpu="NVIDIA B200"),  # no file for it
    ):
        assert pick.source == "heuristic" and pick.path is None
        assert pick.config == default_scaled_mm_config(8, 6144, 4096)
    # which GPU the pick was for (None: no GPU): hlvllm runs vLLM's kernel on a GPU without a tuned entry
    assert pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, device="cpu").gpu is None
    assert pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, gpu="NVIDIA B200").gpu == "nvidia_b200"
    with caplog.at_level(logging.WARNING):
        smc.clear_scaled_mm_config_cache()
        caplog.clear()
        for m in (1, 2, 4):  # one warning per GPU and process, naming the tuning command
            pick_scaled_mm_config("fp8_dynamic", m, 6144, 4096, gpu="NVIDIA B200")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "hltools autotune" in warnings[0] and "nvidia_b200" in warnings[0]


def test_file_without_the_format_gives_the_heuristic_and_names_the_file(config_dir):
    _write(config_dir, [ConfigEntry(cs.scaled_mm_key("w8a8_int8", 6144, 4096, 8), _cfg(1))])
    pick = pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, gpu="NVIDIA H200")
    assert (pick.source, pick.gpu) == ("heuristic", "nvidia_h200") and pick.path.endswith("nvidia_h200.json")


def test_family_file_serves_a_variant(config_dir):
    _write(config_dir, _tuned_entries(), gpu="nvidia_h100")
    pick = pick_scaled_mm_config("fp8_dynamic", 1, 6144, 4096, gpu="NVIDIA H100 80GB HBM3")
    assert (pick.config["num_stages"], pick.source) == (1, "exact")
    assert pick.path.endswith("nvidia_h100.json")


def test_rejected_file_falls_back_to_heuristic_with_one_warning(config_dir, caplog):
    _write(config_dir, _tuned_entries(), helion="0.0.1")
    with caplog.at_level(logging.WARNING):
        picks = [pick_scaled_mm_config("fp8_dynamic", m, 6144, 4096, gpu=GPU) for m in (1, 1, 2)]
    assert {p.source for p in picks} == {"heuristic"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "helion 0.0.1" in warnings[0]


def test_invalid_entries_are_skipped(config_dir, caplog):
    bad = ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 8), {**_cfg(2), "split_k": 3})
    _write(config_dir, [*_tuned_entries(), bad])
    with caplog.at_level(logging.WARNING):
        # M=8's entry is invalid: the next rule (smallest other tuned M >= 8) applies
        assert _tag("fp8_dynamic", 8, 6144, 4096) == (3, "same_shape")
    assert any("split_k" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("knob", ["pdl", "split_k_workspace"])
def test_entries_with_a_removed_knob_are_skipped_with_one_warning(config_dir, caplog, knob):
    """A file written when the kernel still had PDL / workspace split-K: those entries are invalid
    (one warning naming the file, the count and the knob), the others still serve."""
    stale = [
        ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, m), {**_cfg(tag), knob: True})
        for m, tag in ((8, 2), (32, 3))
    ]
    _write(config_dir, [*_tuned_entries(), *stale])
    with caplog.at_level(logging.WARNING):
        # M=8 and M=32 are gone: the smallest tuned M >= 8 left is none, so the largest (M=1)
        assert _tag("fp8_dynamic", 8, 6144, 4096) == (1, "same_shape")
        assert _tag("fp8_dynamic", 1, 6144, 4096) == (1, "exact")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert (
        "ignoring 2 scaled_mm entries" in warnings[0] and f"{knob}: no longer a scaled_mm knob" in warnings[0]
    )
    assert check_scaled_mm_config({**_cfg(1), knob: False}) is not None  # the key itself is stale


def test_fallback_marker(config_dir):
    _write(config_dir, _tuned_entries(t2=True))
    marked = pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, gpu=GPU)
    assert marked.fallback and marked.source == "exact"
    assert marked.config == _cfg(2)  # the config stays available (e.g. for benchmarks)
    assert pick_scaled_mm_config("fp8_dynamic", 5, 6144, 4096, gpu=GPU).fallback  # reuses the marked key
    assert not pick_scaled_mm_config("fp8_dynamic", 1, 6144, 4096, gpu=GPU).fallback


def test_memoised_on_ints_and_safe_to_mutate(config_dir, monkeypatch):
    _write(config_dir, _tuned_entries())
    calls = []
    real = cs.find_configs
    monkeypatch.setattr(smc, "find_configs", lambda *a: calls.append(a) or real(*a))
    first = pick_scaled_mm_config("fp8_dynamic", 8, 6144, 4096, gpu=GPU)
    first.config["num_stages"] = 99  # a copy: the memoised pick is unchanged
    again = pick_scaled_mm_config("fp8_dynamic", torch.tensor(8).item(), 6144, 4096, gpu="nvidia_h200")
    assert again is first and again.config["num_stages"] == 2
    pick_scaled_mm_config("fp8_dynamic", 9, 6144, 4096, gpu=GPU)
    assert len(calls) == 1  # the file was read once for all picks
    assert smc._pick.cache_info().hits >= 1
    with pytest.raises(ValueError, match="fmt must be one of"):
        pick_scaled_mm_config("fp4", 1, 1, 1)


def test_check_scaled_mm_config():
    assert check_scaled_mm_config(default_scaled_mm_config(3, 100, 4096)) is None
    assert "block_sizes" in check_scaled_mm_config({"block_sizes": [16, 48, 128]})
    assert "split_k" in check_scaled_mm_config({"block_sizes": [16, 64, 128], "split_k": 512})
    assert "swap_ab" in check_scaled_mm_config({"block_sizes": [16, 64, 128], "swap_ab": 1})


def test_scaled_mm_uses_the_picker_and_is_unchanged_without_configs(config_dir, monkeypatch):
    from hlcore import scaled_mm as sm

    seen = []

    def fake_kernel_for(config_json):
        seen.append(config_json)
        return lambda a, b_t, *rest: torch.zeros(a.shape[0], b_t.shape[0])

    monkeypatch.setattr(sm, "_kernel_for", fake_kernel_for)
    _write(config_dir, _tuned_entries())  # for nvidia_h200: not this CPU run
    inputs = sm.generate_scaled_mm_inputs(3, 64, 128)
    sm.scaled_mm(**inputs)
    assert json.loads(seen[-1]) == default_scaled_mm_config(3, 64, 128)
    assert seen[-1] == json.dumps(
        default_scaled_mm_config(3, 64, 128), sort_keys=True
    )  # same compile cache key
    monkeypatch.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")
    sm.scaled_mm(**inputs)  # on "an H200": nearest tuned K (4096), then N (4096), its M (4)
    assert json.loads(seen[-1]) == _cfg(4)
