"""``hltools autotune --gpus N``: the keys of one run shared out over N local GPUs.

The keys still to tune (:func:`hltools.autotune.run_autotune`'s resume rule) are dealt round-robin
to ``N`` worker processes (:func:`shard_keys`), one per GPU (``CUDA_VISIBLE_DEVICES`` set to that
GPU before the worker imports torch), each running :func:`hltools.autotune.run_autotune` into its
own shard file beside the output (:func:`shard_path`: ``<gpu>.shard<i>.json``, saved after every
key as the single-GPU run saves its file). When the workers end, :func:`merge_shards` folds the
shard files into the output file and deletes them; a run that was stopped leaves its shard files,
and the next run folds them in first, so it resumes from every key any worker finished.

The grid search (``--effort grid``, the default) is sharded by search group instead
(:func:`hltools.grid_search.shard_groups`: whole (format, N, K) shapes, split into M buckets when
there are fewer shapes than GPUs), so no two workers search or compile the same candidates; each
worker runs its own search (:func:`hltools.grid_search.make_grid_tuner`) with ``cpus // workers``
compile processes, so the workers' compiles together use every CPU once, into one kernel cache
directory (:func:`hltools.grid_search.use_run_kernel_cache`, set before the workers start). A
worker times on its own GPU while others still compile: the timer measures the GPU's time inside
one CUDA-graph replay, which the host's load does not stretch. Each worker prints its search's
stage line (``[gpu i] grid search: ...``).

Keys are timed on the GPU that tuned them; the GPUs must be of one kind (the output file is named
after the GPU: a worker whose GPU has another name fails its keys). Several machines:
:mod:`hltools.autotune_ray` (``--ray``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.text import Text

from hlcore.config_store import read_config_file, save_config_file
from hltools import autotune as at
from hltools.bench_configs import PROVENANCE_FIELDS


def shard_keys(keys: Sequence[at.TuneKey], shards: int) -> list[list[at.TuneKey]]:
    """``keys`` dealt round-robin into ``shards`` lists (the keys' order is shape-major, so every
    worker gets a mix of shapes and sizes); empty lists are dropped."""
    if shards < 1:
        raise ValueError(f"--gpus must be at least 1; got {shards}")
    return [part for part in (list(keys[i::shards]) for i in range(shards)) if part]


def shard_path(path: Path, index: int) -> Path:
    """The shard file of worker ``index`` beside ``path`` (``nvidia_h200.json`` ->
    ``nvidia_h200.shard0.json``)."""
    return path.with_name(f"{path.stem}.shard{index}{path.suffix}")


def merge_shards(path: Path, metadata: dict[str, Any] | None = None) -> int:
    """Fold every shard file beside ``path`` into ``path`` (same keys replaced; the file's provenance
    fields replaced by ``metadata``'s, the run's :attr:`hltools.autotune.Resume.metadata`, else by the
    shard's own with the file's under ``earlier`` where another command made it,
    :func:`hltools.autotune.save_metadata`), delete them, and return how many entries were folded
    in. A shard file that cannot be read is left in place and raises
    :class:`hltools.autotune.AutotuneError` naming it."""
    folded = 0
    for shard in sorted(path.parent.glob(f"{path.stem}.shard*{path.suffix}")):
        try:
            shard_file = read_config_file(shard)
        except ValueError as exc:
            raise at.AutotuneError(f"{shard}: cannot fold this shard file into {path.name}: {exc}") from None
        entries = list(shard_file.entries.values())
        if entries:
            meta = metadata or at.save_metadata(at.load_existing(path), shard_file.metadata)
            save_config_file(path, entries, meta, merge=True, drop_metadata=PROVENANCE_FIELDS)
        shard.unlink()
        folded += len(entries)
    return folded


def _worker(
    index: int,
    gpu: str,
    keys: list[at.TuneKey],
    path: Path,
    run: dict[str, Any],
    options: at.TuneOptions,
    compile_workers: int | None = None,
) -> at.RunSummary:
    """One GPU's share (runs in its own process): the GPU made the only visible one, then
    :func:`hltools.autotune.run_autotune` into the shard file, a status line per key on stdout
    (the grid search: over this share's keys, ``compile_workers`` compile processes, and its stage
    line at the end)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    backend = at.gpu_backend()
    if backend is None:
        raise at.AutotuneError(f"worker {index}: GPU {gpu} is not usable")
    _gpu_name, tune, check = backend
    if options.effort == "grid":
        from hltools import grid_search

        tune = grid_search.make_grid_tuner(keys, options, compile_workers)
    summary = at.run_autotune(
        keys,
        shard_path(path, index),
        tune=tune,
        check=check,
        options=options,
        on_done=lambda status: print(
            f"[gpu {gpu}] {Text.from_markup(at.status_line(status)).plain}", flush=True
        ),
        **run,
    )
    search = getattr(tune, "search", None)
    if search is not None and search.stages:
        print(f"[gpu {gpu}] {search.stage_report()}", flush=True)
    if (checked := at.check_stage_report()) is not None:
        print(f"[gpu {gpu}] {checked}", flush=True)
    return summary


def run_sharded(
    keys: Sequence[at.TuneKey],
    path: Path,
    gpus: Sequence[str],
    *,
    options: at.TuneOptions,
    metadata: dict[str, Any],
    force: bool = False,
    budget_seconds: float | None = None,
    context: str = "spawn",
) -> at.RunSummary:
    """Tune ``keys`` into ``path`` on the local GPUs ``gpus`` (CUDA device indices as strings), one
    worker process each (``context``: multiprocessing start method; CUDA needs ``spawn``); the grid
    search (``options.effort == "grid"``) sharded by search group (module docstring).

    Shard files left by an earlier run are folded in first; keys already in ``path`` are skipped
    (``force`` retunes them, as :func:`hltools.autotune.run_autotune` does, after the same check of
    the file's GPU and helion version). Returns one summary over all workers."""
    merge_shards(path)
    plan = at.resume(keys, path, metadata, force)
    summary = at.RunSummary(path)
    summary.statuses = list(plan.skipped.values())
    todo = [keys[i] for i in plan.todo]
    compile_workers = None
    if options.effort == "grid":
        from hltools import grid_search

        parts = grid_search.shard_groups(todo, len(gpus))
        compile_workers = options.compile_workers or max(1, (os.cpu_count() or 1) // max(len(parts), 1))
        grid_search.use_run_kernel_cache()  # before the workers start: they share it
    else:
        parts = shard_keys(todo, len(gpus))
    run = {"metadata": metadata, "force": True, "budget_seconds": budget_seconds}  # a shard file is new
    # not multiprocessing.Pool: its workers are daemonic and may not start processes, which the
    # grid's compile workers and Helion's autotuner precompile both do
    with ProcessPoolExecutor(len(parts) or 1, mp_context=mp.get_context(context)) as pool:
        results = [
            pool.submit(_worker, i, gpus[i], part, path, run, options, compile_workers)
            for i, part in enumerate(parts)
        ]
        summaries = [r.result() for r in results]
    if plan.stale:  # --force over another GPU's or helion's file: it starts afresh, as run_autotune does
        path.unlink()
    merge_shards(path, plan.metadata)
    for part in summaries:
        summary.statuses += part.statuses
    return summary
