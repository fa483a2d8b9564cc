"""Where hlvllm's share of an engine's start-up goes: wall seconds per phase, logged once.

Each phase of ours that runs before the first CUDA graph is replayed adds up here
(:func:`timed`); :func:`summary` is logged with the kernel-cache line at the last Helion capture
(:func:`hlvllm.dispatch.run`), so a start-up log says which seconds were hlvllm's:

* ``shape registration``: at weight processing, each layer's guard/precompile registration
  (:func:`hlvllm.guard.register_shape`), of which ``recording``: the Helion calls recorded for the
  worker processes (:func:`hlvllm.precompile.pool_jobs`, ``HL_PRECOMPILE_PROCESSES``);
* ``waiting for workers``: the first Helion call waiting for the worker processes;
* ``speed guard``: timing Helion against vLLM's kernel on untuned shapes (:mod:`hlvllm.guard`);
* ``precompile threads``: ``HL_PRECOMPILE_THREADS``' compiles before a shape's first call;
* ``importing hlcore``: the first import of hlcore's GEMM module (:func:`import_kernels`, before
  the first Helion call; 0 when something imported it earlier). Helion itself is imported only by
  a call that misses hlcore's kernel cache (inside ``first Helion calls``); a start whose kernels
  all load from the cache never imports it (:mod:`hlcore.helion_free`; the capture log line says
  which);
* ``first Helion calls``: each (format, M, N, K)'s first eager Helion call (kernel load or compile),
  the slowest keys named (a load from the kernel cache takes milliseconds; a second or so is a
  compile, Helion's or Triton's);
* ``checks against vLLM``: vLLM's kernel on the same inputs, compared once per key.

The rest of the difference in start-up against vLLM alone is vLLM's own work on our behalf (the
compile range above max_helion_size, capture of the Helion graphs), which its log times.
Nested phases are counted in both (``recording`` is part of ``shape registration``).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

#: Phase name -> wall seconds, in the order of the module docstring (unknown names last).
PHASES = (
    "shape registration",
    "recording",
    "waiting for workers",
    "speed guard",
    "precompile threads",
    "importing hlcore",
    "first Helion calls",
    "checks against vLLM",
)
SECONDS: defaultdict[str, float] = defaultdict(float)
#: Phase -> item (e.g. ``"block_fp8 M=8 N=24576 K=4096"``) -> wall seconds, for the items timed by name.
ITEMS: defaultdict[str, dict[str, float]] = defaultdict(dict)
#: How many of a phase's slowest items :func:`summary` names.
SLOWEST = 3
clock = time.perf_counter  # tests put a fake clock here


@contextmanager
def timed(phase: str, item: str | None = None) -> Iterator[None]:
    """Add the wall time of the ``with`` body to ``phase`` (also when it raises), and to ``item``
    of it when given."""
    t0 = clock()
    try:
        yield
    finally:
        dt = clock() - t0
        SECONDS[phase] += dt
        if item is not None:
            ITEMS[phase][item] = ITEMS[phase].get(item, 0.0) + dt


def import_kernels(module: str = "hlcore.scaled_mm") -> None:
    """Import ``module`` (hlcore's GEMM) unless imported already, timed as ``importing hlcore``, so
    that the first Helion call's seconds are its own."""
    if module not in sys.modules:
        with timed("importing hlcore"):
            importlib.import_module(module)


def summary() -> str:
    """``"shape registration 1.2 s (recording 0.8 s), first Helion calls 2.0 s (slowest: fp8_dynamic
    M=8 N=6144 K=4096 0.31 s, ...), ..."``: the phases that took any time, in :data:`PHASES` order,
    with the :data:`SLOWEST` slowest of a phase's named items when it has more than one; ``"none"``
    when none did."""
    order = [p for p in PHASES if SECONDS.get(p)] + sorted(
        p for p in SECONDS if p not in PHASES and SECONDS[p]
    )
    parts = []
    for phase in order:
        if phase == "recording" and SECONDS.get("shape registration"):
            continue
        text = f"{phase} {SECONDS[phase]:.1f} s"
        if phase == "shape registration" and SECONDS.get("recording"):
            text += f" (recording {SECONDS['recording']:.1f} s)"
        items = sorted(ITEMS.get(phase, {}).items(), key=lambda kv: -kv[1])[:SLOWEST]
        if len(ITEMS.get(phase, {})) > 1:
            text += " (slowest: " + ", ".join(f"{name} {sec:.2f} s" for name, sec in items) + ")"
        parts.append(text)
    return ", ".join(parts) or "none"


def reset() -> None:
    """Forget the phases (tests)."""
    SECONDS.clear()
    ITEMS.clear()
