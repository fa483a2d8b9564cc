"""``hltools configs from-bench`` on the CPU: entries from fake benchmark rows (win, loss,
conflicting duplicates, failed rows), the written file (accepted by the loader, picks carry the
fallback mark), metadata from the rows, a file of another GPU / helion version refused without
--force; the Helion row's ``"<label> <JSON>"`` config round trip, label-only rows resolved with
--config-dir (as the picker does), --only-new."""

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from hlcore import config_store as cs
from hlcore import scaled_mm_config as smc
from hlcore.scaled_mm_config import default_scaled_mm_config, pick_scaled_mm_config
from hltools import bench
from hltools import bench_configs as bc
from hltools.bench import BenchResult
from hltools.bench_configs import entries_from_bench, fallback_mark, measured_config, pick_from_config_dir
from hltools.cli import app
from hltools.results import write_json

runner = CliRunner()
#: The single-run rule (any loss marks, one process is enough): the CLI tests below exercise file
#: writing, merging and provenance on one benchmark run each; the 3-process margin rule has its own.
ONE_RUN = ["--min-processes", "1", "--margin", "0"]
VERSIONS = {"torch": "2.11.0", "triton": "3.6.0", "helion": "1.5.0", "vllm": "0.26.0"}
TUNED = {"block_sizes": [16, 64, 128], "num_warps": 8, "num_stages": 3, "split_k": 2, "swap_ab": True}


def _pair(helion_us, vllm_us, *, fmt="fp8_dynamic", n=6144, k=4096, m=1, model="qwen3-8b", layer="qkv", **hl):
    common = dict(model=model, layer=layer, format=fmt, m=m, n=n, k=k, gpu="NVIDIA H200", ok=True)
    common |= VERSIONS | {"date": "2026-11-30T17:49:48+00:00"}
    helion = dict(
        provider="helion", kernel="helion scaled_mm", median_us=helion_us, rel_err=3e-3, config="heuristic"
    )
    h = BenchResult(**(common | helion | hl))
    v = BenchResult(provider="vllm", kernel="vllm cutlass_scaled_mm", median_us=vllm_us, **common)
    return [h, v]


def _by_key(entries):
    return {(e.key["format"], e.key["n"], e.key["k"], e.key["m"]): e for e in entries}


def _stats(out, fmt, n, k, m):
    """The stats of one key in the sidecar of config directory ``out`` (default location outside a
    checkout: ``out`` itself, beside the config file)."""
    sidecar = cs.stats_file_path("scaled_mm", "nvidia_h200", out)
    return cs.read_stats_file(sidecar)[1][cs.key_id(cs.scaled_mm_key(fmt, n, k, m))]


def test_win_and_loss():
    rows = _pair(9.0, 10.0, m=1) + _pair(11.0, 10.0, m=2) + _pair(10.0, 10.0, m=4)
    rows.append(BenchResult("qwen3-8b", "qkv", "fp8_dynamic", "torch", "torch._scaled_mm", 1, 6144, 4096))
    entries = _by_key(entries_from_bench(rows))
    assert set(entries) == {("fp8_dynamic", 6144, 4096, m) for m in (1, 2, 4)}
    win, loss, tie = (entries["fp8_dynamic", 6144, 4096, m] for m in (1, 2, 4))
    assert not win.fallback and loss.fallback and not tie.fallback  # a tie is not a loss
    assert win.config == default_scaled_mm_config(1, 6144, 4096)  # "heuristic": what ran
    assert loss.config == default_scaled_mm_config(2, 6144, 4096)
    assert win.stats["helion_us"] == 9.0 and win.stats["fallback_us"] == 10.0
    assert win.stats["fallback_kernel"] == "vllm cutlass_scaled_mm"
    assert win.stats["rel_err"] == 3e-3 and win.stats["source"] == "hltools bench kernels"
    assert win.stats["layers"] == ["qwen3-8b qkv"] and win.stats["measurements"] == 1
    assert win.key == cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1)


def test_json_config_is_used_as_measured():
    rows = _pair(9.0, 10.0, config=json.dumps(TUNED) + " (marked fallback)")
    (entry,) = entries_from_bench(rows)
    assert entry.config == TUNED and entry.stats["config_source"] == "measured config"


def test_conflicting_duplicates_are_marked_fallback():
    """The same key from two models / layers: fallback when ANY measurement lost (conservative);
    the stats are the worst measurement's."""
    rows = _pair(9.0, 10.0, model="a", layer="o") + _pair(10.5, 10.0, model="b", layer="qkv")
    rows += _pair(8.0, 10.0, model="c", layer="o", fmt="w8a8_int8") + _pair(
        9.0, 10.0, model="d", fmt="w8a8_int8"
    )
    entries = _by_key(entries_from_bench(rows))
    fp8, int8 = entries["fp8_dynamic", 6144, 4096, 1], entries["w8a8_int8", 6144, 4096, 1]
    assert fp8.fallback and not int8.fallback
    assert fp8.stats["helion_us"] == 10.5 and fp8.stats["measurements"] == 2
    assert fp8.stats["layers"] == ["a o", "b qkv"] and fp8.stats["models"] == ["a", "b"]
    assert int8.stats["helion_us"] == 9.0  # worst ratio: 0.9 > 0.8


