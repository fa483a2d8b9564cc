"""``hltools autotune --ray ADDRESS``: the keys of one run tuned on the GPUs of a Ray cluster.

Each key still to tune (:func:`hltools.autotune.run_autotune`'s resume rule) is one Ray task that
asks for one GPU (``num_gpus=1``: Ray places it on a free GPU of any node and sets
``CUDA_VISIBLE_DEVICES`` there), and runs on that node what a single-GPU run does per key
(:func:`hltools.autotune._tune_one`: Helion's search, the check against the fp32 reference, the
timing against vLLM's kernel) with the node's own GPU backend. At most one task per GPU of the
cluster is in flight, so a stopped run loses at most the keys in flight. The driver (this process)
saves each key into the output file as its task returns, as the single-GPU run saves after every
key: a rerun of the same command resumes from every key finished on any node; nothing is written on
the other nodes. ``--budget-minutes`` bounds the whole run: each task's search gets its share of
what is left (the time left x GPUs / keys left), and keys not started in time are ``not run``.

The grid search (``--effort grid``) runs as one task per search shard instead
(:func:`hltools.grid_search.shard_groups` over the cluster's GPUs: whole (format, N, K) shapes, or
their M buckets): each task asks for one GPU and its node's CPUs per GPU (:func:`cpus_per_gpu`, the
fewest of any GPU node), compiles its candidates on them and searches its keys
(:func:`hltools.grid_search.make_grid_tuner`), checks each key as above, and returns every key's
status at once; the driver saves them as the task returns, so a stopped run loses the shards in
flight. A budget stops starting shards (those keys are ``not run``), not a shard that runs.

Requirements: Ray (``pip install "hltools[ray]"``, or any Ray the cluster runs) and hl installed on
every node at the driver's versions; the GPUs of one kind. The output file is named after the GPU
of a first probe task; a task whose GPU has another canonical name fails its key (a key is timed
on the GPU that tuned it). ``ray.init(address=ADDRESS)``: ``auto`` joins the cluster this machine
belongs to (``ray start --head`` / ``ray start --address=...`` on the nodes), ``local`` starts a
one-machine cluster (its GPUs), any other value is a cluster address (``ray://host:10001``),
which must accept a TCP connection within :data:`CONNECT_TIMEOUT_S` (Ray's own ``init`` retries an
address where nothing listens for minutes).
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hltools import autotune as at

#: ``() -> (gpu_name, tune, check) | None``: the GPU backend a task uses on its node (tests give a fake).
Backend = Callable[[], tuple[str, at.Tuner, at.Checker] | None]
#: ``(keys, options, compile_workers) -> tuner``: the grid search a grid task runs over its keys.
GridTuner = Callable[[list[at.TuneKey], at.TuneOptions, int], at.Tuner]


def gpu_grid_tuner(keys: list[at.TuneKey], options: at.TuneOptions, compile_workers: int) -> at.Tuner:
    """The GPU's grid search over ``keys`` (:func:`hltools.grid_search.make_grid_tuner`)."""
    from hltools import grid_search

    return grid_search.make_grid_tuner(keys, options, compile_workers)


def import_ray():
    """The ``ray`` module, or :class:`hltools.autotune.AutotuneError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise at.AutotuneError(
            '--ray needs Ray on this machine and on every node: pip install "hltools[ray]" (or ray)'
        ) from None
    return ray


#: Seconds a ``HOST:PORT`` address has to accept a TCP connection before ``ray.init`` is tried.
CONNECT_TIMEOUT_S = 10.0


def unreachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why nothing can answer at a cluster address (``HOST:PORT`` or ``ray://HOST:PORT``): a TCP
    connection to it failed within ``timeout`` seconds. None when it connected, and for ``auto``,
    ``local`` or a value of another form (``ray.init`` judges those itself)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address in ("auto", "local") or not sep or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as exc:  # refused, no route, unknown host, timed out
        return f"nothing accepts a connection at {host}:{port} within {timeout:g} s ({exc})"


def connect(address: str, **init_kwargs: Any):
    """``ray.init`` for ``--ray ADDRESS`` (``local``: a new one-machine cluster; else the address,
    ``auto`` included), unless this process is connected already; returns the ``ray`` module.
    :class:`hltools.autotune.AutotuneError` when there is no cluster at the address (a ``HOST:PORT``
    address: when :func:`unreachable` says why, before Ray is asked)."""
    ray = import_ray()
    if not ray.is_initialized():
        if (why := unreachable(address)) is not None:
            raise at.AutotuneError(
                f"--ray {address}: cannot connect to a Ray cluster ({why}); "
                "start one (ray start --head) or give its address, or use --ray local"
            )
        try:
            ray.init(address=None if address == "local" else address, **init_kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:  # no cluster there, a bad address
            raise at.AutotuneError(
                f"--ray {address}: cannot connect to a Ray cluster ({type(exc).__name__}: {exc}); "
                "start one (ray start --head) or give its address, or use --ray local"
            ) from None
    return ray


def _probe(backend: Backend) -> tuple[str | None, str | None]:
    """The task's GPU name (None: no usable GPU) and why it cannot tune (a GPU hlvllm does not run
    on: :func:`hltools.autotune.gpu_backend`'s error), returned rather than raised from the task."""
    try:
        found = backend()
    except at.AutotuneError as exc:
        return None, str(exc)
    return (None if found is None else found[0]), None


