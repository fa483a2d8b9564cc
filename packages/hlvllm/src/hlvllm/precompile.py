"""Compile one GEMM shape's Helion kernels for all its CUDA-graph sizes at once, in threads.

Without it, vLLM's capture loop compiles Helion's kernels one size at a time: the eager warm-up call
before each size's capture binds the kernel, generates Triton code and compiles it (1-3 s each on
the H200; 19-31 s of extra capture time per engine, docs/benchmarks.md). With
``HL_PRECOMPILE_THREADS=N`` (N > 1; default 0, off), the first eager Helion call of a (format, N, K)
first runs the Helion GEMM at every capture size of that shape that will use Helion (its own size
too), ``N`` at a time in threads, and waits for them, so the warm-up calls find their kernels
compiled. Helion's binding and code generation are Python and share the GIL (Helion also serialises
them per kernel); Triton's compile (MLIR passes, ``ptxas``) releases it, and that is the part that
runs in parallel (4 Triton compiles in 2 threads took 0.99 s against 2.16 s one after the other on
a 2-core CPU machine). Sizes whose config and Triton specialization class (M = 1, M divisible by 16,
other) are the same compile one kernel, so one size per such group runs.

Each job calls the GEMM only (no activation quantization, no aux op) on operands of the real
call's dtypes and layouts with M rows (``helion_at(m)``: activations and per-token scales of ones,
the layer's own weight and scales), on the calling thread's CUDA device and stream, so the kernels
compiled are the ones the real calls at those sizes run. Nothing here changes a result: every
size's real first call still runs and is checked against vLLM's kernel (:func:`hlvllm.dispatch.run`).
A job that fails is logged at debug level only: the real call at that size meets the same error and
falls back with its warning. Not under CUDA-graph capture, not twice for a shape; the capture sizes
are read from vLLM's compilation config when the precompile runs (vLLM may change them after model
load). Under the CPU interpreters (``TRITON_INTERPRET``, ``HELION_INTERPRET``, whose global state
threads would share) the jobs run one after the other on the calling thread (a Helion bind on a
second thread followed by the main thread's first ``torch.compile`` crashed in Dynamo's fake
tensors there).

Off by default: on the H200 (2026-12-01 evening, 8-layer Qwen3-8B FP8_Dynamic, one sample) 16
threads took CUDA-graph capture from 26 to 22 s; most of a Helion compile holds the GIL
(docs/configuration.md).

**Worker processes** (``HL_PRECOMPILE_PROCESSES=N``, N > 0, or ``auto``, the default:
:func:`auto_pool_processes`; needs the kernel cache,
``HL_KERNEL_CACHE_DIR``, which ``hlvllm.plugin`` sets): the first registration of each layer shape
(:func:`hlvllm.guard.register_shape` -> :func:`schedule_pool`, at weight processing) records its
Helion GEMM call (``GuardShape.gemm_at``) at every capture size Helion may run
(:func:`hlvllm.routing.decide`) without launching it, keeping the calls whose cache entry is
missing, and re-arms a timer; :data:`POOL_DELAY` s after the last registration the timer hands the
calls to :class:`hlcore.kernel_pool.Pool` (N worker processes, each config's sizes in one worker). That overlaps vLLM's torch.compile and memory
profiling. The first eager Helion call of the process waits for the pool (:func:`wait_pool`, at
most :data:`POOL_TIMEOUT` s), then every size's first call loads its kernel from the cache. Each
worker holds a CUDA context (about 0.5 GB) while it runs: vLLM's memory profiling, if it overlaps,
counts that memory out of the KV cache. A failed or late worker only leaves its kernels to the
normal first call; nothing changes a result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from hlvllm.settings import AUTO, get_settings

logger = logging.getLogger("vllm.hlvllm")

_capture_sizes: tuple[int, ...] = ()
_compilation_config: Any = None  # vLLM's CompilationConfig, read when the precompile runs
_done: set[tuple[str, int, int]] = set()  # (fmt, N, K) already precompiled in this process


def set_capture_sizes(sizes: Iterable[int]) -> None:
    """Fix the capture sizes (tests; an engine uses :func:`set_compilation_config`)."""
    global _capture_sizes
    _capture_sizes = tuple(sorted({int(s) for s in sizes if int(s) > 0}))


def set_compilation_config(config: Any) -> None:
    """Keep vLLM's ``CompilationConfig``: its capture sizes and CUDA-graph mode are read at
    precompile time (vLLM rounds the sizes again after model load, e.g. for speculative decoding)."""
    global _compilation_config
    _compilation_config = config


def capture_sizes() -> tuple[int, ...]:
    """The CUDA-graph capture sizes now: from the kept compilation config (empty when CUDA graphs
    are off), else the fixed ones."""
    if _compilation_config is None:
        return _capture_sizes
    from hlvllm.graphs import capture_sizes_of

    return tuple(sorted(set(capture_sizes_of(_compilation_config))))


def triton_class(m: int) -> int:
    """Triton's specialization of an integer argument: 1, divisible by 16, or neither (0)."""
    return 1 if m == 1 else 16 if m % 16 == 0 else 0