def test_failed_and_unpaired_rows_are_skipped():
    failed = _pair(None, 10.0, m=1, ok=False, note="Helion failed: boom")
    vllm_failed = _pair(9.0, None, m=2)
    vllm_failed[1].ok = False
    no_vllm = _pair(9.0, 10.0, m=4)[:1]
    unknown_config = _pair(9.0, 10.0, m=8, config="nearest")
    good = _pair(9.0, 10.0, m=16)
    skipped: list[str] = []
    entries = entries_from_bench(failed + vllm_failed + no_vllm + unknown_config + good, skipped)
    assert [e.key["m"] for e in entries] == [16]
    text = "\n".join(skipped)
    assert len(skipped) == 5, text  # M=1 Helion, M=2 vLLM + its Helion row (unpaired), M=4, M=8
    assert "M=1" in text and "boom" in text and "no timed vLLM row" in text and "'nearest'" in text


def test_different_configs_for_one_key_are_skipped():
    rows = _pair(9.0, 10.0, model="a") + _pair(9.0, 10.0, model="b", config=json.dumps(TUNED))
    skipped: list[str] = []
    assert entries_from_bench(rows, skipped) == [] and "different configs" in skipped[0]


def test_measured_config_labels():
    r = _pair(9.0, 10.0, m=3, n=512, k=1024)[0]
    assert measured_config(r) == (default_scaled_mm_config(3, 512, 1024), "heuristic")
    r.config = "exact"
    config, reason = measured_config(r)
    assert config is None and "'exact'" in reason and "--config-dir" in reason
    compact = json.dumps(TUNED, separators=(",", ":"))
    r.config = f"exact (marked fallback) {compact}"  # what hltools bench kernels writes now
    assert measured_config(r) == (TUNED, "exact")
    r.config = f"nearest {json.dumps(TUNED)}"
    assert measured_config(r) == (TUNED, "nearest")
    r.config = f"heuristic {compact}"  # the JSON wins over the label
    assert measured_config(r) == (TUNED, "heuristic")
    r.config = f"{compact} (marked fallback)"  # old: JSON alone
    assert measured_config(r) == (TUNED, "measured config")
    r.config = "exact {not json"
    assert measured_config(r)[0] is None


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _write_bench(path, rows, command="hltools bench kernels --model x", **metadata):
    write_json(path, {"metadata": {"command": command, **metadata}, "results": [r.to_dict() for r in rows]})
    return path


@pytest.fixture
def picks(monkeypatch, tmp_path):
    """``pick(fmt, n, k, m)`` on "an H200" with ``HL_CONFIG_DIR = tmp_path/out``."""
    out = tmp_path / "out"
    monkeypatch.setenv("HL_CONFIG_DIR", str(out))
    smc.clear_scaled_mm_config_cache()
    yield lambda fmt, n, k, m: pick_scaled_mm_config(fmt, m, n, k, gpu="nvidia_h200")
    smc.clear_scaled_mm_config_cache()


def test_cli_writes_a_loadable_file_with_fallback_marks(tmp_path, picks, monkeypatch):
    rows = _pair(9.0, 10.0, m=1) + _pair(11.0, 10.0, m=2)
    a = _write_bench(tmp_path / "a.json", rows)
    b = _write_bench(
        tmp_path / "b.json", _pair(12.0, 10.0, fmt="block_fp8", m=1), "hltools bench kernels --b"
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["configs", "from-bench", str(a), str(b), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    assert "3 keys written (2 marked fallback), 0 kept" in " ".join(result.output.split())
    path = out / "scaled_mm" / "nvidia_h200.json"
    cf = cs.load_config_file(path, helion_version="1.5.0")
    assert cf is not None and len(cf.entries) == 3
    meta = cf.metadata
    assert meta["gpu"] == "nvidia_h200" and meta["gpu_name"] == "NVIDIA H200"
    assert {d: meta[d] for d in VERSIONS} == VERSIONS  # from the rows, not this machine
    assert meta["date"] == "2026-11-30T17:49:48+00:00" and meta["source"] == "hltools bench kernels"
    assert meta["commit"] is None and "not autotuned" in meta["note"]
    assert meta["bench_commands"] == ["hltools bench kernels --model x", "hltools bench kernels --b"]
    assert meta["command"].startswith("hltools configs from-bench ")

    monkeypatch.setattr(cs, "installed_helion_version", lambda: "1.5.0")
    win, loss, block = (
        picks("fp8_dynamic", 6144, 4096, 1),
        picks("fp8_dynamic", 6144, 4096, 2),
        picks("block_fp8", 6144, 4096, 1),
    )
    assert (win.source, loss.source, block.source) == ("exact", "exact", "exact")
    assert (win.fallback, loss.fallback, block.fallback) == (False, True, True)
    assert win.config == default_scaled_mm_config(1, 6144, 4096)

    # rerun with one more key: merged, the others kept
    c = _write_bench(tmp_path / "c.json", _pair(9.0, 10.0, m=4))
    result = runner.invoke(app, ["configs", "from-bench", str(c), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    assert len(cs.read_config_file(path).entries) == 4


def test_cli_model_keeps_one_models_rows(tmp_path):
    """--model ships one model of a benchmark that ran two: the other model's keys are not written,
    and a name without rows is refused with the names the files hold."""
    rows = _pair(9.0, 10.0, m=1, model="qwen3-32b", n=10240, k=5120) + _pair(
        11.0, 10.0, m=1, model="llama-3.1-8b"
    )
    a = _write_bench(tmp_path / "a.json", rows)
    out = tmp_path / "out"
    args = ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN]
    result = runner.invoke(app, [*args, "--model", "qwen3-32b"])
    assert result.exit_code == 0, result.output
    cf = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json")
    assert set(cf.entries) == {cs.key_id(cs.scaled_mm_key("fp8_dynamic", 10240, 5120, 1))}
    assert cf.metadata["command"].endswith("--model qwen3-32b")
    result = runner.invoke(app, [*args, "--model", "mistral-7b"])
    assert result.exit_code == 2
    assert "mistral-7b" in result.output and "llama-3.1-8b, qwen3-32b" in " ".join(result.output.split())


@pytest.mark.parametrize(
    "meta", [{"gpu": "nvidia_h100", "helion": "1.5.0"}, {"gpu": "nvidia_h200", "helion": "1.4.0"}]
)
def test_cli_refuses_another_gpu_or_helion_without_force(tmp_path, meta):
    out = tmp_path / "out"
    path = cs.config_file_path("scaled_mm", "nvidia_h200", out)
    old = cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 1, 1, 1), dict(TUNED))
    cs.save_config_file(path, [old], meta)
    before = path.read_text()
    a = _write_bench(tmp_path / "a.json", _pair(9.0, 10.0))
    result = runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 2, result.output
    assert "--force" in result.output and path.read_text() == before
    result = runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), "--force", *ONE_RUN])
    assert result.exit_code == 0, result.output
    cf = cs.read_config_file(path)
    assert cf.metadata["gpu"] == "nvidia_h200" and cf.metadata["helion"] == "1.5.0"
    assert list(cf.entries) == [cs.key_id(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1))]  # started afresh


