"""``hltools configs from-bench``: a scaled_mm config file from a side-by-side kernel benchmark.

``hltools bench kernels`` times, at every (model, layer, format, M), Helion's scaled GEMM with the
config it picked next to vLLM's default kernel for the format, in one process under CUDA graphs.
:func:`entries_from_bench` turns those rows into config entries: one per (format, N, K, M) key,
``config`` = the Helion config that was measured, ``"fallback": true`` where Helion's median was
above vLLM's (dispatch then keeps vLLM's kernel for that key, issue 4), ``stats`` = the two
medians. The CLI writes them to ``<output>/scaled_mm/<gpu>.json`` with
:func:`hlcore.config_store.save_config_file` (merged), the GPU and versions taken from the
benchmark rows, never from this machine.

Rules:

* A key needs a Helion row that ran (``ok``, a median, a known config) and a vLLM row with a
  median at the same point (model, layer, format, N, K, M, TP, out dtype); anything else is
  skipped with a reason (returned in ``skipped`` and logged).
* The measured config: the row's ``config`` text is either the config's JSON, or the label of
  where the picker took it from. ``heuristic`` means
  :func:`hlcore.scaled_mm_config.default_scaled_mm_config` for that (M, N, K) (deterministic:
  what the benchmark ran when no config file existed); other labels (``exact``, ``nearest``...)
  name a config from a file the row did not record, so those rows are skipped.
* The same key measured more than once (two models or layers with one shape, two result files):
  conservative, ``fallback`` when ANY measurement has Helion slower than vLLM; ``stats`` then
  report the measurement with the worst Helion/vLLM ratio, and ``measurements`` how many there
  were. Measurements of one key with different configs are skipped (they cannot be one entry).

Only the side-by-side medians decide: a key is marked when Helion lost by any margin, the
benchmark's own repeat-to-repeat noise is not subtracted (a near-tie can go either way).
"""

from __future__ import annotations

import json
import logging
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from hlcore.config_store import (
    SCALED_MM_KERNEL,
    ConfigEntry,
    ConfigFileError,
    canonical_gpu_name,
    config_file_path,
    metadata_mismatch,
    read_config_file,
    save_config_file,
    scaled_mm_key,
)
from hlcore.scaled_mm_config import SCALED_MM_FORMATS, check_scaled_mm_config, default_scaled_mm_config

if TYPE_CHECKING:
    from hltools.bench import BenchResult

logger = logging.getLogger(__name__)

SOURCE = "hltools bench kernels"
HEURISTIC = "heuristic"
MARKED_SUFFIX = " (marked fallback)"
VERSION_FIELDS = ("torch", "triton", "helion", "vllm")
NOTE = (
    "configs are the heuristic defaults (or whatever config each benchmark row ran) as measured by "
    "`hltools bench kernels`, not autotuned; fallback marks where Helion's median was above vLLM's "
    "default kernel's in the side-by-side benchmark"
)


class BenchConfigError(ValueError):
    """Benchmark rows that cannot make one config file (e.g. two GPUs or helion versions)."""


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _point(r: BenchResult) -> tuple:
    return (r.model, r.layer, r.format, r.n, r.k, r.m, r.tp, r.out_dtype)


def _label(r: BenchResult) -> str:
    return f"{r.model} {r.layer} {r.format} N={r.n} K={r.k} M={r.m} tp{r.tp}"


def measured_config(r: BenchResult) -> tuple[dict[str, Any] | None, str]:
    """``(config, source)`` of a Helion row: its JSON config, or the heuristic default for
    ``heuristic``; ``(None, reason)`` when the row does not say which config ran."""
    text = (r.config or "").strip()
    if text.endswith(MARKED_SUFFIX):
        text = text[: -len(MARKED_SUFFIX)].strip()
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, f"config is not valid JSON ({exc})"
        return (config, "measured config") if isinstance(config, dict) else (None, "config is not an object")
    if text == HEURISTIC:
        return default_scaled_mm_config(r.m, r.n, r.k), HEURISTIC
    return None, f"config {text or '(empty)'!r} names a config file's entry that the row did not record"


def entries_from_bench(results: Iterable[BenchResult], skipped: list[str] | None = None) -> list[ConfigEntry]:
    """One :class:`ConfigEntry` per (format, N, K, M) with a usable Helion row and a timed vLLM
    row (rules: module docstring), sorted by key. Reasons for skipped rows are appended to
    ``skipped`` (when given) and logged."""
    skipped = skipped if skipped is not None else []
    results = list(results)

    def skip(reason: str) -> None:
        skipped.append(reason)
        logger.info("hltools configs from-bench: skipped %s", reason)

    vllm: dict[tuple, BenchResult] = {}
    for r in results:
        if r.provider != "vllm":
            continue
        if not (r.ok and _finite(r.median_us)):
            skip(f"{_label(r)}: vLLM row not timed ({r.note or 'not ok'})")
            continue
        vllm[_point(r)] = r

    measurements: dict[tuple, list[tuple[BenchResult, BenchResult, dict[str, Any], str]]] = {}
    for r in results:
        if r.provider != "helion":
            continue
        if r.format not in SCALED_MM_FORMATS:
            skip(f"{_label(r)}: unknown format {r.format!r}")
            continue
        if not (r.ok and _finite(r.median_us)):
            skip(f"{_label(r)}: Helion row failed ({r.note or 'not ok'})")
            continue
        base = vllm.get(_point(r))
        if base is None:
            skip(f"{_label(r)}: no timed vLLM row at this point")
            continue
        config, source = measured_config(r)
        if config is None:
            skip(f"{_label(r)}: {source}")
            continue
        if reason := check_scaled_mm_config(config):
            skip(f"{_label(r)}: invalid config ({reason})")
            continue
        kid = (r.format, r.n, r.k, r.m)
        measurements.setdefault(kid, []).append((r, base, config, source))

    entries = []
    for (fmt, n, k, m), ms in sorted(measurements.items()):
        if len({json.dumps(c, sort_keys=True) for _, _, c, _ in ms}) > 1:
            skip(f"{fmt} N={n} K={k} M={m}: measured with {len(ms)} different configs")
            continue
        fallback = any(h.median_us > v.median_us for h, v, _, _ in ms)
        h, v, config, source = max(ms, key=lambda x: x[0].median_us / x[1].median_us)
        stats: dict[str, Any] = {
            "helion_us": h.median_us,
            "fallback_us": v.median_us,
            "fallback_kernel": v.kernel,
            "speedup_vs_fallback": v.median_us / h.median_us,
            "config_source": source,
            "source": SOURCE,
            "models": sorted({x.model for x, _, _, _ in ms}),
            "layers": sorted({f"{x.model} {x.layer}" for x, _, _, _ in ms}),
            "measurements": len(ms),
        }
        if _finite(h.rel_err):
            stats["rel_err"] = h.rel_err
        entries.append(ConfigEntry(scaled_mm_key(fmt, n, k, m), dict(config), fallback, stats))
    return entries


