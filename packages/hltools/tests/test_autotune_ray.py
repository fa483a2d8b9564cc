"""hltools autotune --ray without GPUs: a local Ray cluster with two fake GPUs, one task per key with a
fake tuner that records the GPU Ray gave it, every key saved by the driver as it returns, a node of
another GPU kind failing its keys, the resume of a rerun, the budget, and the CLI's option checks."""

import os
import socket
import sys
import types

import pytest
from typer.testing import CliRunner

from hlcore import config_store as cs
from hlcore.scaled_mm_config import default_scaled_mm_config
from hltools import autotune as at
from hltools import autotune_ray, options
from hltools.cli import app

# Read when ray is imported: under `uv run` (nox, CI) Ray would otherwise package the checkout and
# start its workers through `uv run`.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
ray = pytest.importorskip("ray")

TINY = {"hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 4}
META = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 3}


def _keys():
    return at.build_keys(TINY, ["fp8_dynamic"], [1], [1, 2, 4])  # 3 shapes x 3 M = 9 keys


def fake_tune(key, options):
    """The heuristic config with the task's GPU (as Ray set CUDA_VISIBLE_DEVICES) in num_stages;
    one key fails; the benchmark environment must have reached the task."""
    assert os.environ.get("HELION_BENCHMARK_CUDAGRAPH") == "1"
    gpu = int(os.environ["CUDA_VISIBLE_DEVICES"])
    if (key.n, key.k, key.m) == (256, 384, 4):
        raise RuntimeError("no valid config")
    return {**default_scaled_mm_config(key.m, key.n, key.k), "num_stages": 1 + gpu}


def fake_check(key, config, options):
    return at.CheckResult(True, config, rel_err=1e-3, helion_us=10.0, default_us=12.0, fallback_us=11.0)


def h200_backend():
    return ("nvidia_h200", fake_tune, fake_check)


def other_gpu_backend():
    return ("nvidia_h100", fake_tune, fake_check)


