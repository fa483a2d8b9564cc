"""Hybrid dispatch inside an opaque torch custom op: Helion for num_tokens <= max_helion_size under
CUDA-graph capture, vLLM's default kernel otherwise.

vLLM traces linear layers with torch.compile and drops guards, so the size test must not live in
traced Python; here it runs inside the op's eager implementation, at every real call: during eager
warm-up, during CUDA-graph capture (the chosen kernel is recorded), and for eager batches.

Helion's host call costs tens of microseconds, so outside capture Helion runs only once per
(M, N, K) to compile before capture (vLLM's warm-up run precedes each capture at the same size),
unless ``HL_HELION_EAGER=1``. A Helion failure for a shape logs one warning and that shape uses
vLLM's kernel from then on: a server never fails because of us. A tuned key that ``hltools
autotune`` marked ``"fallback": true`` (vLLM's kernel was faster for it) also uses vLLM's kernel.

Never silently wrong: the first eager Helion call of each (format, M, N, K) (the warm-up compile
before capture, or the first call under ``HL_HELION_EAGER``) also runs vLLM's kernel on the same
inputs; if the two differ by more than twice the format's tolerance against the fp32 reference
(:func:`hlcore.testing.tolerance`; each kernel is within it), or Helion's output is not finite where
vLLM's is, that shape logs one warning and uses vLLM's kernel from then on (its result is returned).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Hashable

import torch

from hlvllm.settings import get_settings

logger = logging.getLogger("vllm.hlvllm")

#: (path, M, N, K) -> calls that ran the op body (eager, warm-up or capture; not graph replays).
DISPATCH_COUNTS: Counter[tuple[str, int, int, int]] = Counter()
#: (path, M, N, K) -> calls made while a CUDA graph was being captured (what graph replays run).
CAPTURE_COUNTS: Counter[tuple[str, int, int, int]] = Counter()
_warmed: set[tuple[str, int, int, int]] = set()
_validated: set[tuple[str, int, int, int]] = set()  # (fmt, M, N, K) checked against vLLM's kernel
_broken: dict[tuple[str, int, int], str] = {}
_fallback_marks: dict[tuple[str, int, int, int], bool] = {}  # (fmt, M, N, K) -> vLLM's kernel by config
_untuned_warned: set[str] = set()  # formats whose first untuned shape was warned about
_untuned_logged: set[tuple[str, int, int]] = set()  # (fmt, N, K) untuned shapes already logged
_max_m_limit: int | None = None  # min(max_helion_size, max CUDA-graph capture size), set by kernels


def set_capture_limit(max_capture_size: int) -> None:
    """Record the largest CUDA-graph capture size; Helion never runs above it."""
    global _max_m_limit
    _max_m_limit = max_capture_size if _max_m_limit is None else max(_max_m_limit, max_capture_size)


def max_helion_m() -> int:
    """Largest M routed to Helion in this process."""
    limit = get_settings().max_helion_size
    return limit if _max_m_limit is None else min(limit, _max_m_limit)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def tuned_fallback(fmt: str, m: int, n: int, k: int) -> bool:
    """Whether this key must use vLLM's kernel by the config file: the picked entry is marked as
    slower than vLLM's kernel (``"fallback": true``), or the shape has no tuned key of its own
    (nearest key, the file's default entry or the heuristic) and ``HL_UNTUNED_SHAPES=vllm``, or this
    GPU has no tuned entry of the format at all (no file: hlcore's one warning per GPU names the
    tuning command) and ``HL_UNTUNED_SHAPES`` is not ``heuristic``: never an unmeasured config.

    A shape without a tuned key under the default ``HL_UNTUNED_SHAPES=nearest`` runs Helion with the
    nearest tuned key's config and logs one warning per format and process naming the tuning command
    (later untuned shapes of that format: INFO). Without a GPU (the CPU interpreters) the heuristic
    config runs. Scaled-GEMM formats only; memoised per key (:func:`reset`
    forgets); a picker error counts as "no" (the Helion call itself then fails over with its own
    warning)."""
    if fmt not in ("fp8_dynamic", "w8a8_int8", "block_fp8"):
        return False
    key = (fmt, m, n, k)
    if key in _fallback_marks:  # eager calls at small M come here every step: no GPU-name/file lookups
        return _fallback_marks[key]
    try:
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        pick = pick_scaled_mm_config(fmt, m, n, k)
    except Exception:  # noqa: BLE001
        return False
    untuned = pick.source not in ("exact", "same_shape")
    mode = get_settings().untuned_shapes
    # a GPU without a tuned entry at all (no file, or none of this format): vLLM's kernel, never an
    # unmeasured Helion config, unless HL_UNTUNED_SHAPES=heuristic
    no_tuned = pick.source == "heuristic" and pick.gpu is not None
    to_vllm = untuned and (mode == "vllm" or (no_tuned and mode != "heuristic"))
    _fallback_marks[key] = pick.fallback or to_vllm
    if pick.fallback:
        logger.info(
            "hlvllm: %s M=%d N=%d K=%d uses vLLM's kernel: the tuned key %s in %s is marked as slower",
            fmt,
            m,
            n,
            k,
            dict(pick.key or ()),
            pick.path,
        )
    elif untuned and (to_vllm or pick.source != "heuristic") and not (no_tuned and pick.path is None):
        # (a GPU without a file, no_tuned with no path: hlcore's picker warned already, once per GPU)
        why = "HL_UNTUNED_SHAPES=vllm" if mode == "vllm" else "no tuned entry of this format"
        _log_untuned(fmt, m, n, k, pick, why if to_vllm else None)
    return _fallback_marks[key]


def _log_untuned(fmt: str, m: int, n: int, k: int, pick, why_vllm: str | None) -> None:
    """One warning per format and process for shapes without a tuned key (INFO once per further
    (N, K) of the format; nothing for more M of a logged (N, K)). ``why_vllm``: why vLLM's kernel
    runs for it, None when Helion runs the picked config."""
    if (fmt, n, k) in _untuned_logged:
        return
    _untuned_logged.add((fmt, n, k))
    level = logging.INFO if fmt in _untuned_warned else logging.WARNING
    _untuned_warned.add(fmt)
    if why_vllm:
        what = f"vLLM's kernel runs for it ({why_vllm})"
    else:
        used = (
            f"the {pick.source} tuned key {dict(pick.key or ())}" if pick.key else f"the {pick.source} config"
        )
        what = (
            f"Helion runs {used}, checked against vLLM's kernel at its first call but possibly slower "
            "than it (HL_UNTUNED_SHAPES=vllm runs vLLM's kernel for such shapes instead)"
        )
    logger.log(
        level,
        "hlvllm: %s M=%d N=%d K=%d has no tuned key in %s; %s. Tune this model's shapes with "
        "`hltools autotune --model <model> --formats %s --output DIR` and set HL_CONFIG_DIR=DIR%s",
        fmt,
        m,
        n,
        k,
        pick.path or "the shipped configs",
        what,
        fmt,
        "" if level == logging.INFO else " (further untuned shapes of this format are logged at INFO)",
    )


def route(fmt: str, m: int, n: int, k: int) -> str:
    """``"helion"`` or ``"fallback"`` for one call of format ``fmt`` at ``[M, K] x [K, N]``."""
    settings = get_settings()
    if m == 0 or m > max_helion_m() or (fmt, n, k) in _broken or tuned_fallback(fmt, m, n, k):
        return "fallback"
    if settings.helion_eager or _capturing():
        return "helion"
    key = (fmt, m, n, k)
    if key not in _warmed:  # first eager call at this size: compile now, before any capture
        _warmed.add(key)
        return "helion"
    return "fallback"


def will_use_helion(fmt: str, m: int, n: int, k: int) -> bool:
    """Whether the first eager call of (``fmt``, ``m``, ``n``, ``k``) is still to come and will run
    Helion (:func:`route` without recording anything)."""
    return (
        0 < m <= max_helion_m()
        and (fmt, n, k) not in _broken
        and (fmt, m, n, k) not in _validated
        and not tuned_fallback(fmt, m, n, k)
    )


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
    """Run ``helion_fn`` or ``fallback_fn`` as :func:`route` says; count and optionally log it.
    ``helion_at(size)``: the same Helion GEMM at another M and ``group_key(size)`` what it compiles,
    for :mod:`hlvllm.precompile` (run before this shape's first eager Helion call when
    ``HL_PRECOMPILE_THREADS`` > 1; its failure is logged, never raised)."""
    path = route(fmt, m, n, k)
    capturing = _capturing()
    if path == "helion":
        if helion_at is not None and not capturing:
            from hlvllm import precompile

            try:
                precompile.precompile_shape(
                    fmt, m, n, k, helion_at, lambda size: will_use_helion(fmt, size, n, k), group_key
                )
            except Exception as exc:  # noqa: BLE001 - a speed-up only: never fail the call for it
                logger.warning("hlvllm: precompile of %s N=%d K=%d failed (%s)", fmt, n, k, exc)
        try:
            out = helion_fn()
            if not capturing and (fmt, m, n, k) not in _validated:
                _validated.add((fmt, m, n, k))
                ref = fallback_fn()
                reason = disagreement(fmt, out, ref)
                if reason:
                    raise ValueError(f"result differs from vLLM's kernel on the same inputs: {reason}")
        except Exception as exc:  # noqa: BLE001 - any Helion failure must fall back, never crash
            _broken[(fmt, n, k)] = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "hlvllm: Helion %s kernel failed for M=%d N=%d K=%d (%s); this shape uses vLLM's "
                "kernel from now on. Run `hltools validate` to reproduce.",
                fmt,
                m,
                n,
                k,
                _broken[(fmt, n, k)][:300],
            )
            path = "fallback"
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
    return out


def disagreement(fmt: str, out: torch.Tensor, ref: torch.Tensor) -> str | None:
    """Why Helion's ``out`` and vLLM's ``ref`` (same inputs) cannot both be right, or None: a
    shape/dtype mismatch, a non-finite value where vLLM's is finite, or a relative Frobenius error
    (:func:`hlcore.testing.rel_error`; absolute when ``ref`` is all zeros) above twice the format's
    tolerance against the fp32 reference (:func:`hlcore.testing.tolerance`)."""
    from hlcore.testing import rel_error, tolerance

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
    """Forget warm-up state, failures and counts (tests)."""
    DISPATCH_COUNTS.clear()
    CAPTURE_COUNTS.clear()
    _warmed.clear()
    _validated.clear()
    _broken.clear()
    _fallback_marks.clear()
    _untuned_warned.clear()
    _untuned_logged.clear()
    from hlvllm import precompile

    precompile.reset()
