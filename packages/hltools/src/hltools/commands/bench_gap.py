"""``hltools bench gap``: where Helion misses a target speedup in ``bench kernels`` results, and what
it would need (:mod:`hltools.bench_gap`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hltools import options as opt

Files = Annotated[
    list[Path],
    typer.Argument(
        metavar="FILES",
        help="`kernels.json` files of `bench kernels` (or their directories; a missing `kernels.json` "
        "is read from `kernels.json.gz` next to it).",
    ),
]
Target = Annotated[float, typer.Option(min=1.0, help="Speedup over vLLM's default kernel to reach.")]
Markdown = Annotated[
    Path | None, typer.Option(help="Also write the report (with the per-point tables) as markdown here.")
]
Points = Annotated[bool, typer.Option(help="Print the per-point tables too.")]
ReadFloor = Annotated[
    Path | None,
    typer.Option(
        help="`stream_floor.json` of `lab/scripts/stream_floor.py`: per (N, K), the best measured time of its "
        "Triton kernels that only read the weight (a measured floor, not a hardware bound; measure it on "
        "the same GPU model). Adds a table per format: points where vLLM µs / target < read µs, the "
        "geomean vLLM / read and Helion / read, and the Helion / read the target needs. Shapes not in the "
        "file count as 'no floor' and are left out."
    ),
]


def gap(
    files: Files,
    target: Target = 1.25,
    markdown: Markdown = None,
    points: Points = False,
    read_floor: ReadFloor = None,
) -> None:
    """Where Helion misses the --target speedup over vLLM's default kernel, and what it would need
    (`hltools.bench_gap`). Per point timed for both: bytes moved (`bench.gemm_bytes`), the copy-bandwidth
    floor bytes / copy BW, the time needed vLLM / target, and the verdict: met, needs X µs less fixed
    cost, or beyond copy bandwidth (no kernel reaches the target). Per file and format: geomean, as
    dispatched (slower keys 1.0), the floor-limited best geomean, median % of copy bandwidth for weights
    of at least 16 MiB, verdict counts; per format a fit t = bytes / BW_eff + c for Helion and vLLM. With
    --read-floor, per format: points beyond a weight read (a GEMM that streams its weight no faster than
    that read kernel cannot meet the target), the best geomean at the read's speed (vLLM / read) and
    Helion's time over the read's. Needs no GPU. Exits 1 when a file cannot be read or holds no Helion/vLLM pair."""
    from hltools import bench_gap as g

    out = opt.console()
    rows, sources = _gap_rows(out, files, target)
    summaries, fits = g.summarize(rows), g.fit_by_format(rows)
    floor_summaries, floor_source = None, ""
    if read_floor is not None:
        try:
            floor_meta, floor = g.load_read_floor(read_floor)
        except (OSError, ValueError) as exc:
            opt.fail(str(exc))
        floor_summaries = g.read_floor_summary(rows, floor, target)
        floor_source = f"`{read_floor.name}` ({floor_meta.get('gpu', '?')}, {len(floor)} shapes)"
    if points:
        for s in summaries:
            sub = [r for r in rows if (r.file, r.format) == (s.file, s.format)]
            out.print(g.table(g.point_table(sub), f"{s.file}: {s.format}").rich())
    out.print(
        g.table(g.summary_table(summaries), f"Helion vs vLLM's default kernel, target {target:g}x").rich()
    )
    out.print(g.table(g.fit_table(fits), "t = bytes / BW_eff + c (least squares, per format)").rich())
    if floor_summaries:
        out.print(
            g.table(g.read_floor_table(floor_summaries), f"Against a weight read: {floor_source}").rich()
        )
    if markdown is not None:
        from hltools.results import write_text

        write_text(
            markdown,
            g.markdown(
                rows, summaries, fits, target, opt.command_line(), sources, floor_summaries, floor_source
            ),
        )
        out.print(f"wrote {markdown}")


def _gap_rows(out: Console, files: list[Path], target: float) -> tuple[list, dict]:
    """The gap rows of every file and each file's metadata by label; exit 1 on a file that cannot be
    read, has no copy bandwidth or no point timed for both Helion and vLLM."""
    from hltools import bench_gap as g
    from hltools.kernel_results import read_results

    rows, sources = [], {}
    for path in files:
        try:
            metadata, results = read_results(path)
        except (FileNotFoundError, ValueError) as exc:
            opt.fail(str(exc))
        label = g.file_label(path)
        bw = g.copy_bandwidth_gbs(metadata, results)
        if not bw:
            opt.fail(f"{path}: no copy bandwidth in its metadata or rows", 1)
        got, skipped = g.gap_rows(results, bw, target, label)
        if not got:
            opt.fail(f"{path}: no point timed for both Helion and vLLM", 1)
        if skipped:
            out.print(f"[yellow]{label}: {skipped} Helion/vLLM rows without a timed partner left out")
        rows += got
        sources[label] = metadata
    return rows, sources
