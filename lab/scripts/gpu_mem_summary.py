"""Summarise a GPU memory log written by lab/runs/2026-12-29.sh's sampler.

Each line of the log: ``<unix time>, <pid>, <used MiB>`` (nvidia-smi --query-compute-apps, one
sample of every compute process on the GPU about every 0.3 s). Prints the processes seen, the
largest process (the timing process of a grid or bench run: it holds the rotating weights), each
other process's peak (the compile workers) and the largest sum at one sample.

Usage: python3 lab/scripts/gpu_mem_summary.py LOG [LOG...]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path


def summary(path: str) -> str:
    peak: dict[int, float] = defaultdict(float)
    at: dict[str, float] = defaultdict(float)
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[2].replace(".", "").isdigit():
            continue
        t, pid, mib = parts[0], int(parts[1]), float(parts[2])
        peak[pid] = max(peak[pid], mib)
        at[t] += mib
    if not peak:
        return f"{path}: no samples"
    main = max(peak, key=peak.get)
    others = sorted(v for p, v in peak.items() if p != main)
    gib = 1024.0
    line = (
        f"{path}: {len(at)} samples, {len(peak)} processes; largest (pid {main}) {peak[main] / gib:.2f} GiB"
    )
    if others:
        line += (
            f"; the other {len(others)} peak {others[0] / gib:.2f}-{others[-1] / gib:.2f} GiB"
            f" (median {statistics.median(others) / gib:.2f})"
        )
    return line + f"; all together at most {max(at.values()) / gib:.2f} GiB at one sample"


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(summary(p))
