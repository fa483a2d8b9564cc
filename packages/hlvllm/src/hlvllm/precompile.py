"""Compile one GEMM shape's Helion kernels for all its CUDA-graph sizes at once, in threads.

Without it, vLLM's capture loop compiles Helion's kernels one size at a time: the eager warm-up call
before each size's capture binds the kernel, generates Triton code and compiles it (1-3 s each on
the H200; 19-31 s of extra capture time per engine, docs/benchmarks.md). With
``HL_PRECOMPILE_THREADS=N`` (N > 1; default 0, off), the first eager Helion call of a (format, N, K)
first runs the same Helion call for every other capture size of that shape that will use Helion,
``N`` at a time in threads, and waits for them, so the later warm-up calls find their kernels
compiled. Helion's binding and code generation are Python and share the GIL; Triton's compile
(MLIR passes, ``ptxas``) releases it, and that is the part that runs in parallel (4 Triton compiles
in 2 threads took 0.99 s against 2.16 s one after the other on a 2-core CPU machine).

Each job calls Helion on operands of the real call's dtypes, layouts and devices with M rows
(``helion_at(m)``: activations and per-token scales of ones, the layer's own weight and scales), so
the kernels compiled are the ones the real calls at those sizes run. Nothing here changes a result:
every size's real first call still runs and is checked against vLLM's kernel
(:func:`hlvllm.dispatch.run`). A job that fails is logged at debug level only: the real call at
that size meets the same error and falls back with its warning. Not under CUDA-graph capture, not
twice for a shape; under the CPU interpreters (``TRITON_INTERPRET``, ``HELION_INTERPRET``, whose
global state threads would share) the jobs run one after the other.

Experimental: not yet measured on a GPU (docs/configuration.md).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import torch

from hlvllm.settings import get_settings

logger = logging.getLogger("vllm.hlvllm")

_capture_sizes: tuple[int, ...] = ()
_done: set[tuple[str, int, int]] = set()  # (fmt, N, K) already precompiled in this process


def set_capture_sizes(sizes: Iterable[int]) -> None:
    """Record vLLM's CUDA-graph capture sizes (``compilation_config.cudagraph_capture_sizes``)."""
    global _capture_sizes
    _capture_sizes = tuple(sorted({int(s) for s in sizes if int(s) > 0} | set(_capture_sizes)))


def capture_sizes() -> tuple[int, ...]:
    return _capture_sizes


def ones_like_rows(t: torch.Tensor | None, m_old: int, m_new: int) -> torch.Tensor | None:
    """``t`` with ``m_new`` rows of ones when it is a per-row tensor of the call (first dim
    ``m_old``, contiguous), else ``t`` itself (weights, per-channel scales, bias, None)."""
    if t is None or t.dim() == 0 or t.shape[0] != m_old or not t.is_contiguous():
        return t
    return torch.ones((m_new, *t.shape[1:]), dtype=t.dtype, device=t.device)


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("HELION_INTERPRET") == "1"


def precompile_shape(
    fmt: str,
    m: int,
    n: int,
    k: int,
    helion_at: Callable[[int], object],
    will_use_helion: Callable[[int], bool],
) -> list[int]:
    """Run ``helion_at(size)`` for each capture size of (``fmt``, ``n``, ``k``) other than ``m`` for
    which ``will_use_helion(size)``, in ``HL_PRECOMPILE_THREADS`` threads; return those sizes (empty
    when off, already done for this shape, or under capture)."""
    threads = get_settings().precompile_threads
    if threads <= 1 or (fmt, n, k) in _done:
        return []
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return []
    _done.add((fmt, n, k))
    sizes = [s for s in _capture_sizes if s != m and will_use_helion(s)]
    if not sizes:
        return []
    workers = 1 if _interpreted() else min(threads, len(sizes))
    start = time.perf_counter()
    failed: list[str] = []

    def job(size: int) -> None:
        try:
            helion_at(size)
        except Exception as exc:  # noqa: BLE001 - the real call at this size reports it
            failed.append(f"M={size}: {type(exc).__name__}: {str(exc)[:200]}")

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hlvllm-precompile") as pool:
        list(pool.map(job, sizes))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
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


def reset() -> None:
    """Forget capture sizes and precompiled shapes (tests)."""
    global _capture_sizes
    _capture_sizes = ()
    _done.clear()
