"""The results of ``hltools bench kernels`` (:mod:`hltools.bench`): one :class:`BenchResult` per
provider and point, Helion's speedups and their geomeans, and the files ``kernels.json`` /
``kernels.csv`` / ``kernels.md`` written and read through :mod:`hltools.results`.

Pure Python (no torch): ``bench report``, ``bench gap`` and ``configs from-bench`` read results here
without a GPU.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hltools import shapes
from hltools.results import (
    PROVENANCE_FIELDS,
    ResultTable,
    cell,
    find_result,
    geomean,
    provenance_text,
    read_rows,
    row_from_dict,
    write_csv,
    write_json,
    write_text,
)

PROVIDERS = ("helion", "vllm", "torch")
BASELINES = ("vllm", "torch")
RESULTS_JSON = "kernels.json"
RESULTS_CSV = "kernels.csv"
SUMMARY_MD = "kernels.md"


# --------------------------------------------------------------------------------------------
# Result schema
# --------------------------------------------------------------------------------------------
@dataclass
class BenchResult:
    """One provider at one (model, format, layer, M, N, K): per-call device time and what it means.

    ``provider``: ``helion``, ``vllm`` (vLLM's default kernel for the format) or ``torch``;
    ``kernel``: what actually ran (e.g. ``vllm block deep_gemm fp8_gemm_nt``; ``-`` when nothing
    could run). Times are microseconds per call (None when not measured: ``note`` says why);
    ``speedup_vs_vllm`` = vLLM's median / this median; ``rel_err``: relative Frobenius error of this
    provider's output vs the fp32 dequantized reference (weight copy 0; DeepGEMM's includes vLLM's
    UE8M0 re-quantization of the weight, about 2.6e-2); ``ok``: ran, timed, and (for
    Helion) within the hlcore.numerics tolerance. ``config``: for Helion, where the config came from
    and what it was: ``"<source> <compact JSON>"``, e.g. ``exact {"block_sizes":[16,64,128],...}``
    (source: the picker's ``exact``, ``nearest``, ``heuristic``..., plus `` (marked fallback)``
    when the picked entry is marked); results of older benchmarks hold only the source (or only
    the JSON)."""

    model: str
    layer: str
    format: str
    provider: str
    kernel: str
    m: int
    n: int
    k: int
    tp: int = 1
    out_dtype: str = "bf16"
    gpu: str = ""
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    gbps: float | None = None
    roofline_pct: float | None = None
    speedup_vs_vllm: float | None = None
    rel_err: float | None = None
    ok: bool = False
    copies: int = 0
    repeats: int = 0
    config: str = ""
    torch: str = ""
    triton: str = ""
    helion: str = ""
    vllm: str = ""
    commit: str = ""
    date: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResult:
        """Inverse of :meth:`to_dict`; also reads CSV rows (all strings, empty = None). Unknown keys
        are ignored, so older result files stay readable."""
        return row_from_dict(cls, d)


FIELDS = [f.name for f in dataclasses.fields(BenchResult)]


def model_label(model: str) -> str:
    """A result's ``model`` as a table shows it: a ``--model`` given as a path (to a config.json or
    its folder, e.g. on the GPU machine that ran it) shows as that folder's name
    (:func:`hltools.shapes.path_model_name`); an embedded name or HF id as given.
    The results keep the path (repro commands use it)."""
    return (shapes.path_model_name(model) or model) if shapes.is_path_like(model) else model


def point(r: BenchResult) -> tuple:
    """The point a result measures: (model, format, layer, N, K, M, TP, out dtype)."""
    return (r.model, r.format, r.layer, r.n, r.k, r.m, r.tp, r.out_dtype)


def failures(results: Iterable[BenchResult]) -> list[BenchResult]:
    """Helion rows that did not run, were not timed or exceeded the tolerance."""
    return [r for r in results if r.provider == "helion" and not r.ok]


def repro_command(r: BenchResult, metadata: Mapping[str, Any]) -> str:
    """The ``hltools bench kernels`` command that reruns only the point of result ``r``."""
    parts = ["hltools", "bench", "kernels", "--model", r.model, "--formats", r.format, "--tp", str(r.tp)]
    for name in r.layer.split("/"):
        parts += ["--layer", name]
    parts += ["--num-tokens", str(r.m), "--out-dtype", r.out_dtype, "--seed", str(metadata.get("seed", 0))]
    if r.format == "block_fp8":  # explicit: the default follows HL_DISPATCH_AT
        parts += ["--block-scale-a", metadata.get("block_scale_a", "row")]
    return shlex.join(parts)


# --------------------------------------------------------------------------------------------
# Speedups
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Speedup:
    """Helion vs a baseline at one (model, format, layer, M): ``value`` = baseline µs / Helion µs."""

    model: str
    format: str
    layer: str
    m: int
    n: int
    k: int
    baseline: str  # the baseline's kernel
    value: float


def speedups(results: Iterable[BenchResult], baseline: str = "vllm") -> list[Speedup]:
    """Helion's speedup over ``baseline`` (a provider) at every point where both were timed."""
    results = list(results)
    base = {point(r): r for r in results if r.provider == baseline and r.median_us}
    out = []
    for r in results:
        b = base.get(point(r))
        if r.provider == "helion" and r.median_us and b is not None:
            out.append(
                Speedup(r.model, r.format, r.layer, r.m, r.n, r.k, b.kernel, b.median_us / r.median_us)
            )
    return out


