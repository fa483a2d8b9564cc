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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

#: L2 cache of an H200 (and H100): 50-60 MB; rotations are sized against the larger figure.
L2_BYTES_H200 = 60 * 1024 * 1024
#: Bytes of weights one benchmark graph rotates over (4x L2: every call reads its weight from HBM).
ROTATE_BYTES = 4 * L2_BYTES_H200
#: A timing that starts after the GPU was left idle longer than this (or the first of the process)
#: first replays its graph for :data:`SPIN_UP_S`: see :func:`spin_up_seconds`.
IDLE_S = 1.0
SPIN_UP_S = 0.2
#: A timing whose p80 / p20 is above this is disturbed: :func:`steadiest` takes it again, at most
#: :data:`RETIME_TRIES` more times.
RETIME_SPREAD = 1.05
RETIME_TRIES = 2

_last_end: float | None = None  # time.monotonic() when the last time_graph of this process returned


def spin_up_seconds(
    now: float, last_end: float | None, idle_s: float = IDLE_S, spin_s: float = SPIN_UP_S
) -> float:
    """Seconds of extra warm-up replays before a timing starts: ``spin_s`` when nothing was timed in
    this process yet (``last_end`` None) or the last timing ended more than ``idle_s`` before
    ``now``; else 0.

    Why: a GPU left idle (a benchmark's CPU-only precompile, a process's start) runs the first
    graph timed after it slower, and a few warm-up replays of a sub-millisecond graph do not bring
    it back up to speed (the measurement: docs/benchmarks.md, "Method: kernels", warm-up)."""
    if last_end is None or now - last_end > idle_s:
        return spin_s
    return 0.0


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
    the capture. The graph is replayed ``warmup`` times before the timed replays, and for
    :func:`spin_up_seconds` more when the GPU was idle (the first timing of a process, or one after
    more than :data:`IDLE_S` without). The graph and its memory pool are freed when this returns.

    Raises:
        RuntimeError: from CUDA (no GPU, out of memory, a call that cannot be captured)."""
    global _last_end
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
    now = time.monotonic()
    spin_until = now + spin_up_seconds(now, _last_end)
    while time.monotonic() < spin_until:
        for _ in range(8):
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
    _last_end = time.monotonic()
    samples.sort()
    q = statistics.quantiles(samples, n=5)
    return Timing(statistics.median(samples), q[0], q[3])


def spread(t: Timing) -> float:
    """``t.p80_us / t.p20_us`` (inf when p20 is not positive)."""
    return t.p80_us / t.p20_us if t.p20_us > 0 else float("inf")


def steadiest(
    timer: Callable[[Sequence[Callable[[], object]]], Timing],
    calls: Sequence[Callable[[], object]],
    *,
    max_spread: float = RETIME_SPREAD,
    tries: int = RETIME_TRIES,
) -> tuple[Timing, int]:
    """``(timing, how many were taken)``: ``timer(calls)`` (e.g. :func:`time_graph`), taken again
    while the last one's p80 / p20 is above ``max_spread``, at most ``tries`` more times; of those,
    the one with the narrowest spread.

    Why: a disturbance during a timing (the GPU's clocks, a neighbour on the host) moves its
    median and widens its spread together; the rows of undisturbed benchmark processes spread
    ~1 % (docs/benchmarks.md, "Method: kernels")."""
    timings = [timer(calls)]
    while spread(timings[-1]) > max_spread and len(timings) <= tries:
        timings.append(timer(calls))
    return min(timings, key=spread), len(timings)
