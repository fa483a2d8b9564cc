"""Hybrid dispatch inside an opaque torch custom op: Helion for num_tokens <= max_helion_size under
CUDA-graph capture, vLLM's default kernel otherwise.

What runs for a (format, M, N, K) is decided by :func:`hlvllm.routing.decide` (the one owner of that
rule: size, failures, tuned keys and their fallback marks, untuned shapes and the speed guard); this
module adds the rule of the call's context. Inside vLLM's compiled graph the op is only reached at
num_tokens <= max_helion_size: the compile range above it calls vLLM's own op directly
(:mod:`hlvllm.lowering`); the size test here covers every other caller (eager mode, tests, a graph
compiled without the lowering).

Helion's host call costs tens of microseconds, so outside capture Helion runs only once per
(M, N, K) to compile before capture (vLLM's warm-up run precedes each capture at the same size),
unless ``HL_HELION_EAGER=1``. Before the first such call the speed guard times every registered
shape without an exact tuned key, or whose Block_FP8 key's mark was measured on the other scale_a
layout (:func:`hlvllm.guard.check_all`, once per process). A Helion failure
for a shape logs one warning and that shape uses vLLM's kernel from then on: a server never fails
because of us.

Never silently wrong: the first eager Helion call of each (format, M, N, K) (the warm-up compile
before capture, or the first call under ``HL_HELION_EAGER``) also runs vLLM's kernel on the same
inputs; if the two differ by more than twice the format's tolerance against the fp32 reference
(:func:`hlcore.numerics.tolerance`; each kernel is within it), or Helion's output is not finite where
vLLM's is, that shape logs one warning and uses vLLM's kernel from then on (its result is returned).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections import Counter
from collections.abc import Callable, Hashable

import torch

from hlvllm import routing, startup
from hlvllm.routing import HELION, VLLM, max_helion_m, set_capture_limit
from hlvllm.settings import get_settings

__all__ = ["DISPATCH_COUNTS", "CAPTURE_COUNTS", "max_helion_m", "set_capture_limit", "run", "route"]

logger = logging.getLogger("vllm.hlvllm")

#: (path, M, N, K) -> calls that ran the op body (eager, warm-up or capture; not graph replays).
DISPATCH_COUNTS: Counter[tuple[str, int, int, int]] = Counter()
#: (path, M, N, K) -> calls made while a CUDA graph was being captured (what graph replays run).
CAPTURE_COUNTS: Counter[tuple[str, int, int, int]] = Counter()
_warmed: set[tuple[str, int, int, int]] = set()
_validated: set[tuple[str, int, int, int]] = set()  # (fmt, M, N, K) checked against vLLM's kernel


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def tuned_fallback(fmt: str, m: int, n: int, k: int) -> bool:
    """Whether the config file and the guard send this key to vLLM's kernel (:func:`routing.decide`
    for a size Helion may take)."""
    return not routing.decide(fmt, m, n, k).helion


def route(fmt: str, m: int, n: int, k: int) -> str:
    """``"helion"`` or ``"fallback"`` for one call of format ``fmt`` at ``[M, K] x [K, N]`` in this
    call's context (records the first eager call of a size)."""
    if not routing.decide(fmt, m, n, k).helion:
        return VLLM
    if get_settings().helion_eager or _capturing():
        return HELION
    key = (fmt, m, n, k)
    if key not in _warmed:  # first eager call at this size: compile now, before any capture
        _warmed.add(key)
        return HELION
    return VLLM


def will_use_helion(fmt: str, m: int, n: int, k: int) -> bool:
    """Whether the first eager call of (``fmt``, ``m``, ``n``, ``k``) is still to come and will run
    Helion (:func:`route` without recording anything)."""
    return (fmt, m, n, k) not in _validated and routing.decide(fmt, m, n, k).helion