def test_cli_refuses_rows_of_two_gpus(tmp_path):
    rows = _pair(9.0, 10.0) + _pair(9.0, 10.0, m=2, gpu="NVIDIA H100 80GB HBM3")
    a = _write_bench(tmp_path / "a.json", rows)
    result = runner.invoke(
        app, ["configs", "from-bench", str(a), "--output", str(tmp_path / "out"), *ONE_RUN]
    )
    assert result.exit_code == 2 and "several GPU" in result.output
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# The Helion row's config: "<label> <JSON>" round trip; label-only rows with --config-dir
# --------------------------------------------------------------------------------------------
OTHER = {"block_sizes": [32, 64, 128], "num_warps": 4, "num_stages": 4, "split_k": 1, "swap_ab": True}
DEFAULT = {"block_sizes": [64, 64, 128], "num_warps": 4, "num_stages": 2, "split_k": 1, "swap_ab": False}


def _config_file(root, helion="1.5.0"):
    """``<root>/scaled_mm/nvidia_h200.json``: fp8_dynamic (N=6144, K=4096) at M=1 (TUNED, marked)
    and M=8 (OTHER), and a default entry (DEFAULT)."""
    entries = [
        cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1), dict(TUNED), True),
        cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 8), dict(OTHER)),
        cs.ConfigEntry({}, dict(DEFAULT)),
    ]
    path = cs.config_file_path("scaled_mm", "nvidia_h200", root)
    cs.save_config_file(path, entries, {"gpu": "nvidia_h200", "helion": helion})
    return path


def test_helion_row_config_says_source_and_config(tmp_path, picks, monkeypatch):
    """bench's Helion row: the picker's label then the config that _helion_prepare runs, as compact
    JSON; from-bench reads that config back."""
    _config_file(tmp_path / "out")
    monkeypatch.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")  # "an H200"
    inputs = SimpleNamespace(fmt="fp8_dynamic", n=6144, k=4096, device="cuda")
    compact = '{"block_sizes":[16,64,128],"num_stages":3,"num_warps":8,"split_k":2,"swap_ab":true}'
    assert bench._helion_config(inputs, 1) == f"exact (marked fallback) {compact}"
    other = json.dumps(OTHER, sort_keys=True, separators=(",", ":"))
    assert bench._helion_config(inputs, 4) == f"same_shape {other}"
    assert bench._helion_config(SimpleNamespace(fmt="block_fp8", n=6144, k=4096, device="cuda"), 2) == (
        "default " + json.dumps(DEFAULT, sort_keys=True, separators=(",", ":"))
    )
    # the config in the label is the one the timed calls run
    from hlcore import scaled_mm as sm

    ran = []
    monkeypatch.setattr(sm, "scaled_mm", lambda *a, config, **kw: ran.append(config))
    one_copy = SimpleNamespace(
        **vars(inputs), a=[0] * 4, scale_a=[0] * 4, block_size=None, out_dtype=None, weights=[(0, 0)]
    )
    for m in (1, 4):
        (call,) = bench._helion_prepare(one_copy)(m)
        call()
        label = bench._helion_config(inputs, m)
        assert json.loads(ran[-1]) == json.loads(label[label.index("{") :])
    assert json.loads(ran[0]) == TUNED and json.loads(ran[1]) == OTHER

    # round trip through from-bench (M=4 is a new key: its config is M=8's)
    rows = _pair(11.0, 10.0, m=1, config=bench._helion_config(inputs, 1))
    rows += _pair(9.0, 10.0, m=4, config=bench._helion_config(inputs, 4))
    a = _write_bench(tmp_path / "a.json", rows)
    out = tmp_path / "new"
    result = runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    cf = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json")
    one, four = (cf.get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, m)) for m in (1, 4))
    one_stats, four_stats = (_stats(out, "fp8_dynamic", 6144, 4096, m) for m in (1, 4))
    assert (one.config, one.fallback, one_stats["config_source"]) == (TUNED, True, "exact")
    assert (four.config, four.fallback, four_stats["config_source"]) == (OTHER, False, "same_shape")


