"""hltools autotune without a GPU: keys (TP, num_tokens), resume/force/failure/budget logic with a
fake tuner and checker, provenance, --list, the no-GPU exit, and the picker reading the result."""

import json
import os

import pytest
import torch
from typer.testing import CliRunner

from hlcore import config_store as cs
from hlcore import scaled_mm_config as smc
from hlcore.formats import FORMAT_NAMES
from hlcore.scaled_mm_config import default_scaled_mm_config
from hltools import autotune as at
from hltools.cli import app
from hltools.shapes import UnknownLayer, load_model_config

runner = CliRunner()
TINY = {  # qkv (768, 256) and gate_up (768, 256) coincide; o (256, 256); down (256, 384)
    "hidden_size": 256,
    "intermediate_size": 384,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
}
META = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 3}


class FakeTuner:
    """Counts calls; returns the heuristic config with num_warps 8 (so saved configs are recognisable)."""

    def __init__(self, fail=(), clock=None, step=0.0):
        self.calls, self.options, self.fail, self.clock, self.step = [], [], set(fail), clock, step

    def __call__(self, key, options):
        self.calls.append((key.fmt, key.n, key.k, key.m))
        self.options.append(options)
        if self.clock is not None:
            self.clock.now += self.step
        if (key.n, key.k, key.m) in self.fail:
            raise RuntimeError("no valid config")
        return {**default_scaled_mm_config(key.m, key.n, key.k), "num_warps": 8}


def fake_check(key, config, options):
    slower = key.m == 4  # pretend vLLM's kernel wins at M=4
    return at.CheckResult(
        True, config, rel_err=1e-3, helion_us=10.0, default_us=12.0, fallback_us=9.0 if slower else 11.0
    )


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def _fake_backend(monkeypatch, tmp_path, tuner):
    """TINY's config.json written into ``tmp_path`` and this machine's GPU backend faked (an H200,
    ``tuner``, :func:`fake_check`): the config's path, for ``--model``."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps(TINY))
    monkeypatch.setattr(at, "gpu_backend", lambda: ("NVIDIA H200", tuner, fake_check))
    monkeypatch.setenv("HELION_BENCHMARK_CUDAGRAPH", "0")
    return model


def _keys(num_tokens=(1, 4)):
    return at.build_keys(TINY, ["fp8_dynamic"], [1], num_tokens)


def _entries(path):
    return cs.read_config_file(path).entries


# ------------------------------------------------------------------------------------------------
# keys
# ------------------------------------------------------------------------------------------------
def test_build_keys_with_tp_and_duplicates():
    keys = at.build_keys(load_model_config("qwen3-8b"), ["fp8_dynamic", "block_fp8"], [2, 1], [1, 8])
    shapes = {(k.n, k.k) for k in keys}
    tp1 = {(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)}
    tp2 = {(3072, 4096), (4096, 2048), (12288, 4096), (4096, 6144)}  # N/2 column-, K/2 row-parallel
    assert shapes == tp1 | tp2
    assert len(keys) == 2 * 8 * 2 and len({(k.fmt, k.n, k.k, k.m) for k in keys}) == len(keys)
    assert [k.fmt for k in keys[:16]] == ["fp8_dynamic"] * 16  # format-major
    assert next(k for k in keys if (k.n, k.k) == (3072, 4096)).layers == ("qkv tp2",)
    tiny = _keys()
    assert [(k.n, k.k, k.m) for k in tiny] == [(768, 256, 1), (768, 256, 4), (256, 256, 1), (256, 256, 4)] + [
        (256, 384, 1),
        (256, 384, 4),
    ]
    assert tiny[0].layers == ("qkv tp1", "gate_up tp1")
    with pytest.raises(ValueError, match="unknown format"):
        at.build_keys(TINY, ["fp4"], [1], [1])
    with pytest.raises(ValueError, match="does not divide"):
        at.build_keys(TINY, ["fp8_dynamic"], [3], [1])


def test_build_keys_of_some_layers_only():
    """``layers`` keeps the keys of those layers' shapes, in the usual order; a shape two layers
    share is kept when either is asked for; a layer the model lacks is named with the model's."""
    keys = at.build_keys(load_model_config("qwen3-4b"), ["fp8_dynamic"], [1], [8, 1], ["gate_up", "qkv"])
    assert [(k.n, k.k, k.m, k.layers) for k in keys] == [
        (6144, 2560, 1, ("qkv tp1",)),
        (6144, 2560, 8, ("qkv tp1",)),
        (19456, 2560, 1, ("gate_up tp1",)),
        (19456, 2560, 8, ("gate_up tp1",)),
    ]
    assert [k.layers for k in at.build_keys(TINY, ["fp8_dynamic"], [1], [1], ["gate_up"])] == [
        ("gate_up tp1",)
    ]
    assert at.build_keys(TINY, ["fp8_dynamic"], [1], [1], []) == at.build_keys(
        TINY, ["fp8_dynamic"], [1], [1]
    )
    with pytest.raises(
        UnknownLayer, match=r"unknown layer\(s\) \['mlp'\]; choose from \['qkv', 'o', 'gate_up', 'down'\]"
    ):
        at.build_keys(TINY, ["fp8_dynamic"], [1], [1], ["down", "mlp"])
    with pytest.raises(ValueError, match="does not divide"):  # the TP size is checked first
        at.build_keys(TINY, ["fp8_dynamic"], [3], [1], ["mlp"])


