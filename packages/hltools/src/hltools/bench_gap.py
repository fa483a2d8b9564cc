"""``hltools bench gap``: where Helion misses a speedup target over vLLM's default kernel, and why.

For every point that a ``kernels.json`` (``hltools bench kernels``) holds for both Helion and vLLM's
default kernel (same model, format, layer, N, K, M, TP and output dtype; the ``torch`` rows are not
used):

* ``bytes``: the fewest bytes a call moves, :func:`hltools.bench.gemm_bytes` (the formula behind the
  rows' GB/s and % of copy bandwidth);
* ``t_vllm``, ``t_helion``: the medians (µs per call; Helion with the config the row recorded);
* ``t_floor = bytes / copy bandwidth``: a kernel that streams its bytes at the copy bandwidth measured
  in the same run and has no fixed cost;
* ``t_need = t_vllm / target``: the time Helion needs for the target;
* verdict: ``met`` (``t_helion <= t_need``), ``needs`` (``t_floor <= t_need < t_helion``: Helion must
  lose ``t_helion - t_need`` µs; ``t_need - t_floor`` µs are left above the floor for fixed cost and
  below-copy-bandwidth streaming) or ``beyond`` (``t_need < t_floor``: even a kernel at 100 % of copy
  bandwidth with zero fixed cost misses; the best speedup possible there is ``t_vllm / t_floor``).

Per (file, format) :func:`summarize` gives the geomean speedup, the geomean as dispatched (a key where
Helion is slower runs vLLM's kernel: 1.0, as the shipped config file marks each measured key by its
own row), the best geomean the copy bandwidth allows (``t_vllm / t_floor`` per key), the median % of
copy bandwidth of Helion and vLLM for weights of at least :data:`BIG_WEIGHT_BYTES` and the verdict
counts. :func:`fit_linear` fits ``t = bytes / BW_eff + c`` by least squares.

With a weight-read floor (``lab/scripts/stream_floor.py``'s ``stream_floor.json``: per (N, K) the time of
the fastest of its kernels that only read the [N, K] weight once, timed like the benchmarks),
:func:`read_floor_summary` tells per format how many points miss the target even at that time
(``t_need < t_read``: a GEMM that streams its weight no faster than these read kernels cannot meet
it; a better-streaming read kernel would lower the floor), the best geomean a kernel as fast
as that read would give, and how close to the read Helion is and would have to be.

Pure functions on :class:`hltools.kernel_results.BenchResult` rows, read with
:func:`hltools.kernel_results.read_results` (``kernels.json.gz`` too: the night runs are committed
compressed); the tables are :class:`hltools.results.ResultTable` (printed and written the same).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hltools.bench import gemm_bytes
from hltools.kernel_results import BenchResult, point, results_path
from hltools.results import ResultTable, cell, geomean, read_json

DEFAULT_TARGET = 1.25
BIG_WEIGHT_BYTES = 16 * 2**20  # issue 4: "weights >= 16 MB" (Qwen3-8B's o, 4096 x 4096 fp8, is exactly this)
OUT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
VERDICTS = ("met", "needs", "beyond")


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
def copy_bandwidth_gbs(metadata: Mapping[str, Any], results: Iterable[BenchResult]) -> float | None:
    """The copy bandwidth the run measured: ``metadata["copy_bandwidth_gbs"]``, else recovered from the
    rows (``gbps / roofline_pct * 100``, median), else None."""
    bw = metadata.get("copy_bandwidth_gbs")
    if bw:
        return float(bw)
    vals = [100.0 * r.gbps / r.roofline_pct for r in results if r.gbps and r.roofline_pct]
    return statistics.median(vals) if vals else None


def file_label(path: Path) -> str:
    """``<date dir>/<run dir>`` of a result file, e.g. ``2026-11-30-night/kernels-tp2``."""
    parent = results_path(path).parent
    return f"{parent.parent.name}/{parent.name}" if parent.parent.name else parent.name


# --------------------------------------------------------------------------------------------
# Per point
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GapRow:
    """One (format, model, layer, N, K, M) timed for both Helion and vLLM's default kernel; times in µs."""

    file: str
    model: str
    format: str
    layer: str
    n: int
    k: int
    m: int
    tp: int
    bytes: int
    t_vllm: float
    t_helion: float
    t_floor: float
    t_need: float
    vllm_kernel: str
    config: str
    copy_bw_gbs: float

    @property
    def weight_bytes(self) -> int:
        return self.n * self.k  # one byte per element in every format

    @property
    def speedup(self) -> float:
        return self.t_vllm / self.t_helion

    @property
    def dispatched(self) -> float:
        """Speedup as dispatched: a key where Helion is slower runs vLLM's kernel (1.0)."""
        return max(self.speedup, 1.0)

    @property
    def floor_speedup(self) -> float:
        """The best speedup the copy bandwidth allows: ``t_vllm / t_floor``."""
        return self.t_vllm / self.t_floor

    @property
    def verdict(self) -> str:
        if self.t_helion <= self.t_need:
            return "met"
        return "needs" if self.t_need >= self.t_floor else "beyond"

    @property
    def gap_us(self) -> float:
        """How much faster Helion must get for the target (0 when met)."""
        return max(self.t_helion - self.t_need, 0.0)

    @property
    def budget_us(self) -> float:
        """``t_need - t_floor``: time left above the copy-bandwidth floor (negative: beyond)."""
        return self.t_need - self.t_floor

    def pct_copy_bw(self, t_us: float) -> float:
        return 100.0 * self.t_floor / t_us

    @property
    def verdict_text(self) -> str:
        v = self.verdict
        if v == "met":
            return "met"
        if v == "needs":
            return f"needs {self.gap_us:.2f} µs less fixed cost ({self.budget_us:.2f} µs above the floor)"
        return f"beyond copy bandwidth (floor allows {self.floor_speedup:.3f}×)"