def geomean_by_format(results: Iterable[BenchResult], baseline: str = "vllm") -> dict[str, float]:
    """Format -> geomean of Helion's speedups over ``baseline`` (formats without any left out)."""
    groups: dict[str, list[float]] = {}
    for s in speedups(results, baseline):
        groups.setdefault(s.format, []).append(s.value)
    return {f: g for f, vals in groups.items() if (g := geomean(vals)) is not None}


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def write_results(
    output: Path, results: Sequence[BenchResult], metadata: Mapping[str, Any]
) -> dict[str, Path]:
    """``output/kernels.json`` (``{"metadata", "geomean_speedup", "results"}``), ``kernels.csv`` (one
    row per result, :class:`BenchResult` field order) and ``kernels.md`` (summary tables)."""
    output = Path(output)
    payload = {
        "metadata": dict(metadata),
        "geomean_speedup": {
            b: geomean_by_format(results, b) for b in BASELINES if any(r.provider == b for r in results)
        },
        "results": [r.to_dict() for r in results],
    }
    paths = {"json": output / RESULTS_JSON, "csv": output / RESULTS_CSV, "md": output / SUMMARY_MD}
    write_json(paths["json"], payload)
    write_csv(paths["csv"], [r.to_dict() for r in results], FIELDS)
    write_text(paths["md"], summary_markdown(results, metadata))
    return paths


def results_path(path: Path) -> Path:
    """The result file that ``path`` names: itself, its ``kernels.json`` when a directory, or the
    ``.gz`` beside a missing file."""
    return find_result(path, RESULTS_JSON)


def read_results(path: Path) -> tuple[dict[str, Any], list[BenchResult]]:
    """``(metadata, results)`` of a ``kernels.json``, ``kernels.json.gz``, ``kernels.csv`` (metadata
    empty) or a directory holding one (:func:`results_path`). Raises ``FileNotFoundError`` or
    ``ValueError`` for a missing or malformed file."""
    return read_rows(results_path(path), BenchResult, rows_key="results", what="kernel benchmark result file")


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------
def table_rows(results: Sequence[BenchResult]) -> list[dict[str, str]]:
    """One row per (model, format, layer, M): the providers' medians side by side, Helion's speedups
    and share of the copy bandwidth (strings, for the printed and the markdown tables)."""
    points: dict[tuple, dict[str, BenchResult]] = {}
    for r in results:
        points.setdefault(point(r), {})[r.provider] = r
    out = []
    for (model, format_, layer, n, k, m, _tp, _dt), by in points.items():
        h, v, t = by.get("helion"), by.get("vllm"), by.get("torch")
        out.append(
            {
                "model": model_label(model),
                "format": format_,
                "layer": layer,
                "N": str(n),
                "K": str(k),
                "M": str(m),
                "Helion µs": cell(h.median_us if h else None, ".1f"),
                "vLLM µs": cell(v.median_us if v else None, ".1f"),
                "vLLM kernel": _short_kernel(v.kernel) if v else "-",
                "torch µs": cell(t.median_us if t else None, ".1f"),
                "vs vLLM": cell(h.speedup_vs_vllm if h else None, ".2f"),
                "vs torch": cell(_ratio(t, h), ".2f"),
                "Helion % HBM": cell(h.roofline_pct if h else None, ".0f"),
            }
        )
    return out


