"""GPU timing as the project measures speed: CUDA-graph replay of many calls that rotate over
weight copies larger than L2 (so every call streams its weight from HBM), warm-up first, median of
repeats. Importable without a GPU; the functions need one."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

L2_BYTES_H200 = 60 * 1024 * 1024
ROTATE_BYTES = 4 * L2_BYTES_H200  # bytes of weights a graph rotates over


@dataclass(frozen=True)
class Timing:
    """Per-call device time in microseconds (median, 20th and 80th percentile over repeats)."""

    median_us: float
    p20_us: float
    p80_us: float


def copies_for(weight_bytes: int, rotate_bytes: int = ROTATE_BYTES, max_copies: int = 64) -> int:
    """How many weight copies make the rotation exceed ``rotate_bytes`` (at least 2)."""
    return max(2, min(max_copies, -(-rotate_bytes // max(1, weight_bytes))))


def time_graph(calls: Sequence[Callable[[], object]], *, repeats: int = 30, warmup: int = 3) -> Timing:
    """Capture ``calls`` (one launch sequence each, typically one per weight copy) into one CUDA
    graph, replay it ``repeats`` times, and return the time per call.

    Every call runs once eagerly first (compiles, allocates) and again inside the capture."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for c in calls:  # warm-up on the capture stream
            c()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / len(calls))
    samples.sort()
    q = statistics.quantiles(samples, n=5)
    return Timing(statistics.median(samples), q[0], q[3])


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


def scaled_mm_bytes(m: int, n: int, k: int, out_bytes: int = 2) -> int:
    """Fewest bytes one FP8/INT8 scaled GEMM moves: A, B (1 byte each), scales (fp32), output."""
    return m * k + n * k + 4 * (m + n) + out_bytes * m * n
