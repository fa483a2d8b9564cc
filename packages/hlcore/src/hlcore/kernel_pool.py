"""Compile Helion GEMM kernels in worker processes ahead of their first call (cold start).

A Helion kernel's first call in a process binds it (traces the body), generates Triton source and
compiles it; the binding and code generation are Python and hold the GIL, so threads barely help
(:mod:`hlvllm.precompile`). With the on-disk code cache (:mod:`hlcore.kernel_cache`,
``HL_KERNEL_CACHE_DIR``) a *later* process only loads the generated module and Triton's cubin. This
module makes that later-process path available to the first process: it records the exact kernel
calls the process is going to make, runs them in ``processes`` fresh Python processes (each writes
the cache entries and Triton's cache), and the process's own first calls then load them.

1. :func:`recording`: while active on this thread, :func:`hlcore.scaled_mm.scaled_mm` does not
   launch; it records a :class:`Job` (the config text and :func:`describe` of the Helion kernel's
   exact arguments) and returns an uninitialised ``[M, N]`` output of the right dtype. Jobs whose
   cache entry already exists are not recorded (a warm start spawns nothing).
2. :class:`Pool`: ``Pool(jobs, processes).start()`` spawns ``python -m hlcore.kernel_pool`` workers
   (jobs of one config stay in one worker, so it binds that config once), ``wait(timeout)``
   collects their reports.
3. A worker rebuilds each call's arguments with the same shape, strides, storage offset, dtype,
   device and aliasing (:func:`rebuild`; zeros: the values do not change what compiles) and calls the
   cached kernel, which writes the entry for exactly that metadata.

Nothing here changes a result: the calls the process makes later are its own, from the cache entry
(same key rules as any later process) or, on any mismatch, through Helion's normal path. A worker
that fails or times out only costs the compile time it was meant to save; its error is in the
report. Workers inherit the environment (``HL_KERNEL_CACHE_DIR``, ``CUDA_VISIBLE_DEVICES``,
``HELION_*``), which is part of the cache key; Triton compiles their kernels and launchers into
``<HL_KERNEL_CACHE_DIR>/triton`` (:func:`hlcore.kernel_cache.triton_cache_scope`), where the
process's own first runs look, whatever ``TRITON_CACHE_DIR`` says by then. Triton's key holds the
ptxas version: a process that will switch ptxas later (Inductor's rule, in any torch.compile'd
process) makes that switch before starting a pool (:func:`hlcore.kernel_cache.use_inductors_ptxas`,
as ``hlvllm.plugin`` does), or the workers' kernels miss there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from hlcore.kernel_cache import CachedKernel, call_key

_local = threading.local()


@dataclass(frozen=True)
class Job:
    """One Helion kernel call to compile: ``kernel`` (a name of :data:`KERNELS`), its config JSON and
    :func:`describe` of its positional arguments."""

    kernel: str
    config: str
    args: list = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Arguments as metadata
# --------------------------------------------------------------------------------------------
def describe(args: Sequence[object]) -> list:
    """JSON-able metadata of a kernel call's positional arguments: a tensor as ``{"tensor": [shape,
    stride, dtype, storage_offset, device]}`` (``{"same": i}`` when it is argument ``i`` again), a
    dtype as ``{"dtype": name}``, None / bool / int / float as themselves.

    Raises:
        TypeError: an argument of another type."""
    out: list = []
    seen: dict[int, int] = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if id(a) in seen:
                out.append({"same": seen[id(a)]})
                continue
            seen[id(a)] = i
            dev = a.device
            out.append(
                {
                    "tensor": [
                        list(a.shape),
                        list(a.stride()),
                        str(a.dtype).removeprefix("torch."),
                        a.storage_offset(),
                        f"{dev.type}:{dev.index if dev.index is not None else 0}"
                        if dev.type == "cuda"
                        else dev.type,
                    ]
                }
            )
        elif isinstance(a, torch.dtype):
            out.append({"dtype": str(a).removeprefix("torch.")})
        elif a is None or isinstance(a, (bool, int, float)):
            out.append(a)
        else:
            raise TypeError(f"kernel_pool.describe: argument {i} of type {type(a).__name__} is not supported")
    return out


def rebuild(items: Sequence[Any]) -> tuple:
    """The arguments :func:`describe` describes: tensors of zeros over a fresh storage just large
    enough for their shape, strides and storage offset (so the offset and the allocator's alignment
    match), aliasing as described."""
    out: list = []
    for item in items:
        if isinstance(item, dict) and "tensor" in item:
            shape, stride, dtype, offset, device = item["tensor"]
            dt = getattr(torch, dtype)
            extent = 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True)) if all(shape) else 0
            base = torch.zeros(offset + extent, dtype=dt, device=device)
            out.append(base.as_strided(shape, stride, offset))
        elif isinstance(item, dict) and "same" in item:
            out.append(out[item["same"]])
        elif isinstance(item, dict) and "dtype" in item:
            out.append(getattr(torch, item["dtype"]))
        else:
            out.append(item)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def recording() -> Iterator[list[Job]]:
    """Within the block, on this thread, :func:`hlcore.scaled_mm.scaled_mm` records its Helion call
    as a :class:`Job` in the yielded list instead of launching (see the module docstring)."""
    jobs: list[Job] = []
    previous = getattr(_local, "jobs", None)
    _local.jobs = jobs
    try:
        yield jobs
    finally:
        _local.jobs = previous


def recorder() -> list[Job] | None:
    """The job list of the active :func:`recording` on this thread, else None (hot path)."""
    return getattr(_local, "jobs", None)


def record(kernel_name: str, kernel: Any, config_text: str, args: tuple, jobs: list[Job]) -> None:
    """Append the job for ``kernel(*args)`` unless its cache entry already exists (or the kernel has
    no on-disk cache, where a worker's compile would be lost)."""
    if not isinstance(kernel, CachedKernel):
        return
    key = call_key(args)
    if key is None or kernel.entry_path(kernel.entry_key(args, key)).exists():
        return
    job = Job(kernel_name, config_text, describe(args))
    if job not in jobs:
        jobs.append(job)


# --------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------
#: Job kernel name -> "module:function" giving the (cached) Helion kernel of a config text.
KERNELS = {
    "scaled_mm": "hlcore.scaled_mm:_kernel_for",
    "block_fp8_linear": "hlcore.fused_linear:_kernel_for",
}


def kernel_of(name: str, config_text: str) -> Any:
    """The Helion kernel a job of kernel ``name`` runs (:data:`KERNELS`).

    Raises:
        ValueError: ``name`` is not in :data:`KERNELS`."""
    import importlib

    if name not in KERNELS:
        raise ValueError(f"kernel_pool: unknown kernel {name!r}; known: {sorted(KERNELS)}")
    module, function = KERNELS[name].split(":")
    return getattr(importlib.import_module(module), function)(config_text)


def run_jobs(jobs: Sequence[Job]) -> list[dict]:
    """Run each job's kernel call once (in this process); one report per job: ``seconds`` and
    ``error`` (None when it ran)."""
    reports = []
    for job in jobs:
        start = time.perf_counter()
        error = None
        try:
            kernel = kernel_of(job.kernel, job.config)
            args = rebuild(job.args)
            kernel(*args)
            if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which carries on
            error = f"{type(exc).__name__}: {str(exc)[:300]}"
        reports.append({"seconds": round(time.perf_counter() - start, 3), "error": error})
    return reports


def split(jobs: Sequence[Job], processes: int) -> list[list[Job]]:
    """Jobs in at most ``processes`` groups, each config's jobs in one group (it binds once), the
    largest configs first onto the least loaded group."""
    by_config: dict[tuple[str, str], list[Job]] = {}
    for job in jobs:
        by_config.setdefault((job.kernel, job.config), []).append(job)
    groups: list[list[Job]] = [[] for _ in range(max(1, min(processes, len(by_config))))]
    for same in sorted(by_config.values(), key=len, reverse=True):
        min(groups, key=len).extend(same)
    return [g for g in groups if g]


@dataclass
class Pool:
    """``processes`` worker processes compiling ``jobs`` (see the module docstring)."""

    jobs: Sequence[Job]
    processes: int
    _procs: list[tuple[subprocess.Popen, Path, int]] = field(default_factory=list)
    _dir: tempfile.TemporaryDirectory | None = None
    _start: float = 0.0

    def start(self) -> Pool:
        """Spawn the workers (non-blocking)."""
        self._start = time.perf_counter()
        self._dir = tempfile.TemporaryDirectory(prefix="hl-kernel-pool-")
        for i, group in enumerate(split(self.jobs, self.processes)):
            path = Path(self._dir.name) / f"jobs-{i}.json"
            path.write_text(json.dumps([asdict(j) for j in group]))
            with open(path.with_suffix(".out"), "w") as out, open(path.with_suffix(".err"), "w") as err:
                proc = subprocess.Popen(  # output to files: a full pipe would stall the worker
                    [sys.executable, "-m", "hlcore.kernel_pool", str(path)],
                    stdout=out,
                    stderr=err,
                    env=os.environ.copy(),
                )
            self._procs.append((proc, path, len(group)))
        return self

    def wait(self, timeout: float | None = None) -> dict:
        """Wait for every worker (killing those still running after ``timeout`` seconds from now);
        returns ``{"jobs", "ran", "failed", "workers", "seconds", "errors"}``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        ran = failed = 0
        errors: list[str] = []
        for proc, path, count in self._procs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                failed += count
                errors.append(f"worker timed out with {count} jobs")
                continue
            try:
                reports = json.loads(path.with_suffix(".out").read_text().strip().splitlines()[-1])
            except (json.JSONDecodeError, IndexError, OSError):
                stderr = path.with_suffix(".err").read_text(errors="replace").strip()
                failed += count
                errors.append(f"worker exit {proc.returncode}: {stderr[-300:]}")
                continue
            for report in reports:
                if report["error"] is None:
                    ran += 1
                else:
                    failed += 1
                    errors.append(report["error"])
        if self._dir is not None:
            self._dir.cleanup()
        return {
            "jobs": len(self.jobs),
            "ran": ran,
            "failed": failed,
            "workers": len(self._procs),
            "seconds": round(time.perf_counter() - self._start, 2),
            "errors": errors,
        }


def main(argv: Sequence[str] | None = None) -> int:
    """Worker entry point: ``python -m hlcore.kernel_pool JOBS.json`` prints the reports as one JSON
    line on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    jobs = [Job(**j) for j in json.loads(Path(argv[0]).read_text())]
    print(json.dumps(run_jobs(jobs)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