def test_pick_from_config_dir_is_the_picker(tmp_path, picks):
    """For every kind of pick, the same config, source, key and mark as pick_scaled_mm_config on
    "an H200" with HL_CONFIG_DIR = that directory."""
    path = _config_file(tmp_path / "out")
    points = [("fp8_dynamic", 6144, 4096, m) for m in (1, 2, 8, 64)]
    points += [("fp8_dynamic", 5120, 4096, 2), ("fp8_dynamic", 6144, 8192, 1), ("w8a8_int8", 6144, 4096, 1)]
    sources = set()
    for fmt, n, k, m in points:
        want = picks(fmt, n, k, m)
        got, why = pick_from_config_dir(tmp_path / "out", "NVIDIA H200", "1.5.0", fmt, m, n, k)
        assert got == want and why == "" and got.path == str(path)
        sources.add(got.source)
    assert sources == {"exact", "same_shape", "nearest", "default"}
    # the rows' helion, not this machine's: a file of helion 1.4.0 is what a 1.4.0 benchmark ran
    _config_file(tmp_path / "old", helion="1.4.0")
    got, _ = pick_from_config_dir(tmp_path / "old", "NVIDIA H200", "1.4.0", "fp8_dynamic", 1, 6144, 4096)
    assert (got.source, got.config, got.fallback) == ("exact", TUNED, True)
    got, why = pick_from_config_dir(tmp_path / "old", "NVIDIA H200", "1.5.0", "fp8_dynamic", 1, 6144, 4096)
    assert got.source == "heuristic" and "tuned with helion 1.4.0" in why
    got, why = pick_from_config_dir(tmp_path / "none", "NVIDIA H200", "1.5.0", "fp8_dynamic", 1, 6144, 4096)
    assert got.config == default_scaled_mm_config(1, 6144, 4096) and "no " in why
    assert (got.source, got.gpu, got.path) == ("heuristic", "nvidia_h200", None)  # as the picker says


def _label_only_rows():
    """Rows of an older benchmark that ran with _config_file (labels only), and one row whose label
    that file does not give (M=16: the picker gives same_shape, M=8's entry)."""
    return (
        _pair(11.0, 10.0, m=1, config="exact (marked fallback)")
        + _pair(9.0, 10.0, m=4, config="same_shape")
        + _pair(8.0, 10.0, m=2, n=5120, config="nearest")
        + _pair(9.0, 10.0, m=2, fmt="block_fp8", config="default")
        + _pair(9.0, 10.0, m=16, config="exact")
    )


def test_cli_resolves_label_only_rows_with_config_dir(tmp_path, picks, monkeypatch):
    ran = tmp_path / "ran"
    _config_file(ran)
    a = _write_bench(tmp_path / "a.json", _label_only_rows())
    out = tmp_path / "out"
    args = ["configs", "from-bench", str(a), "--output", str(out), "--config-dir", str(ran), *ONE_RUN]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "4 keys written (1 marked fallback), 0 kept" in text and "1 rows skipped" in text
    assert "'exact', but" in text and "gives 'same_shape'" in text  # M=16: not the file it ran with
    cf = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json")
    got = {(e.key["format"], e.key["n"], e.key["m"]): e for e in cf.entries.values()}
    assert set(got) == {
        ("fp8_dynamic", 6144, 1),
        ("fp8_dynamic", 6144, 4),
        ("fp8_dynamic", 5120, 2),
        ("block_fp8", 6144, 2),
    }
    assert got["fp8_dynamic", 6144, 1].config == TUNED and got["fp8_dynamic", 6144, 1].fallback
    assert got["fp8_dynamic", 6144, 4].config == OTHER  # same_shape: M=8's
    assert got["fp8_dynamic", 5120, 2].config == OTHER  # nearest N=6144, then M'=8 >= 2
    assert got["block_fp8", 6144, 2].config == DEFAULT
    path = str(cs.config_file_path("scaled_mm", "nvidia_h200", ran))
    assert _stats(out, "fp8_dynamic", 6144, 4096, 4)["config_source"] == f"same_shape in {path}"
    # exactly what the picker returns with that directory
    monkeypatch.setenv("HL_CONFIG_DIR", str(ran))
    smc.clear_scaled_mm_config_cache()
    for (fmt, n, m), e in got.items():
        assert e.config == picks(fmt, n, 4096, m).config
    assert cf.metadata["command"].endswith(f"--config-dir {ran}")
    # the file it ran is named, with what made it (this one records no command)
    assert cf.metadata["configs_from"] == [{"file": path}] and cf.metadata["note"] == bc.NOTE_FILES


def test_cli_skips_label_only_rows_without_config_dir(tmp_path):
    a = _write_bench(tmp_path / "a.json", _label_only_rows())
    out = tmp_path / "out"
    result = runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "nothing written" in text and text.count("the row did not record (--config-dir DIR") == 5
    assert not out.exists()


