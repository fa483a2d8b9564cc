"""Speed guard: a GEMM shape without an exact tuned key keeps Helion only where it is measured faster.

Also a Block_FP8 key whose mark was measured on another activation-scale layout than the dispatch
mode's and does not settle it (:mod:`hlvllm.routing`, rule 4): the guard times it the same way.

The picker reuses a config for shapes it was not tuned on (another M of the shape, the nearest
shape, the file's default entry): such a config can be slower than vLLM's kernel on a shape it was
never measured on. So at warm-up, before CUDA-graph capture, every such (format, M, N, K) of the
model is timed, Helion's picked config against vLLM's kernel on that layer, and keeps Helion only
when Helion's time is at most vLLM's / 1.02 (a win of at least 2 %); otherwise vLLM's kernel runs it
(:func:`hlvllm.routing.decide`, rule 5).

How it times (the benchmarks' own method, :func:`hlcore.timing.time_graph`): CUDA-graph replay of
one call per weight copy, rotating over copies of the layer's weight that together exceed 4x the
L2 cache (so every call streams its weight from HBM, as at decode), random activations of the
call's dtype and layout (never zeros), median of 30 replays; the two kernels are timed in turns,
three rounds, and each side's median over the rounds compared. The copies exist only while one
shape is timed. The GEMM alone for FP8_Dynamic and W8A8_INT8 (the activation quantization is
vLLM's either way), the whole op (1x128 quantization + GEMM on each side) for Block_FP8.

When: once per process, at the first eager call of a linear op with num_tokens <= max_helion_size
(vLLM's warm-up of its first CUDA-graph size): every shape the kernels registered at weight
processing (:func:`register_shape`), at every CUDA-graph capture size up to max_helion_size; a size
or shape not covered then is timed at its own first eager call (:func:`check_key`). One summary line
per format: ``N shapes checked: Helion on a, vLLM's kernel on b; took x s``.

Cached on disk next to the kernel cache (``$HL_KERNEL_CACHE_DIR/speed_guard.json``), keyed by the GPU,
the versions of torch, triton, helion, vLLM, hlcore and hlvllm, a digest of hlcore's kernel sources,
``HL_DISPATCH_AT``, the format, M, N, K, the Helion config and vLLM's kernel: a restart does not
time again. A guard failure (an error, out of memory) sends that shape to vLLM's kernel with one
warning. ``HL_SPEED_GUARD=0`` turns it off (Helion then runs every picked config, as before the
guard). Without a CUDA device nothing is timed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from hlcore.config_store import write_text_atomic
from hlvllm import routing, startup
from hlvllm.settings import get_settings

logger = logging.getLogger("vllm.hlvllm")

#: Helion keeps a shape only when its time is at most vLLM's divided by this.
MARGIN = 1.02
#: Rounds of (Helion, vLLM) timings whose medians are compared.
ROUNDS = 3
CACHE_FILE = "speed_guard.json"
CACHE_VERSION = 1

Calls = Sequence[Callable[[], object]]


@dataclass(frozen=True)
class GuardShape:
    """A layer shape the guard may time. ``make_calls(m, copies)`` returns ``(helion_calls,
    vllm_calls)``: one call per weight copy (``copies`` of them, the first the layer's own weight),
    each running that kernel once at M = ``m`` on random inputs of the real call's dtypes and
    layouts. ``vllm_kernel``: what vLLM's side runs (cache key, logs). ``gemm_at(m)``: the layer's
    Helion GEMM alone at M = ``m`` on operands of ones with the real call's layouts (what
    :mod:`hlvllm.precompile` compiles ahead), or None."""

    fmt: str
    n: int
    k: int
    weight_bytes: int
    vllm_kernel: str
    make_calls: Callable[[int, int], tuple[Calls, Calls]]
    gemm_at: Callable[[int], object] | None = None


def time_pair(helion_calls: Calls, vllm_calls: Calls) -> tuple[float, float]:
    """Median per-call µs of Helion and of vLLM's kernel over :data:`ROUNDS` alternating rounds of
    :func:`hlcore.timing.time_graph`."""
    from hlcore.timing import time_graph

    helion, vllm = [], []
    for _ in range(ROUNDS):
        helion.append(time_graph(helion_calls).median_us)
        vllm.append(time_graph(vllm_calls).median_us)
    return statistics.median(helion), statistics.median(vllm)


def time_shape(shape: GuardShape, m: int) -> tuple[float, float]:
    """(Helion µs, vLLM µs) of ``shape`` at M = ``m``: :func:`time_pair` over enough weight copies to
    rotate through 4x L2 (:func:`hlcore.timing.copies_for`)."""
    from hlcore.timing import copies_for

    helion_calls, vllm_calls = shape.make_calls(m, copies_for(shape.weight_bytes))
    return time_pair(helion_calls, vllm_calls)


#: The timer (tests put a fake here): (shape, M) -> (Helion µs, vLLM µs).
TIMER: Callable[[GuardShape, int], tuple[float, float]] = time_shape

_shapes: dict[tuple[str, int, int], GuardShape] = {}
_checked_all = False
_timed: set[tuple[str, int, int, int]] = set()  # keys already looked at (decided, cached or skipped)
_failed: set[tuple[str, int, int]] = set()


def register_shape(shape: GuardShape) -> None:
    """Make (format, N, K) known to the guard (one layer per shape is enough: the others run the same
    GEMM on another weight of the same size; the last registered one is timed)."""
    from hlvllm import precompile

    with startup.timed("shape registration"):
        _shapes[(shape.fmt, shape.n, shape.k)] = shape
        precompile.schedule_pool(shape)


def registered(fmt: str, n: int, k: int) -> bool:
    """Whether a layer of (format, N, K) was registered by one of hlvllm's kernels."""
    return (fmt, n, k) in _shapes