def gap_rows(
    results: Iterable[BenchResult], copy_bw_gbs: float, target: float = DEFAULT_TARGET, file: str = ""
) -> tuple[list[GapRow], int]:
    """The :class:`GapRow` of every point with a timed Helion and a timed vLLM row, in file order,
    and the number of Helion or vLLM rows left out (not timed, or without a partner)."""
    if not copy_bw_gbs or copy_bw_gbs <= 0:
        raise ValueError("a positive copy bandwidth is needed")
    if not target > 0:
        raise ValueError(f"target must be positive, got {target}")
    by: dict[tuple, dict[str, BenchResult]] = {}
    skipped = 0
    for r in results:
        if r.provider not in ("helion", "vllm"):
            continue
        if not r.median_us or r.median_us <= 0:
            skipped += 1
            continue
        by.setdefault(point(r), {})[r.provider] = r
    out = []
    for (model, fmt, layer, n, k, m, tp, out_dtype), pair in by.items():
        h, v = pair.get("helion"), pair.get("vllm")
        if h is None or v is None:
            skipped += 1
            continue
        nbytes = gemm_bytes(fmt, m, n, k, OUT_BYTES.get(out_dtype, 2))
        out.append(
            GapRow(
                file, model, fmt, layer, n, k, m, tp, nbytes, v.median_us, h.median_us,
                nbytes / (copy_bw_gbs * 1e3), v.median_us / target, v.kernel, h.config, copy_bw_gbs,
            )
        )  # fmt: skip
    return out, skipped


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    """``t = bytes / bw_gbs + c_us`` by least squares over ``n`` points; residuals in µs."""

    n: int
    bw_gbs: float
    c_us: float
    rms_us: float
    min_resid_us: float
    max_resid_us: float

    def predict(self, nbytes: float) -> float:
        return nbytes / (self.bw_gbs * 1e3) + self.c_us