def ones_like_rows(t: torch.Tensor | None, m_old: int, m_new: int) -> torch.Tensor | None:
    """``t`` with ``m_new`` rows of ones and ``t``'s layout when it is a per-row tensor of the call
    (2-D, first dim ``m_old``: row-major contiguous, or column-major as a transposed contiguous
    tensor); else ``t`` itself (weights, per-channel scales, bias, None). A per-row tensor with any
    other layout is a ``ValueError`` (that precompile job is skipped)."""
    if t is None or t.dim() == 0 or t.shape[0] != m_old:
        return t
    if t.is_contiguous():
        return torch.ones((m_new, *t.shape[1:]), dtype=t.dtype, device=t.device)
    if t.dim() == 2 and t.t().is_contiguous():
        return torch.ones((t.shape[1], m_new), dtype=t.dtype, device=t.device).t()
    raise ValueError(f"per-row tensor {tuple(t.shape)} with strides {t.stride()}: layout not reproduced")


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("HELION_INTERPRET") == "1"


def _representatives(sizes: list[int], m: int, group_key: Callable[[int], Hashable] | None) -> list[int]:
    """One size per group (``m`` for its own group), in ``sizes`` order."""
    if group_key is None:
        return sizes
    chosen: dict[Hashable, int] = {}
    for s in sizes:
        key = group_key(s)
        if key not in chosen or s == m:
            chosen[key] = s
    kept = set(chosen.values())
    return [s for s in sizes if s in kept]


def precompile_shape(
    fmt: str,
    m: int,
    n: int,
    k: int,
    helion_at: Callable[[int], object],
    will_use_helion: Callable[[int], bool],
    group_key: Callable[[int], Hashable] | None = None,
) -> list[int]:
    """Run ``helion_at(size)`` for one size per ``group_key`` group of the capture sizes of
    (``fmt``, ``n``, ``k``) (``m`` included) for which ``will_use_helion(size)``, in
    ``HL_PRECOMPILE_THREADS`` threads; return the sizes run (empty when off, already done for this
    shape, or under capture)."""
    threads = get_settings().precompile_threads
    if threads <= 1 or (fmt, n, k) in _done:
        return []
    cuda = torch.cuda.is_available()
    if cuda and torch.cuda.is_current_stream_capturing():
        return []
    _done.add((fmt, n, k))
    sizes = [s for s in capture_sizes() if s == m or will_use_helion(s)]
    if m not in sizes:
        sizes = sorted([*sizes, m])
    sizes = _representatives(sizes, m, group_key)
    if len(sizes) < 2:
        return []
    workers = 1 if _interpreted() else min(threads, len(sizes))
    device = torch.cuda.current_device() if cuda else None
    stream = torch.cuda.current_stream() if cuda else None
    start = time.perf_counter()
    failed: list[str] = []

    def job(size: int) -> None:
        try:
            with (
                torch.cuda.device(device) if cuda else contextlib.nullcontext(),
                torch.cuda.stream(stream) if cuda else contextlib.nullcontext(),
            ):
                helion_at(size)
        except Exception as exc:  # noqa: BLE001 - the real call at this size reports it
            failed.append(f"M={size}: {type(exc).__name__}: {str(exc)[:200]}")

    if workers == 1:  # on this thread: no second thread binding Helion kernels (fake tensors)
        for size in sizes:
            job(size)
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hlvllm-precompile") as pool:
            list(pool.map(job, sizes))
    if cuda:
        torch.cuda.current_stream().synchronize()
    logger.info(
        "hlvllm: precompiled %s N=%d K=%d at M=%s in %.1f s (%d threads)%s",
        fmt,
        n,
        k,
        ",".join(map(str, sizes)),
        time.perf_counter() - start,
        workers,
        "" if not failed else f"; {len(failed)} failed (their first call reports it)",
    )
    for line in failed:
        logger.debug("hlvllm: precompile %s N=%d K=%d %s", fmt, n, k, line)
    return sizes