def test_cli_only_new_keeps_existing_keys(tmp_path):
    out = tmp_path / "out"
    path = cs.config_file_path("scaled_mm", "nvidia_h200", out)
    old = cs.ConfigEntry(
        cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1), dict(TUNED), True, {"source": "autotune"}
    )
    first = {"command": "hltools autotune --model qwen3-8b", "date": "2026-11-30", "earlier": [{"date": "x"}]}
    cs.save_config_file(path, [old], {"gpu": "nvidia_h200", "helion": "1.5.0", **first})
    a = _write_bench(tmp_path / "a.json", _pair(9.0, 10.0, m=1) + _pair(11.0, 10.0, m=2))
    args = ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN]
    result = runner.invoke(app, [*args, "--only-new"])
    assert result.exit_code == 0, result.output
    assert "1 keys written (1 marked fallback), 1 kept" in " ".join(result.output.split())
    cf = cs.read_config_file(path)
    one, two = (cf.get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, m)) for m in (1, 2))
    assert one == old  # config, fallback mark and stats untouched
    assert two.config == default_scaled_mm_config(2, 6144, 4096) and two.fallback
    assert cf.metadata["command"].endswith("--only-new")
    # where the kept key came from is not lost: the file's provenance, then what it had kept
    assert cf.metadata["earlier"] == [
        {"command": "hltools autotune --model qwen3-8b", "date": "2026-11-30"},
        {"date": "x"},
    ]
    # nothing new: the file is not rewritten
    before = path.read_text()
    result = runner.invoke(app, [*args, "--only-new"])
    assert result.exit_code == 0, result.output
    assert "0 keys written (0 marked fallback), 2 kept" in " ".join(result.output.split())
    assert path.read_text() == before
    # default: the benchmark's entries replace the file's
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    one = cs.read_config_file(path).get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1))
    assert one.config == default_scaled_mm_config(1, 6144, 4096) and not one.fallback


# --------------------------------------------------------------------------------------------
# Stats sidecar: the config file holds key, config, fallback and provenance; measurements beside
# --------------------------------------------------------------------------------------------
def test_cli_writes_stats_to_the_sidecar_not_the_config_file(tmp_path):
    rows = _pair(9.0, 10.0, m=1) + _pair(11.0, 10.0, m=2, fmt="block_fp8")
    a = _write_bench(tmp_path / "a.json", rows)
    out, stats_dir = tmp_path / "configs", tmp_path / "elsewhere"
    args = ["configs", "from-bench", str(a), "--output", str(out), "--stats-output", str(stats_dir), *ONE_RUN]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    path = out / "scaled_mm" / "nvidia_h200.json"
    sidecar = stats_dir / "scaled_mm" / "nvidia_h200.stats.json"
    assert not (tmp_path / "lab").exists()  # --stats-output replaces the default location
    data = json.loads(path.read_text())
    assert [sorted(item) for item in data[1:]] == [
        ["config", "fallback", "key"],
        ["config", "key"],
    ]  # block, fp8
    cf = cs.read_config_file(path)
    assert cf.metadata["stats_file"] == str(sidecar) and cf.metadata["command"].endswith(
        f"--stats-output {stats_dir}"
    )
    meta, stats = cs.read_stats_file(sidecar)
    assert set(stats) == set(cf.entries)  # keyed the same way
    win = stats[cs.key_id(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1))]
    loss = stats[cs.key_id(cs.scaled_mm_key("block_fp8", 6144, 4096, 2))]
    assert (win["helion_us"], win["fallback_us"], win["config_source"]) == (9.0, 10.0, "heuristic")
    assert (loss["helion_us"], loss["fallback_us"], loss["measurements"]) == (11.0, 10.0, 1)
    assert meta["config_file"] == str(path) and meta["gpu"] == "nvidia_h200" and meta["helion"] == "1.5.0"
    assert meta["command"] == cf.metadata["command"] and "informative only" in meta["note"]


def test_cli_stats_sidecar_default_location_in_a_checkout(tmp_path):
    """In a checkout (``lab/`` beside the config directory) the sidecar goes to
    ``lab/results/config-stats``, not into the configs the wheel ships."""
    (tmp_path / "lab").mkdir()
    out = tmp_path / "configs"
    a = _write_bench(tmp_path / "a.json", _pair(9.0, 10.0, m=1))
    result = runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    sidecar = tmp_path / "lab" / "results" / "config-stats" / "scaled_mm" / "nvidia_h200.stats.json"
    assert cs.read_stats_file(sidecar)[1] and not list(out.rglob("*.stats.json"))
    assert cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json").metadata["stats_file"] == str(sidecar)


def test_cli_stats_sidecar_of_another_directory_in_a_checkout_stays_beside_it(tmp_path):
    """Only the checkout's ``configs`` sends its sidecar to ``lab/``: a user's ``my-configs`` there
    keeps it beside its own file, and the shipped sidecar is not touched."""
    (tmp_path / "lab").mkdir()
    out = tmp_path / "my-configs"
    a = _write_bench(tmp_path / "a.json", _pair(9.0, 10.0, m=1))
    result = runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    assert _stats(out, "fp8_dynamic", 6144, 4096, 1)["helion_us"] == 9.0
    assert not (tmp_path / "lab" / "results").exists()