def kernel_tables(
    results: Sequence[BenchResult], title: str = "{format}: per-call µs (median)"
) -> list[ResultTable]:
    """One table of :func:`table_rows` per format (``title`` formatted with the format)."""
    rows = table_rows(results)
    return [
        ResultTable.of_dicts(
            title.format(format=f),
            [r for r in rows if r["format"] == f],
            drop=("format",),
            left=("model", "layer", "vLLM kernel"),
        )
        for f in dict.fromkeys(r["format"] for r in rows)
    ]


def geomean_lines(results: Sequence[BenchResult]) -> list[str]:
    """``geomean speedup of Helion vs <baseline>: <format> <x>x, ...`` per baseline with speedups."""
    lines = []
    for baseline, label in (("vllm", "vLLM's default kernel"), ("torch", "torch._scaled_mm")):
        g = geomean_by_format(results, baseline)
        if g:
            lines.append(
                f"geomean speedup of Helion vs {label}: " + ", ".join(f"{f} {v:.3f}x" for f, v in g.items())
            )
    return lines


def _ratio(base: BenchResult | None, r: BenchResult | None) -> float | None:
    return base.median_us / r.median_us if base and r and base.median_us and r.median_us else None


def _short_kernel(kernel: str) -> str:
    return kernel.removeprefix("vllm ").replace("block ", "").replace("deep_gemm fp8_gemm_nt", "deep_gemm")


def summary_markdown(results: Sequence[BenchResult], metadata: Mapping[str, Any]) -> str:
    """Markdown: provenance line, geomean speedup per format, one table per format, the notes."""
    results = list(results)
    lines = ["# Kernel benchmark", "", provenance_text({k: metadata.get(k) for k in PROVENANCE_FIELDS})]
    if metadata.get("copy_bandwidth_gbs"):
        lines.append(f"\nMeasured copy bandwidth: {metadata['copy_bandwidth_gbs']:.0f} GB/s.")
    if metadata.get("command"):
        lines.append(f"\nCommand: `{metadata['command']}`")
    gv, gt = geomean_by_format(results, "vllm"), geomean_by_format(results, "torch")
    by_vllm = speedups(results, "vllm")
    geomeans = ResultTable(
        "",
        ["format", "geomean vs vLLM", "geomean vs torch._scaled_mm", "points"],
        [
            [
                f,
                cell(gv.get(f), ".3f", "×"),
                cell(gt.get(f), ".3f", "×"),
                str(sum(s.format == f for s in by_vllm)),
            ]
            for f in dict.fromkeys(r.format for r in results)
        ],
    )
    lines += ["", *geomeans.markdown()]
    for table in kernel_tables(results, "{format}"):
        lines += ["", f"## {table.title}", "", *table.markdown()]
    notes: dict[tuple[str, str, str], list[str]] = {}  # (format, provider, note) -> points
    for r in results:
        if r.note:
            notes.setdefault((r.format, r.provider, r.note), []).append(
                f"{model_label(r.model)} {r.layer} M={r.m}"
            )
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {f} {prov} ({', '.join(pts)}): {note}" for (f, prov, note), pts in notes.items()]
    return "\n".join(lines) + "\n"