def run(
    fmt: str,
    m: int,
    n: int,
    k: int,
    helion_fn: Callable[[], torch.Tensor],
    fallback_fn: Callable[[], torch.Tensor],
    helion_at: Callable[[int], object] | None = None,
    group_key: Callable[[int], Hashable] | None = None,
) -> torch.Tensor:
    """Run ``helion_fn()`` (Helion with the route's config) or ``fallback_fn()`` (vLLM's kernel) as
    :func:`route` says; count and optionally log it. ``helion_at(size)``: the
    same Helion GEMM at another M and ``group_key(size)`` what it compiles, for
    :mod:`hlvllm.precompile` (run before this shape's first eager Helion call when
    ``HL_PRECOMPILE_THREADS`` > 1; its failure is logged, never raised)."""
    capturing = _capturing()
    if not capturing and 0 < m <= max_helion_m():
        from hlvllm import guard, precompile

        precompile.wait_pool()  # the kernels compiled in worker processes (HL_PRECOMPILE_PROCESSES)
        guard.check_all()  # once per process, before the first Helion call
        guard.check_key(fmt, m, n, k)  # a size or shape check_all did not cover
    path = route(fmt, m, n, k)
    if path == HELION:
        if helion_at is not None and not capturing:
            from hlvllm import precompile

            try:
                with startup.timed("precompile threads"):
                    precompile.precompile_shape(
                        fmt, m, n, k, helion_at, lambda size: will_use_helion(fmt, size, n, k), group_key
                    )
            except Exception as exc:  # noqa: BLE001 - a speed-up only: never fail the call for it
                logger.warning("hlvllm: precompile of %s N=%d K=%d failed (%s)", fmt, n, k, exc)
        try:
            startup.import_kernels()  # a failing import falls back like any Helion failure
            first = not capturing and (fmt, m, n, k) not in _validated
            with (
                startup.timed("first Helion calls", f"{fmt} M={m} N={n} K={k}")
                if first
                else contextlib.nullcontext()
            ):
                out = helion_fn()
            if first:
                _validated.add((fmt, m, n, k))
                with startup.timed("checks against vLLM"):
                    ref = fallback_fn()
                    reason = disagreement(fmt, out, ref)
                if reason:
                    raise ValueError(f"result differs from vLLM's kernel on the same inputs: {reason}")
        except Exception as exc:  # noqa: BLE001 - any Helion failure must fall back, never crash
            report_failure(fmt, m, n, k, exc)
            path = VLLM
            out = fallback_fn()
    else:
        out = fallback_fn()
    key = (path, m, n, k)
    if get_settings().dispatch_log and (
        key not in DISPATCH_COUNTS or (capturing and key not in CAPTURE_COUNTS)
    ):
        logger.info("hlvllm dispatch: %s %s M=%d N=%d K=%d capturing=%s", fmt, path, m, n, k, capturing)
    DISPATCH_COUNTS[key] += 1
    if capturing:
        CAPTURE_COUNTS[key] += 1
        if path == HELION and not _cache_logged:
            _log_kernel_cache(m)
    return out


_cache_logged = False


def _log_kernel_cache(m: int) -> None:
    """Once, when the smallest CUDA-graph size Helion runs is captured (vLLM captures the largest
    first): how many of this process's Helion kernels came from hlcore's kernel cache."""
    global _cache_logged
    from hlcore import kernel_cache
    from hlvllm import precompile

    sizes = [s for s in precompile.capture_sizes() if 0 < s <= max_helion_m()]
    if sizes and m != min(sizes):
        return
    _cache_logged = True
    stats, loads = kernel_cache.stats(), kernel_cache.load_seconds()
    logger.info(
        "hlvllm: Helion kernels at CUDA-graph capture: %d loaded from the kernel cache (import %.2f s, "
        "first runs %.2f s), %d compiled in this process (%d cache errors; helion %s); start-up seconds "
        "in hlvllm: %s",
        stats["disk_hits"],
        loads["import"],
        loads["first_run"],
        stats["misses"],
        stats["errors"],
        "imported" if "helion" in sys.modules else "never imported",
        startup.summary(),
    )


def report_failure(fmt: str, m: int, n: int, k: int, exc: BaseException) -> None:
    """Helion failed at (``fmt``, ``m``, ``n``, ``k``): one warning, and the shape (every M) uses
    vLLM's kernel from now on."""
    why = f"{type(exc).__name__}: {exc}"
    routing.mark_broken(fmt, n, k, why)
    logger.warning(
        "hlvllm: Helion %s kernel failed for M=%d N=%d K=%d (%s); this shape uses vLLM's "
        "kernel from now on. Run `hltools validate` to reproduce.",
        fmt,
        m,
        n,
        k,
        why[:300],
    )


def disagreement(fmt: str, out: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why Helion's ``out`` and vLLM's ``ref`` (same inputs) cannot both be right, or None: a
    shape/dtype mismatch, a non-finite value where vLLM's is finite, or a relative Frobenius error
    (:func:`hlcore.numerics.rel_error`; absolute when ``ref`` is all zeros) above twice the format's
    tolerance against the fp32 reference (:func:`hlcore.numerics.tolerance`)."""
    from hlcore.numerics import rel_error, tolerance

    if out.shape != ref.shape or out.dtype != ref.dtype:
        return f"shape/dtype {tuple(out.shape)} {out.dtype} vs {tuple(ref.shape)} {ref.dtype}"
    finite = torch.isfinite(ref)
    if not bool(torch.isfinite(out)[finite].all()):
        return "non-finite values where vLLM's kernel is finite"
    err = rel_error(out.masked_fill(~finite, 0), ref.masked_fill(~finite, 0))
    try:
        limit = 2 * tolerance(fmt, ref.dtype)
    except ValueError:  # an out dtype without its own entry (fp32): the bf16 one is looser
        limit = 2 * tolerance(fmt, torch.bfloat16)
    return None if err <= limit else f"relative error {err:.3g} > {limit:.2g}"


def reset() -> None:
    """Forget warm-up state, routes, failures, guard verdicts and counts (tests)."""
    global _cache_logged
    DISPATCH_COUNTS.clear()
    CAPTURE_COUNTS.clear()
    _warmed.clear()
    _validated.clear()
    _cache_logged = False
    routing.reset()
    from hlvllm import guard, precompile

    guard.reset()
    precompile.reset()
    startup.reset()