def test_cli_stats_sidecar_default_location_and_merge(tmp_path):
    """Default outside a checkout: beside the config file, which the picker still reads alone; a
    second run merges (new keys added, kept keys' stats untouched with --only-new, replaced without)."""
    out = tmp_path / "my-configs"
    sidecar = out / "scaled_mm" / "nvidia_h200.stats.json"
    a = _write_bench(tmp_path / "a.json", _pair(9.0, 10.0, m=1))
    assert (
        runner.invoke(app, ["configs", "from-bench", str(a), "--output", str(out), *ONE_RUN]).exit_code == 0
    )
    assert _stats(out, "fp8_dynamic", 6144, 4096, 1)["helion_us"] == 9.0
    b = _write_bench(tmp_path / "b.json", _pair(12.0, 10.0, m=1) + _pair(8.0, 10.0, m=2))
    args = ["configs", "from-bench", str(b), "--output", str(out), *ONE_RUN]
    result = runner.invoke(app, [*args, "--only-new"])
    assert result.exit_code == 0, result.output
    assert _stats(out, "fp8_dynamic", 6144, 4096, 1)["helion_us"] == 9.0  # kept
    assert _stats(out, "fp8_dynamic", 6144, 4096, 2)["helion_us"] == 8.0  # added
    assert len(cs.read_stats_file(sidecar)[1]) == 2
    assert cs.known_gpu_names([out]) == cs.known_gpu_names()  # the sidecar names no GPU
    assert bc.config_file_provenance(out, "NVIDIA H200", "1.5.0")["file"] == str(
        sidecar.with_name("nvidia_h200.json")
    )
    assert runner.invoke(app, args).exit_code == 0
    assert _stats(out, "fp8_dynamic", 6144, 4096, 1)["helion_us"] == 12.0  # replaced
    assert (
        cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json")
        .get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1))
        .fallback
    )


# ------------------------------------------------------------------------------------------------
# Fallback marks from margins: vLLM faster by > 2 % in the median of >= 3 independent processes
# ------------------------------------------------------------------------------------------------
def _processes(*runs):
    """Rows of several benchmark processes (one list of rows each) and each row's process index."""
    rows, procs = [], []
    for i, run in enumerate(runs):
        rows += run
        procs += [i] * len(run)
    return rows, procs


def test_marks_need_a_margin_in_the_median_of_three_processes():
    """Per key: the median over processes of Helion / vLLM; marked above 1.02 only."""
    rows, procs = _processes(
        _pair(10.3, 10.0, m=1) + _pair(10.1, 10.0, m=2) + _pair(10.3, 10.0, m=4),
        _pair(10.1, 10.0, m=1) + _pair(10.3, 10.0, m=2) + _pair(9.9, 10.0, m=4),
        _pair(10.5, 10.0, m=1) + _pair(9.9, 10.0, m=2) + _pair(10.4, 10.0, m=4),
    )
    entries = _by_key(entries_from_bench(rows, processes=procs, margin=0.02, min_processes=3))
    one, two, four = (entries["fp8_dynamic", 6144, 4096, m] for m in (1, 2, 4))
    assert one.fallback  # 1.03 (median of 1.01, 1.03, 1.05)
    assert not two.fallback  # 1.01: inside the margin (the old any-loss rule marked it)
    assert four.fallback  # 1.03
    assert one.stats["process_ratios"] == pytest.approx([1.01, 1.03, 1.05])
    assert one.stats["median_ratio"] == pytest.approx(1.03)
    assert one.stats["ratio_spread_pct"] == pytest.approx(100 * (1.05 / 1.01 - 1))
    assert one.stats["helion_us"] == 10.3 and one.stats["measurements"] == 3  # the median process


def test_a_key_every_process_reads_slower_is_marked_inside_the_margin():
    """Helion slower than vLLM's kernel in each of three processes, by less than the margin: marked
    (a steady loss, not noise; the shipped files held 33 such keys, 0.1-2 % slower in every
    process). One process faster keeps the margin's rule (noise)."""
    rows, procs = _processes(
        _pair(10.05, 10.0, m=1) + _pair(10.15, 10.0, m=2),
        _pair(10.1, 10.0, m=1) + _pair(9.95, 10.0, m=2),
        _pair(10.15, 10.0, m=1) + _pair(10.1, 10.0, m=2),
    )
    entries = _by_key(entries_from_bench(rows, processes=procs, margin=0.02, min_processes=3))
    assert entries["fp8_dynamic", 6144, 4096, 1].fallback  # 1.005, 1.01, 1.015: all slower
    assert not entries["fp8_dynamic", 6144, 4096, 2].fallback  # 0.995, 1.01, 1.015: median inside
    assert fallback_mark([1.001], 0.02) and not fallback_mark([1.0], 0.02)  # one process: any loss
    assert fallback_mark([0.9, 1.03, 1.05], 0.02)  # the median beyond the margin, one faster
    with pytest.raises(ValueError, match="no process ratios"):
        fallback_mark([], 0.02)


def test_a_key_in_too_few_processes_is_skipped_and_a_process_counts_its_worst_measurement():
    rows, procs = _processes(
        _pair(9.0, 10.0, m=1, model="a")
        + _pair(10.5, 10.0, m=1, model="b", layer="o")
        + _pair(9.0, 10.0, m=2),
        _pair(10.5, 10.0, m=1),
        _pair(9.0, 10.0, m=1) + _pair(9.0, 10.0, m=2),
    )
    skipped: list[str] = []
    entries = _by_key(entries_from_bench(rows, skipped, processes=procs, margin=0.02, min_processes=3))
    assert set(entries) == {("fp8_dynamic", 6144, 4096, 1)}  # M=2: two processes only
    assert any("M=2: measured in 2 process(es), the rule needs 3" in s for s in skipped), skipped
    # process 0's worst is 1.05 (model b), process 1: 1.05, process 2: 0.9 -> median 1.05: marked
    assert entries["fp8_dynamic", 6144, 4096, 1].fallback
    assert entries["fp8_dynamic", 6144, 4096, 1].stats["process_ratios"] == pytest.approx([0.9, 1.05, 1.05])