def _tune_task(key: at.TuneKey, options: at.TuneOptions, gpu_name: str, backend: Backend) -> at.KeyStatus:
    """One key on the task's GPU (runs on a Ray worker): ``failed`` when the node has no usable GPU
    or one of another kind than ``gpu_name``."""
    start = time.monotonic()
    found = backend()
    if found is None:
        status = at.KeyStatus(key, "failed", message="no usable CUDA GPU on this Ray node")
    elif found[0] != gpu_name:
        status = at.KeyStatus(key, "failed", message=f"this node's GPU is {found[0]}, the file's {gpu_name}")
    else:
        status = at._tune_one(key, found[1], found[2], options)
    status.seconds = time.monotonic() - start
    return status


def _grid_task(
    keys: list[at.TuneKey],
    options: at.TuneOptions,
    gpu_name: str,
    backend: Backend,
    grid: GridTuner,
    compile_workers: int,
) -> tuple[list[at.KeyStatus], str]:
    """One shard of a grid run on the task's GPU (runs on a Ray worker): the search over ``keys``
    with ``compile_workers`` compile processes, then each key checked as a single-GPU run checks
    it; every key ``failed`` when the node has no usable GPU or one of another kind. Returns the
    keys' statuses and the search's stage line (:meth:`hltools.grid_search.GridSearch.stage_report`;
    empty when it did not run), with the checks' (:func:`hltools.autotune.check_stage_report`) on a
    second line when they ran."""
    found = backend()
    if found is None or found[0] != gpu_name:
        message = (
            "no usable CUDA GPU on this Ray node"
            if found is None
            else f"this node's GPU is {found[0]}, the file's {gpu_name}"
        )
        return [at.KeyStatus(key, "failed", message=message) for key in keys], ""
    tune = grid(keys, options, compile_workers)
    at.CHECK_STAGES.clear()  # a Ray worker process may run several tasks
    statuses = []
    for key in keys:
        start = time.monotonic()
        status = at._tune_one(key, tune, found[2], options)
        status.seconds = time.monotonic() - start
        statuses.append(status)
    search = getattr(tune, "search", None)
    lines = [search.stage_report() if search is not None and search.stages else "", at.check_stage_report()]
    return statuses, "\n".join(line for line in lines if line)


