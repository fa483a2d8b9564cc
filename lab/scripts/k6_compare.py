"""Phase K6 of lab/runs/2026-12-31.sh read back: does the grid with the full search's knobs
(lab/scripts/grid_lfbo_knobs.py) beat the grid as shipped, run beside it as a control?

Two readings, both from the logs the GPU runs wrote (lab/results/2026-12-06-d):

* ``k6 DIR``: each K6 phase folder's ``grid-<model>.log`` (knobs) and ``ctl-<model>.log`` (control).
  Each log's decode-step table times its run's file against the heuristic default and against the
  file in effect (the packaged H100 file, "untuned") in that run's process; the two runs are
  separate processes. Prints, per model and format, the mean over M of both ratios for the two runs.
* ``kb DIR``: ``kb-<grid|ctl>-<run>.log``, one ``hltools bench kernels`` process each with
  ``HL_CONFIG_DIR`` on the knobs' or the control's file, alternated. Prints each process's sum of
  Helion's medians over every (layer, M) row (a decode step at each M, all M added) and vLLM's in
  the same process, then the median and range of each side over its processes.

    python3 lab/scripts/k6_compare.py k6 lab/results/2026-12-06-d/raw/K6-fp8_dynamic-qwen3-4b_qwen3-8b
    python3 lab/scripts/k6_compare.py kb lab/results/2026-12-06-d/raw/KB-qwen3-4b-fp8_dynamic
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

from tabulate import tabulate


def table_rows(text: str, first: str) -> list[list[str]]:
    """The cells of a rich table's body rows in ``text`` whose first cell is ``first``."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0] == first:
            rows.append(cells)
    return rows


def step_ratios(log: str, fmt: str) -> dict[int, tuple[float, float]]:
    """M -> (tuned vs heuristic, tuned vs untuned) of the decode-step table in an autotune log."""
    text = log[log.index("decode step") :]
    return {int(c[2]): (float(c[6]), float(c[7])) for c in table_rows(text, fmt)}


def bench_sums(log: str, model: str) -> tuple[float, float, int]:
    """(Helion µs, vLLM µs, rows) added over every row of a ``bench kernels`` log's table."""
    rows = table_rows(log, model)
    return sum(float(c[5]) for c in rows), sum(float(c[6]) for c in rows), len(rows)


def k6(folder: Path) -> str:
    fmt = re.match(r"K6-(\w+?)-", folder.name).group(1)
    out = []
    for knobs in sorted(folder.glob("grid-*.log")):
        model = knobs.stem.removeprefix("grid-")
        runs = {
            name: step_ratios((folder / f"{name}-{model}.log").read_text(), fmt) for name in ("grid", "ctl")
        }
        assert runs["grid"].keys() == runs["ctl"].keys(), f"{model}: the two runs have other M"
        line = [model, fmt, len(runs["grid"])]
        for column in (0, 1):
            line += [statistics.mean(r[column] for r in runs[name].values()) for name in ("grid", "ctl")]
        out.append(line)
    head = [
        "model",
        "format",
        "M",
        "knobs vs heuristic",
        "control vs heuristic",
        "knobs vs H100 file",
        "control vs H100 file",
    ]
    return tabulate(out, head, floatfmt=".4f")


def kb(folder: Path, model: str = "qwen3-4b") -> str:
    per = {}
    for log in sorted(folder.glob("kb-*-*.log")):
        _, side, run = log.stem.split("-")
        per[(side, run)] = bench_sums(log.read_text(), model)
    rows = [[side, run, h, v, v / h, n] for (side, run), (h, v, n) in sorted(per.items())]
    text = tabulate(
        rows, ["file", "process", "Helion µs", "vLLM µs", "vLLM / Helion", "rows"], floatfmt=".4f"
    )
    for side in sorted({s for s, _ in per}):
        sums = [h for (s, _), (h, _, _) in per.items() if s == side]
        ratios = [v / h for (s, _), (h, v, _) in per.items() if s == side]
        text += (
            f"\n{side}: Helion {statistics.median(sums):.1f} µs ({min(sums):.1f}-{max(sums):.1f}), "
            f"vLLM / Helion {statistics.median(ratios):.4f} ({min(ratios):.4f}-{max(ratios):.4f})"
        )
    return text


def main(argv: list[str]) -> None:
    what, folder = argv
    print({"k6": k6, "kb": kb}[what](Path(folder)))


if __name__ == "__main__":
    main(sys.argv[1:])