@pytest.fixture(scope="module")
def cluster():
    """A one-machine Ray cluster with 2 CPUs and 2 (fake) GPUs; this module's functions travel to
    its workers by value (the test module is not importable there)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing sent anywhere from a test
    autotune_ray.connect(
        "local",
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        object_store_memory=80 * 1024**2,
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


def _run(path, backend=h200_backend, **kw):
    done = []
    summary = autotune_ray.run_on_ray(
        ray,
        _keys(),
        path,
        gpu_name="nvidia_h200",
        options=kw.pop("options", at.TuneOptions()),
        metadata=META,
        backend=backend,
        env=at.benchmark_env(),
        on_done=done.append,
        **kw,
    )
    return summary, done


def l40s_backend():
    raise at.AutotuneError("NVIDIA L40S is SM89: hlvllm's kernels run on SM90 GPUs only")


def test_keys_are_tuned_on_the_clusters_gpus_and_saved_by_the_driver(cluster, tmp_path):
    assert autotune_ray.gpu_name_of_cluster(ray, h200_backend) == "nvidia_h200"
    with pytest.raises(at.AutotuneError, match="^the Ray cluster's GPU: NVIDIA L40S is SM89: hlvllm"):
        autotune_ray.gpu_name_of_cluster(ray, l40s_backend)  # said by the probe, not a task's traceback
    path = tmp_path / "nvidia_h200.json"
    summary, done = _run(path)
    assert [s.key for s in summary.statuses] == _keys()  # in the keys' order, whatever order they ran in
    assert summary.count("tuned") == 8 and [s.key.label for s in summary.failed] == [
        "fp8_dynamic N=256 K=384 M=4"
    ]
    assert "tuning raised RuntimeError: no valid config" in summary.failed[0].message
    assert len(done) == 9 and all(s.seconds > 0 for s in summary.statuses)
    saved = cs.read_config_file(path)
    assert saved.metadata["gpu"] == "nvidia_h200" and len(saved.entries) == 8
    stages = {e.config["num_stages"] for e in saved.entries.values()}
    assert stages <= {1, 2} and len(stages) == 2  # both GPUs tuned keys
    for entry in saved.entries.values():
        assert entry.stats["helion_us"] == 10.0 and entry.fallback is False

    again, _ = _run(path)  # the rerun resumes: done keys skipped, the failed one retried
    assert again.count("skipped") == 8 and again.count("failed") == 1 and again.count("tuned") == 0

    spent, _ = _run(tmp_path / "b" / "nvidia_h200.json", budget_seconds=0)
    assert spent.count("not run") == 9


def test_a_node_with_another_gpu_fails_its_keys_and_another_gpus_file_needs_force(cluster, tmp_path):
    path = tmp_path / "nvidia_h200.json"
    summary, _ = _run(path, backend=other_gpu_backend)
    assert summary.count("failed") == 9 and not path.exists()
    assert "this node's GPU is nvidia_h100, the file's nvidia_h200" in summary.failed[0].message
    cs.save_config_file(path, [], {**META, "gpu": "nvidia_h100"})
    with pytest.raises(at.AutotuneError, match="--force"):
        _run(path)
    forced, _ = _run(path, force=True)
    assert forced.count("tuned") == 8 and cs.read_config_file(path).metadata["gpu"] == "nvidia_h200"


def test_cli_ray_option_checks(monkeypatch, tmp_path):
    runner = CliRunner()
    args = ["autotune", "--model", "qwen3-8b", "--ray", "auto", "--output", str(tmp_path)]
    for listing in ([], ["--list"]):  # --list exits 2 on it too, as on every bad combination
        result = runner.invoke(app, [*args, "--gpus", "2", *listing], env={"COLUMNS": "300"})
        assert result.exit_code == 2 and "with --ray leave it out" in result.output

    def no_ray():
        raise at.AutotuneError(
            '--ray needs Ray on this machine and on every node: pip install "hltools[ray]"'
        )

    def unconnected(error: Exception):
        """A ``ray`` module not connected to any cluster, whose ``init`` raises ``error``."""

        def init(address=None, **kw):
            raise error

        return lambda: types.SimpleNamespace(is_initialized=lambda: False, init=init)

    monkeypatch.setattr(
        autotune_ray, "import_ray", unconnected(ConnectionError("Could not find any running Ray instance."))
    )
    result = runner.invoke(app, [*args, "--effort", "grid"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "--ray auto: cannot connect to a Ray cluster" in result.output
    assert "Could not find any running Ray instance" in result.output

    # --ray local without a GPU: no Ray cluster is started to find none
    monkeypatch.setattr(
        autotune_ray, "import_ray", unconnected(AssertionError("ray.init called on a machine without a GPU"))
    )
    monkeypatch.setattr(options, "cuda_device_count", lambda: 0)
    result = runner.invoke(
        app, [*args[:3], "--ray", "local", "--output", str(tmp_path)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2 and "--ray local: this machine has no CUDA GPU" in result.output

    monkeypatch.setattr(autotune_ray, "import_ray", no_ray)
    result = runner.invoke(
        app, ["autotune", "--model", "qwen3-8b", "--ray", "auto", "--output", str(tmp_path)]
    )
    assert result.exit_code == 2 and 'pip install "hltools[ray]"' in result.output


def test_ray_address_where_nothing_listens(monkeypatch, tmp_path):
    """A HOST:PORT where nothing listens exits 2 naming it, without asking Ray (whose ``init``
    retries such an address for minutes); a port that accepts passes the probe."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # free again once closed: a connection is refused
    assert f"nothing accepts a connection at 127.0.0.1:{port}" in autotune_ray.unreachable(
        f"127.0.0.1:{port}"
    )
    assert f"at 127.0.0.1:{port} within" in autotune_ray.unreachable(f"ray://127.0.0.1:{port}")
    with socket.create_server(("127.0.0.1", 0)) as server:
        assert autotune_ray.unreachable(f"127.0.0.1:{server.getsockname()[1]}") is None
    for other in ("auto", "local", "no-port-here"):
        assert autotune_ray.unreachable(other) is None

    def init(address=None, **kw):
        raise AssertionError(f"ray.init({address!r}) called for an address where nothing listens")

    monkeypatch.setattr(
        autotune_ray, "import_ray", lambda: types.SimpleNamespace(is_initialized=lambda: False, init=init)
    )
    args = ["autotune", "--model", "qwen3-8b", "--ray", f"127.0.0.1:{port}", "--output", str(tmp_path)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert (
        f"--ray 127.0.0.1:{port}: cannot connect to a Ray cluster (nothing accepts a connection"
        in result.output
    )


def _cost(m, n, k, c):  # deterministic, and not the heuristic's optimum
    return 10.0 + abs(c["split_k"] - 4) + (c["block_sizes"][1] == 128) + 0.01 * m


def _fake_search(keys):
    from hltools import grid_search as gs

    def time(fmt, m, n, k, configs):
        return [_cost(m, n, k, c) for c in configs]

    return gs.GridSearch([(k.fmt, k.n, k.k, k.m) for k in keys], time=time, compile=lambda jobs: None)


def test_a_grid_run_is_one_task_per_shard_of_whole_shapes_with_the_nodes_cpus_per_gpu(cluster, tmp_path):
    """--effort grid on Ray: one task per shard (a shape's keys never on two tasks), each given the
    GPU nodes' CPUs per GPU as compile workers (``--jobs``' value when given); the saved configs are one search's over all keys;
    each task's stage line reaches the driver; a budget spent starts no shard; a rerun resumes."""
    import json

    from hltools import grid_search as gs

    log = tmp_path / "tasks.jsonl"

    def grid(keys, options, compile_workers):
        with log.open("a") as f:
            f.write(
                json.dumps({"shapes": sorted({(k.n, k.k) for k in keys}), "workers": compile_workers}) + "\n"
            )
        return gs.grid_tuner(_fake_search(keys))

    path = tmp_path / "nvidia_h200.json"
    reports = []
    summary, done = _run(path, options=at.TuneOptions(effort="grid"), grid=grid, on_report=reports.append)
    assert summary.count("tuned") == 9 and len(done) == 9
    assert [s.key for s in summary.statuses] == _keys()
    tasks = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(tasks) == 2 and {t["workers"] for t in tasks} == {1}  # 2 CPUs / 2 GPUs
    shapes = [tuple(s) for t in tasks for s in t["shapes"]]
    assert len(shapes) == len(set(shapes)) == 3  # each shape on one task
    one = _fake_search(_keys())
    saved = cs.read_config_file(path).entries
    for key in _keys():
        assert saved[cs.ConfigEntry(key.key, {}).id].config == one.pick(key.fmt, key.n, key.k, key.m).config
    assert len(reports) == 2 and all(r.startswith("grid search: compile the grid (") for r in reports)

    again, _ = _run(path, options=at.TuneOptions(effort="grid"), grid=grid)
    assert again.count("skipped") == 9 and len(log.read_text().splitlines()) == 2  # nothing searched
    spent, _ = _run(
        tmp_path / "b" / "nvidia_h200.json",
        options=at.TuneOptions(effort="grid"),
        grid=grid,
        budget_seconds=0,
    )
    assert spent.count("not run") == 9
    jobs, _ = _run(
        tmp_path / "j" / "nvidia_h200.json",
        options=at.TuneOptions(effort="grid", compile_workers=5),
        grid=grid,
    )  # --jobs 5: each task's compile workers, whatever the node's CPUs
    tasks = [json.loads(line) for line in log.read_text().splitlines()]
    assert jobs.count("tuned") == 9 and len(tasks) == 4 and {t["workers"] for t in tasks[2:]} == {5}


def test_a_grid_task_on_another_gpu_fails_its_keys(cluster, tmp_path):
    def grid(keys, options, compile_workers):
        raise AssertionError("not searched on a GPU of another kind")

    summary, _ = _run(
        tmp_path / "nvidia_h200.json",
        backend=other_gpu_backend,
        options=at.TuneOptions(effort="grid"),
        grid=grid,
    )
    assert summary.count("failed") == 9
    assert "this node's GPU is nvidia_h100, the file's nvidia_h200" in summary.failed[0].message


def test_cpus_per_gpu_is_the_fewest_of_any_gpu_node():
    class FakeRay:
        def nodes(self):
            return [
                {"Alive": True, "Resources": {"CPU": 64.0}},  # a head node without GPUs
                {"Alive": True, "Resources": {"CPU": 32.0, "GPU": 8.0}},
                {"Alive": True, "Resources": {"CPU": 48.0, "GPU": 4.0}},
                {"Alive": False, "Resources": {"CPU": 2.0, "GPU": 2.0}},
            ]

    assert autotune_ray.cpus_per_gpu(FakeRay()) == 4
