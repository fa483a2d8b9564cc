"""GPU timing for the tools: the project's timer (:mod:`hlcore.timing`, re-exported here) plus the copy
bandwidth that reports compare against. Importable without a GPU; the functions need one."""

from __future__ import annotations

import statistics

import torch

from hlcore.timing import L2_BYTES_H200, ROTATE_BYTES, Timing, copies_for, time_graph

__all__ = [
    "L2_BYTES_H200",
    "ROTATE_BYTES",
    "Timing",
    "copies_for",
    "copy_bandwidth_gbs",
    "time_graph",
]


def copy_bandwidth_gbs(nbytes: int = 2 * 1024**3) -> float:
    """Measured device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    samples = []
    for _ in range(10):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(2 * nbytes / (start.elapsed_time(end) * 1e-3) / 1e9)
    del src, dst
    return statistics.median(samples)
