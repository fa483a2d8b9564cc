"""hltools autotune --gpus N without GPUs: keys dealt to one worker process per GPU (forked here, with
a fake tuner that records the GPU it saw), shard files folded into the output, resume from a stopped
run's shard files, the metadata check, and the CLI's --gpus bound."""

import multiprocessing as mp
import os

import pytest
import torch
from typer.testing import CliRunner

from hlcore import config_store as cs
from hlcore.scaled_mm_config import default_scaled_mm_config
from hltools import autotune as at
from hltools import autotune_shards as shards
from hltools.cli import app

TINY = {"hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 4}
META = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 3}


def _keys():
    return at.build_keys(TINY, ["fp8_dynamic"], [1], [1, 2, 4])  # 3 shapes x 3 M = 9 keys


def fake_tune(key, options):
    """The heuristic config, with the visible GPU written into num_stages (1 + its id) so the saved
    file shows which worker tuned each key."""
    gpu = int(os.environ["CUDA_VISIBLE_DEVICES"])
    if (key.n, key.k, key.m) == (256, 384, 4):
        raise RuntimeError("no valid config")
    return {**default_scaled_mm_config(key.m, key.n, key.k), "num_stages": 1 + gpu}


def fake_check(key, config, options):
    return at.CheckResult(True, config, rel_err=1e-3, helion_us=10.0, default_us=12.0, fallback_us=11.0)


@pytest.fixture
def fake_gpus(monkeypatch):
    monkeypatch.setattr(at, "gpu_backend", lambda: ("nvidia_h200", fake_tune, fake_check))


def _run(path, gpus, options=None, **kw):
    options = options or at.TuneOptions()
    return shards.run_sharded(_keys(), path, gpus, options=options, metadata=META, context="fork", **kw)


def test_shard_keys_deals_round_robin():
    keys = _keys()
    parts = shards.shard_keys(keys, 2)
    assert parts == [keys[0::2], keys[1::2]]
    assert shards.shard_keys(keys[:1], 4) == [keys[:1]]  # no empty shard
    with pytest.raises(ValueError, match="at least 1"):
        shards.shard_keys(keys, 0)


def test_workers_tune_their_share_on_their_gpu_and_the_shards_fold_in(fake_gpus, tmp_path):
    path = tmp_path / "nvidia_h200.json"
    summary = _run(path, ["0", "3"])
    assert summary.count("tuned") == 8 and summary.count("failed") == 1
    assert [s.key.label for s in summary.failed] == [
        k.label for k in _keys() if (k.n, k.k, k.m) == (256, 384, 4)
    ]
    entries = cs.read_config_file(path).entries
    assert len(entries) == 8
    keys = [k for k in _keys() if (k.n, k.k, k.m) != (256, 384, 4)]
    by_gpu = {}
    for key in keys:  # the worker of keys[i::2] saw GPU "0" for i = 0 and "3" for i = 1
        stages = entries[cs.ConfigEntry(key.key, {}).id].config["num_stages"]
        by_gpu.setdefault(stages - 1, []).append(key)
    all_keys = _keys()
    assert by_gpu[0] == [k for k in all_keys[0::2] if k in keys]
    assert by_gpu[3] == [k for k in all_keys[1::2] if k in keys]
    assert not list(tmp_path.glob("*.shard*"))  # folded and deleted
    assert cs.read_config_file(path).metadata["gpu"] == "nvidia_h200"


def test_a_stopped_runs_shard_files_are_folded_in_and_skipped(fake_gpus, tmp_path):
    path = tmp_path / "nvidia_h200.json"
    first = _keys()[0]
    config = {**default_scaled_mm_config(first.m, first.n, first.k), "num_stages": 7}
    cs.save_config_file(shards.shard_path(path, 1), [cs.ConfigEntry(first.key, config)], META)
    summary = _run(path, ["0", "1"])
    assert summary.count("skipped") == 1 and summary.count("tuned") == 7
    assert cs.read_config_file(path).entries[cs.ConfigEntry(first.key, {}).id].config["num_stages"] == 7


def test_another_gpus_file_needs_force(fake_gpus, tmp_path):
    path = tmp_path / "nvidia_h200.json"
    cs.save_config_file(path, [], {**META, "gpu": "nvidia_h100"})
    with pytest.raises(at.AutotuneError, match="--force"):
        _run(path, ["0", "1"])
    summary = _run(path, ["0", "1"], force=True)
    assert summary.count("tuned") == 8
    assert cs.read_config_file(path).metadata["gpu"] == "nvidia_h200"  # started afresh


def test_a_file_of_another_command_keeps_its_provenance_under_earlier(fake_gpus, tmp_path):
    path = tmp_path / "nvidia_h200.json"
    other = cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 1, 1, 1), default_scaled_mm_config(1, 1, 1))
    cs.save_config_file(path, [other], {**META, "command": "hltools autotune --model a", "date": "d1"})
    shards.run_sharded(
        _keys(), path, ["0", "1"], options=at.TuneOptions(), context="fork",
        metadata={**META, "command": "hltools autotune --model b --gpus 2", "date": "d2"},
    )  # fmt: skip
    cf = cs.read_config_file(path)
    assert cf.metadata["command"] == "hltools autotune --model b --gpus 2" and cf.metadata["date"] == "d2"
    assert cf.metadata["earlier"] == [{"command": "hltools autotune --model a", "date": "d1", "seed": 3}]
    assert other.id in cf.entries and len(cf.entries) == 9