def weight_copies(weight: torch.Tensor, copies: int) -> list[torch.Tensor]:
    """``weight`` and ``copies - 1`` copies with its shape, strides and values."""
    out = [weight]
    for _ in range(copies - 1):
        c = torch.empty_strided(weight.shape, weight.stride(), dtype=weight.dtype, device=weight.device)
        c.copy_(weight)
        out.append(c)
    return out


def _enabled() -> bool:
    if not get_settings().speed_guard:
        return False
    return TIMER is not time_shape or torch.cuda.is_available()


def _capture_sizes(limit: int) -> list[int]:
    from hlvllm import precompile

    return [s for s in precompile.capture_sizes() if 0 < s <= limit]


def check_all() -> None:
    """Time every registered shape at every capture size up to max_helion_size whose route waits for
    the guard (once per process); log one summary line per format."""
    global _checked_all
    if _checked_all:
        return
    _checked_all = True
    if not _enabled() or not _shapes:
        return
    sizes = _capture_sizes(routing.max_helion_m())
    by_fmt: dict[str, list[tuple[str, int, int, int]]] = {}
    for fmt, n, k in _shapes:
        by_fmt.setdefault(fmt, []).extend((fmt, m, n, k) for m in sizes)
    for fmt, keys in by_fmt.items():
        start = time.perf_counter()
        results = [r for key in keys if (r := _check(*key)) is not None]
        if not results:
            continue
        kept = sum(1 for keep, _ in results if keep)
        cached = sum(1 for _, from_cache in results if from_cache)
        logger.info(
            "hlvllm: speed guard, %s: %d shapes checked: Helion on %d, vLLM's kernel on %d; took %.1f s%s",
            fmt,
            len(results),
            kept,
            len(results) - kept,
            time.perf_counter() - start,
            f" ({cached} from the cache)" if cached else "",
        )


def check_key(fmt: str, m: int, n: int, k: int) -> None:
    """Time one key now if its route waits for the guard and :func:`check_all` did not cover it."""
    if (fmt, m, n, k) in _timed or (fmt, n, k) not in _shapes or not _enabled():
        return
    result = _check(fmt, m, n, k)
    if result is not None:
        logger.debug("hlvllm: speed guard, %s M=%d N=%d K=%d: Helion kept=%s", fmt, m, n, k, result[0])


