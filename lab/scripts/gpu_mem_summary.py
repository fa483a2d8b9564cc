"""Summarise a GPU memory log written by lab/runs/2026-12-29.sh's sampler.

Each line of the log: ``<unix time>, <pid>, <parent pid>, <used MiB>`` (nvidia-smi
--query-compute-apps joined with ps: one sample of every compute process on the GPU about every
0.3 s; one GPU), and ``<unix time>, gpu, <used MiB>`` (the GPU's memory in use, every process
together: what is left when the per-process query shows none, as in some containers). A process whose parent is another GPU process is one of its workers (the grid's
and ``bench kernels``' compile workers are spawned by the process that times); every other process
is a run of its own (the grid, then ``bench kernels``, a probe). Prints one line per run: its own
peak, its workers' peaks and the largest sum of the run and its workers at one sample.

Usage: python3 lab/scripts/gpu_mem_summary.py LOG [LOG...]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

GIB = 1024.0  # MiB per GiB


def summary(path: str) -> list[str]:
    peak: dict[int, float] = defaultdict(float)
    parent: dict[int, int] = {}
    samples: dict[str, dict[int, float]] = defaultdict(dict)
    gpu_used = 0.0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1] == "gpu" and parts[2].isdigit():
            gpu_used = max(gpu_used, float(parts[2]))
            continue
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:3]) or not parts[3].isdigit():
            continue
        t, pid, ppid, mib = parts[0], int(parts[1]), int(parts[2]), float(parts[3])
        peak[pid] = max(peak[pid], mib)
        parent[pid] = ppid
        samples[t][pid] = mib
    used = f"the GPU's memory in use at most {gpu_used / GIB:.2f} GiB"
    if not peak:
        return [f"{path}: no process samples; {used}"]
    run_of = {p: (parent[p] if parent[p] in peak else p) for p in peak}
    out = [f"{path}: {len(samples)} samples, {len(peak)} GPU processes; {used}"]
    for run in sorted(set(run_of.values()), key=lambda r: min(t for t, s in samples.items() if r in s)):
        workers = sorted(peak[p] for p in peak if run_of[p] == run and p != run)
        together = max(sum(v for p, v in s.items() if run_of[p] == run) for s in samples.values())
        line = f"  run pid {run}: {peak[run] / GIB:.2f} GiB"
        if workers:
            line += (
                f"; {len(workers)} workers {workers[0] / GIB:.2f}-{workers[-1] / GIB:.2f} GiB each"
                f" (median {statistics.median(workers) / GIB:.2f})"
            )
        out.append(line + f"; together at most {together / GIB:.2f} GiB at one sample")
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print("\n".join(summary(p)))