def test_cli_default_rule_is_three_processes_and_two_percent(tmp_path):
    runs = [
        _pair(10.3, 10.0, m=1) + _pair(10.1, 10.0, m=2),
        _pair(10.1, 10.0, m=1) + _pair(10.3, 10.0, m=2),
        _pair(10.5, 10.0, m=1) + _pair(9.9, 10.0, m=2),
    ]
    files = [str(_write_bench(tmp_path / f"run{i}.json", r)) for i, r in enumerate(runs)]
    out = tmp_path / "out"
    one = runner.invoke(app, ["configs", "from-bench", files[0], "--output", str(out)])
    assert one.exit_code == 1 and "measured in 1 process(es), the rule needs 3" in " ".join(
        one.output.split()
    )
    result = runner.invoke(app, ["configs", "from-bench", *files, "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 keys written (1 marked fallback), 0 kept" in " ".join(result.output.split())
    cf = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json")
    marks = {e.key["m"]: e.fallback for e in cf.entries.values()}
    assert marks == {1: True, 2: False}
    assert "--margin 0.02 --min-processes 3" in cf.metadata["command"]
    assert _stats(out, "fp8_dynamic", 6144, 4096, 2)["process_ratios"] == pytest.approx([0.99, 1.01, 1.03])


def test_block_entries_record_the_scale_a_layout_they_were_measured_on(tmp_path, picks, monkeypatch):
    """Processes run with ``--block-scale-a tma``: their Block_FP8 keys say so in the file (the
    picker hands it to dispatch), per-token formats do not; a key measured on both layouts is skipped."""
    runs = [
        (_pair(9.0, 10.0, fmt="block_fp8", m=1) + _pair(9.0, 10.0, m=1), "tma"),
        (_pair(9.5, 10.0, fmt="block_fp8", m=2), "row"),
        (_pair(9.0, 10.0, fmt="block_fp8", m=4), "tma"),
        (_pair(9.0, 10.0, fmt="block_fp8", m=4), "row"),
    ]
    files = [
        str(_write_bench(tmp_path / f"run{i}.json", rows, block_scale_a=layout))
        for i, (rows, layout) in enumerate(runs)
    ]
    out = tmp_path / "out"
    result = runner.invoke(app, ["configs", "from-bench", *files, "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    assert "M=4: measured on several scale_a layouts ['row', 'tma']" in " ".join(result.output.split())
    data = json.loads((out / "scaled_mm" / "nvidia_h200.json").read_text())
    layouts = {(d["key"]["format"], d["key"]["m"]): d.get("block_scale_a") for d in data if "key" in d}
    assert layouts == {("block_fp8", 1): "tma", ("block_fp8", 2): None, ("fp8_dynamic", 1): None}
    monkeypatch.setattr(cs, "installed_helion_version", lambda: "1.5.0")
    assert picks("block_fp8", 6144, 4096, 1).block_scale_a == "tma"
    assert picks("block_fp8", 6144, 4096, 2).block_scale_a == "row"


def test_a_tuned_file_re_marked_from_three_bench_runs_of_itself(tmp_path):
    """docs/tuning.md's recipe for a user's tuned file: its marks came from one process (autotune);
    three `bench kernels` runs with HL_CONFIG_DIR on it (Helion rows ``exact <JSON>``) fed to
    from-bench into the same directory keep each tuned config and re-derive the mark by the median
    rule: M=1 was unmarked although vLLM is 3 % faster in the median, M=2 marked although even."""
    out = tmp_path / "my-configs"
    path = cs.config_file_path("scaled_mm", "nvidia_h200", out)
    tuned = {
        m: cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, m), dict(TUNED), m == 2, {})
        for m in (1, 2)
    }
    meta = {
        "gpu": "nvidia_h200",
        "helion": "1.5.0",
        "command": "hltools autotune --effort grid",
        "effort": "grid",
    }
    cs.save_config_file(path, list(tuned.values()), meta)
    exact = "exact " + json.dumps(TUNED, sort_keys=True, separators=(",", ":"))
    runs = [
        _pair(10.3, 10.0, m=1, config=exact) + _pair(10.0, 10.0, m=2, config=exact + " (marked fallback)"),
        _pair(10.4, 10.0, m=1, config=exact) + _pair(9.9, 10.0, m=2, config=exact + " (marked fallback)"),
        _pair(9.9, 10.0, m=1, config=exact) + _pair(10.1, 10.0, m=2, config=exact + " (marked fallback)"),
    ]
    ran = bc.config_file_provenance(out, "NVIDIA H200", "1.5.0")  # what bench kernels records
    assert ran == {"file": str(path), "command": "hltools autotune --effort grid", "effort": "grid"}
    files = [str(_write_bench(tmp_path / f"run{i}.json", r, config_file=ran)) for i, r in enumerate(runs)]
    result = runner.invoke(app, ["configs", "from-bench", *files, "--output", str(out)])
    assert result.exit_code == 0, result.output
    cf = cs.read_config_file(path)
    for m, fallback in ((1, True), (2, False)):
        entry = cf.get(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, m))
        assert entry.config == TUNED and entry.fallback is fallback
    # autotune's provenance (its command and effort) under earlier, not beside the import's command
    assert cf.metadata["earlier"][0] == {"command": "hltools autotune --effort grid", "effort": "grid"}
    assert "effort" not in cf.metadata
    # the new file says its configs came from the autotuned file, once (three processes ran it)
    assert cf.metadata["configs_from"] == [ran] and "not autotuned" not in cf.metadata["note"]
    # a later import of heuristic rows: its own provenance at the top, the grid file's under earlier
    heur = _write_bench(tmp_path / "heur.json", _pair(9.0, 10.0, m=4), config_file=None)
    result = runner.invoke(app, ["configs", "from-bench", str(heur), "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    meta = cs.read_config_file(path).metadata
    assert "configs_from" not in meta and meta["note"] == bc.NOTE_HEURISTIC
    assert meta["bench_commands"] == ["hltools bench kernels --model x"] and "effort" not in meta
    assert meta["earlier"][0]["configs_from"] == [ran] and meta["earlier"][1]["effort"] == "grid"
    assert meta["earlier"][0]["bench_commands"] == ["hltools bench kernels --model x"] * 3


def test_config_file_provenance_follows_the_picker(tmp_path):
    """The file a benchmark with HL_CONFIG_DIR=dir runs: none (heuristic), another helion's passed
    over, an unreadable one reported, the fitting one with the fields saying how it was made."""
    assert bc.config_file_provenance(tmp_path / "none", "NVIDIA H200", "1.5.0") is None
    path = _config_file(tmp_path / "old", helion="1.4.0")
    assert bc.config_file_provenance(tmp_path / "old", "NVIDIA H200", "1.5.0") is None
    assert bc.config_file_provenance(tmp_path / "old", "nvidia_h200", "1.4.0") == {"file": str(path)}
    bad = cs.config_file_path("scaled_mm", "nvidia_h200", tmp_path / "bad")
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    got = bc.config_file_provenance(tmp_path / "bad", "NVIDIA H200", "1.5.0")
    assert got["file"] == str(bad) and got["error"]
    meta = {"gpu": "nvidia_h200", "helion": "1.5.0", "command": "hltools autotune", "effort": "grid", "x": 1}
    good = cs.config_file_path("scaled_mm", "nvidia_h200", tmp_path / "good")
    cs.save_config_file(good, [cs.ConfigEntry({}, dict(DEFAULT))], meta)
    got = bc.config_file_provenance(tmp_path / "good", "NVIDIA H200", "1.5.0")
    assert got == {"file": str(good), "command": "hltools autotune", "effort": "grid"}
    # an unreadable exact-variant file is passed over, as the picker does: the family file runs
    fam = tmp_path / "family"
    bad = cs.config_file_path("scaled_mm", "nvidia_h100_sxm", fam)
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    family = cs.config_file_path("scaled_mm", "nvidia_h100", fam)
    cs.save_config_file(family, [cs.ConfigEntry({}, dict(DEFAULT))], {**meta, "gpu": "nvidia_h100"})
    got = bc.config_file_provenance(fam, "NVIDIA H100 80GB HBM3", "1.5.0")
    assert got == {"file": str(family), "command": "hltools autotune", "effort": "grid"}
    pick, _ = pick_from_config_dir(fam, "NVIDIA H100 80GB HBM3", "1.5.0", "fp8_dynamic", 1, 64, 64)
    assert pick.path == got["file"]


def test_config_file_provenance_names_every_autotune_run_of_the_file(tmp_path):
    """A grid file tuned for two models (two autotune commands into one --output): a benchmark
    records both; an earlier import by from-bench (no effort) is not repeated there."""
    from hltools import autotune as at

    path = cs.config_file_path("scaled_mm", "nvidia_h200", tmp_path)
    tiny = {"hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 4}
    base = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 0, "effort": "grid"}
    imported = {"command": "hltools configs from-bench k --output x", "source": "hltools bench kernels"}
    cs.save_config_file(path, [], {"gpu": "nvidia_h200", "helion": "1.5.0", **imported})
    for model, m in (("a", 1), ("b", 2)):
        run = {**base, "command": f"hltools autotune --model {model}", "commit": model, "date": f"d{m}"}
        at.run_autotune(
            at.build_keys(tiny, ["fp8_dynamic"], [1], [m]), path, metadata=run,
            tune=lambda key, o: default_scaled_mm_config(key.m, key.n, key.k),
            check=lambda key, config, o: at.CheckResult(True, config, helion_us=1.0, default_us=1.0, fallback_us=2.0),
        )  # fmt: skip
    got = bc.config_file_provenance(tmp_path, "NVIDIA H200", "1.5.0")
    run_a = {"command": "hltools autotune --model a", "commit": "a", "date": "d1", "effort": "grid"}
    assert got == {
        "file": str(path), "command": "hltools autotune --model b", "commit": "b", "date": "d2", "effort": "grid",
        "earlier": [run_a],
    }  # fmt: skip
    assert cs.read_config_file(path).metadata["earlier"][1] == imported  # kept in the file, not repeated


@pytest.mark.parametrize(
    ("recorded", "note"),
    [([None, None], "NOTE_HEURISTIC"), ([None, "absent"], "NOTE"), (["absent", "absent"], "NOTE")],
)
def test_the_note_says_what_the_benchmarks_recorded_of_their_config_file(tmp_path, recorded, note):
    """Every process recorded no config file: heuristic defaults, not autotuned; a process older
    than the record: the earlier note (it cannot say)."""
    files = [
        str(
            _write_bench(
                tmp_path / f"r{i}.json", _pair(9.0, 10.0), **({} if r == "absent" else {"config_file": r})
            )
        )
        for i, r in enumerate(recorded)
    ]
    out = tmp_path / "out"
    result = runner.invoke(app, ["configs", "from-bench", *files, "--output", str(out), *ONE_RUN])
    assert result.exit_code == 0, result.output
    meta = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json").metadata
    assert meta["note"] == getattr(bc, note) and "configs_from" not in meta