def _check(fmt: str, m: int, n: int, k: int) -> tuple[bool, bool] | None:
    """Decide one key: ``(Helion kept, from the cache)``, or None when it needs no decision."""
    key = (fmt, m, n, k)
    if key in _timed:
        return None
    _timed.add(key)
    route = routing.decide(fmt, m, n, k)
    if not route.guarded or routing.guard_decided(*key) or (fmt, n, k) in _failed:
        return None
    shape = _shapes[(fmt, n, k)]
    config = json.dumps(route.config, sort_keys=True) if route.config is not None else route.pick.config_json
    cache_key = _cache_key(route.pick.gpu, fmt, m, n, k, config, shape.vllm_kernel)
    hit = _cache().get(cache_key)
    if hit is not None:
        helion_us, vllm_us = hit["helion_us"], hit["vllm_us"]
        from_cache = True
    else:
        try:
            with startup.timed("speed guard"):
                helion_us, vllm_us = TIMER(shape, m)
        except Exception as exc:  # noqa: BLE001 - a failed check sends the shape to vLLM, never crashes
            _failed.add((fmt, n, k))
            for size in range(1, routing.max_helion_m() + 1):
                routing.set_guard_decision(fmt, size, n, k, False, f"the check failed ({type(exc).__name__})")
            logger.warning(
                "hlvllm: speed guard could not time %s M=%d N=%d K=%d (%s: %s); vLLM's kernel runs this shape",
                fmt,
                m,
                n,
                k,
                type(exc).__name__,
                str(exc)[:200],
            )
            return False, False
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        _store(cache_key, {"helion_us": helion_us, "vllm_us": vllm_us})
        from_cache = False
    keep = helion_us * MARGIN <= vllm_us
    why = f"Helion {helion_us:.2f} µs vs {shape.vllm_kernel} {vllm_us:.2f} µs (needs a 2 % win)"
    routing.set_guard_decision(fmt, m, n, k, keep, why)
    return keep, from_cache


# ------------------------------------------------------------------------------------------------
# Disk cache
# ------------------------------------------------------------------------------------------------
_cache_entries: dict[str, dict] | None = None


def _cache_path() -> Path | None:
    directory = os.environ.get("HL_KERNEL_CACHE_DIR", "").strip()
    return Path(directory) / CACHE_FILE if directory else None


@functools.cache
def _versions() -> str:
    parts = []
    for dist in ("torch", "triton", "helion", "vllm", "hlcore", "hlvllm"):
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    return ",".join(parts)


def _cache_key(gpu: str | None, fmt: str, m: int, n: int, k: int, config: str, vllm_kernel: str) -> str:
    """A verdict's key: the GPU, the versions, hlcore's kernel sources (a changed kernel is timed
    again; the package versions do not change with the code), where dispatch happens
    (``HL_DISPATCH_AT``: the op design and capture mode hand Helion other activation-scale layouts),
    the shape, Helion's config and vLLM's kernel."""
    from hlcore.kernel_cache import source_digest

    code = f"hlcore={source_digest()[:16]}|{get_settings().dispatch_at}"
    return f"{gpu}|{_versions()}|{code}|{fmt}|m={m}|n={n}|k={k}|{config}|{vllm_kernel}"


def _cache() -> dict[str, dict]:
    global _cache_entries
    if _cache_entries is None:
        _cache_entries = {}
        path = _cache_path()
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                if data.get("version") == CACHE_VERSION:
                    _cache_entries = dict(data.get("entries", {}))
            except (OSError, ValueError, AttributeError) as exc:
                logger.warning("hlvllm: ignoring the speed-guard cache %s (%s)", path, exc)
    return _cache_entries


def _store(cache_key: str, entry: dict) -> None:
    """Add one entry and write the file (merged with what another process wrote meanwhile; written to
    a temporary file and renamed). A write error only logs: the next start times again."""
    entries = _cache()
    entries[cache_key] = entry
    path = _cache_path()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {}
        if path.exists():
            try:
                old = json.loads(path.read_text())
                if old.get("version") == CACHE_VERSION:
                    merged.update(old.get("entries", {}))
            except (OSError, ValueError, AttributeError):
                pass
        merged.update(entries)
        text = json.dumps({"version": CACHE_VERSION, "entries": merged}, indent=1, sort_keys=True)
        write_text_atomic(path, text + "\n")
    except OSError as exc:
        logger.debug("hlvllm: could not write the speed-guard cache %s (%s)", path, exc)


def reset() -> None:
    """Forget shapes, verdicts and the loaded cache (tests)."""
    global _checked_all, _cache_entries
    _shapes.clear()
    _timed.clear()
    _failed.clear()
    _checked_all = False
    _cache_entries = None