def test_a_stopped_runs_shards_folded_into_another_commands_file_keep_its_provenance(fake_gpus, tmp_path):
    path = tmp_path / "nvidia_h200.json"
    cs.save_config_file(path, [], {**META, "command": "hltools autotune --model a", "date": "d1"})
    first = _keys()[0]
    stopped = {**META, "command": "hltools autotune --model b --gpus 2", "date": "d2"}
    entry = cs.ConfigEntry(first.key, default_scaled_mm_config(first.m, first.n, first.k))
    cs.save_config_file(shards.shard_path(path, 0), [entry], stopped)
    shards.merge_shards(path)
    meta = cs.read_config_file(path).metadata
    assert meta["command"] == stopped["command"]
    assert meta["earlier"] == [{"command": "hltools autotune --model a", "date": "d1", "seed": 3}]


def test_cli_rejects_more_gpus_than_visible(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(at, "gpu_backend", lambda: ("nvidia_h200", fake_tune, fake_check))
    monkeypatch.setattr(at, "apply_benchmark_env", lambda: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = CliRunner().invoke(
        app,
        ["autotune", "--model", "qwen3-8b", "--gpus", "3", "--output", str(tmp_path)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 2 and "3 GPUs asked for, 2 visible" in result.output


@pytest.mark.parametrize(
    ("alongside", "jobs"),
    [(False, None), (True, None), (True, 6)],
    ids=["compile-first", "compile-alongside", "compile-alongside-jobs-6"],
)
def test_a_grid_run_gives_each_gpu_whole_shapes_and_its_share_of_the_cpus(
    fake_gpus, monkeypatch, tmp_path, capfd, alongside, jobs
):
    """--effort grid over two GPUs: each (format, N, K) is searched and compiled on one worker only,
    with cpus // workers compile processes, in one kernel cache directory set before the workers
    start; the saved configs are those of one search over all keys (the fake GPU times a config
    the same everywhere), and each worker prints its stage line. Compiling alongside the timing,
    a worker's pool has one process fewer (the timing keeps a CPU). ``--jobs 6`` (``compile_workers``):
    six CPUs per GPU instead of the share."""
    import json

    from hltools import grid_search as gs

    log = tmp_path / "log.jsonl"

    def record(**fields):
        fields.update(gpu=os.environ.get("CUDA_VISIBLE_DEVICES"), cache=os.environ.get("HL_KERNEL_CACHE_DIR"))
        with log.open("a") as f:
            f.write(json.dumps(fields) + "\n")

    def cost(m, n, k, c):  # deterministic, and not the heuristic's optimum
        return 10.0 + abs(c["split_k"] - 4) + (c["block_sizes"][1] == 128) + 0.01 * m

    def gpu_timer(max_m, seed=0, block_scale_a="row"):
        def time(fmt, m, n, k, configs):
            record(kind="time", shape=[fmt, n, k], m=m)
            return [cost(m, n, k, c) for c in configs]

        return time

    def parallel_compiler(workers=None, on_done=None, block_scale_a="row"):
        def compile(jobs):  # starts a process, as the real one does: a worker may have children
            child = mp.get_context("fork").Process(target=len, args=((),))
            child.start()
            child.join()
            record(kind="compile", workers=workers, shapes=sorted({(f, n, k) for f, n, k, *_ in jobs}))

        return compile

    def compile_pool(workers):
        from concurrent.futures import ThreadPoolExecutor

        record(kind="pool", workers=workers)
        return lambda: ThreadPoolExecutor(2)

    def compile_job(job, block_scale_a="row"):  # in a pool thread here: no fork (a spawned process there)
        record(kind="compile", workers="pool", shapes=[job[:3]])

    monkeypatch.setattr(gs, "gpu_timer", gpu_timer)
    monkeypatch.setattr(gs, "parallel_compiler", parallel_compiler)
    monkeypatch.setattr(gs, "compile_pool", compile_pool)
    monkeypatch.setattr(gs, "compile_job", compile_job)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("HL_KERNEL_CACHE_DIR", raising=False)
    path = tmp_path / "nvidia_h200.json"
    options = at.TuneOptions(effort="grid", compile_alongside=alongside, compile_workers=jobs)
    summary = _run(path, ["0", "3"], options=options)
    assert summary.count("tuned") == 9
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    shape_gpus = {}
    for r in rows:
        for shape in [r["shape"]] if r["kind"] == "time" else r.get("shapes", []):
            shape_gpus.setdefault(tuple(shape), set()).add(r["gpu"])
    assert len(shape_gpus) == 3 and all(len(g) == 1 for g in shape_gpus.values())
    assert {g for gs_ in shape_gpus.values() for g in gs_} == {"0", "3"}
    cpus = jobs or 4  # 8 CPUs / 2 GPUs
    if alongside:
        assert [r["workers"] for r in rows if r["kind"] == "pool"] == [cpus - 1, cpus - 1]
        assert {r["workers"] for r in rows if r["kind"] == "compile"} == {"pool"}
    else:
        assert {r["workers"] for r in rows if r["kind"] == "compile"} == {cpus}
        assert not [r for r in rows if r["kind"] == "pool"]
    assert len({r["cache"] for r in rows}) == 1 and rows[0]["cache"]
    keys = _keys()
    one = gs.GridSearch([(k.fmt, k.n, k.k, k.m) for k in keys], time=gpu_timer(4), compile=lambda jobs: None)
    saved = cs.read_config_file(path).entries
    for key in keys:
        assert saved[cs.ConfigEntry(key.key, {}).id].config == one.pick(key.fmt, key.n, key.k, key.m).config
    out = capfd.readouterr().out
    assert out.count("] grid search: compile (" if alongside else "] grid search: compile the grid (") == 2
    assert "[gpu 0] grid search" in out and "[gpu 3] grid search" in out
    assert "[gpu 3] tuned fp8_dynamic" in out and "[/]" not in out  # plain text, no rich markup