def fit_linear(points: Sequence[tuple[float, float]]) -> Fit | None:
    """Least-squares ``t_us = bytes / BW + c`` over ``(bytes, t_us)`` points (None with fewer than two
    distinct byte counts, or a slope that is not positive)."""
    pts = [(float(b), float(t)) for b, t in points]
    if len({b for b, _ in pts}) < 2:
        return None
    n = len(pts)
    mb = sum(b for b, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    sxx = sum((b - mb) ** 2 for b, _ in pts)
    slope = sum((b - mb) * (t - mt) for b, t in pts) / sxx  # µs per byte
    if slope <= 0:
        return None
    c = mt - slope * mb
    resid = [t - (slope * b + c) for b, t in pts]
    return Fit(n, 1e-3 / slope, c, math.sqrt(sum(r * r for r in resid) / n), min(resid), max(resid))


@dataclass
class Summary:
    """One (file, format): see :func:`summarize`."""

    file: str
    format: str
    vllm_kernel: str
    copy_bw_gbs: float
    points: int
    geomean: float | None
    dispatched: float | None
    floor_best: float | None
    slower: int
    big_points: int
    helion_big_pct: float | None
    vllm_big_pct: float | None
    counts: dict[str, int] = field(default_factory=dict)
    median_gap_us: float | None = None
    max_gap_us: float | None = None
    min_budget_us: float | None = None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rows: Sequence[GapRow]) -> list[Summary]:
    """One :class:`Summary` per (file, format), in order of appearance: geomean speedup, geomean as
    dispatched (slower keys 1.0), floor-limited best geomean (``t_vllm / t_floor``), keys slower, the
    median % of copy bandwidth of Helion and vLLM on weights >= :data:`BIG_WEIGHT_BYTES`, verdict
    counts, and over the ``needs`` keys the median and largest gap and the smallest budget. With rows
    of more than one file, one more per format over all of them (file ``all``; copy GB/s: the median)."""
    groups: dict[tuple[str, str], list[GapRow]] = {}
    for r in rows:
        groups.setdefault((r.file, r.format), []).append(r)
    if len({r.file for r in rows}) > 1:
        for r in rows:
            groups.setdefault(("all", r.format), []).append(r)
    out = []
    for (file, fmt), rs in groups.items():
        big = [r for r in rs if r.weight_bytes >= BIG_WEIGHT_BYTES]
        needs = [r for r in rs if r.verdict == "needs"]
        kernels = dict.fromkeys(r.vllm_kernel for r in rs)
        out.append(
            Summary(
                file=file,
                format=fmt,
                vllm_kernel=", ".join(kernels),
                copy_bw_gbs=statistics.median(r.copy_bw_gbs for r in rs),
                points=len(rs),
                geomean=geomean(r.speedup for r in rs),
                dispatched=geomean(r.dispatched for r in rs),
                floor_best=geomean(r.floor_speedup for r in rs),
                slower=sum(r.speedup < 1.0 for r in rs),
                big_points=len(big),
                helion_big_pct=_median([r.pct_copy_bw(r.t_helion) for r in big]),
                vllm_big_pct=_median([r.pct_copy_bw(r.t_vllm) for r in big]),
                counts={v: sum(r.verdict == v for r in rs) for v in VERDICTS},
                median_gap_us=_median([r.gap_us for r in needs]),
                max_gap_us=max((r.gap_us for r in needs), default=None),
                min_budget_us=min((r.budget_us for r in needs), default=None),
            )
        )
    return out


@dataclass(frozen=True)
class FormatFit:
    """Per format, over every file's rows: the fits of Helion's and vLLM's times, and the fixed cost
    Helion could afford at its fitted bandwidth on the keys the copy bandwidth does not rule out
    (``c_need_median``: half of them met, ``c_need_all``: all of them), and the same at the copy
    bandwidth (``c_floor_*``: ``t_need - t_floor``)."""

    format: str
    helion: Fit | None
    vllm: Fit | None
    reachable: int
    c_need_median_us: float | None
    c_need_all_us: float | None
    c_floor_median_us: float | None = None
    c_floor_all_us: float | None = None