def cpus_per_gpu(ray) -> int:
    """The CPUs per GPU of the cluster's GPU nodes, the fewest of any (at least 1): what a grid task
    asks for beside its GPU, so that every GPU of every node can run one."""
    ratios = [
        int(node["Resources"].get("CPU", 0) // node["Resources"]["GPU"])
        for node in ray.nodes()
        if node.get("Alive", True) and node.get("Resources", {}).get("GPU", 0) >= 1
    ]
    return max(1, min(ratios, default=1))


def gpu_name_of_cluster(ray, backend: Backend = at.gpu_backend) -> str:
    """The canonical GPU name of the cluster, from one probe task on a GPU;
    :class:`hltools.autotune.AutotuneError` when the cluster has no GPU, the probe finds none, or
    finds one hlvllm does not run on (not SM90)."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise at.AutotuneError("the Ray cluster has no GPU (ray.cluster_resources() lists none)")
    name, error = ray.get(ray.remote(num_gpus=1)(_probe).remote(backend))
    if error is not None:
        raise at.AutotuneError(f"the Ray cluster's GPU: {error}")
    if name is None:
        raise at.AutotuneError("a Ray task on a GPU found no usable CUDA GPU (torch.cuda on that node)")
    return name


def run_on_ray(
    ray,
    keys: Sequence[at.TuneKey],
    path: Path,
    *,
    gpu_name: str,
    options: at.TuneOptions,
    metadata: dict[str, Any],
    force: bool = False,
    budget_seconds: float | None = None,
    backend: Backend = at.gpu_backend,
    grid: GridTuner = gpu_grid_tuner,
    env: dict[str, str] | None = None,
    on_done: Callable[[at.KeyStatus], None] | None = None,
    on_report: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> at.RunSummary:
    """Tune ``keys`` into ``path`` with one Ray task per key on the cluster's GPUs, or one per
    search shard for the grid (``options.effort == "grid"``, searched by ``grid``; see the module
    docstring); ``ray`` is the connected module (:func:`connect`). The resume rule is
    :func:`hltools.autotune.resume`, as for every run. ``env``: environment variables of the tasks (Ray's
    ``runtime_env``; the run's :func:`hltools.autotune.benchmark_env`). ``on_done`` gets each key's
    status as it returns, ``on_report`` each grid task's stage line. Returns the summary in the
    order of ``keys``."""
    plan = at.resume(keys, path, metadata, force)
    fresh = plan.stale is not None
    statuses: dict[int, at.KeyStatus] = dict(plan.skipped)
    if on_done:
        for status in statuses.values():
            on_done(status)
    slots = max(1, int(ray.cluster_resources().get("GPU", 0)))
    runtime = {"runtime_env": {"env_vars": dict(env)}} if env else {}
    if options.effort == "grid":
        from hltools import grid_search

        index = {id(keys[i]): i for i in plan.todo}
        shards = grid_search.shard_groups([keys[i] for i in plan.todo], slots)
        queue = [[index[id(key)] for key in shard] for shard in shards]
        workers = cpus_per_gpu(ray)
        task = ray.remote(num_gpus=1)(_grid_task).options(num_cpus=workers, **runtime)
    else:
        queue = [[i] for i in plan.todo]
        task = ray.remote(num_gpus=1)(_tune_task).options(**runtime)
    deadline = None if budget_seconds is None else clock() + budget_seconds
    running: dict[Any, list[int]] = {}

    def finish(i: int, status: at.KeyStatus) -> None:
        nonlocal fresh
        if status.status == "tuned":
            at.save_tuned(path, status, plan.metadata, merge=not fresh)
            fresh = False
        statuses[i] = status
        if on_done:
            on_done(status)

    while queue or running:
        while queue and len(running) < slots:
            ids = queue.pop(0)
            opts = options
            if deadline is not None:
                remaining = deadline - clock()
                if remaining <= 0:
                    for i in ids:
                        finish(i, at.KeyStatus(keys[i], "not run", message="budget spent; rerun to resume"))
                    continue
                share = remaining * slots / max(len(queue) + 1, 1)
                opts = dataclasses.replace(options, budget_seconds=max(1, int(share)))
            if options.effort == "grid":
                ref = task.remote(
                    [keys[i] for i in ids], opts, gpu_name, backend, grid, options.compile_workers or workers
                )
            else:
                ref = task.remote(keys[ids[0]], opts, gpu_name, backend)
            running[ref] = ids
        if not running:
            break
        (ref,), _ = ray.wait(list(running), num_returns=1)
        ids = running.pop(ref)
        try:
            result = ray.get(ref)
            if options.effort == "grid":
                results, report = result
                if on_report and report:
                    on_report(report)
            else:
                results = [result]
        except Exception as exc:  # the task's worker died, or Ray could not run it
            message = f"Ray task failed: {type(exc).__name__}: {exc}"[:300]
            results = [at.KeyStatus(keys[i], "failed", message=message) for i in ids]
        for i, status in zip(ids, results, strict=True):
            finish(i, status)
    summary = at.RunSummary(path)
    summary.statuses = [statuses[i] for i in sorted(statuses)]
    return summary
