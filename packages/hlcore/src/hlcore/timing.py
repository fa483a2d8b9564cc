"""GPU timing as the project measures speed: CUDA-graph replay of many calls that rotate over
weight copies larger than L2 (so every call streams its weight from HBM), warm-up first, median of
repeats.

The one timer of the project: ``hltools bench kernels``, ``hltools autotune`` and hlvllm's speed
guard (:mod:`hlvllm.guard`, which decides at warm-up whether an untuned shape keeps Helion) all time
with :func:`time_graph`, so a decision at start-up and a committed benchmark measure the same thing.
Importable without a GPU (torch only); the functions need one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

#: L2 cache of an H200 (and H100): 50-60 MB; rotations are sized against the larger figure.
L2_BYTES_H200 = 60 * 1024 * 1024
#: Bytes of weights one benchmark graph rotates over (4x L2: every call reads its weight from HBM).
ROTATE_BYTES = 4 * L2_BYTES_H200


@dataclass(frozen=True)
class Timing:
    """Per-call device time in microseconds (median, 20th and 80th percentile over repeats)."""

    median_us: float
    p20_us: float
    p80_us: float


def copies_for(weight_bytes: int, rotate_bytes: int = ROTATE_BYTES, max_copies: int = 64) -> int:
    """How many weight copies make the rotation exceed ``rotate_bytes`` (at least 2, at most
    ``max_copies``)."""
    return max(2, min(max_copies, -(-rotate_bytes // max(1, weight_bytes))))


def time_graph(calls: Sequence[Callable[[], object]], *, repeats: int = 30, warmup: int = 3) -> Timing:
    """Capture ``calls`` (one launch sequence each, typically one per weight copy) into one CUDA
    graph, replay it ``repeats`` times, and return the time per call.

    Every call runs once eagerly first (compiles, allocates) and again on the capture stream before
    the capture. The graph and its memory pool are freed when this returns.

    Raises:
        RuntimeError: from CUDA (no GPU, out of memory, a call that cannot be captured)."""
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
