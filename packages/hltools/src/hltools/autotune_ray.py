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

Requirements: Ray (``pip install "hltools[ray]"``, or any Ray the cluster runs) and hl installed on
every node at the driver's versions; the GPUs of one kind. The output file is named after the GPU
of a first probe task; a task whose GPU has another canonical name fails its key (a key is timed
on the GPU that tuned it). ``ray.init(address=ADDRESS)``: ``auto`` joins the cluster this machine
belongs to (``ray start --head`` / ``ray start --address=...`` on the nodes), ``local`` starts a
one-machine cluster (its GPUs), any other value is a cluster address (``ray://host:10001``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hltools import autotune as at

#: ``() -> (gpu_name, tune, check) | None``: the GPU backend a task uses on its node (tests give a fake).
Backend = Callable[[], tuple[str, at.Tuner, at.Checker] | None]


def import_ray():
    """The ``ray`` module, or :class:`hltools.autotune.AutotuneError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise at.AutotuneError(
            '--ray needs Ray on this machine and on every node: pip install "hltools[ray]" (or ray)'
        ) from None
    return ray


def connect(address: str, **init_kwargs: Any):
    """``ray.init`` for ``--ray ADDRESS`` (``local``: a new one-machine cluster; else the address,
    ``auto`` included), unless this process is connected already; returns the ``ray`` module."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, **init_kwargs)
    return ray


def _probe(backend: Backend) -> str | None:
    found = backend()
    return None if found is None else found[0]


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


def gpu_name_of_cluster(ray, backend: Backend = at.gpu_backend) -> str:
    """The canonical GPU name of the cluster, from one probe task on a GPU;
    :class:`hltools.autotune.AutotuneError` when the cluster has no GPU or the probe finds none."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise at.AutotuneError("the Ray cluster has no GPU (ray.cluster_resources() lists none)")
    name = ray.get(ray.remote(num_gpus=1)(_probe).remote(backend))
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
    env: dict[str, str] | None = None,
    on_done: Callable[[at.KeyStatus], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> at.RunSummary:
    """Tune ``keys`` into ``path`` with one Ray task per key on the cluster's GPUs (see the module
    docstring); ``ray`` is the connected module (:func:`connect`). The resume rule is
    :func:`hltools.autotune.resume`, as for every run. ``env``: environment variables of the tasks (Ray's
    ``runtime_env``; the run's :func:`hltools.autotune.benchmark_env`). Returns the summary in the
    order of ``keys``."""
    plan = at.resume(keys, path, metadata, force)
    fresh = plan.stale is not None
    statuses: dict[int, at.KeyStatus] = dict(plan.skipped)
    if on_done:
        for status in statuses.values():
            on_done(status)
    todo = [(i, keys[i]) for i in plan.todo]
    slots = max(1, int(ray.cluster_resources().get("GPU", 0)))
    task = ray.remote(num_gpus=1)(_tune_task)
    if env:
        task = task.options(runtime_env={"env_vars": dict(env)})
    deadline = None if budget_seconds is None else clock() + budget_seconds
    running: dict[Any, int] = {}
    queue = list(todo)
    while queue or running:
        while queue and len(running) < slots:
            i, key = queue.pop(0)
            opts = options
            if deadline is not None:
                remaining = deadline - clock()
                if remaining <= 0:
                    statuses[i] = at.KeyStatus(key, "not run", message="budget spent; rerun to resume")
                    if on_done:
                        on_done(statuses[i])
                    continue
                share = remaining * slots / max(len(queue) + 1, 1)
                opts = at.TuneOptions(options.effort, options.seed, max(1, int(share)))
            running[task.remote(key, opts, gpu_name, backend)] = i
        if not running:
            break
        (ref,), _ = ray.wait(list(running), num_returns=1)
        i = running.pop(ref)
        try:
            status = ray.get(ref)
        except Exception as exc:  # the task's worker died, or Ray could not run it
            status = at.KeyStatus(
                keys[i], "failed", message=f"Ray task failed: {type(exc).__name__}: {exc}"[:300]
            )
        if status.status == "tuned":
            at.save_tuned(path, status, plan.metadata, merge=not fresh)
            fresh = False
        statuses[i] = status
        if on_done:
            on_done(status)
    summary = at.RunSummary(path)
    summary.statuses = [statuses[i] for i in sorted(statuses)]
    return summary