def _format_groups(rows: Sequence[GapRow]) -> list[tuple[str, list[GapRow]]]:
    """``(format, rows)`` per format in order of appearance, then ``("all", rows)`` with more than one."""
    formats = list(dict.fromkeys(r.format for r in rows))
    groups = [(fmt, [r for r in rows if r.format == fmt]) for fmt in formats]
    if len(formats) > 1:
        groups.append(("all", list(rows)))
    return groups


def fit_by_format(rows: Sequence[GapRow]) -> list[FormatFit]:
    """:class:`FormatFit` per format (in order of appearance), then one for all formats (``all``)."""
    out = []
    for fmt, rs in _format_groups(rows):
        h = fit_linear([(r.bytes, r.t_helion) for r in rs])
        v = fit_linear([(r.bytes, r.t_vllm) for r in rs])
        reach = [r for r in rs if r.verdict != "beyond"]
        c_need = [r.t_need - r.bytes / (h.bw_gbs * 1e3) for r in reach] if h else []
        c_floor = [r.budget_us for r in reach]
        out.append(
            FormatFit(
                fmt, h, v, len(reach), _median(c_need), min(c_need) if c_need else None,
                _median(c_floor), min(c_floor) if c_floor else None,
            )
        )  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------
# Tables (strings, shared by the printed and the markdown output)
# --------------------------------------------------------------------------------------------
def point_table(rows: Sequence[GapRow]) -> list[dict[str, str]]:
    return [
        {
            "model": r.model,
            "layer": r.layer,
            "N": str(r.n),
            "K": str(r.k),
            "M": str(r.m),
            "MB": f"{r.bytes / 1e6:.2f}",
            "vLLM µs": f"{r.t_vllm:.2f}",
            "Helion µs": f"{r.t_helion:.2f}",
            "speedup": f"{r.speedup:.3f}",
            "floor µs": f"{r.t_floor:.2f}",
            "need µs": f"{r.t_need:.2f}",
            "verdict": r.verdict_text,
        }
        for r in rows
    ]


def summary_table(summaries: Sequence[Summary]) -> list[dict[str, str]]:
    return [
        {
            "file": s.file,
            "format": s.format,
            "vLLM kernel": s.vllm_kernel.removeprefix("vllm ").replace("block ", ""),
            "copy GB/s": f"{s.copy_bw_gbs:.0f}",
            "points": str(s.points),
            "geomean": cell(s.geomean, ".3f", "×"),
            "as dispatched": cell(s.dispatched, ".3f", "×"),
            "floor-limited best": cell(s.floor_best, ".3f", "×"),
            "slower": str(s.slower),
            "% copy BW ≥16 MiB Helion / vLLM (points)": (
                f"{cell(s.helion_big_pct, '.0f')} / {cell(s.vllm_big_pct, '.0f')} % ({s.big_points})"
            ),
            "met / needs / beyond": " / ".join(str(s.counts.get(v, 0)) for v in VERDICTS),
            "needs: gap µs median / max": f"{cell(s.median_gap_us, '.2f')} / {cell(s.max_gap_us, '.2f')}",
            "needs: min budget µs": cell(s.min_budget_us, ".2f"),
        }
        for s in summaries
    ]