#: Seconds without a new registered shape before the worker processes start.
POOL_DELAY = 2.0
#: Seconds the first Helion call waits for them at most.
POOL_TIMEOUT = 300.0
_pool_lock = threading.Lock()
_pool: Any = None  # hlcore.kernel_pool.Pool once started; False when there was nothing to run
_pool_timer: threading.Timer | None = None
_pool_shapes: dict[tuple[str, int, int], list] = {}  # (fmt, N, K) -> its recorded jobs
_auto_processes: int | None = None  # HL_PRECOMPILE_PROCESSES=auto, once resolved


#: ``HL_PRECOMPILE_PROCESSES=auto``: at most this many worker processes (what every capture-mode
#: engine measurement on the H200 ran with, on 16 cores).
AUTO_PROCESSES = 8


def auto_pool_processes() -> int:
    """``HL_PRECOMPILE_PROCESSES=auto``: ``max(1, min(AUTO_PROCESSES, usable CPU cores // 2))`` (the
    cores this process may run on) when this engine runs on one GPU (vLLM's ``parallel_config``:
    world size 1 and data-parallel size 1), else 0: every rank would start its own pool for the same
    kernels, and several pools on one host were never measured. 0 without CUDA (the CPU interpreters
    included) or when vLLM's config cannot be read. One INFO line says what it resolved to."""
    if not torch.cuda.is_available():
        return 0
    try:
        from vllm.config import get_current_vllm_config

        parallel = get_current_vllm_config().parallel_config
        engines = parallel.world_size * getattr(parallel, "data_parallel_size", 1)
    except Exception as exc:  # noqa: BLE001 - no config to read: no pool by default
        logger.info("hlvllm: HL_PRECOMPILE_PROCESSES=auto: off (vLLM's config not readable here: %s)", exc)
        return 0
    if engines != 1:
        logger.info(
            "hlvllm: HL_PRECOMPILE_PROCESSES=auto: off for an engine of %d ranks (set N to compile in N "
            "worker processes per rank)",
            engines,
        )
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    processes = max(1, min(AUTO_PROCESSES, cores // 2))
    logger.info(
        "hlvllm: HL_PRECOMPILE_PROCESSES=auto: %d worker processes (%d usable cores)", processes, cores
    )
    return processes


def _pool_processes() -> int:
    """Worker processes to use now: 0 when off, without CUDA or the kernel cache, or interpreted.
    ``auto`` is resolved at the first ask (weight processing, inside vLLM's config) and kept: the
    timer thread and the first Helion call may ask outside it."""
    global _auto_processes
    from hlcore.kernel_cache import cache_dir_from_env

    processes = get_settings().precompile_processes
    if processes == AUTO:
        if _auto_processes is None:
            _auto_processes = auto_pool_processes()
        processes = _auto_processes
    if processes <= 0 or os.environ.get("HELION_INTERPRET") == "1" or cache_dir_from_env() is None:
        return 0
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        return 0
    return processes


def schedule_pool(shape: Any, delay: float | None = None) -> None:
    """Record the Helion GEMM calls of ``shape`` (a :class:`hlvllm.guard.GuardShape`, first
    registration per (format, N, K); :func:`pool_jobs`, here on the loading thread, which is cheap)
    and (re)arm the timer that starts the worker processes ``delay`` s (:data:`POOL_DELAY`) after
    the last registered shape; nothing when they are off or already started."""
    global _pool_timer
    key = (shape.fmt, shape.n, shape.k)
    if _pool_processes() <= 0 or key in _pool_shapes:
        return
    from hlvllm import startup

    with startup.timed("recording"):
        _pool_shapes[key] = pool_jobs([shape])
    with _pool_lock:
        if _pool is not None:
            return
        if _pool_timer is not None:
            _pool_timer.cancel()
        _pool_timer = threading.Timer(POOL_DELAY if delay is None else delay, start_pool)
        _pool_timer.daemon = True
        _pool_timer.start()


def pool_jobs(shapes: Iterable[Any]) -> list:
    """The Helion GEMM calls of ``shapes`` at every capture size Helion may run whose kernel-cache
    entry is missing (:func:`hlcore.kernel_pool.recording`; nothing launches)."""
    from hlcore import kernel_pool
    from hlvllm import routing

    sizes = [s for s in capture_sizes() if 0 < s <= routing.max_helion_m()]
    with kernel_pool.recording() as jobs:  # gemm_at puts its tensors on the layer weight's device
        for shape in shapes:
            if shape.gemm_at is None:
                continue
            for m in sizes:
                if not routing.decide(shape.fmt, m, shape.n, shape.k).helion:
                    continue
                try:
                    shape.gemm_at(m)
                except Exception as exc:  # noqa: BLE001 - that size compiles at its first call
                    logger.debug(
                        "hlvllm: no precompile job for %s N=%d K=%d M=%d: %s",
                        shape.fmt,
                        shape.n,
                        shape.k,
                        m,
                        exc,
                    )
    return jobs


def start_pool() -> None:
    """Start the worker processes on the recorded jobs (once per process; see the module docstring)."""
    global _pool, _pool_timer
    processes = _pool_processes()
    with _pool_lock:
        if _pool is not None or processes <= 0:
            return
        _pool_timer = None
        try:
            from hlcore.kernel_pool import Pool

            jobs = [job for shape_jobs in _pool_shapes.values() for job in shape_jobs]
            _pool = Pool(jobs, processes).start() if jobs else False
        except Exception as exc:  # noqa: BLE001 - a speed-up only
            logger.warning("hlvllm: precompile worker processes not started (%s)", exc)
            _pool = False
            return
    if _pool:
        logger.info(
            "hlvllm: compiling %d Helion kernels in %d worker processes", len(_pool.jobs), len(_pool._procs)
        )


def wait_pool() -> dict | None:
    """Before the first Helion call: start the workers now if the timer has not, wait for them
    (:data:`POOL_TIMEOUT`), log one line; their report, or None when there was none (off, nothing to
    compile, or already waited)."""
    global _pool
    if _pool is False or _pool_processes() <= 0:
        return None
    if _pool_timer is not None:
        _pool_timer.cancel()
    start_pool()
    with _pool_lock:
        pool, _pool = _pool, False
    if not pool:
        return None
    from hlvllm import startup

    with startup.timed("waiting for workers"):
        report = pool.wait(POOL_TIMEOUT)
    logger.info(
        "hlvllm: precompiled %d of %d Helion kernels in %d worker processes; ready after %.1f s%s",
        report["ran"],
        report["jobs"],
        report["workers"],
        report["seconds"],
        "" if not report["failed"] else f" ({report['failed']} failed: {report['errors'][0][:200]})",
    )
    return report


def reset() -> None:
    """Forget capture sizes, the compilation config, precompiled shapes, the worker pool and the
    resolved ``auto`` process count (tests)."""
    global _capture_sizes, _compilation_config, _pool, _pool_timer, _auto_processes
    _capture_sizes = ()
    _auto_processes = None
    _compilation_config = None
    _done.clear()
    if _pool_timer is not None:
        _pool_timer.cancel()
    _pool_timer = None
    _pool = None
    _pool_shapes.clear()
