"""``hltools configs from-bench``: a scaled_mm config file from a side-by-side kernel benchmark.

``hltools bench kernels`` times, at every (model, layer, format, M), Helion's scaled GEMM with the
config it picked next to vLLM's default kernel for the format, in one process under CUDA graphs.
:func:`entries_from_bench` turns those rows into config entries: one per (format, N, K, M) key,
``config`` = the Helion config that was measured, ``"fallback": true`` where Helion's median was
above vLLM's (dispatch then keeps vLLM's kernel for that key, issue 4), ``stats`` = the two
medians. The CLI writes the configs and fallback marks to ``<output>/scaled_mm/<gpu>.json`` with
:func:`hlcore.config_store.save_config_file` (merged; the file the wheel ships), and each key's
``stats`` to the sidecar ``<stats-output>/scaled_mm/<gpu>.stats.json`` beside the benchmark results
with :func:`hlcore.config_store.save_stats_file` (merged, keyed the same way; default
``<output>/../lab/results/config-stats``, i.e. ``lab/results/config-stats`` for the repo's
``configs``). The GPU and versions come from the benchmark rows, never from this machine.

Rules:

* A key needs a Helion row that ran (``ok``, a median, a known config) and a vLLM row with a
  median at the same point (model, layer, format, N, K, M, TP, out dtype); anything else is
  skipped with a reason (returned in ``skipped`` and logged).
* The measured config (:func:`measured_config`): the row's ``config`` text is ``"<label> <JSON>"``
  (what ``hltools bench kernels`` writes: where the picker took the config from, then the config
  itself), the config's JSON alone, or (older benchmarks) the label alone. With JSON, the JSON is
  the config. ``heuristic`` alone means
  :func:`hlcore.scaled_mm_config.default_scaled_mm_config` for that (M, N, K) (deterministic:
  what the benchmark ran when no config file existed). Other labels alone (``exact``,
  ``nearest``...) name an entry of the config file the benchmark ran with: given that file's
  config directory (``--config-dir``), the entry is found again by the picker's rules for the rows'
  GPU and helion version (:func:`pick_from_config_dir`), and the row is used only when that pick
  has the row's label; without it those rows are skipped.
* Fallback marks come from margins over independent processes: each input file is one process
  (one ``hltools bench kernels`` run). In one process a key's ratio is Helion's median over vLLM's
  at its worst measurement (two models or layers with one shape: conservative); a key is marked
  ``"fallback": true`` when the median of those per-process ratios is above ``1 + margin``
  (vLLM's kernel faster by more than ``margin``) or every one of them is above 1 (vLLM's kernel
  faster in each process: :func:`fallback_mark`), and only once it was measured in at least
  ``min_processes`` processes. The CLI's defaults are the shipped files' rule: a 2 % margin, 3
  processes; a key measured in fewer processes is skipped (no exact key: hlvllm's speed guard
  times it at warm-up). ``stats`` report the worst measurement of the median process, the
  per-process ratios (``process_ratios``, their spread) and ``measurements``. Measurements of one
  key with different configs are skipped (they cannot be one entry).

A mark applies to its own key only: the picker never carries it to another shape (hlvllm routing).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from hlcore.config_store import (
    SCALED_MM_KERNEL,
    ConfigEntry,
    ConfigFile,
    ConfigFileError,
    canonical_gpu_name,
    config_file_path,
    gpu_name_candidates,
    installed_helion_version,
    metadata_mismatch,
    read_config_file,
    save_config_file,
    save_stats_file,
    scaled_mm_key,
)
from hlcore.formats import get_format
from hlcore.scaled_mm_config import (
    SCALED_MM_FORMATS,
    ScaledMMConfigPick,
    check_scaled_mm_config,
    default_scaled_mm_config,
    select_scaled_mm_entry,
)
from hltools import options as opt

if TYPE_CHECKING:
    from hltools.bench import BenchResult

logger = logging.getLogger(__name__)

SOURCE = "hltools bench kernels"
HEURISTIC = "heuristic"
MARKED_SUFFIX = " (marked fallback)"
VERSION_FIELDS = ("torch", "triton", "helion", "vllm")
NOTE = (
    "configs are the heuristic defaults (or whatever config each benchmark row ran) as measured by "
    "`hltools bench kernels`, not autotuned; fallback marks where vLLM's default kernel was faster "
    "than Helion by more than the command's --margin in the median over its benchmark processes, or "
    "faster in every one of them (one per input file, at least --min-processes)"
)
#: The note when the benchmarks ran config files (``configs_from`` says which, and how they were made).
NOTE_FILES = (
    "configs are the entries of the config files in `configs_from` (each with the command that made "
    "it) that the benchmark rows ran, or the heuristic defaults where a file had no entry, as measured "
    "by `hltools bench kernels`; fallback marks where vLLM's default kernel was faster than Helion by "
    "more than the command's --margin in the median over its benchmark processes, or faster in every "
    "one of them (one per input file, at least --min-processes)"
)
#: The note when every benchmark recorded that it ran without a config file.
NOTE_HEURISTIC = (
    "configs are the heuristic defaults (the benchmarks ran without a config file) as measured by "
    "`hltools bench kernels`, not autotuned; fallback marks where vLLM's default kernel was faster "
    "than Helion by more than the command's --margin in the median over its benchmark processes, or "
    "faster in every one of them (one per input file, at least --min-processes)"
)
#: The ``_metadata`` fields of a config file that say how it was made (kept in ``configs_from``).
CONFIG_FILE_FIELDS = ("command", "commit", "date", "effort", "source")


class BenchConfigError(ValueError):
    """Benchmark rows that cannot make one config file (e.g. two GPUs or helion versions)."""


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _point(r: BenchResult) -> tuple:
    return (r.model, r.layer, r.format, r.n, r.k, r.m, r.tp, r.out_dtype)


def _label(r: BenchResult) -> str:
    return f"{r.model} {r.layer} {r.format} N={r.n} K={r.k} M={r.m} tp{r.tp}"


@functools.lru_cache(maxsize=16)
def _read_file(path: str, mtime_ns: int, size: int) -> ConfigFile:
    """:func:`read_config_file`, once per version of the file (mtime and size in the key)."""
    return read_config_file(path)


def _fitting_file(
    config_dir: str | Path, gpu: str, helion: str
) -> tuple[Path | None, ConfigFile | None, list[tuple[Path, str, bool]]]:
    """``(path, file, passed_over)``: the first scaled_mm file among the GPU's names (exact
    variant, then family) under ``config_dir`` that exists, reads and fits ``helion`` (the
    picker's order), or ``(None, None, ...)``; ``passed_over``: ``(path, why, unreadable)`` of the
    names before it."""
    passed_over: list[tuple[Path, str, bool]] = []
    for name in gpu_name_candidates(gpu):
        path = config_file_path(SCALED_MM_KERNEL, name, config_dir)
        try:
            st = path.stat()
            cf = _read_file(str(path), st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            passed_over.append((path, f"no {path}", False))
            continue
        except Exception as exc:  # noqa: BLE001 (the picker passes over any unreadable file)
            passed_over.append((path, f"{path}: {exc}", True))
            continue
        if reason := metadata_mismatch(cf.metadata, name, helion):
            passed_over.append((path, f"{path}: {reason}", False))
            continue
        return path, cf, passed_over
    return None, None, passed_over


def pick_from_config_dir(
    config_dir: str | Path, gpu: str, helion: str | None, fmt: str, m: int, n: int, k: int
) -> tuple[ScaledMMConfigPick, str]:
    """``(pick, why)``: what :func:`hlcore.scaled_mm_config.pick_scaled_mm_config` returns for
    ``(fmt, M, N, K)`` on GPU ``gpu`` with ``HL_CONFIG_DIR=config_dir`` and helion ``helion``
    installed (the benchmark's; None: this machine's), whatever GPU and helion this machine has.

    The picker's own steps, with its public parts: the first usable file among the GPU's names
    (exact variant, then family; another helion version or a malformed file is passed over),
    entries with an invalid config dropped, :func:`select_scaled_mm_entry`, else the file's default
    entry, else the heuristic. ``why``: for a heuristic pick, why no file was used (else "")."""
    canonical = canonical_gpu_name(gpu)
    path, cf, passed_over = _fitting_file(config_dir, gpu, helion or installed_helion_version())
    if cf is None:
        why = "; ".join(reason for _, reason, _ in passed_over)
        file_without_entry = None
    else:  # the picker does not look further than the first usable file
        usable = {i: e for i, e in cf.entries.items() if check_scaled_mm_config(e.config) is None}
        entry, source = select_scaled_mm_entry(usable.values(), fmt, m, n, k)
        if entry is None and () in usable:
            entry, source = usable[()], "default"
        if entry is not None:
            config_json = json.dumps(entry.config, sort_keys=True)
            pick = ScaledMMConfigPick(
                config_json, source, entry.id, entry.fallback, str(path), canonical, entry.block_scale_a
            )
            return pick, ""
        why = f"{path} has no usable {fmt} entry and no default entry"
        file_without_entry = str(path)
    config_json = json.dumps(default_scaled_mm_config(m, n, k), sort_keys=True)
    return ScaledMMConfigPick(config_json, HEURISTIC, path=file_without_entry, gpu=canonical), why


def _made_by(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {f: meta[f] for f in CONFIG_FILE_FIELDS if meta.get(f)}


def config_file_provenance(
    config_dir: str | Path, gpu: str, helion: str | None = None
) -> dict[str, Any] | None:
    """The scaled_mm config file a benchmark on GPU ``gpu`` (raw or canonical name) with
    ``HL_CONFIG_DIR=config_dir`` and helion ``helion`` (None: this machine's) runs, and how it was
    made: ``{"file": <path>, **its _metadata's CONFIG_FILE_FIELDS}`` for the file the picker uses
    (:func:`pick_from_config_dir`'s), with ``"earlier"``: the same fields of the other autotune runs
    that wrote into it (``_metadata.earlier`` entries with an ``effort``; a file tuned for two models
    names both commands); when none fits, ``{"file": <path>, "error": <why>}`` for the
    first that could not be read, else None (the heuristic defaults run). ``hltools bench kernels``
    records it as ``config_file`` in its metadata; ``configs from-bench`` copies it to
    ``configs_from``."""
    path, cf, passed_over = _fitting_file(config_dir, gpu, helion or installed_helion_version())
    if cf is not None:
        meta = cf.metadata
        out = {"file": str(path), **_made_by(meta)}
        runs = [_made_by(e) for e in meta.get("earlier", []) if isinstance(e, dict) and e.get("effort")]
        return {**out, "earlier": runs} if runs else out
    unreadable = [(p, why) for p, why, bad in passed_over if bad]
    return {"file": str(unreadable[0][0]), "error": unreadable[0][1][:200]} if unreadable else None


def measured_config(r: BenchResult, *, config_dir: Path | None = None) -> tuple[dict[str, Any] | None, str]:
    """``(config, source)`` of a Helion row (rules: module docstring), or ``(None, reason)`` when
    the row does not say which config ran.

    ``config`` text: ``"<label> <JSON>"`` (``label`` may end in `` (marked fallback)``), the JSON
    alone (old; may end in the marked suffix), ``heuristic``, or another label alone: then,
    given ``config_dir`` (the config directory the benchmark ran with), the entry the picker
    takes from its file for the row's GPU (:func:`pick_from_config_dir`), when its label is the
    row's. ``source``: the label (``measured config`` for JSON alone; ``... in <file>`` when
    resolved from ``config_dir``)."""
    text = (r.config or "").strip().removesuffix(MARKED_SUFFIX).strip()
    label, brace, rest = text.partition("{")
    label = label.strip().removesuffix(MARKED_SUFFIX).strip()
    if brace:
        try:
            config = json.loads(brace + rest)
        except json.JSONDecodeError as exc:
            return None, f"config is not valid JSON ({exc})"
        if not isinstance(config, dict):
            return None, "config is not an object"
        return config, label or "measured config"
    if label == HEURISTIC:
        return default_scaled_mm_config(r.m, r.n, r.k), HEURISTIC
    if not label:
        return None, "the row records no config"
    if config_dir is None:
        return None, (
            f"config {label!r} names a config file's entry that the row did not record "
            "(--config-dir DIR: the config directory the benchmark ran with)"
        )
    if not r.gpu:
        return None, f"config {label!r}: the row does not name its GPU"
    pick, why = pick_from_config_dir(config_dir, r.gpu, r.helion or None, r.format, r.m, r.n, r.k)
    if pick.source != label:
        where = pick.path or why or str(config_dir)
        return None, (
            f"config {label!r}, but {config_dir} gives {pick.source!r} there ({where}): "
            "not the config file the benchmark ran with"
        )
    return pick.config, f"{label} in {pick.path}"


def entries_from_bench(
    results: Iterable[BenchResult],
    skipped: list[str] | None = None,
    *,
    config_dir: Path | None = None,
    processes: Sequence[int] | None = None,
    margin: float = 0.0,
    min_processes: int = 1,
    block_scale_a: Mapping[int, str] | None = None,
) -> list[ConfigEntry]:
    """One :class:`ConfigEntry` per (format, N, K, M) with a usable Helion row and a timed vLLM
    row (rules: module docstring), sorted by key. Reasons for skipped rows are appended to
    ``skipped`` (when given) and logged. ``config_dir``: the config directory the benchmark ran
    with, to resolve label-only rows (:func:`measured_config`). ``processes``: the process (input
    file) of each row, parallel to ``results`` (default: all one process); ``margin`` and
    ``min_processes``: the fallback rule (defaults: any loss, one process). ``block_scale_a``: the
    layout of Block_FP8's ``scale_a`` each process's Helion rows read (``hltools bench kernels
    --block-scale-a``; default and missing processes ``"row"``): a block key's entry records it, and
    a key measured on several layouts is skipped (its mark would mix two kernels' inputs)."""
    skipped = skipped if skipped is not None else []
    results = list(results)
    process_of = list(processes) if processes is not None else [0] * len(results)

    def skip(reason: str) -> None:
        skipped.append(reason)
        logger.info("hltools configs from-bench: skipped %s", reason)

    vllm: dict[tuple, BenchResult] = {}
    for r, p in zip(results, process_of, strict=True):
        if r.provider != "vllm":
            continue
        if not (r.ok and _finite(r.median_us)):
            skip(f"{_label(r)}: vLLM row not timed ({r.note or 'not ok'})")
            continue
        vllm[(p, *_point(r))] = r

    measurements: dict[tuple, list[tuple[BenchResult, BenchResult, dict[str, Any], str, int]]] = {}
    for r, p in zip(results, process_of, strict=True):
        if r.provider != "helion":
            continue
        if r.format not in SCALED_MM_FORMATS:
            skip(f"{_label(r)}: unknown format {r.format!r}")
            continue
        if not (r.ok and _finite(r.median_us)):
            skip(f"{_label(r)}: Helion row failed ({r.note or 'not ok'})")
            continue
        base = vllm.get((p, *_point(r)))
        if base is None:
            skip(f"{_label(r)}: no timed vLLM row at this point")
            continue
        config, source = measured_config(r, config_dir=config_dir)
        if config is None:
            skip(f"{_label(r)}: {source}")
            continue
        if reason := check_scaled_mm_config(config):
            skip(f"{_label(r)}: invalid config ({reason})")
            continue
        measurements.setdefault((r.format, r.n, r.k, r.m), []).append((r, base, config, source, p))

    layout_of = block_scale_a or {}
    entries = []
    for (fmt, n, k, m), ms in sorted(measurements.items()):
        if len({json.dumps(c, sort_keys=True) for _, _, c, _, _ in ms}) > 1:
            skip(f"{fmt} N={n} K={k} M={m}: measured with {len(ms)} different configs")
            continue
        layouts = {layout_of.get(x[4], "row") for x in ms} if get_format(fmt).block_size else {"row"}
        if len(layouts) > 1:
            skip(f"{fmt} N={n} K={k} M={m}: measured on several scale_a layouts {sorted(layouts)}")
            continue
        entry = _entry_from_measurements(fmt, n, k, m, ms, margin, min_processes, layouts.pop())
        if isinstance(entry, str):
            skip(entry)
            continue
        entries.append(entry)
    return entries


def _ratio(h: BenchResult, v: BenchResult) -> float:
    return h.median_us / v.median_us


#: The marks' margin of the shipped files (``configs from-bench --margin``'s default).
MARGIN = 0.02


def fallback_mark(ratios: Sequence[float], margin: float = MARGIN) -> bool:
    """Whether a key is marked fallback from its per-process ratios (Helion's median time over vLLM's
    default kernel's, one ratio per independent benchmark process): vLLM's kernel is faster by more
    than ``margin`` in the median over the processes, or faster in every one of them, however
    little. The margin keeps a key whose processes disagree (noise) on Helion; the second clause
    sends a key that every process read slower to vLLM's kernel (a tie costs nothing there, a
    steady loss would cost every step). With one process it is "Helion slower", the per-key check's
    rule of ``hltools autotune``."""
    if not ratios:
        raise ValueError("fallback_mark: no process ratios")
    return statistics.median(ratios) > 1.0 + margin or min(ratios) > 1.0


def _entry_from_measurements(
    fmt, n, k, m, ms, margin: float, min_processes: int, layout: str = "row"
) -> ConfigEntry | str:
    """The entry of one key from its measurements ``(helion, vllm, config, source, process)``, or why
    it is skipped (too few processes)."""
    worst: dict[int, tuple] = {}  # process -> its worst measurement
    for x in ms:
        if x[4] not in worst or _ratio(x[0], x[1]) > _ratio(worst[x[4]][0], worst[x[4]][1]):
            worst[x[4]] = x
    if len(worst) < min_processes:
        return (
            f"{fmt} N={n} K={k} M={m}: measured in {len(worst)} process(es), the rule needs {min_processes}"
        )
    ranked = sorted(worst.values(), key=lambda x: _ratio(x[0], x[1]))
    ratios = [_ratio(x[0], x[1]) for x in ranked]
    median_ratio = statistics.median(ratios)
    h, v, config, source, _ = ranked[(len(ranked) - 1) // 2]  # the median process (lower middle)
    stats: dict[str, Any] = {
        "helion_us": h.median_us,
        "fallback_us": v.median_us,
        "fallback_kernel": v.kernel,
        "speedup_vs_fallback": v.median_us / h.median_us,
        "config_source": source,
        "source": SOURCE,
        "models": sorted({x.model for x, *_ in ms}),
        "layers": sorted({f"{x.model} {x.layer}" for x, *_ in ms}),
        "measurements": len(ms),
    }
    if len(ratios) > 1:
        stats |= {
            "process_ratios": ratios,
            "median_ratio": median_ratio,
            "ratio_spread_pct": 100.0 * (ratios[-1] / ratios[0] - 1.0),
        }
    if _finite(h.rel_err):
        stats["rel_err"] = h.rel_err
    fallback = fallback_mark(ratios, margin)
    return ConfigEntry(scaled_mm_key(fmt, n, k, m), dict(config), fallback, stats, layout)


def _one(values: Iterable[str], what: str) -> str:
    found = sorted({v for v in values if v})
    if len(found) > 1:
        raise BenchConfigError(f"the benchmark rows name several {what}: {found}; make one file per {what}")
    return found[0] if found else ""


def bench_metadata(
    results: Sequence[BenchResult],
    bench_meta: Sequence[Mapping[str, Any]] = (),
    command: str = "",
    config_dir: Path | None = None,
) -> dict[str, Any]:
    """The ``_metadata`` of the file: GPU (canonical and raw), versions, commit and date of the
    benchmark rows (one GPU and one helion version, else :class:`BenchConfigError`), and the note
    and ``configs_from`` of :func:`configs_from`."""
    gpu_name = _one((r.gpu for r in results), "GPU")
    if not gpu_name:
        raise BenchConfigError("the benchmark rows do not name their GPU")
    helion = _one((r.helion for r in results), "helion version")
    if not helion:
        raise BenchConfigError("the benchmark rows do not name their helion version")
    versions = {
        d: ", ".join(sorted({getattr(r, d) for r in results if getattr(r, d)})) for d in VERSION_FIELDS
    }
    meta: dict[str, Any] = {
        "gpu": canonical_gpu_name(gpu_name),
        "gpu_name": gpu_name,
        **{d: v for d, v in versions.items() if v},
        "versions": {d: v for d, v in versions.items() if v},
        "source": SOURCE,
        "date": max((r.date for r in results if r.date), default=""),
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    commits = sorted({r.commit for r in results if r.commit})
    meta["commit"] = ", ".join(commits) if commits else None  # None: the benchmark did not record it
    bench_commands = [m["command"] for m in bench_meta if m.get("command")]
    if bench_commands:
        meta["bench_commands"] = bench_commands
    if command:
        meta["command"] = command
    files, note = configs_from(bench_meta, config_dir, gpu_name, helion)
    meta["note"] = note
    if files:
        meta["configs_from"] = files
    return {k: v for k, v in meta.items() if v not in ("", None) or k == "commit"}


def configs_from(
    bench_meta: Sequence[Mapping[str, Any]], config_dir: Path | None, gpu: str, helion: str
) -> tuple[list[dict[str, Any]], str]:
    """``(files, note)``: the config files the benchmark processes ran (each process's
    ``config_file`` metadata, or :func:`config_file_provenance` of ``config_dir`` for all of them
    when given: the config directory they ran with), without repeats, and the file's note:
    :data:`NOTE_FILES` when a process ran a file, :data:`NOTE_HEURISTIC` when every process
    recorded that it ran none, else (benchmarks older than the record) :data:`NOTE`."""
    if config_dir is not None:
        found = [config_file_provenance(config_dir, gpu, helion)]
    else:
        found = [m.get("config_file") for m in bench_meta if "config_file" in m]
    files = [f for i, f in enumerate(found) if f and f not in found[:i]]
    if files:
        return files, NOTE_FILES
    known = config_dir is not None or (bool(bench_meta) and len(found) == len(bench_meta))
    return [], NOTE_HEURISTIC if known else NOTE


STATS_NOTE = (
    "per-key measurements of the side-by-side benchmark behind the entries of config_file (Helion's "
    "and vLLM's medians, the config's source, the layers measured); informative only, nothing reads "
    "them at run time"
)
#: ``_metadata`` fields of the config file repeated in its stats sidecar.
STATS_METADATA_FIELDS = ("gpu", "gpu_name", "helion", "source", "command", "date", "generated", "commit")


def default_stats_dir(output: Path) -> Path:
    """Where the stats sidecars of config directory ``output`` go by default: for a checkout's
    shipped configs (``output`` named ``configs`` with a ``lab/`` folder beside it) that checkout's
    ``lab/results/config-stats`` (the wheel never carries them); for any other directory ``output``
    itself (``<output>/scaled_mm/<gpu>.stats.json``, beside the config file; the picker reads only
    ``<gpu>.json``)."""
    resolved = output.resolve()
    lab = resolved.parent / "lab"
    return lab / "results" / "config-stats" if resolved.name == "configs" and lab.is_dir() else output


def stats_metadata(metadata: Mapping[str, Any], config_file: Path | str) -> dict[str, Any]:
    """The sidecar's ``_metadata``: which config file it belongs to, :data:`STATS_NOTE` and the
    config file's own :data:`STATS_METADATA_FIELDS`."""
    own = {f: metadata[f] for f in STATS_METADATA_FIELDS if metadata.get(f) is not None}
    return {**own, "config_file": str(config_file), "note": STATS_NOTE}


#: ``_metadata`` fields that say where a file's entries came from (kept under ``"earlier"`` on merge):
#: ``configs from-bench``'s (with the stats sidecar of its keys) and ``hltools autotune``'s (model,
#: effort, seed, block_scale_a).
PROVENANCE_FIELDS = (
    "command", "bench_commands", "configs_from", "date", "generated", "commit", "note", "source",
    "stats_file", "model", "effort", "seed", "block_scale_a",
)  # fmt: skip


def earlier_provenance(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``"earlier"`` list of a file merged into: the provenance fields of its metadata
    (:data:`PROVENANCE_FIELDS`) first, then what it already kept, so merging new benchmark keys
    into a file never loses where its older keys came from (the new metadata replaces the old
    fields, as :func:`hlcore.config_store.save_config_file` merges)."""
    own = {f: metadata[f] for f in PROVENANCE_FIELDS if metadata.get(f) is not None}
    return ([own] if own else []) + list(metadata.get("earlier", []))


# --------------------------------------------------------------------------------------------
# What the command (hltools.commands.configs_from_bench) runs
# --------------------------------------------------------------------------------------------
def read_bench(kernels_json: Sequence[Path]) -> tuple[list, list[dict], list[int]]:
    """Rows and metadata of every benchmark result file, and each row's file index (its process);
    ``typer.BadParameter`` for a bad file."""
    from hltools.bench import read_results  # imports torch: not at module level (fast --help)

    results: list = []
    bench_meta: list[dict] = []
    processes: list[int] = []
    for i, path in enumerate(kernels_json):
        try:
            meta, rows = read_results(path)
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="KERNELS_JSON") from None
        bench_meta.append(meta)
        results += rows
        processes += [i] * len(rows)
    return results, bench_meta, processes


def rows_of_models(results: Sequence, processes: Sequence[int], models: str) -> tuple[list, list[int]]:
    """The rows (and their process indices) of the comma-separated ``models``;
    ``typer.BadParameter`` naming the files' models when one of them has no row."""
    names = [m.strip() for m in models.split(",") if m.strip()]
    have = sorted({r.model for r in results})
    missing = [m for m in names if m not in have]
    if not names or missing:
        raise typer.BadParameter(
            f"no rows of {', '.join(missing) or repr(models)} in the benchmark files; they hold: {', '.join(have)}",
            param_hint="--model",
        )
    keep = [i for i, r in enumerate(results) if r.model in names]
    return [results[i] for i in keep], [processes[i] for i in keep]


def merge_target(path: Path, metadata: dict[str, Any], force: bool) -> tuple[bool, set]:
    """``(merge, keys already there)`` for writing ``path``; a file of another GPU or helion version
    (or an unreadable one) exits 2 unless ``force`` (then it is started afresh). Sets
    ``metadata["earlier"]`` when merging into an existing file."""
    if not path.exists():
        return True, set()
    try:
        current = read_config_file(path)
        reason = metadata_mismatch(current.metadata, metadata["gpu"], metadata["helion"])
    except ConfigFileError as exc:
        reason = str(exc)
    if reason:
        if not force:
            opt.fail(f"{path}: {reason}; rerun with --force to replace it (or pick another --output)", 2)
        return False, set()  # as autotune --force: the file is started afresh
    metadata["earlier"] = earlier_provenance(current.metadata)
    return True, set(current.entries)


def print_summary(console, path, kernels_json, entries, written, kept, skipped) -> None:
    table = Table(title=f"{path.name} from {len(kernels_json)} benchmark file(s)")
    for col in ("format", "written", "fallback", "Helion faster", "kept"):
        table.add_column(col, justify="left" if col == "format" else "right")
    for fmt in dict.fromkeys(e.key["format"] for e in entries):
        fw = [e for e in written if e.key["format"] == fmt]
        marked = sum(e.fallback for e in fw)
        fk = sum(e.key["format"] == fmt for e in kept)
        table.add_row(str(fmt), str(len(fw)), str(marked), str(len(fw) - marked), str(fk))
    console.print(table)
    console.print("read: " + " ".join(map(str, kernels_json)), markup=False, highlight=False, soft_wrap=True)
    for reason in skipped:
        console.print(f"skipped {reason}", markup=False, highlight=False, style="yellow")
    total_marked = sum(e.fallback for e in written)
    console.print(
        f"{len(written)} keys written ({total_marked} marked fallback), {len(kept)} kept (already in "
        f"the file), {len(skipped)} rows skipped -> {path}" + ("" if written else " (unchanged)"),
        style="bold green",
    )


def write_config_and_stats(
    path: Path, stats_path: Path, entries: Sequence[ConfigEntry], metadata: dict[str, Any], *, merge: bool
) -> None:
    """``entries`` without their stats (key, config, fallback mark) and ``metadata`` (plus
    ``stats_file``) into the config file ``path``; their stats into the sidecar ``stats_path``
    (same keys, :func:`stats_metadata`). Both merged unless ``merge`` is False; the config file's
    :data:`PROVENANCE_FIELDS` are ``metadata``'s alone (its ``earlier`` keeps the file's older ones,
    :func:`merge_target`), so no field of an earlier import (``configs_from``, ``bench_commands``)
    stays at the top beside another import's command."""
    metadata = {**metadata, "stats_file": str(stats_path)}
    entries_only = [dataclasses.replace(e, stats={}) for e in entries]
    save_config_file(path, entries_only, metadata, merge=merge, drop_metadata=PROVENANCE_FIELDS)
    stats = {e.id: e.stats for e in entries if e.stats}
    save_stats_file(stats_path, stats, stats_metadata(metadata, path), merge=merge)