def fit_table(fits: Sequence[FormatFit]) -> list[dict[str, str]]:
    out = []
    for f in fits:
        row = {"format": f.format, "points": str((f.helion or f.vllm).n if (f.helion or f.vllm) else 0)}
        for name, fit in (("Helion", f.helion), ("vLLM", f.vllm)):
            row[f"{name} BW_eff TB/s"] = cell(fit.bw_gbs / 1e3 if fit else None, ".2f")
            row[f"{name} c µs"] = cell(fit.c_us if fit else None, ".2f")
            row[f"{name} resid rms (min / max) µs"] = (
                f"{fit.rms_us:.2f} ({fit.min_resid_us:+.2f} / {fit.max_resid_us:+.2f})" if fit else "-"
            )
        row["not beyond"] = str(f.reachable)
        row["c needed at Helion BW: median / all keys µs"] = (
            f"{cell(f.c_need_median_us, '.2f')} / {cell(f.c_need_all_us, '.2f')}"
        )
        row["c needed at copy BW: median / all keys µs"] = (
            f"{cell(f.c_floor_median_us, '.2f')} / {cell(f.c_floor_all_us, '.2f')}"
        )
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# Weight-read floor (lab/scripts/stream_floor.py)
# --------------------------------------------------------------------------------------------
def load_read_floor(path: Path) -> tuple[dict[str, Any], dict[tuple[int, int], float]]:
    """``(metadata, {(N, K): µs})`` of a ``stream_floor.json``: ``read`` rows with ``n``, ``k`` and
    ``best_us`` (the fastest weight-read kernel per shape). Raises ``FileNotFoundError`` or
    ``ValueError`` (naming the file) when it cannot be read or has no such rows."""
    what = "stream_floor.json with read rows of n, k, best_us"
    payload = read_json(path, what)
    try:
        floor = {(int(r["n"]), int(r["k"])): float(r["best_us"]) for r in payload["read"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a {what} ({type(exc).__name__}: {exc})") from None
    if not floor or not all(t > 0 for t in floor.values()):
        raise ValueError(f"{path}: no positive read times in its 'read' rows")
    return {k: v for k, v in payload.items() if k != "read"}, floor


@dataclass(frozen=True)
class ReadFloorSummary:
    """One format against the weight-read floor ``t_read`` (µs per (N, K)), over the points whose
    shape the floor file has (``missing``: the others). ``beyond_read``: points with ``t_need <
    t_read``; ``read_best``: geomean ``t_vllm / t_read`` (the speedup of a GEMM as fast as the read,
    i.e. vLLM's time over the read's); ``helion_ratio``: geomean ``t_helion / t_read``;
    ``helion_ratio_needed``: the geomean ``t_helion / t_read`` that meets the target on the geomean
    (``read_best / target``)."""

    format: str
    points: int
    missing: int
    beyond_read: int
    read_best: float | None
    helion_ratio: float | None
    helion_ratio_needed: float | None
    median_helion_over_read_us: float | None


def read_floor_summary(
    rows: Sequence[GapRow], floor: Mapping[tuple[int, int], float], target: float = DEFAULT_TARGET
) -> list[ReadFloorSummary]:
    """:class:`ReadFloorSummary` per format (in order of appearance), then ``all`` with more than one."""
    out = []
    for fmt, rs in _format_groups(rows):
        have = [(r, floor[(r.n, r.k)]) for r in rs if (r.n, r.k) in floor]
        best = geomean(r.t_vllm / t for r, t in have)
        out.append(
            ReadFloorSummary(
                format=fmt,
                points=len(have),
                missing=len(rs) - len(have),
                beyond_read=sum(r.t_need < t for r, t in have),
                read_best=best,
                helion_ratio=geomean(r.t_helion / t for r, t in have),
                helion_ratio_needed=best / target if best else None,
                median_helion_over_read_us=_median([r.t_helion - t for r, t in have]),
            )
        )
    return out


def read_floor_table(summaries: Sequence[ReadFloorSummary]) -> list[dict[str, str]]:
    return [
        {
            "format": s.format,
            "points (no floor)": f"{s.points} ({s.missing})",
            "beyond a weight read": str(s.beyond_read),
            "read-limited best (= vLLM / read)": cell(s.read_best, ".3f", "×"),
            "Helion / read": cell(s.helion_ratio, ".3f", "×"),
            "Helion / read needed": cell(s.helion_ratio_needed, ".3f", "×"),
            "Helion − read median µs": cell(s.median_helion_over_read_us, ".2f"),
        }
        for s in summaries
    ]


#: The columns of the gap tables justified left (the others hold numbers).
LEFT = ("file", "format", "model", "layer", "vLLM kernel", "verdict")


def table(rows: Sequence[Mapping[str, str]], title: str = "") -> ResultTable:
    """A gap table (:func:`point_table`, :func:`summary_table`...) to print or write."""
    return ResultTable.of_dicts(title, rows, left=LEFT, fold=True)


def markdown(
    rows: Sequence[GapRow],
    summaries: Sequence[Summary],
    fits: Sequence[FormatFit],
    target: float,
    command: str = "",
    sources: Mapping[str, Mapping[str, Any]] | None = None,
    read_floor: Sequence[ReadFloorSummary] | None = None,
    read_floor_source: str = "",
) -> str:
    """The whole report: command, legend, summary per (file, format), fits per format, the
    weight-read floor table (when given), then one point table per (file, format)."""
    lines = [f"# Where Helion misses {target:g}× over vLLM's default kernel", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    for label, meta in (sources or {}).items():
        info = " · ".join(str(meta[k]) for k in ("gpu", "date", "helion", "vllm") if meta.get(k))
        lines.append(f"- `{label}`: {info} · `{meta.get('command', '')}`")
    if sources:
        lines.append("")
    lines += [
        "Per point: bytes = `hltools.bench.gemm_bytes` (A, B, fp32 scales, bf16 output); floor = bytes /"
        f" the run's copy bandwidth; need = vLLM µs / {target:g}. Verdict: met (Helion ≤ need); needs X µs"
        " (floor ≤ need < Helion; the second number is need − floor); beyond copy bandwidth (need <"
        " floor: even 100 % of copy bandwidth with no fixed cost misses; vLLM µs / floor is the best"
        " speedup possible). As dispatched: keys where Helion is slower run vLLM's kernel (1.0×)."
        " Floor-limited best: geomean of vLLM µs / floor. % copy BW: floor / time, median over weights"
        " N·K ≥ 16 MiB.",
        "",
        "## Summary per file and format",
        "",
        *table(summary_table(summaries)).markdown(),
        "",
        "## Fit t = bytes / BW_eff + c (least squares, per format over all files)",
        "",
        "c needed: the fixed cost Helion could afford on the keys that are not beyond copy bandwidth, so"
        " that half of them (median) or all of them meet the target, streaming at its fitted BW_eff or at"
        " the run's copy bandwidth (need − floor). Negative: not reachable at that bandwidth even with no"
        " fixed cost.",
        "",
        *table(fit_table(fits)).markdown(),
    ]
    if read_floor:
        lines += [
            "",
            "## Against a kernel that only reads the weight",
            "",
            f"Read floor: {read_floor_source}. Per (N, K), the fastest of its kernels that read the [N, K]"
            " weight once and do nothing else (no A, no MMA, no scales, no output tile), timed the same way;"
            " a GEMM must read its weight too, so one that streams no faster than these kernels cannot beat it"
            " (a faster read kernel would lower this floor: it is measured, not a hardware bound). Beyond a"
            " weight read: need < read time. The floor was measured in its own run on the same GPU model;"
            " shapes it does not have count as 'no floor' and are left out."
            " Read-limited best: geomean vLLM µs / read µs (the speedup of a GEMM as fast as the read). Helion / read"
            f" needed: the geomean Helion µs / read µs that gives {target:g}× on the geomean.",
            "",
            *table(read_floor_table(read_floor)).markdown(),
        ]
    groups: dict[tuple[str, str], list[GapRow]] = {}
    for r in rows:
        groups.setdefault((r.file, r.format), []).append(r)
    for (file, fmt), rs in groups.items():
        lines += ["", f"## {file}: {fmt}", "", *table(point_table(rs)).markdown()]
    return "\n".join(lines) + "\n"