def _one(values: Iterable[str], what: str) -> str:
    found = sorted({v for v in values if v})
    if len(found) > 1:
        raise BenchConfigError(f"the benchmark rows name several {what}: {found}; make one file per {what}")
    return found[0] if found else ""


def bench_metadata(
    results: Sequence[BenchResult], bench_meta: Sequence[Mapping[str, Any]] = (), command: str = ""
) -> dict[str, Any]:
    """The ``_metadata`` of the file: GPU (canonical and raw), versions, commit and date of the
    benchmark rows (one GPU and one helion version, else :class:`BenchConfigError`)."""
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
        "note": NOTE,
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
    return {k: v for k, v in meta.items() if v not in ("", None) or k == "commit"}


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
configs_app = typer.Typer(
    help="Config files: `from-bench` (a scaled_mm config file from `hltools bench kernels` results).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 200))


@configs_app.callback()
def _configs() -> None:
    """Config files of the Helion kernels."""


@configs_app.command("from-bench")
def from_bench(
    kernels_json: Annotated[
        list[Path],
        typer.Argument(
            help="kernels.json (or .csv, or a folder with kernels.json) of `hltools bench kernels`."
        ),
    ],
    output: Annotated[
        Path, typer.Option(help="Config directory: writes `<output>/scaled_mm/<gpu>.json` (merged).")
    ] = Path("configs"),
    force: Annotated[
        bool,
        typer.Option(help="Replace an existing file whose metadata names another GPU or helion version."),
    ] = False,
) -> None:
    """Write the scaled_mm config file of the benchmark's GPU from side-by-side kernel results.

    Each (format, N, K, M) gets the Helion config that was measured; keys where Helion's median was
    above vLLM's default kernel's are marked `"fallback": true` (dispatch keeps vLLM's kernel
    there). GPU, versions and date come from the benchmark rows. These configs are what the
    benchmark ran (the heuristic defaults unless it had a config file), not autotuned ones.
    """
    from hltools.bench import read_results  # imports torch: not at module level (fast --help)

    console = _console()
    results: list = []
    bench_meta: list[dict] = []
    for path in kernels_json:
        try:
            meta, rows = read_results(path)
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="KERNELS_JSON") from None
        bench_meta.append(meta)
        results += rows
    command = shlex.join(
        ["hltools", "configs", "from-bench", *map(str, kernels_json), "--output", str(output)]
        + (["--force"] if force else [])
    )
    try:
        metadata = bench_metadata(results, bench_meta, command)
    except BenchConfigError as exc:
        console.print(f"[bold red]{exc}")
        raise typer.Exit(2) from None
    skipped: list[str] = []
    entries = entries_from_bench(results, skipped)
    if not entries:
        console.print("[bold red]no usable (Helion, vLLM) pair in the benchmark rows; nothing written")
        for reason in skipped:
            console.print(f"  skipped {reason}", markup=False, highlight=False)
        raise typer.Exit(1)

    path = config_file_path(SCALED_MM_KERNEL, metadata["gpu"], output)
    merge = True
    if path.exists():
        try:
            reason = metadata_mismatch(read_config_file(path).metadata, metadata["gpu"], metadata["helion"])
        except ConfigFileError as exc:
            reason = str(exc)
        if reason:
            if not force:
                console.print(
                    f"[bold red]{path}: {reason}; rerun with --force to replace it (or pick another --output)"
                )
                raise typer.Exit(2)
            merge = False  # as autotune --force: the file is started afresh
    save_config_file(path, entries, metadata, merge=merge)

    table = Table(title=f"{path}: from {', '.join(map(str, kernels_json))}")
    for col in ("format", "keys", "fallback", "Helion faster"):
        table.add_column(col, justify="left" if col == "format" else "right")
    for fmt in dict.fromkeys(e.key["format"] for e in entries):
        fe = [e for e in entries if e.key["format"] == fmt]
        marked = sum(e.fallback for e in fe)
        table.add_row(str(fmt), str(len(fe)), str(marked), str(len(fe) - marked))
    console.print(table)
    for reason in skipped:
        console.print(f"skipped {reason}", markup=False, highlight=False, style="yellow")
    total_marked = sum(e.fallback for e in entries)
    console.print(
        f"{len(entries)} keys, {total_marked} marked fallback, {len(skipped)} rows skipped -> {path}",
        style="bold green",
    )