def test_decode_num_tokens_follows_max_helion_size():
    assert at.decode_num_tokens() == [1, 2, 4, 8, 16, 24, 32]
    assert at.decode_num_tokens(16) == [1, 2, 4, 8, 16, 24, 32]  # only larger values extend it
    assert at.decode_num_tokens(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert at.decode_num_tokens(300)[-4:] == [248, 256, 272, 288]


# ------------------------------------------------------------------------------------------------
# the tuning loop
# ------------------------------------------------------------------------------------------------
def test_resume_skips_done_keys_and_force_retunes(tmp_path):
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    keys = _keys()
    tuner = FakeTuner()
    summary = at.run_autotune(keys, path, tune=tuner, check=fake_check, metadata=META)
    assert summary.count("tuned") == 6 and len(tuner.calls) == 6
    entries = _entries(path)
    assert len(entries) == 6
    entry = entries[cs.key_id(cs.scaled_mm_key("fp8_dynamic", 768, 256, 1))]
    assert entry.config["num_warps"] == 8 and not entry.fallback
    assert entry.stats == {"rel_err": 1e-3, "helion_us": 10.0, "default_us": 12.0, "fallback_us": 11.0}
    assert entries[cs.key_id(cs.scaled_mm_key("fp8_dynamic", 768, 256, 4))].fallback  # lost to vLLM
    assert cs.read_config_file(path).metadata == META

    again = FakeTuner()
    summary = at.run_autotune([*keys, *_keys((8,))], path, tune=again, check=fake_check, metadata=META)
    assert summary.count("skipped") == 6 and summary.count("tuned") == 3
    assert sorted({c[3] for c in again.calls}) == [8]  # only the new keys
    forced = FakeTuner()
    at.run_autotune(keys, path, tune=forced, check=fake_check, metadata=META, force=True)
    assert len(forced.calls) == 6 and len(_entries(path)) == 9


def test_failed_key_is_reported_others_saved_and_retried_next_run(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    tuner = FakeTuner(fail={(256, 256, 4)})

    def check(key, config, options):
        if key.n == 256 and key.k == 384 and key.m == 1:
            return at.CheckResult(False, config, rel_err=0.5, note="relative error 0.5 > 0.015")
        return fake_check(key, config, options)

    summary = at.run_autotune(_keys(), path, tune=tuner, check=check, metadata=META)
    failed = {(s.key.n, s.key.k, s.key.m): s.message for s in summary.failed}
    assert failed == {
        (256, 256, 4): "tuning raised RuntimeError: no valid config",
        (256, 384, 1): "relative error 0.5 > 0.015",
    }
    assert len(_entries(path)) == 4
    retry = FakeTuner()
    summary = at.run_autotune(_keys(), path, tune=retry, check=fake_check, metadata=META)
    assert sorted(retry.calls) == [("fp8_dynamic", 256, 256, 4), ("fp8_dynamic", 256, 384, 1)]
    assert not summary.failed and len(_entries(path)) == 6


def test_a_search_cut_by_its_budget_share_says_so(tmp_path):
    """Helion raises NoConfigFound when its budget ends before a candidate ran (--effort full with
    under a minute a key); the key's message names its share of --budget-minutes."""

    class NoConfigFound(Exception):  # Helion's helion.exc.NoConfigFound, by name
        pass

    def tune(key, options):
        raise NoConfigFound("No working config found from autotuning")

    path = tmp_path / "nvidia_h200.json"
    clock = Clock()  # stands still: each key's share is the budget over the keys left
    summary = at.run_autotune(
        _keys((1,)), path, tune=tune, check=fake_check, metadata=META, budget_seconds=60, clock=clock
    )
    assert [s.message.split(" (")[0] for s in summary.failed] == [
        "no working config in this key's 20 s share of --budget-minutes",
        "no working config in this key's 30 s share of --budget-minutes",
        "no working config in this key's 60 s share of --budget-minutes",
    ]
    assert summary.failed[0].message.endswith(
        "tuning raised NoConfigFound: No working config found from autotuning"
    )
    unbounded = at.run_autotune(_keys((1,)), path, tune=tune, check=fake_check, metadata=META)
    assert (
        unbounded.failed[0].message == "tuning raised NoConfigFound: No working config found from autotuning"
    )


def test_invalid_tuned_config_fails_the_key(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    summary = at.run_autotune(
        _keys((1,)), path, tune=lambda key, o: {"block_sizes": [16, 48, 128]}, check=fake_check, metadata=META
    )
    assert len(summary.failed) == 3 and "block_sizes" in summary.failed[0].message
    assert not path.exists()


def test_checkpoint_after_each_key(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    seen = []

    def tune(key, options):
        seen.append(len(_entries(path)) if path.exists() else 0)
        return default_scaled_mm_config(key.m, key.n, key.k)

    at.run_autotune(_keys(), path, tune=tune, check=fake_check, metadata=META)
    assert seen == [0, 1, 2, 3, 4, 5]


def test_budget_splits_time_and_leaves_keys_for_the_next_run(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    clock = Clock()
    tuner = FakeTuner(clock=clock, step=25.0)
    summary = at.run_autotune(
        _keys(), path, tune=tuner, check=fake_check, metadata=META, budget_seconds=60, clock=clock
    )
    assert [s.status for s in summary.statuses] == ["tuned"] * 3 + ["not run"] * 3
    assert [o.budget_seconds for o in tuner.options] == [10, 7, 2]  # 60/6, 35/5, 10/4 s
    assert len(_entries(path)) == 3


def test_other_gpu_or_helion_file_needs_force(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    old = cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 1, 1, 1), default_scaled_mm_config(1, 1, 1))
    cs.save_config_file(path, [old], {"gpu": "nvidia_h200", "helion": "0.0.1"})
    with pytest.raises(at.AutotuneError, match="tuned with helion 0.0.1.*--force"):
        at.run_autotune(_keys(), path, tune=FakeTuner(), check=fake_check, metadata=META)
    at.run_autotune(_keys(), path, tune=FakeTuner(), check=fake_check, metadata=META, force=True)
    cf = cs.read_config_file(path)
    assert cf.metadata["helion"] == "1.5.0" and old.id not in cf.entries and len(cf.entries) == 6
    path.write_text("[")
    with pytest.raises(at.AutotuneError, match="not valid JSON"):
        at.run_autotune(_keys(), path, tune=FakeTuner(), check=fake_check, metadata=META)


def test_a_run_of_another_command_keeps_the_files_provenance_under_earlier(tmp_path):
    """Tuning model B into model A's file (or into a file that configs from-bench wrote) names B's
    command at the top and A's (the import's) under ``earlier``; resuming the same command adds
    nothing there."""
    path = tmp_path / "nvidia_h200.json"
    run_a = {**META, "command": "hltools autotune --model a", "model": "a", "effort": "grid", "date": "d1"}
    at.run_autotune(_keys((1,)), path, tune=FakeTuner(), check=fake_check, metadata=run_a)
    at.run_autotune(_keys((1, 2)), path, tune=FakeTuner(), check=fake_check, metadata={**run_a, "date": "d2"})
    assert "earlier" not in cs.read_config_file(path).metadata  # a resume of the same command
    a_fields = {
        "command": "hltools autotune --model a",
        "model": "a",
        "effort": "grid",
        "date": "d2",
        "seed": 3,
    }

    run_b = {**META, "command": "hltools autotune --model b", "model": "b", "effort": "quick", "date": "d3"}
    at.run_autotune(_keys((8,)), path, tune=FakeTuner(), check=fake_check, metadata=run_b)
    cf = cs.read_config_file(path)
    assert cf.metadata == {**run_b, "earlier": [a_fields]}
    assert len(cf.entries) == 9  # A's six keys and B's three

    imported = {  # the provenance fields of an import by hltools configs from-bench
        "command": "hltools configs from-bench x/kernels.json --output configs", "source": "hltools bench kernels",
        "bench_commands": ["hltools bench kernels ..."], "configs_from": [{"file": "grid.json"}],
        "note": "not autotuned", "date": "d4", "stats_file": "stats.json",
    }  # fmt: skip
    cs.save_config_file(path, [], imported, drop_metadata=("model", "effort", "seed", "earlier"))
    run_c = {**META, "command": "hltools autotune --model c", "model": "c", "effort": "grid", "date": "d5"}
    at.run_autotune(_keys((16,)), path, tune=FakeTuner(), check=fake_check, metadata=run_c)
    meta = cs.read_config_file(path).metadata
    assert {f: meta.get(f) for f in ("bench_commands", "configs_from", "source", "note")} == dict.fromkeys(
        ("bench_commands", "configs_from", "source", "note")
    )
    assert meta["command"] == run_c["command"] and "stats_file" not in meta  # C's stats are its entries'
    assert meta["earlier"] == [imported]


def test_a_resume_with_another_budget_is_the_same_run_and_a_run_without_a_command_is_not(tmp_path):
    path = tmp_path / "nvidia_h200.json"
    command = "hltools autotune --model a --formats fp8_dynamic"
    for budget, m in ((" --budget-minutes 5", 1), (" --budget-minutes=10", 2), ("", 4)):
        run = {**META, "command": command + budget, "model": "a"}
        at.run_autotune(_keys((m,)), path, tune=FakeTuner(), check=fake_check, metadata=run)
    meta = cs.read_config_file(path).metadata
    assert meta["command"] == command and "earlier" not in meta

    hand_made = tmp_path / "hand" / "nvidia_h200.json"  # no command: the run's fields cannot be its
    cs.save_config_file(hand_made, [], {**META, "model": "x", "note": "hand-made"})
    at.run_autotune(_keys((1,)), hand_made, tune=FakeTuner(), check=fake_check, metadata=META)
    meta = cs.read_config_file(hand_made).metadata
    assert meta["earlier"] == [{"model": "x", "note": "hand-made", "seed": 3}] and "note" not in meta


# ------------------------------------------------------------------------------------------------
# vLLM's kernel as the baseline
# ------------------------------------------------------------------------------------------------
def test_vllm_baseline_is_vllms_default_prepared_once_per_copy(ref_provider, monkeypatch):
    """The baseline comes from hltools.providers.vllm_default for the key's format and (N, K) (for
    block_fp8 DeepGEMM / CUTLASS block first, not vLLM's Triton block kernel); each copy's weight
    and scales are prepared once, the timed calls only launch; a wrong kernel is not timed."""
    from hlcore.scaled_mm import generate_scaled_mm_inputs
    from hltools import providers

    asked = []

    def candidates(fmt, order=None):
        asked.append(fmt)
        return [ref_provider]

    monkeypatch.setattr(providers, "candidates", candidates)
    copies = [generate_scaled_mm_inputs(3, 128, 256, fmt="block_fp8", seed=s) for s in range(3)]
    timed = []

    def timer(calls):
        timed.append([c() for c in calls])
        return type("T", (), {"median_us": 7.5})

    assert at.time_vllm_kernel(copies, "block_fp8", timer) == ("fake reference kernel", 7.5)
    assert asked == ["block_fp8"] and ref_provider.counts == {"weights": 3, "scales": 3, "calls": 4}
    assert [o.shape for o in timed[0]] == [(3, 128)] * 3 and not torch.equal(timed[0][0], timed[0][1])

    class Wrong(ref_provider):
        def call(self, a, scale_a, w):
            return torch.zeros((a.shape[0], w.b.shape[1]), dtype=self.out_dtype)

    monkeypatch.setattr(providers, "candidates", lambda fmt, order=None: [Wrong])
    with pytest.raises(RuntimeError, match="fake reference kernel: relative error 1 "):
        at.time_vllm_kernel(copies, "block_fp8", timer)
    monkeypatch.setattr(providers, "candidates", lambda fmt, order=None: [])
    with pytest.raises(providers.Unsupported, match="no vLLM kernel for block_fp8"):
        at.time_vllm_kernel(copies, "block_fp8", timer)
    assert len(timed) == 1


# ------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_cli_no_gpu_exits_2_with_a_clear_message(no_gpu, tmp_path):
    result = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--output", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "needs a CUDA GPU" in result.output and "--list" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "option"),
    [(["--jobs", "4"], "--jobs"), (["--compile-alongside"], "--compile-alongside")],
)
def test_cli_list_refuses_grid_only_options_with_another_effort(no_gpu, extra, option):
    """``--list`` (the no-GPU dry run) checks the options as a run would: a grid-only option with
    ``--effort quick`` exits 2 there, not first on the GPU machine."""
    result = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--list", "--effort", "quick", *extra])
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and option in out and "only with --effort grid" in out, result.output
    assert "got --effort quick" in out


@pytest.mark.parametrize(("name", "capability"), [("NVIDIA L40S", (8, 9)), ("NVIDIA B200", (10, 0))])
def test_cli_on_a_gpu_hlvllm_does_not_run_on_exits_2_before_tuning(monkeypatch, tmp_path, name, capability):
    """hlvllm's kernels run on SM90 alone: on another GPU the run stops at once (exit 2, why) and
    writes nothing, where it would have spent minutes on configs the plugin never reads; on an
    SM90 GPU the backend is the real tuner and checker."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    sm = "SM{}{}".format(*capability)
    with pytest.raises(at.AutotuneError, match=f"^{name} is {sm}: hlvllm's kernels run on SM90 GPUs only"):
        at.gpu_backend()
    result = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--output", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"{name} is {sm}" in " ".join(result.output.split()) and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert at.gpu_backend() == ("NVIDIA H200", at.helion_tuner, at.gpu_checker)


def test_cli_list_prints_keys_with_tp_and_max_helion_size(no_gpu, monkeypatch):
    from hlvllm.settings import get_settings

    monkeypatch.setenv("HL_MAX_HELION_SIZE", "48")
    get_settings.cache_clear()
    try:
        result = runner.invoke(app, ["autotune", "--model", "Qwen/Qwen3-8B", "--tp", "1,2", "--list"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "72 keys, 0 done" in result.output  # 8 (N, K) over TP 1 and 2 x M in 1..32, 40, 48
    lines = result.output.splitlines()
    assert any("3072" in ln and "4096" in ln and " 48 " in ln and "qkv tp2" in ln for ln in lines)
    assert not any(" 56 " in ln for ln in lines)


def test_cli_layer_lists_and_tunes_those_layers_only_and_its_rerun_says_so(no_gpu, tmp_path, monkeypatch):
    """``--layer`` (repeatable, as in validate and bench kernels): --list shows those layers' keys,
    a run tunes them alone and its resume command (printed on failure, kept in the file's metadata)
    names them; an unknown layer exits 2 naming the model's layers."""
    listed = runner.invoke(
        app, ["autotune", "--model", "qwen3-4b", "--list", "--layer", "gate_up", "--num-tokens", "8"]
    )
    assert listed.exit_code == 0, listed.output
    assert "1 keys, 0 done" in listed.output and "gate_up tp1" in listed.output and "qkv" not in listed.output
    bad = runner.invoke(app, ["autotune", "--model", "qwen3-4b", "--list", "--layer", "mlp"])
    assert bad.exit_code == 2
    assert "Invalid value for --layer: unknown layer(s) ['mlp']; choose from" in " ".join(bad.output.split())

    out = tmp_path / "out"
    tuner = FakeTuner(fail={(256, 384, 4)})
    model = _fake_backend(monkeypatch, tmp_path, tuner)
    args = ["autotune", "--model", str(model), "--num-tokens", "1,4", "--layer", "down", "--output", str(out)]
    result = runner.invoke(app, [*args, "--effort", "quick"])
    assert result.exit_code == 1, result.output
    assert tuner.calls == [("fp8_dynamic", 256, 384, 1), ("fp8_dynamic", 256, 384, 4)]
    assert "--num-tokens 1,4 --layer down --effort quick" in " ".join(result.output.split())
    meta = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json").metadata
    assert "--layer down" in meta["command"]


def test_cli_tunes_resumes_and_fails_with_a_fake_backend(tmp_path, monkeypatch):
    out = tmp_path / "out"
    tuner = FakeTuner(fail={(256, 384, 4)})
    model = _fake_backend(monkeypatch, tmp_path, tuner)
    args = ["autotune", "--model", str(model), "--num-tokens", "1,4", "--seed", "5", "--output", str(out)]
    args += ["--effort", "quick"]  # the fake tuner stands for Helion's autotuner

    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "5 tuned, 0 skipped, 1 failed, 0 not run" in result.output
    assert "FAILED fp8_dynamic N=256 K=384 M=4" in result.output
    assert "rerun the same command" in result.output
    assert "hltools autotune --model" in result.output and "--num-tokens 1,4" in result.output
    assert os.environ["HELION_BENCHMARK_CUDAGRAPH"] == "1"
    path = out / "scaled_mm" / "nvidia_h200.json"
    cf = cs.read_config_file(path)
    assert len(cf.entries) == 5
    meta = cf.metadata
    assert meta["gpu"] == "nvidia_h200" and meta["gpu_name"] == "NVIDIA H200" and meta["seed"] == 5
    assert meta["helion"] == cs.installed_helion_version() and meta["torch"] and meta["triton"]
    assert meta["effort"] == "quick" and "--seed 5" in meta["command"] and meta["date"]

    tuner.fail.clear()
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 tuned, 5 skipped, 0 failed" in result.output
    assert len(tuner.calls) == 7

    # what the picker makes of it (HL_CONFIG_DIR = the output)
    monkeypatch.setenv("HL_CONFIG_DIR", str(out))
    smc.clear_scaled_mm_config_cache()
    try:
        pick = smc.pick_scaled_mm_config("fp8_dynamic", 3, 768, 256, gpu="NVIDIA H200")
        assert (pick.source, pick.fallback, pick.config["num_warps"]) == ("same_shape", True, 8)
        assert smc.pick_scaled_mm_config("fp8_dynamic", 1, 768, 256, gpu="NVIDIA H200").source == "exact"
    finally:
        smc.clear_scaled_mm_config_cache()


def test_cli_refuses_a_file_from_another_helion_without_force(tmp_path, monkeypatch):
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    cs.save_config_file(path, [], {"gpu": "nvidia_h200", "helion": "0.0.1"})
    tuner = FakeTuner()
    model = _fake_backend(monkeypatch, tmp_path, tuner)
    args = ["autotune", "--model", str(model), "--num-tokens", "2", "--output", str(tmp_path)]
    args += ["--effort", "quick"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "tuned with helion 0.0.1" in result.output and "--force" in result.output
    assert tuner.calls == [] and cs.read_config_file(path).metadata["helion"] == "0.0.1"
    result = runner.invoke(app, [*args, "--force"])
    assert result.exit_code == 0, result.output
    assert (
        len(tuner.calls) == 3
        and cs.read_config_file(path).metadata["helion"] == cs.installed_helion_version()
    )


def test_step_table_weighs_each_layer_of_a_decoder_layer_once(tmp_path):
    """The decode-step table adds each layer's time once per (format, TP, M) (a key shared by two
    layers counts twice), takes vLLM's time on fallback keys for ``dispatched``, and leaves out a
    (format, TP, M) with a layer not timed in this run."""
    from pathlib import Path

    def status(n, m, layers, helion, default, vllm, fallback=False):
        key = at.TuneKey("fp8_dynamic", n, 4096, m, tuple(layers))
        result = at.CheckResult(True, {}, 0.001, helion, default, vllm, "cutlass", fallback)
        return at.KeyStatus(key, "tuned", 1.0, result)

    summary = at.RunSummary(Path(tmp_path / "f.json"))
    summary.statuses = [
        status(6144, 1, ["qkv tp1"], 10.0, 11.0, 12.0),
        status(4096, 1, ["o tp1", "qkv tp2"], 8.0, 8.0, 7.0, fallback=True),
        status(4096, 2, ["o tp1"], 8.0, 9.0, 9.0),  # M=2 has no qkv timing: no row
        at.KeyStatus(at.TuneKey("fp8_dynamic", 6144, 4096, 2, ("qkv tp1",)), "skipped"),
    ]
    table = at.step_table(summary)
    rows = {(r[1], r[2]): r for r in table.rows}
    assert set(rows) == {("tp1", "1"), ("tp2", "1")}
    fmt, tp, m, tuned, heuristic, vllm, gain, untuned, dispatched, per_key = rows[("tp1", "1")]
    assert (tuned, heuristic, vllm) == ("18.0", "19.0", "19.0")
    assert gain == f"{19 / 18:.3f}" and untuned == "-"  # no untuned time in these results
    assert dispatched == f"{19 / (10 + 7):.3f}"  # o is marked fallback: vLLM's 7 µs dispatched
    assert per_key == f"{((11 / 10) * (8 / 8)) ** 0.5:.3f}"
    assert rows[("tp2", "1")][3:6] == ["8.0", "8.0", "7.0"]
    assert at.step_table(at.RunSummary(Path(tmp_path / "g.json"))) is None


def test_format_names_take_the_prose_spellings():
    """``FP8_Dynamic`` (README's prose) and ``fp8-dynamic`` (model ids) name ``fp8_dynamic``; each once."""
    from hltools.format_names import check_formats

    assert check_formats(["FP8_Dynamic", "fp8-dynamic", "Block_FP8", "w8a8_int8"]) == [
        "fp8_dynamic",
        "block_fp8",
        "w8a8_int8",
    ]
    with pytest.raises(ValueError, match=r"unknown format\(s\) \['FP4'\]"):
        check_formats(["FP4"])


@pytest.mark.parametrize("fmt, layout, strides", [("block_fp8", "tma", (1, 4)), ("block_fp8", "row", (3, 1)),
                                                  ("fp8_dynamic", "tma", (1, 1))])  # fmt: skip
def test_tuning_inputs_take_the_block_scale_layout(monkeypatch, fmt, layout, strides):
    """``--block-scale-a tma``: the tuner and the checker hand Helion vLLM's TMA-aligned column-major
    Block_FP8 scales (column stride M rounded up to 4); per-token scales stay as generated."""
    from hlcore import scaled_mm as sm

    real = sm.generate_scaled_mm_inputs
    monkeypatch.setattr(
        sm, "generate_scaled_mm_inputs", lambda *a, device, **kw: real(*a, device="cpu", **kw)
    )
    d = at._inputs(at.TuneKey(fmt, 64, 384, 3), at.TuneOptions(block_scale_a=layout), seed=1)
    ref = real(3, 64, 384, fmt=fmt, device="cpu", seed=1)
    assert d["scale_a"].stride() == strides and torch.equal(d["scale_a"], ref["scale_a"])


def test_block_keys_tuned_on_the_column_major_layout_say_so(tmp_path):
    """``--block-scale-a tma`` (the metadata's ``block_scale_a``): each Block_FP8 entry records the
    layout it was tuned and checked on; per-token formats' entries do not."""
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    keys = at.build_keys(TINY, ["block_fp8", "fp8_dynamic"], [1], (1,))
    at.run_autotune(keys, path, tune=FakeTuner(), check=fake_check, metadata={**META, "block_scale_a": "tma"})
    layouts = {(e.key["format"], e.key["n"], e.key["k"]): e.block_scale_a for e in _entries(path).values()}
    assert set(layouts) == {
        (f, n, k) for f in ("block_fp8", "fp8_dynamic") for n, k in ((768, 256), (256, 256), (256, 384))
    }
    assert {f: {v for (g, *_), v in layouts.items() if g == f} for f in ("block_fp8", "fp8_dynamic")} == {
        "block_fp8": {"tma"},
        "fp8_dynamic": {"row"},
    }


@pytest.mark.parametrize(
    ("mode", "flag", "expected"),
    [
        (None, [], "tma"),
        ("op", [], "row"),
        ("op", ["--block-scale-a", "tma"], "tma"),
        (None, ["--block-scale-a", "row"], "row"),
    ],
)
def test_cli_block_scale_a_follows_the_dispatch_mode_by_default(
    tmp_path, monkeypatch, dispatch_at, mode, flag, expected
):
    """``--block-scale-a auto`` (the default): Block_FP8 keys are tuned on the layout hlvllm's dispatch
    mode hands the GEMM (vLLM's column-major in capture mode, the default; row-major with
    HL_DISPATCH_AT=op), and the entries and the resume command say which."""
    out = tmp_path / "out"
    tuner = FakeTuner()
    model = _fake_backend(monkeypatch, tmp_path, tuner)
    dispatch_at(mode)
    args = [
        "autotune",
        "--model",
        str(model),
        "--formats",
        "block_fp8",
        "--num-tokens",
        "1",
        "--output",
        str(out),
        "--effort",
        "quick",
    ]
    result = runner.invoke(app, [*args, *flag])
    assert result.exit_code == 0, result.output
    assert {o.block_scale_a for o in tuner.options} == {expected}
    cf = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json")
    assert {e.block_scale_a for e in cf.entries.values()} == {expected}
    assert f"--block-scale-a {expected}" in cf.metadata["command"]  # a rerun keeps the layout
    assert cf.metadata["block_scale_a"] == expected


def test_a_rerun_tunes_again_the_block_keys_of_the_other_layout(tmp_path):
    """Resume counts a Block_FP8 key as done only on the run's layout: keys tuned on row-major are
    tuned again (and replaced) by a run on vLLM's column-major, per-token formats' keys are not."""
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    keys = at.build_keys(TINY, ["block_fp8", "fp8_dynamic"], [1], (1,))
    at.run_autotune(keys, path, tune=FakeTuner(), check=fake_check, metadata={**META, "block_scale_a": "row"})
    again = FakeTuner()
    summary = at.run_autotune(
        keys, path, tune=again, check=fake_check, metadata={**META, "block_scale_a": "tma"}
    )
    assert {c[0] for c in again.calls} == {"block_fp8"} and summary.count("skipped") == 3
    entries = _entries(path).values()
    assert {(e.key["format"], e.block_scale_a) for e in entries} == {
        ("block_fp8", "tma"),
        ("fp8_dynamic", "row"),
    }


@pytest.mark.parametrize(
    "extra,expected",
    [([], "grid"), (["--gpus", "1"], "grid"), (["--gpus", "2"], "grid"), (["--effort", "quick"], "quick")],
)
def test_cli_default_effort_is_the_grid(tmp_path, monkeypatch, extra, expected):
    """Without --effort a run is the grid search (minutes a model, never worse than the heuristic),
    on one GPU or sharded over several (here one visible). The metadata and the resume command name
    the effort that ran."""
    from hltools import grid_search as gs

    model = tmp_path / "config.json"
    model.write_text(json.dumps(TINY))
    out = tmp_path / "out"
    helion_tuner, grid_tuner = FakeTuner(), FakeTuner()
    monkeypatch.setattr(at, "gpu_backend", lambda: ("NVIDIA H200", helion_tuner, fake_check))
    monkeypatch.setattr(
        gs,
        "make_grid_tuner",
        lambda keys, options, compile_workers=None: grid_tuner,
    )
    from hltools.commands import autotune as cmd

    monkeypatch.setattr(cmd, "_local_gpus", lambda gpus: ["0"])  # one visible: the run stays here
    monkeypatch.setenv("HELION_BENCHMARK_CUDAGRAPH", "0")
    args = ["autotune", "--model", str(model), "--num-tokens", "2", "--output", str(out), *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    ran, idle = (grid_tuner, helion_tuner) if expected == "grid" else (helion_tuner, grid_tuner)
    assert len(ran.calls) == 3 and idle.calls == []
    meta = cs.read_config_file(out / "scaled_mm" / "nvidia_h200.json").metadata
    assert meta["effort"] == expected and f"--effort {expected}" in meta["command"]
    assert f"effort {expected}" in result.output


def test_untuned_pick_routes_as_the_plugin_would():
    """An exact key runs Helion unless marked fallback; a file without an entry of the format
    (``heuristic``) runs vLLM's kernel; a nearest pick, and an exact Block_FP8 key measured on
    another scale_a layout, run Helion only under the speed guard's 2 % rule."""
    exact = at.UntunedPick({}, "exact")
    assert exact.route(12.0, 10.0) == "helion"  # an exact key is not re-timed by the plugin
    assert at.UntunedPick({}, "exact", fallback=True).route(8.0, 10.0) == "vllm"
    assert at.UntunedPick({}, "heuristic").route(5.0, 10.0) == "vllm"
    nearest = at.UntunedPick({}, "nearest")
    assert nearest.route(9.8, 10.0) == "helion"  # 9.8 * 1.02 = 9.996 <= 10
    assert nearest.route(9.81, 10.0) == "vllm"  # a win under 2 %
    assert nearest.route(None, 10.0) == "vllm"
    assert at.UntunedPick({}, "exact", unproven=True).route(9.9, 10.0) == "vllm"
    assert at.UntunedPick({}, "exact", unproven=True).route(9.0, 10.0) == "helion"
    assert at.UntunedPick({}, "exact", fallback=True).label == "exact (marked fallback)"


def test_untuned_pick_reads_the_config_file_in_effect(tmp_path, monkeypatch):
    """The pick comes from HL_CONFIG_DIR's file: the exact key with its mark, the nearest entry for
    another shape without the mark, and hlvllm's layout rule for an exact Block_FP8 key measured on
    row-major scales in a run on the capture (``tma``) layout: marked stays vLLM's, unmarked is
    unproven (the guard's rule)."""
    cfg = {**default_scaled_mm_config(1, 768, 256), "num_warps": 8}
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    cs.save_config_file(
        path,
        [
            cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 768, 256, 1), cfg, fallback=True),
            cs.ConfigEntry(cs.scaled_mm_key("block_fp8", 768, 256, 1), cfg, fallback=True),
            cs.ConfigEntry(cs.scaled_mm_key("block_fp8", 768, 256, 2), cfg),
        ],
        META,
    )
    monkeypatch.setenv("HL_CONFIG_DIR", str(tmp_path))
    smc.clear_scaled_mm_config_cache()
    try:
        key = at.TuneKey("fp8_dynamic", 768, 256, 1, ("qkv tp1",))
        pick = at.untuned_pick(key, at.TuneOptions(), gpu="NVIDIA H200")
        assert (pick.config, pick.source, pick.fallback, pick.unproven) == (cfg, "exact", True, False)
        other = at.untuned_pick(
            at.TuneKey("fp8_dynamic", 1024, 256, 1, ()), at.TuneOptions(), gpu="NVIDIA H200"
        )
        assert (other.config, other.source, other.fallback) == (cfg, "nearest", False)
        row, tma = at.TuneOptions(block_scale_a="row"), at.TuneOptions(block_scale_a="tma")
        marked, unmarked = at.TuneKey("block_fp8", 768, 256, 1, ()), at.TuneKey("block_fp8", 768, 256, 2, ())
        for key, options, want in [
            (marked, row, (True, False)),
            (marked, tma, (True, False)),  # slower on tma: the row mark holds
            (unmarked, row, (False, False)),
            (unmarked, tma, (False, True)),  # Helion's row win is not proven on tma
        ]:
            pick = at.untuned_pick(key, options, gpu="NVIDIA H200")
            assert (pick.fallback, pick.unproven) == want, (key, options.block_scale_a)
        none = at.untuned_pick(at.TuneKey("w8a8_int8", 768, 256, 1, ()), at.TuneOptions(), gpu="NVIDIA H200")
        assert none.source == "heuristic" and none.config == default_scaled_mm_config(1, 768, 256)
    finally:
        smc.clear_scaled_mm_config_cache()


def test_fastest_keeps_the_first_on_a_tie():
    assert at.fastest([("tuned", {"a": 1}, 9.0), ("default", {}, 9.0), ("untuned", {}, 10.0)])[0] == "tuned"
    assert at.fastest([("tuned", {}, 9.0), ("default", {}, 9.5), ("untuned", {"b": 2}, 8.0)])[1] == {"b": 2}


def test_step_table_compares_tuned_with_the_untuned_dispatch(tmp_path):
    """``tuned vs untuned`` adds each layer's untuned time as the plugin would route it (an exact
    marked key: vLLM's time; a nearest pick: Helion only under the 2 % rule) over the tuned dispatch;
    the stats written to the file say which pick the untuned time was."""
    from pathlib import Path

    def status(n, layer, helion, vllm, untuned_us, pick, fallback=False):
        key = at.TuneKey("fp8_dynamic", n, 4096, 1, (layer,))
        result = at.CheckResult(
            True, {}, 0.001, helion, helion, vllm, "cutlass", fallback, untuned_us=untuned_us, untuned=pick
        )
        return at.KeyStatus(key, "tuned", 1.0, result)

    summary = at.RunSummary(Path(tmp_path / "f.json"))
    summary.statuses = [
        status(6144, "qkv tp1", 10.0, 12.0, 11.0, at.UntunedPick({}, "exact", fallback=True)),  # untuned: 12
        status(4096, "o tp1", 8.0, 9.0, 8.9, at.UntunedPick({}, "nearest")),  # 8.9*1.02 > 9: vLLM, 9
        status(12288, "gate_up tp1", 20.0, 25.0, 21.0, at.UntunedPick({}, "nearest")),  # Helion, 21
        status(4096 * 3, "down tp1", 15.0, 14.0, 15.0, at.UntunedPick({}, "exact"), fallback=True),  # 15 / 14
    ]
    row = at.step_table(summary).rows[0]
    assert row[3] == f"{10 + 8 + 20 + 15:.1f}"
    assert row[7] == f"{(12 + 9 + 21 + 15) / (10 + 8 + 20 + 14):.3f}"
    stats = summary.statuses[0].result.stats()
    assert stats["untuned_us"] == 11.0 and stats["untuned_source"] == "exact (marked fallback)"


@pytest.mark.parametrize("mode", ["op", "capture"])
def test_untuned_route_agrees_with_hlvllm_routing_on_the_shipped_file(monkeypatch, mode):
    """On the shipped H200 file, for every Qwen3-8B and Llama-3.1-8B key of the three formats (exact
    keys, both scale_a layouts' marks) and a model's shapes outside the file (nearest picks), in
    both dispatch modes: where hlvllm's :func:`hlvllm.routing.decide` routes without its speed guard,
    :meth:`UntunedPick.route` gives the same path whatever the times; where decide leaves the key
    to the guard, the pick follows the guard's rule."""
    from hlvllm import routing
    from hlvllm.settings import get_settings

    monkeypatch.delenv("HL_CONFIG_DIR", raising=False)
    for var in ("HL_UNTUNED_SHAPES", "HL_DETERMINISTIC", "HL_MAX_HELION_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HL_DISPATCH_AT", mode)
    monkeypatch.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")
    monkeypatch.setattr(cs, "installed_helion_version", lambda: "1.5.0")
    get_settings.cache_clear()
    smc.clear_scaled_mm_config_cache()
    routing.reset()
    options = at.TuneOptions(block_scale_a=routing.block_scale_a())
    models = ["qwen3-8b", "llama-3.1-8b", {**TINY, "hidden_size": 2304, "intermediate_size": 7000}]
    checked = {"helion": 0, "vllm": 0, "guarded": 0}
    try:
        for model in models:
            config = load_model_config(model) if isinstance(model, str) else model
            for key in at.build_keys(config, list(FORMAT_NAMES), [1], [1, 8, 32]):
                route = routing.decide(key.fmt, key.m, key.n, key.k)
                pick = at.untuned_pick(key, options)
                if route.guarded:
                    assert pick.source != "exact" or pick.unproven, key
                    assert (pick.route(9.0, 10.0), pick.route(9.9, 10.0)) == ("helion", "vllm"), key
                    checked["guarded"] += 1
                else:
                    want = "helion" if route.path == routing.HELION else "vllm"
                    assert pick.route(9.0, 10.0) == pick.route(11.0, 10.0) == want, (key, route.reason)
                    checked[want] += 1
    finally:
        get_settings.cache_clear()
        smc.clear_scaled_mm_config_cache()
        routing.reset()
    assert all(checked.values()), checked  # each kind of route was met


# --------------------------------------------------------------------------------------------
# The GPU checker's operands: a shape's weight copies drawn once for all its M
# --------------------------------------------------------------------------------------------
@pytest.fixture
def fresh_check_inputs():
    at._CHECK_INPUTS.clear()
    yield
    at._CHECK_INPUTS.clear()


def test_check_inputs_draw_a_shapes_copies_once_for_all_m(fresh_check_inputs):
    from hlcore.scaled_mm import generate_scaled_mm_inputs
    from hlcore.timing import copies_for

    opts = at.TuneOptions(effort="grid", seed=3)
    n, k = 256, 128
    two = at.check_inputs(at.TuneKey("fp8_dynamic", n, k, 2), opts, device="cpu")
    eight = at.check_inputs(at.TuneKey("fp8_dynamic", n, k, 8), opts, device="cpu")
    assert len(two) == len(eight) == copies_for(n * k)
    assert all(x["b"] is y["b"] and x["scale_b"] is y["scale_b"] for x, y in zip(two, eight, strict=True))
    assert two[0]["a"].shape == (2, k) and eight[0]["a"].shape == (8, k) and two[0]["b"].shape == (k, n)
    # copy 0 and the activations are the seeded instance of CHECK_MAX_M tokens, first M rows
    ref = generate_scaled_mm_inputs(at.CHECK_MAX_M, n, k, fmt="fp8_dynamic", seed=3)
    assert torch.equal(eight[0]["a"].view(torch.uint8), ref["a"][:8].view(torch.uint8))
    assert torch.equal(eight[0]["scale_a"], ref["scale_a"][:8])
    assert torch.equal(eight[0]["b"].view(torch.uint8), ref["b"].view(torch.uint8))
    assert torch.equal(eight[0]["scale_b"], ref["scale_b"])
    copy0, copy1 = (eight[i]["b"].view(torch.uint8) for i in (0, 1))
    assert not torch.equal(copy0, copy1)  # distinct copies
    # another shape (or seed) replaces them; an M above CHECK_MAX_M draws more rows
    other = at.check_inputs(at.TuneKey("fp8_dynamic", 128, 256, 1), opts, device="cpu")
    assert len(at._CHECK_INPUTS) == 1 and other[0]["b"].shape == (256, 128)
    big = at.check_inputs(at.TuneKey("fp8_dynamic", 128, 256, at.CHECK_MAX_M + 8), opts, device="cpu")
    assert big[0]["a"].shape == (at.CHECK_MAX_M + 8, 256)


def test_check_inputs_block_scale_a_in_the_runs_layout(fresh_check_inputs):
    row = at.check_inputs(at.TuneKey("block_fp8", 256, 256, 4), at.TuneOptions(), device="cpu")
    tma = at.check_inputs(
        at.TuneKey("block_fp8", 256, 256, 4), at.TuneOptions(block_scale_a="tma"), device="cpu"
    )
    assert row[0]["block_size"] == (128, 128) and row[0]["scale_a"].shape == (4, 2)
    assert row[0]["scale_a"].stride() == (2, 1) and tma[0]["scale_a"].stride()[0] == 1  # column-major
    assert torch.equal(row[0]["scale_a"], tma[0]["scale_a"])


def test_check_stage_report_sums_each_stage():
    at.CHECK_STAGES.clear()
    try:
        assert at.check_stage_report() is None
        synced = []
        for _ in range(2):
            with at._check_stage("draw the inputs", lambda: synced.append(1)):
                pass
        with pytest.raises(RuntimeError), at._check_stage("reference"):
            raise RuntimeError("a failed check still counts its time")
        line = at.check_stage_report()
        assert line.startswith("check: draw the inputs (2) ") and "; reference (1) " in line
        assert line.endswith(" s in all") and synced == [1, 1]
    finally:
        at.CHECK_STAGES.clear()


def test_helion_tuner_hands_helion_an_out_that_equals_its_clone(monkeypatch):
    """Helion's autotuner takes an argument for mutated when its clone, run through the custom
    baseline, no longer ``torch.equal``s it, and then checks every candidate's arguments with the
    accuracy function too. An empty ``out`` holding NaN bits never equals its clone, which fails
    every candidate of a key (NoConfigFound; lab/scripts/quick_probe.py on a GPU). The fake
    kernel below runs that detection as Helion 1.5.0's ``_compute_baseline`` does, on CPU inputs:
    ``out`` is zero-filled, nothing reads as mutated, the fp32 reference passes the check, a
    wrong output fails it with the error, and a tuple (Helion's argument comparison) fails it
    with an AssertionError (an accuracy failure) rather than an AttributeError."""
    import types

    import helion

    from hlcore import scaled_mm as sm

    key = at.TuneKey("fp8_dynamic", 64, 128, 8)
    inputs = sm.generate_scaled_mm_inputs(key.m, key.n, key.k, fmt=key.fmt, seed=0)
    monkeypatch.setattr(at, "_inputs", lambda key, options, seed: inputs)
    seen = {}

    class FakeKernel:
        settings = types.SimpleNamespace()

        def autotune(self, args, force):
            clones = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            expected = self.settings.autotune_baseline_fn(*clones)
            seen["mutated"] = [
                i
                for i, (a, c) in enumerate(zip(args, clones, strict=True))
                if isinstance(a, torch.Tensor) and not torch.equal(a, c)
            ]
            seen["out"], seen["expected"] = args[5], expected
            return helion.Config(**default_scaled_mm_config(key.m, key.n, key.k))

    monkeypatch.setattr(sm, "scaled_mm_kernel", FakeKernel)
    config = at.helion_tuner(key, at.TuneOptions())
    assert config == default_scaled_mm_config(key.m, key.n, key.k)
    assert seen["mutated"] == [] and seen["out"].shape == (8, 64) and not seen["out"].any()
    check = FakeKernel.settings.autotune_baseline_accuracy_check_fn
    expected = seen["expected"]
    check(expected.clone(), expected)  # the reference itself passes
    with pytest.raises(AssertionError, match="relative error .* vs the fp32 reference"):
        check(-expected, expected)
    with pytest.raises(AssertionError, match="expected the kernel's output tensor, got tuple"):
        check((expected,), (expected,))
