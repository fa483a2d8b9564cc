"""The one owner of "Helion with which config, or vLLM's kernel, and why" for a GEMM call.

:func:`decide` answers for one (format, M, N, K), whatever the call's context; the op bodies
(:mod:`hlvllm.dispatch`), the precompile (:mod:`hlvllm.precompile`), the speed guard
(:mod:`hlvllm.guard`) and the logs all ask it. The rules, in order:

1. ``M == 0``: vLLM's kernel (nothing to compute; the ops return an empty ``[0, N]`` first).
2. ``M > max_helion_size`` (capped by the largest CUDA-graph capture size, :func:`max_helion_m`):
   vLLM's kernel. Inside vLLM's compiled graph these calls never reach our op at all: the
   compile range above the threshold is lowered to vLLM's own op (:mod:`hlvllm.lowering`).
3. Helion failed for this (format, N, K) earlier in the process: vLLM's kernel.
4. The tuned key of this exact (format, M, N, K) is marked ``"fallback": true`` (vLLM's kernel was
   faster by more than 2 % in the median of at least 3 processes or in every one of them,
   ``hltools configs from-bench``):
   vLLM's kernel. A mark applies to its own key only, never to another shape the picker reuses its
   config for. A Block_FP8 key measured on another ``scale_a`` layout than the one this dispatch
   mode hands the GEMM (:func:`block_scale_a`: row-major in the op design, vLLM's column-major at
   capture; the entry's ``block_scale_a``): the layout moves the Helion GEMM's time by up to ~18 %,
   row-major being the faster (lab record 2026-12-04-c: column-major 0.99-1.05x the time with
   ``prefetch_scales``, 0.96-1.14x without), so a mark measured on row-major holds at
   capture only when it says vLLM's kernel wins, and one measured on column-major holds in the op
   design only when it says Helion wins; the speed guard decides the other two, as in rule 5 (one
   INFO line per format says so).
5. No exact tuned key (the picker reuses another M of the shape, the nearest shape, the file's
   default entry, or the heuristic):

   * ``HL_UNTUNED_SHAPES=vllm`` and no key of this (N, K) at any M: vLLM's kernel;
   * this GPU has no tuned entry of the format at all and ``HL_UNTUNED_SHAPES`` is not
     ``heuristic``: vLLM's kernel (never an unmeasured config);
   * otherwise the speed guard decides (:mod:`hlvllm.guard`): Helion's picked config is timed
     against vLLM's kernel at warm-up and kept only when it wins by at least 2 %. Until the guard
     has decided (and with ``HL_SPEED_GUARD=0``, or without a GPU to time on), Helion.
6. Otherwise Helion, with the picked config (``HL_DETERMINISTIC=1``: with ``split_k = 1``).

Memoised per (format, M, N, K) (:func:`reset` forgets); a failure or a guard decision updates the
memo of the keys it concerns.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from hlvllm.settings import get_settings

logger = logging.getLogger("vllm.hlvllm")

HELION = "helion"
VLLM = "fallback"  # the name dispatch counts and logs use for vLLM's kernel


@dataclass(frozen=True)
class Route:
    """What runs one (format, M, N, K) and why.

    ``path``: :data:`HELION` or :data:`VLLM`. ``reason``: one phrase for logs. ``config``: the
    Helion config to pass to ``hlcore.scaled_mm`` (None: its picker chooses, the same pick as
    ``pick``). ``pick``: the picker's result (None where the rules stop before the picker).
    ``guarded``: Helion runs a config without an exact tuned key (or a Block_FP8 key whose mark was
    measured on another scale_a layout and does not settle it, rule 4), so the speed guard decides."""

    path: str
    reason: str
    config: dict[str, Any] | None = None
    pick: Any = None
    guarded: bool = False

    @property
    def helion(self) -> bool:
        return self.path == HELION


_max_m_limit: int | None = None  # min(max_helion_size, max CUDA-graph capture size), set by kernels
_routes: dict[tuple, Route] = {}
_broken: dict[tuple[str, int, int], str] = {}  # (fmt, N, K) -> why Helion failed
_guard: dict[tuple[str, int, int, int], tuple[bool, str]] = {}  # (fmt, M, N, K) -> (keep Helion, why)
_untuned_warned: set[str] = set()  # formats whose first untuned shape was warned about
_untuned_logged: set[tuple[str, int, int]] = set()  # (fmt, N, K) untuned shapes already logged
_marks_logged: set[tuple[str, int, int, int]] = set()
_layout_logged: set[str] = set()  # formats whose keys' other scale_a layout was logged


def set_capture_limit(max_capture_size: int) -> None:
    """Record the largest CUDA-graph capture size; Helion never runs above it."""
    global _max_m_limit
    _max_m_limit = max_capture_size if _max_m_limit is None else max(_max_m_limit, max_capture_size)


def max_helion_m() -> int:
    """Largest M routed to Helion in this process: ``max_helion_size``, capped by the largest
    CUDA-graph capture size once a kernel has recorded it."""
    limit = get_settings().max_helion_size
    return limit if _max_m_limit is None else min(limit, _max_m_limit)


#: The layout of Block_FP8's ``scale_a`` the Helion GEMM reads in each dispatch mode, by the names of
#: :data:`hlcore.config_store.BLOCK_SCALE_A_LAYOUTS`: row-major in the op design (hlvllm's
#: quantizer), vLLM's column-major with ``HL_DISPATCH_AT=capture`` (vLLM's quantizer).
BLOCK_SCALE_A_OF_MODE = {"op": "row", "capture": "tma"}


def block_scale_a() -> str:
    """The layout of Block_FP8's ``scale_a`` in this process's dispatch mode
    (:data:`BLOCK_SCALE_A_OF_MODE`)."""
    return BLOCK_SCALE_A_OF_MODE[get_settings().dispatch_at]


def decide(fmt: str, m: int, n: int, k: int) -> Route:
    """The route of one call of ``fmt`` at ``[M, K] x [K, N]`` by the rules of this module."""
    if m <= 0:
        return Route(VLLM, "no rows")
    if m > max_helion_m():
        return Route(VLLM, f"num_tokens {m} > max_helion_size {max_helion_m()}")
    if (fmt, n, k) in _broken:
        return Route(VLLM, f"Helion failed for this shape ({_broken[(fmt, n, k)][:120]})")
    key = (fmt, m, n, k)
    memo = (key, get_settings())  # settings change only in tests; a stale route must not survive one
    route = _routes.get(memo)
    if route is None:
        route = _routes[memo] = _decide_by_config(fmt, m, n, k)
    if route.guarded and key in _guard:
        keep, why = _guard[key]
        if not keep:
            return Route(VLLM, f"speed guard: {why}", pick=route.pick)
    return route


def _decide_by_config(fmt: str, m: int, n: int, k: int) -> Route:
    """Rules 4-6 (the config file, ``HL_UNTUNED_SHAPES``, ``HL_DETERMINISTIC``), uncached."""
    from hlcore.formats import get_format
    from hlcore.scaled_mm_config import SCALED_MM_FORMATS, pick_scaled_mm_config

    if fmt not in SCALED_MM_FORMATS:
        raise ValueError(f"hlvllm routing: unknown format {fmt!r}; expected one of {SCALED_MM_FORMATS}")
    settings = get_settings()
    try:
        pick = pick_scaled_mm_config(fmt, m, n, k)
    except Exception as exc:  # noqa: BLE001 - the Helion call then fails over with its own warning
        return Route(HELION, f"picker failed ({exc}); Helion's call reports it")
    exact = pick.source == "exact"
    other_layout = exact and get_format(fmt).block_size is not None and pick.block_scale_a != block_scale_a()
    unproven = other_layout and pick.fallback == (pick.block_scale_a == "tma")  # rule 4's layout case
    if exact and pick.fallback and not unproven:
        _log_mark(fmt, m, n, k, pick)
        return Route(VLLM, "its tuned key is marked fallback (vLLM's kernel measured faster)", pick=pick)
    config = None
    if settings.deterministic:
        config = json.loads(pick.config_json)
        config["split_k"] = 1
    if unproven:
        _log_layout(fmt, pick)
        why = f"tuned key measured on {pick.block_scale_a} scale_a, this mode reads {block_scale_a()}"
        return Route(HELION, why, config, pick, guarded=True)
    if exact:
        return Route(HELION, "tuned key", config, pick)
    mode = settings.untuned_shapes
    no_tuned = pick.source == "heuristic" and pick.gpu is not None  # a GPU without any entry of fmt
    other_shape = pick.source != "same_shape"  # HL_UNTUNED_SHAPES is about shapes without a key
    if (mode == "vllm" and other_shape) or (no_tuned and mode != "heuristic"):
        why = "HL_UNTUNED_SHAPES=vllm" if mode == "vllm" else "no tuned entry of this format"
        if not (no_tuned and pick.path is None):  # no file at all: hlcore's picker warned, once per GPU
            _log_untuned(fmt, m, n, k, pick, why)
        return Route(VLLM, why, pick=pick)
    if other_shape and pick.source != "heuristic":
        _log_untuned(fmt, m, n, k, pick, None)
    return Route(HELION, f"{pick.source} config, no exact tuned key", config, pick, guarded=True)


def _log_layout(fmt: str, pick) -> None:
    """Once per format: its tuned keys' marks were measured on another scale_a layout than this mode's."""
    if fmt in _layout_logged:
        return
    _layout_logged.add(fmt)
    layout = block_scale_a()
    logger.info(
        "hlvllm: %s keys of %s were measured on %s scale_a; HL_DISPATCH_AT=%s hands Helion %s: the speed "
        "guard times the ones their marks do not settle at warm-up (mark them on this layout with "
        "`hltools bench kernels --block-scale-a %s` in 3 processes and `hltools configs from-bench`, or "
        "`hltools autotune --block-scale-a %s`)",
        fmt,
        pick.path,
        pick.block_scale_a,
        get_settings().dispatch_at,
        layout,
        layout,
        layout,
    )


def _log_mark(fmt: str, m: int, n: int, k: int, pick) -> None:
    if (fmt, m, n, k) in _marks_logged:
        return
    _marks_logged.add((fmt, m, n, k))
    logger.info(
        "hlvllm: %s M=%d N=%d K=%d uses vLLM's kernel: the tuned key %s in %s is marked as slower",
        fmt,
        m,
        n,
        k,
        dict(pick.key or ()),
        pick.path,
    )


def _log_untuned(fmt: str, m: int, n: int, k: int, pick, why_vllm: str | None) -> None:
    """One warning per format and process for shapes without a tuned key (INFO once per further
    (N, K) of the format; nothing for more M of a logged (N, K)). ``why_vllm``: why vLLM's kernel
    runs for it, None when Helion runs the picked config (subject to the speed guard)."""
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
        guard = get_settings().speed_guard
        what = (
            f"Helion runs {used}"
            + (
                " where the speed guard times it faster than vLLM's kernel at warm-up"
                if guard
                else ", checked against vLLM's kernel at its first call but possibly slower than it"
            )
            + " (HL_UNTUNED_SHAPES=vllm runs vLLM's kernel for such shapes instead)"
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


def mark_broken(fmt: str, n: int, k: int, why: str) -> None:
    """Helion failed for (``fmt``, ``n``, ``k``): every M of the shape uses vLLM's kernel from now on."""
    _broken[(fmt, n, k)] = why


def broken(fmt: str, n: int, k: int) -> str | None:
    """Why Helion failed for this shape, or None."""
    return _broken.get((fmt, n, k))


def set_guard_decision(fmt: str, m: int, n: int, k: int, keep_helion: bool, why: str) -> None:
    """The speed guard's verdict for one key (:mod:`hlvllm.guard`)."""
    _guard[(fmt, m, n, k)] = (keep_helion, why)


def guard_decided(fmt: str, m: int, n: int, k: int) -> bool:
    return (fmt, m, n, k) in _guard


def reset() -> None:
    """Forget routes, failures, guard verdicts and what was logged (tests)."""
    global _max_m_limit
    _max_m_limit = None
    _routes.clear()
    _broken.clear()
    _guard.clear()
    _untuned_warned.clear()
    _untuned_logged.clear()
    _marks_logged.clear()
    _layout_logged.clear()
