"""``hltools autotune``: tune the scaled GEMM for every (format, N, K, M) a model dispatches.

Keys (docs/tuning.md): every linear (N, K) of the model (:func:`hltools.shapes.linear_shapes`, for each
tensor-parallel size: N/tp column-parallel, K/tp row-parallel) x num_tokens M (the CUDA-graph decode
sizes 1, 2, 4, 8, 16, 24, 32; with ``HL_MAX_HELION_SIZE`` above 32 also vLLM's larger capture sizes
up to it: 40, 48, ...) x format. Duplicates (the same shape from two layers or TP sizes) are tuned once.

For each key, :func:`run_autotune` calls

1. a *tuner* ``tune(key, options) -> config dict`` (on a GPU :func:`helion_tuner`: Helion's
   autotuner on ``hlcore.scaled_mm.scaled_mm_kernel()``, the heuristic default config seeded into
   the search, candidates checked against the fp32 reference, CUDA-graph benchmarking), then
2. a *checker* ``check(key, config, options) -> CheckResult`` (on a GPU :func:`gpu_checker`: the
   tuned config against the fp32 reference, then timed under CUDA-graph replay with rotating weights
   against the default config, the *untuned* config (what the plugin runs for this key without
   this run: the picker's entry in the config file in effect, :func:`untuned_pick`) and vLLM's
   default kernel for the format and shape (:func:`time_vllm_kernel`); the fastest Helion config
   is kept (so a key never ends slower than the heuristic or the file it replaces, in that
   measurement), and a key where vLLM's kernel is faster is saved with ``"fallback": true``),

and saves the key at once (checkpoint: :func:`hlcore.config_store.save_config_file` merges and
writes atomically). A rerun skips keys already in the file (``force`` retunes them); a failing key
is reported, not saved, and retried by the next run. A run into a file that another command made
(another model, an import by ``hltools configs from-bench``) moves that file's provenance fields
under ``_metadata.earlier`` (:func:`save_metadata`), so the file never names this run's command for
keys it did not tune. Both functions are parameters so that the
resume/force/failure logic runs without a GPU in tests.

This module imports torch, helion and vLLM only inside the GPU functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.markup import escape

from hlcore.config_store import (
    SCALED_MM_KERNEL,
    ConfigEntry,
    ConfigFile,
    canonical_gpu_name,
    config_file_path,
    installed_helion_version,
    metadata_mismatch,
    read_config_file,
    save_config_file,
    scaled_mm_key,
)
from hlcore.formats import FORMAT_NAMES, get_format
from hlcore.scaled_mm_config import check_scaled_mm_config
from hltools.bench_compare import runs_helion
from hltools.bench_configs import PROVENANCE_FIELDS, earlier_provenance, fallback_mark
from hltools.format_names import check_formats
from hltools.provenance import versions
from hltools.results import ResultTable, cell, geomean
from hltools.shapes import linear_shapes, only_layers

DEFAULT_NUM_TOKENS = (1, 2, 4, 8, 16, 24, 32)
EFFORTS = ("quick", "full")


class AutotuneError(RuntimeError):
    """A run that cannot start (e.g. the output file belongs to another GPU or helion version)."""


# --------------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------------
def cuda_graph_sizes(max_size: int) -> list[int]:
    """vLLM's default CUDA-graph capture sizes up to ``max_size``: 1, 2, 4, then every multiple of
    8 up to 256, then every multiple of 16."""
    sizes = [1, 2, 4, *range(8, 257, 8), *range(272, max(max_size, 272) + 1, 16)]
    return [s for s in sizes if s <= max_size]


def decode_num_tokens(max_helion_size: int | None = None) -> list[int]:
    """The num_tokens to tune: 1, 2, 4, 8, 16, 24, 32, or the capture sizes up to
    ``max_helion_size`` when that is larger than 32."""
    if max_helion_size is not None and max_helion_size > 32:
        return cuda_graph_sizes(max_helion_size)
    return list(DEFAULT_NUM_TOKENS)


@dataclass(frozen=True)
class TuneKey:
    """One tuned shape; ``layers`` says where it comes from (e.g. ``("qkv tp1", "o tp2")``)."""

    fmt: str
    n: int
    k: int
    m: int
    layers: tuple[str, ...] = ()

    @property
    def key(self) -> dict[str, int | str]:
        return scaled_mm_key(self.fmt, self.n, self.k, self.m)

    @property
    def label(self) -> str:
        return f"{self.fmt} N={self.n} K={self.k} M={self.m}"


def build_keys(
    model_config: dict[str, Any],
    formats: Sequence[str],
    tps: Sequence[int],
    num_tokens: Sequence[int],
    layers: Sequence[str] | None = None,
) -> list[TuneKey]:
    """Every (format, N, K, M) of the model for these TP sizes, format-major, then shapes in the
    order of :func:`linear_shapes` over ascending TP, then M; each once. ``layers`` (e.g.
    ``["gate_up"]``): only those layers' shapes (:func:`hltools.shapes.only_layers`; all when None).
    Raises ``ValueError`` for an unknown format or a TP size the model cannot be split by, and its
    subclass :class:`hltools.shapes.UnknownLayer` for a layer the model does not have."""
    formats = check_formats(formats)
    shapes: dict[tuple[int, int], list[str]] = {}
    for tp in sorted(dict.fromkeys(tps)):
        for s in only_layers(linear_shapes(model_config, tp=tp), layers):
            shapes.setdefault((s.n, s.k), []).append(f"{s.name} tp{tp}")
    return [
        TuneKey(fmt, n, k, m, tuple(layers))
        for fmt in dict.fromkeys(formats)
        for (n, k), layers in shapes.items()
        for m in sorted(dict.fromkeys(num_tokens))
    ]


# --------------------------------------------------------------------------------------------
# Tuning loop
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TuneOptions:
    effort: str = "quick"
    seed: int = 0
    budget_seconds: int | None = None  # for this key's search (Helion's autotune_budget_seconds)
    # the Block_FP8 scale_a layout tuned and checked on (hltools.bench.BLOCK_SCALE_A_LAYOUTS)
    block_scale_a: str = "row"
    # the grid search compiles alongside the timing (hltools.grid_search.GridSearch's compile_pool)
    compile_alongside: bool = False
    # the grid's CPUs per GPU (--jobs; its compile processes, one fewer alongside the timing); None:
    # all, shared among the run's GPUs; either way fewer processes where the GPU's free memory is
    # small (hltools.bench_compile.workers_for_memory)
    compile_workers: int | None = None


@dataclass(frozen=True)
class UntunedPick:
    """The config the plugin dispatches for a key without this run's configs: the picker's pick
    (:func:`hlcore.scaled_mm_config.pick_scaled_mm_config`) from the config file in effect
    (``HL_CONFIG_DIR``, else the shipped one). ``source``: the pick's source (``exact``,
    ``same_shape``, ``nearest``, ``default``, ``heuristic``); ``fallback``: the exact key is marked
    fallback (a mark is never inherited by another shape); ``unproven``: an exact Block_FP8 key
    measured on the other scale_a layout whose verdict does not carry over to the run's layout
    (:func:`hlvllm.routing.decide`'s layout rule), so the plugin's speed guard times it."""

    config: dict[str, Any]
    source: str
    fallback: bool = False
    unproven: bool = False

    @property
    def label(self) -> str:
        return (
            self.source
            + (" (marked fallback)" if self.fallback else "")
            + (" (guarded)" if self.unproven else "")
        )

    def route(self, helion_us: float | None, vllm_us: float) -> str:
        """``"helion"`` or ``"vllm"`` by hlvllm's routing rules (:func:`hlvllm.routing.decide`, the
        default settings) applied to this pick and the two times: an exact key runs Helion unless it is
        marked fallback; ``heuristic`` (no entry of the format in the file) runs vLLM's kernel; any
        other pick (and an unproven exact key) runs Helion only when the speed guard's rule holds
        (:func:`hltools.bench_compare.runs_helion`: the rule, not the guard's own timing)."""
        if self.source == "heuristic":
            return "vllm"
        exact = self.source == "exact" and not self.unproven
        return "helion" if runs_helion(exact, self.fallback, helion_us, vllm_us) else "vllm"


def untuned_pick(key: TuneKey, options: TuneOptions, gpu: str | None = None) -> UntunedPick:
    """The :class:`UntunedPick` of ``key`` on ``gpu`` (None: the current CUDA device's name), for a
    run on ``options.block_scale_a``: the config file in effect when this process first picks
    (``--output`` into that same directory makes keys this run already saved count as untuned).
    The layout rule as hlvllm's: a key measured on row-major scale_a and marked fallback stays
    vLLM's on the capture (``tma``) layout, which is slower; an unmarked one is unproven there (and
    the reverse for a key measured on ``tma`` in a row-major run)."""
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    pick = pick_scaled_mm_config(key.fmt, key.m, key.n, key.k, gpu=gpu)
    exact = pick.source == "exact"
    blocked = get_format(key.fmt).block_size is not None
    other_layout = exact and blocked and pick.block_scale_a != options.block_scale_a
    unproven = other_layout and pick.fallback == (pick.block_scale_a == "tma")
    return UntunedPick(pick.config, pick.source, exact and pick.fallback and not unproven, unproven)


def fastest(timed: Sequence[tuple[str, dict[str, Any], float]]) -> tuple[str, dict[str, Any], float]:
    """The fastest of ``(name, config, µs)`` candidates, the first on a tie (the tuned one comes
    first: a tie keeps it)."""
    return min(timed, key=lambda t: t[2])


@dataclass
class CheckResult:
    """What the checker found for one tuned config. ``config`` is what gets saved (the tuned
    config, or the default when that was faster); ``fallback``: vLLM's kernel was faster."""

    passed: bool
    config: dict[str, Any]
    rel_err: float | None = None
    helion_us: float | None = None
    default_us: float | None = None
    fallback_us: float | None = None
    fallback_name: str | None = None
    fallback: bool = False
    note: str = ""
    #: the untuned config's time (µs) and its pick (:func:`untuned_pick`): None when not timed
    untuned_us: float | None = None
    untuned: UntunedPick | None = None

    def untuned_dispatched_us(self) -> float | None:
        """The time the plugin spends on this key without this run's config: the untuned pick's
        route (:meth:`UntunedPick.route`) with this check's times; None when a time it needs is
        missing."""
        if self.untuned is None or self.fallback_us is None:
            return None
        route = self.untuned.route(self.untuned_us, self.fallback_us)
        return self.fallback_us if route == "vllm" else self.untuned_us

    def slower_than_fallback(self) -> bool:
        """Helion's time is above vLLM's kernel's (False when either was not measured): the marks'
        rule (:func:`hltools.bench_configs.fallback_mark`) over this one process."""
        if self.helion_us is None or self.fallback_us is None:
            return False
        return fallback_mark([self.helion_us / self.fallback_us])

    def stats(self) -> dict[str, Any]:
        out = {
            "rel_err": self.rel_err,
            "helion_us": self.helion_us,
            "default_us": self.default_us,
            "fallback_us": self.fallback_us,
            "fallback_kernel": self.fallback_name,
            "untuned_us": self.untuned_us,
            "untuned_source": self.untuned.label if self.untuned is not None else None,
        }
        return {
            k: v for k, v in out.items() if v is not None and not (isinstance(v, float) and math.isnan(v))
        }


Tuner = Callable[[TuneKey, TuneOptions], dict[str, Any]]
Checker = Callable[[TuneKey, dict[str, Any], TuneOptions], CheckResult]


@dataclass
class KeyStatus:
    """``status``: ``tuned``, ``skipped`` (already in the file), ``failed`` or ``not run`` (budget)."""

    key: TuneKey
    status: str
    seconds: float = 0.0
    result: CheckResult | None = None
    message: str = ""


@dataclass
class RunSummary:
    path: Path
    statuses: list[KeyStatus] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(s.status == status for s in self.statuses)

    @property
    def failed(self) -> list[KeyStatus]:
        return [s for s in self.statuses if s.status == "failed"]


def load_existing(path: Path) -> ConfigFile | None:
    """The file at ``path`` (strict: a corrupt file raises :class:`AutotuneError`), or None."""
    if not path.exists():
        return None
    try:
        return read_config_file(path)
    except ValueError as exc:
        raise AutotuneError(f"{exc}; fix or move it away (or pick another --output)") from None


def done_keys(existing: ConfigFile | None, block_scale_a: str = "row") -> set:
    """The keys of ``existing`` a run with Block_FP8's ``block_scale_a`` layout counts as done: every
    per-token format's key, and the block formats' keys tuned on that layout (a key tuned on the
    other one is tuned again, and replaced)."""
    if existing is None:
        return set()
    return {
        kid
        for kid, e in existing.entries.items()
        if e.block_scale_a == block_scale_a or not _is_block_key(e.key)
    }


def is_block_format(fmt: object) -> bool:
    """``fmt`` names a format with block scales (Block_FP8), whose keys record a scale_a layout."""
    return isinstance(fmt, str) and fmt in FORMAT_NAMES and get_format(fmt).block_size is not None


def _is_block_key(key: dict) -> bool:
    return is_block_format(key.get("format"))


def fallback_keys(existing: ConfigFile | None) -> set:
    """The done keys marked ``"fallback": true`` (their tuned config lost to vLLM's kernel, which the
    plugin runs there instead)."""
    return set() if existing is None else {kid for kid, e in existing.entries.items() if e.fallback}


@dataclass
class Resume:
    """Where a run starts (:func:`resume`): ``stale``, why the file must start afresh (another GPU's
    or helion's; only with ``force``), else None; ``skipped``, key index -> status of the keys
    already in the file; ``todo``, the indices of the keys to tune, in order; ``metadata``, what
    each save of the run writes (:func:`save_metadata`)."""

    stale: str | None
    skipped: dict[int, KeyStatus]
    todo: list[int]
    metadata: dict[str, Any] = field(default_factory=dict)


def save_metadata(existing: ConfigFile | None, metadata: dict[str, Any]) -> dict[str, Any]:
    """The ``_metadata`` a run with ``metadata`` writes into ``existing`` (:func:`save_tuned` drops
    the file's :data:`hltools.bench_configs.PROVENANCE_FIELDS` and writes these): ``metadata``
    itself, plus ``earlier`` (the file's provenance fields, then its own ``earlier``,
    :func:`hltools.bench_configs.earlier_provenance`) when the file was made by another command.
    A resumed run (the same command line but for ``--budget-minutes``) keeps the file's ``earlier``
    as it is; a file or run without a command is never a resume."""
    if existing is None or _same_run(existing.metadata.get("command"), metadata.get("command")):
        return dict(metadata)
    earlier = earlier_provenance(existing.metadata)
    return {**metadata, "earlier": earlier} if earlier else dict(metadata)


def _same_run(a: object, b: object) -> bool:
    """Two autotune command lines that tune the same keys the same way (``--budget-minutes`` only
    bounds a run's time)."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    return _BUDGET_OPTION.sub("", a) == _BUDGET_OPTION.sub("", b)


_BUDGET_OPTION = re.compile(r"\s--budget-minutes[= ]\S+")


def resume(keys: Sequence[TuneKey], path: Path, metadata: dict[str, Any], force: bool = False) -> Resume:
    """The resume rule of every run (one GPU, ``--gpus``, ``--ray``): keys already in ``path`` are
    skipped unless ``force``; a file whose metadata names another GPU or helion version raises
    :class:`AutotuneError` unless ``force`` (then it is ``stale`` and starts afresh)."""
    existing = load_existing(path)
    stale = None
    if existing is not None:
        stale = metadata_mismatch(existing.metadata, metadata.get("gpu"), metadata.get("helion")) or None
        if stale and not force:
            raise AutotuneError(
                f"{path}: {stale}; rerun with --force to retune and replace it (or pick another --output)"
            )
    done = set() if force else done_keys(existing, metadata.get("block_scale_a", "row"))
    skipped = {
        i: KeyStatus(key, "skipped", message="already tuned")
        for i, key in enumerate(keys)
        if _kid(key) in done
    }
    todo = [i for i in range(len(keys)) if i not in skipped]
    return Resume(stale, skipped, todo, save_metadata(None if stale else existing, metadata))


def save_tuned(path: Path, status: KeyStatus, metadata: dict[str, Any], *, merge: bool) -> None:
    """A ``tuned`` key's entry into ``path`` (marked fallback where vLLM's kernel was faster; a
    block format's entry records the ``scale_a`` layout it was tuned on, ``metadata["block_scale_a"]``).
    The file's provenance fields are ``metadata``'s alone (:func:`save_metadata` carries an earlier
    command's under ``earlier``)."""
    result = status.result
    result.fallback = result.fallback or result.slower_than_fallback()
    layout = metadata.get("block_scale_a", "row") if _is_block_key(status.key.key) else "row"
    entry = ConfigEntry(status.key.key, result.config, result.fallback, result.stats(), layout)
    save_config_file(path, [entry], metadata, merge=merge, drop_metadata=PROVENANCE_FIELDS)


def run_autotune(
    keys: Sequence[TuneKey],
    path: Path,
    *,
    tune: Tuner,
    check: Checker,
    metadata: dict[str, Any],
    options: TuneOptions = TuneOptions(),
    force: bool = False,
    budget_seconds: float | None = None,
    on_start: Callable[[TuneKey], None] | None = None,
    on_done: Callable[[KeyStatus], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunSummary:
    """Tune ``keys`` into ``path`` (see the module docstring), saving after each key.

    ``metadata`` (``gpu``, ``helion`` and the provenance fields) is written with every save. The
    resume rule is :func:`resume` (``force`` retunes, and starts a file of another GPU or helion
    version afresh). ``budget_seconds`` bounds the whole run: each key's search gets an equal share
    of what is left, and keys not started in time are ``not run`` (a rerun resumes). Exceptions
    from ``tune``/``check`` mark that key ``failed``."""
    plan = resume(keys, path, metadata, force)
    fresh = plan.stale is not None
    summary = RunSummary(path)
    deadline = None if budget_seconds is None else clock() + budget_seconds
    left = len(plan.todo)  # keys still to tune
    for i, key in enumerate(keys):
        if i in plan.skipped:
            status = plan.skipped[i]
            summary.statuses.append(status)
            if on_done:
                on_done(status)
            continue
        opts = options
        if deadline is not None:
            remaining = deadline - clock()
            if remaining <= 0:
                status = KeyStatus(key, "not run", message="budget spent; rerun to resume")
                summary.statuses.append(status)
                left -= 1
                if on_done:
                    on_done(status)
                continue
            opts = dataclasses.replace(options, budget_seconds=max(1, int(remaining / max(left, 1))))
        if on_start:
            on_start(key)
        start = clock()
        status = _tune_one(key, tune, check, opts)
        status.seconds = clock() - start
        left -= 1
        if status.status == "tuned":
            save_tuned(path, status, plan.metadata, merge=not fresh)
            fresh = False
        summary.statuses.append(status)
        if on_done:
            on_done(status)
    return summary


def _kid(key: TuneKey):
    return tuple(sorted(key.key.items()))


def _tune_one(key: TuneKey, tune: Tuner, check: Checker, options: TuneOptions) -> KeyStatus:
    try:
        config = tune(key, options)
    except Exception as exc:
        message = f"tuning raised {type(exc).__name__}: {exc}"
        if type(exc).__name__ == "NoConfigFound" and options.budget_seconds is not None:
            # Helion's search ends with no config when its budget runs out before a candidate ran
            message = (
                f"no working config in this key's {options.budget_seconds} s share of --budget-minutes "
                f"(a search cut that short may not finish compiling its first candidates): {message}"
            )
        return KeyStatus(key, "failed", message=message[:300])
    reason = check_scaled_mm_config(config)
    if reason:
        return KeyStatus(key, "failed", message=f"tuned config is not usable: {reason}"[:300])
    try:
        result = check(key, config, options)
    except Exception as exc:
        return KeyStatus(key, "failed", message=f"check raised {type(exc).__name__}: {exc}"[:300])
    if not result.passed:
        return KeyStatus(key, "failed", result=result, message=result.note or "wrong result vs the reference")
    return KeyStatus(key, "tuned", result=result, message=result.note)


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------
def provenance(gpu_name: str, *, command: str, seed: int, effort: str, model: str) -> dict[str, Any]:
    """The ``_metadata`` of a tuned file: canonical and raw GPU name, versions, command, seed, date."""
    v = versions()
    return {
        "gpu": canonical_gpu_name(gpu_name),
        "gpu_name": gpu_name,
        "helion": installed_helion_version() or v.get("helion"),
        "triton": v.get("triton"),
        "torch": v.get("torch"),
        "versions": v,
        "command": command,
        "seed": seed,
        "effort": effort,
        "model": model,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def output_path(output: Path, gpu_name: str) -> Path:
    return config_file_path(SCALED_MM_KERNEL, gpu_name, output)


# --------------------------------------------------------------------------------------------
# The GPU implementations (not runnable without a CUDA GPU)
# --------------------------------------------------------------------------------------------
def gpu_backend() -> tuple[str, Tuner, Checker] | None:
    """``(raw GPU name, tuner, checker)`` on a CUDA machine, else None (the CLI then exits 2).

    Raises :class:`AutotuneError` on a GPU other than SM90: hlvllm's kernels run on SM90 alone
    (``hlvllm.support.helion_supported``), so a file tuned there would never be read."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        raise AutotuneError(
            f"{name} is SM{major}{minor}: hlvllm's kernels run on SM90 GPUs only (H100, H200, H20, GH200;"
            " hlvllm.support), so configs tuned on it would never be used; tune on an SM90 GPU"
        )
    return name, helion_tuner, gpu_checker


def _kernel_args(inputs: dict[str, Any]) -> tuple:
    """The Helion kernel's arguments for ``generate_scaled_mm_inputs`` output (as scaled_mm passes
    them), ``out`` zero-filled: Helion's autotuner takes an argument for mutated when its clone, run
    through the baseline, no longer ``torch.equal``s it, and an empty ``out`` holding NaN bits never
    equals its clone (it then compared every candidate's arguments, not its output, and failed all)."""
    import torch

    from hlcore import scaled_mm as sm

    out = torch.zeros(
        (inputs["a"].shape[0], inputs["b"].shape[1]), dtype=inputs["out_dtype"], device=inputs["a"].device
    )
    return sm.kernel_args(
        inputs["a"],
        inputs["b"],
        inputs["scale_a"],
        inputs["scale_b"],
        inputs["bias"],
        inputs["out_dtype"],
        inputs["block_size"],
        out=out,
    )


def _inputs(key: TuneKey, options: TuneOptions, seed: int) -> dict[str, Any]:
    """``generate_scaled_mm_inputs`` of ``key`` on the GPU, Block_FP8's scale_a in
    ``options.block_scale_a``'s layout (:func:`hltools.bench.block_scale_a`)."""
    from hlcore import scaled_mm as sm
    from hltools.bench import block_scale_a

    d = sm.generate_scaled_mm_inputs(key.m, key.n, key.k, fmt=key.fmt, device="cuda", seed=seed)
    d["scale_a"] = block_scale_a(d["scale_a"], key.fmt, options.block_scale_a)
    return d


def helion_tuner(key: TuneKey, options: TuneOptions) -> dict[str, Any]:
    """Helion's autotuner (``autotune_effort``), the heuristic default config seeded into the search
    (``autotune_seed_configs``), candidates compared with the fp32 reference
    (``autotune_baseline_fn`` + our relative-error tolerance), ``autotune_random_seed`` = the seed,
    ``autotune_budget_seconds`` = this key's share of ``--budget-minutes``. The caller sets
    ``HELION_BENCHMARK_CUDAGRAPH=1`` so candidates are timed as CUDA-graph replays."""
    import helion
    import torch

    from hlcore import scaled_mm as sm
    from hlcore.numerics import rel_error, tolerance
    from hlcore.scaled_mm_config import default_scaled_mm_config

    inputs = _inputs(key, options, options.seed)
    tol = tolerance(key.fmt, inputs["out_dtype"])

    def reference(a, b_t, scale_a, scale_b, bias, out, group_k):  # the kernel's arguments
        block = sm.BLOCK_SIZE if group_k else None
        return sm.scaled_mm_ref(a, b_t.t(), scale_a, scale_b, out.dtype, bias, block_size=block)

    def accurate(actual, expected):
        if not isinstance(actual, torch.Tensor):  # Helion comparing the arguments it saw mutated
            raise AssertionError(f"expected the kernel's output tensor, got {type(actual).__name__}")
        err = rel_error(actual, expected)
        if not err <= tol:
            raise AssertionError(f"relative error {err:.3g} > {tol:.1g} vs the fp32 reference")

    kernel = sm.scaled_mm_kernel()
    s = kernel.settings
    s.autotune_effort = options.effort
    s.autotune_random_seed = options.seed
    s.autotune_budget_seconds = options.budget_seconds
    s.autotune_seed_configs = [helion.Config(**default_scaled_mm_config(key.m, key.n, key.k))]
    s.autotune_baseline_fn = reference
    s.autotune_baseline_accuracy_check_fn = accurate
    s.autotune_progress_bar = False  # ours is running
    s.autotune_ignore_errors = True  # a candidate that fails to compile is skipped, not fatal
    config = kernel.autotune(_kernel_args(inputs), force=True)
    return json.loads(config.to_json())


def time_vllm_kernel(copies: Sequence[dict[str, Any]], fmt: str, timer: Callable) -> tuple[str, float]:
    """``(name, median µs)`` of vLLM's default kernel for ``fmt``, the copies' out dtype and (N, K)
    (:func:`hltools.providers.vllm_default`: CUTLASS for fp8/int8; DeepGEMM, else CUTLASS block,
    else Triton block for block_fp8), over ``copies`` (``generate_scaled_mm_inputs`` dicts). Each
    copy's weight is processed once as vLLM does at load time and its activation scales once into
    the kernel's layout; ``timer(calls)`` (e.g. :func:`hltools.timing.time_graph`) then replays one
    kernel launch per copy. Raises :class:`hltools.providers.Unsupported` when no kernel is usable
    here, ``RuntimeError`` when its result on copy 0 is further than the bf16 tolerance of ``fmt``
    from the fp32 reference of the operands it multiplies."""
    import torch

    from hlcore.numerics import rel_error, tolerance
    from hltools import providers

    first = copies[0]
    k, n = first["b"].shape
    kernel = providers.vllm_default(fmt, first["out_dtype"], n, k)
    runs = [
        (d["a"], kernel.prepare_scale_a(d["scale_a"]), kernel.prepare_weight(d["b"], d["scale_b"]))
        for d in copies
    ]
    a, scale_a, w = runs[0]
    err = rel_error(kernel.call(a, scale_a, w), kernel.reference(a, first["scale_a"], w))
    tol = tolerance(fmt, torch.bfloat16)
    if not err <= tol:
        raise RuntimeError(f"{kernel.name}: relative error {err:.3g} > {tol:.1g} vs the fp32 reference")
    return kernel.name, timer([functools.partial(kernel.call, *r) for r in runs]).median_us


#: The operands :func:`gpu_checker` drew last: one (format, N, K, seed) at a time, as the grid's timer
#: keeps its own (a model's keys come shape by shape, so a shape's weight copies are drawn once for
#: all its M, not once per key).
_CHECK_INPUTS: dict[tuple, Any] = {}
#: Activation rows drawn with a shape's weights (more when a key's M is larger).
CHECK_MAX_M = 32
#: ``stage -> [count, wall seconds]`` of :func:`gpu_checker` in this process
#: (:func:`check_stage_report`; ``hltools.grid_search.Stage`` is not imported here: grid_search
#: imports this module).
CHECK_STAGES: dict[str, list[float]] = {}


@contextlib.contextmanager
def _check_stage(name: str, sync: Callable[[], Any] | None = None):
    """Adds the wall time of the block (after ``sync``, e.g. ``torch.cuda.synchronize``) to
    :data:`CHECK_STAGES` ``[name]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if sync is not None:
            sync()
        stage = CHECK_STAGES.setdefault(name, [0, 0.0])
        stage[0] += 1
        stage[1] += time.perf_counter() - start


def check_stage_report() -> str | None:
    """One line: each stage of :func:`gpu_checker` run in this process, with its count and wall
    seconds; None before the first check."""
    if not CHECK_STAGES:
        return None
    parts = [f"{name} ({int(count)}) {seconds:.1f} s" for name, (count, seconds) in CHECK_STAGES.items()]
    return f"check: {'; '.join(parts)}; {sum(s for _, s in CHECK_STAGES.values()):.1f} s in all"


def check_inputs(key: TuneKey, options: TuneOptions, device: str = "cuda") -> list[dict[str, Any]]:
    """The operands :func:`gpu_checker` times ``key`` on: one ``generate_scaled_mm_inputs``-style dict
    (``a``, ``b``, ``scale_a``, ``scale_b``, ``out_dtype``, ``bias`` None, ``block_size``) per weight
    copy, ``copies_for(N * K)`` copies (more bytes than L2). The copies are
    :func:`hltools.bench.make_inputs`' for ``(key.fmt, key.n, key.k)`` and ``options.seed`` (copy 0 and
    the activations: ``generate_scaled_mm_inputs`` of max(``key.m``, :data:`CHECK_MAX_M`) tokens; copies
    1.. drawn on ``device``), kept for the next key of the same shape; every dict holds the first
    ``key.m`` rows of the activations (``a [M, K]``, ``scale_a`` in ``options.block_scale_a``'s layout
    for Block_FP8, :func:`hltools.bench.block_scale_a`)."""
    from hltools.bench import block_scale_a, make_inputs
    from hltools.timing import copies_for

    shape = (key.fmt, key.n, key.k, options.seed, str(device))
    d = _CHECK_INPUTS.get(shape)
    if d is None or d.a.shape[0] < key.m:
        _CHECK_INPUTS.clear()  # one shape's copies at a time (GBs for the largest)
        copies = copies_for(key.n * key.k)
        d = make_inputs(
            key.fmt, key.n, key.k, max(key.m, CHECK_MAX_M), copies, device=device, seed=options.seed
        )
        _CHECK_INPUTS[shape] = d
    a = d.a[: key.m]
    scale_a = block_scale_a(d.scale_a[: key.m], key.fmt, options.block_scale_a)
    common = {"a": a, "scale_a": scale_a, "out_dtype": d.out_dtype, "bias": None, "block_size": d.block_size}
    return [{**common, "b": b, "scale_b": scale_b} for b, scale_b in d.weights]


def gpu_checker(key: TuneKey, config: dict[str, Any], options: TuneOptions) -> CheckResult:
    """Check ``config`` against the fp32 reference, then time it, the default config and vLLM's
    kernel as CUDA-graph replays over weight copies larger than L2 (:func:`check_inputs`); keep the
    faster Helion config. Helion reads Block_FP8's scale_a in ``options.block_scale_a``'s layout;
    vLLM's kernel its own. A disturbed timing (p80 / p20 above :data:`hlcore.timing.RETIME_SPREAD`)
    is taken again and the steadiest kept (:func:`hlcore.timing.steadiest`), as ``bench kernels``
    does. Each stage's wall time adds to :data:`CHECK_STAGES`."""
    import torch

    from hlcore import scaled_mm as sm
    from hlcore.numerics import rel_error, tolerance
    from hlcore.scaled_mm_config import default_scaled_mm_config
    from hlcore.timing import steadiest
    from hltools.timing import time_graph

    def steady_timer(calls):
        return steadiest(time_graph, calls)[0]

    with _check_stage("draw the inputs", torch.cuda.synchronize):
        copies = check_inputs(key, options)
    inputs = copies[0]
    with _check_stage("reference", torch.cuda.synchronize):
        ref = sm.scaled_mm_ref(**inputs)
        err = rel_error(sm.scaled_mm(**inputs, config=config), ref)
    tol = tolerance(key.fmt, inputs["out_dtype"])
    if not err <= tol:
        return CheckResult(False, config, rel_err=err, note=f"relative error {err:.3g} > {tol:.1g}")

    def timed(fn) -> float:
        return steady_timer([lambda d=d: fn(d) for d in copies]).median_us

    default = default_scaled_mm_config(key.m, key.n, key.k)
    untuned = untuned_pick(key, options)
    times: dict[str, float] = {}  # one timing per distinct config

    def time_config(c: dict[str, Any]) -> float:
        ck = json.dumps(c, sort_keys=True)
        if ck not in times:
            with _check_stage("time Helion's configs"):
                times[ck] = timed(lambda d: sm.scaled_mm(**d, config=c))
        return times[ck]

    tuned_us, default_us = time_config(config), time_config(default)
    untuned_us = time_config(untuned.config)
    name, best, best_us = fastest(
        [
            ("tuned", config, tuned_us),
            ("default", default, default_us),
            ("untuned", untuned.config, untuned_us),
        ]
    )
    if name != "tuned":  # the config saved must pass the reference check too
        other_err = rel_error(sm.scaled_mm(**inputs, config=best), ref)
        if other_err <= tol:
            err = other_err
        else:
            name, best, best_us = "tuned", config, tuned_us
    result = CheckResult(
        True,
        best,
        rel_err=err,
        helion_us=best_us,
        default_us=default_us,
        untuned_us=untuned_us,
        untuned=untuned,
    )
    if name != "tuned":
        result.note = f"{name} config faster than the tuned one ({best_us:.1f} vs {tuned_us:.1f} µs): kept"
    try:
        with _check_stage("time vLLM's kernel"):
            result.fallback_name, result.fallback_us = time_vllm_kernel(copies, key.fmt, steady_timer)
        result.fallback = result.slower_than_fallback()
    except Exception as exc:  # no vLLM kernel for this shape: Helion stays, say why
        result.note = (result.note + "; " if result.note else "") + f"fallback timing failed: {exc}"[:200]
    return result


#: The ``--list`` status of a done key marked ``"fallback": true``.
FALLBACK_STATUS = "done (fallback: vLLM's kernel)"


def key_status(key: TuneKey, done: set, fallback: set = frozenset()) -> str:
    """``--list``'s status of ``key``: ``to tune``, ``done`` or :data:`FALLBACK_STATUS`."""
    kid = _kid(key)
    if kid not in done:
        return "to tune"
    return FALLBACK_STATUS if kid in fallback else "done"


def keys_table_rows(keys: Iterable[TuneKey], done: set, fallback: set = frozenset()) -> list[tuple[str, ...]]:
    return [
        (k.fmt, str(k.n), str(k.k), str(k.m), ", ".join(k.layers), key_status(k, done, fallback))
        for k in keys
    ]


def keys_table(keys: Sequence[TuneKey], done: set, fallback: set, title: str) -> ResultTable:
    """``--list``'s table: each key, the layers it comes from and its status (:func:`key_status`)."""
    columns = ["format", "N", "K", "M", "layers", "status"]
    rows = [list(r) for r in keys_table_rows(keys, done, fallback)]
    return ResultTable(title, columns, rows, left=("format", "layers", "status"))


def summary_table(summary: RunSummary) -> ResultTable:
    """Each key of a run: its status, Helion's (the kept config's), the default config's, the
    untuned config's (:class:`UntunedPick`) and vLLM's times, the speedup."""
    columns = ["format", "N", "K", "M", "status", "Helion µs", "default µs", "untuned µs", "vLLM µs"]
    columns += ["speedup", "note"]
    rows = []
    for s in summary.statuses:
        r = s.result
        speedup = r.fallback_us / r.helion_us if r and r.fallback_us and r.helion_us else None
        status = s.status + (" (fallback)" if r and r.fallback and s.status == "tuned" else "")
        times = [cell(r.helion_us if r else None, ".1f"), cell(r.default_us if r else None, ".1f")]
        times.append(cell(r.untuned_us if r else None, ".1f"))
        times += [cell(r.fallback_us if r else None, ".1f"), cell(speedup, ".2f")]
        rows.append([s.key.fmt, str(s.key.n), str(s.key.k), str(s.key.m), status, *times, s.message])
    return ResultTable(f"autotune summary ({summary.path})", columns, rows, left=("format", "status", "note"))


def step_table(summary: RunSummary) -> ResultTable | None:
    """A decode step's GEMM time as the user feels it, per (format, TP, M): each linear layer of one
    decoder layer once (a key's ``layers`` say which; a decode step runs every decoder layer, so the
    ratios hold for the whole step), with the tuned configs, with the heuristic ones and with vLLM's
    kernel; ``dispatched`` takes vLLM's time where the key is marked fallback. ``tuned vs untuned``:
    the step as the plugin ran it before this run (each key's :class:`UntunedPick` routed by
    :meth:`CheckResult.untuned_dispatched_us`: the shipped file's configs and marks, or the nearest
    entry under the speed guard's rule) over the step dispatched with the tuned configs, the gain a
    user gets from tuning; empty where a key's untuned time was not measured. Beside it, the plain
    geomean over keys of heuristic / tuned time, which weighs a 7 µs and a 28 µs GEMM alike. Rows
    only where every layer of the (format, TP, M) was timed in this run; None when there are none."""
    groups: dict[tuple[str, str, int], list[CheckResult | None]] = {}
    for s in summary.statuses:
        for layer in s.key.layers:  # "qkv tp1"
            groups.setdefault((s.key.fmt, layer.rsplit(" ", 1)[-1], s.key.m), []).append(s.result)
    columns = ["format", "TP", "M", "tuned µs", "heuristic µs", "vLLM µs", "tuned vs heuristic"]
    columns += ["tuned vs untuned", "dispatched vs vLLM", "geomean over keys"]
    rows = []
    for (fmt, tp, m), results in groups.items():
        if not all(r is not None and r.helion_us and r.default_us for r in results):
            continue
        tuned, heuristic = sum(r.helion_us for r in results), sum(r.default_us for r in results)
        per_key = geomean(r.default_us / r.helion_us for r in results)
        vllm = dispatched = untuned = None
        if all(r.fallback_us for r in results):
            vllm = sum(r.fallback_us for r in results)
            tuned_dispatched = sum(r.fallback_us if r.fallback else r.helion_us for r in results)
            dispatched = vllm / tuned_dispatched
            untuned_each = [r.untuned_dispatched_us() for r in results]
            if all(untuned_each):
                untuned = sum(untuned_each) / tuned_dispatched
        cells = [
            cell(tuned, ".1f"),
            cell(heuristic, ".1f"),
            cell(vllm, ".1f"),
            cell(heuristic / tuned, ".3f"),
        ]
        rows.append(
            [fmt, tp, str(m), *cells, cell(untuned, ".3f"), cell(dispatched, ".3f"), cell(per_key, ".3f")]
        )
    title = "decode step: the GEMMs of one decoder layer, time-weighted"
    return ResultTable(title, columns, rows, left=("format", "TP")) if rows else None


def status_line(status: KeyStatus) -> str:
    """One line (rich markup) per finished key: tuned (times, fallback mark), failed or skipped."""
    r, label = status.result, status.key.label
    if status.status == "tuned":
        line = f"[green]tuned[/] {label} in {status.seconds:.0f} s: {cell(r.helion_us, '.1f')} µs"
        untuned = (
            f", untuned {cell(r.untuned_us, '.1f')} ({r.untuned.label})" if r.untuned is not None else ""
        )
        line += f" (default {cell(r.default_us, '.1f')}{untuned}, {r.fallback_name or 'vLLM'} {cell(r.fallback_us, '.1f')})"
        if r.fallback:
            line += " [yellow]slower than vLLM's kernel: marked fallback"
        return line
    if status.status == "failed":
        return f"[bold red]FAILED[/] {label}: {escape(status.message)}"
    return f"[dim]{status.status}[/] {label}: {escape(status.message)}"


def benchmark_env() -> dict[str, str]:
    """Environment the tuning run sets (candidates timed as CUDA-graph replays)."""
    return {"HELION_BENCHMARK_CUDAGRAPH": "1"}


def apply_benchmark_env() -> None:
    os.environ.update(benchmark_env())
