"""Two ``hltools bench kernels`` runs of one model compared as a decode step (``hltools bench compare``).

What tuning bought a model is the time of its decode step, not a geomean over shapes: per (model,
format, TP, M), the GEMMs of one decoder layer (each linear layer of the runs once; a decode step runs
every decoder layer, so the ratios hold for the whole step), each layer at the time the plugin would
spend on it. That time is the run's Helion time or its vLLM time, by the rules of
:func:`hlvllm.routing.decide` applied to the run's own measurements:

- the Helion row's config came from an exact key of the config file (``exact ...``): Helion, unless
  the key is marked fallback (``exact (marked fallback) ...``), then vLLM's kernel;
- ``heuristic`` (the file has no entry of the format, or there is no file): vLLM's kernel, as the
  plugin runs it with the default ``HL_UNTUNED_SHAPES`` (never an unmeasured config); with
  ``untuned_shapes="heuristic"`` (``HL_UNTUNED_SHAPES=heuristic``) the speed guard's rule below;
- any other source (``nearest``, ``same_shape``, ``default``: the picker reused a config of the
  file): the speed guard's rule, Helion only when its time is at most vLLM's / :data:`GUARD_MARGIN`
  (a 2 % win), else vLLM's kernel. The guard times the shape itself at start-up; this uses the
  run's times, so it is the guard's rule, not its exact verdict;
- a Helion row that did not run or was out of tolerance (``ok`` false): vLLM's kernel.

The two runs are separate processes, so their vLLM times differ by the machine's drift: ``after vs
before`` is the plain ratio of the two step times, ``normalized`` divides each step by its own run's
vLLM step first (``(before / vllm_before) / (after / vllm_after)``), which cancels a drift common to
both kernels. Pure Python (no torch).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hltools.bench_configs import HEURISTIC, MARKED_SUFFIX
from hltools.kernel_results import BenchResult, model_label
from hltools.results import ResultTable, cell

#: The speed guard's margin (:data:`hlvllm.guard.MARGIN`; a test keeps the two equal).
GUARD_MARGIN = 1.02

#: ``HL_UNTUNED_SHAPES`` values the comparison can follow (``vllm`` is not modelled).
UNTUNED_SHAPES = ("nearest", "heuristic")

#: The dispatch rules, as the markdown report states them.
RULES = (
    "Each layer runs as the plugin would dispatch it, by this run's own times: an exact tuned key runs "
    "Helion (vLLM's kernel where the key is marked fallback); a heuristic config (no entry of the format "
    "in the file) runs vLLM's kernel (the default HL_UNTUNED_SHAPES); another config of the file (nearest) "
    f"runs Helion only when its time is at most vLLM's / {GUARD_MARGIN} (the speed guard's rule, not its own "
    "timing); a Helion row that did not run or was out of tolerance runs vLLM's kernel. 'normalized' "
    "divides each step by its own run's vLLM step first."
)
#: What the report adds under ``untuned_shapes="heuristic"``.
RULES_HEURISTIC = (
    "As with HL_UNTUNED_SHAPES=heuristic, a heuristic config runs Helion by the speed guard's rule too."
)


@dataclass(frozen=True)
class Layer:
    """One linear layer at one M as the plugin would run it: ``us`` (µs per call) from ``path``
    (``"helion"`` or ``"vllm"``), and ``vllm_us`` the same run's vLLM time."""

    layer: str
    path: str
    us: float
    vllm_us: float


def runs_helion(exact: bool, marked: bool, helion_us: float | None, vllm_us: float) -> bool:
    """Whether the plugin runs Helion on a key, by :func:`hlvllm.routing.decide`'s rules applied to
    measured times: a config from the key's own exact entry runs Helion unless the entry is marked
    fallback (``marked``); any other config only when the speed guard's rule holds,
    ``helion_us * GUARD_MARGIN <= vllm_us`` (never without a Helion time)."""
    if exact:
        return not marked
    return helion_us is not None and helion_us * GUARD_MARGIN <= vllm_us


def dispatched(helion: BenchResult | None, vllm: BenchResult, untuned_shapes: str = "nearest") -> Layer:
    """The time the plugin would spend on one layer (the rules in the module docstring) with
    ``HL_UNTUNED_SHAPES=untuned_shapes`` (one of :data:`UNTUNED_SHAPES`). Raises ValueError when
    ``vllm`` has no time or ``untuned_shapes`` is not one of those."""
    if untuned_shapes not in UNTUNED_SHAPES:
        raise ValueError(f"untuned_shapes {untuned_shapes!r}: expected one of {UNTUNED_SHAPES}")
    if vllm.median_us is None:
        raise ValueError(f"{vllm.layer} M={vllm.m}: vLLM's row has no time")
    v = vllm.median_us
    use_helion = False
    if helion is not None and helion.ok and helion.median_us is not None:
        label = helion.config.partition("{")[0].strip()  # "<source>[ (marked fallback)]"
        source = label.removesuffix(MARKED_SUFFIX)
        exact = source == "exact"
        untuned = source == HEURISTIC and untuned_shapes != "heuristic"
        use_helion = not untuned and runs_helion(exact, label.endswith(MARKED_SUFFIX), helion.median_us, v)
    return Layer(vllm.layer, "helion", helion.median_us, v) if use_helion else Layer(vllm.layer, "vllm", v, v)


def step_layers(
    results: Iterable[BenchResult], untuned_shapes: str = "nearest"
) -> dict[tuple[str, str, int, int], dict[str, Layer]]:
    """Per (model, format, TP, M): each layer with a timed vLLM row, as :func:`dispatched` runs it."""
    helion: dict[tuple, BenchResult] = {}
    vllm: dict[tuple, BenchResult] = {}
    for r in results:
        key = (r.model, r.format, r.tp, r.m, r.layer)
        if r.provider == "helion":
            helion[key] = r
        elif r.provider == "vllm" and r.median_us is not None:
            vllm[key] = r
    steps: dict[tuple[str, str, int, int], dict[str, Layer]] = {}
    for key, v in vllm.items():
        steps.setdefault(key[:4], {})[key[4]] = dispatched(helion.get(key), v, untuned_shapes)
    return steps


@dataclass(frozen=True)
class StepRow:
    """One (model, format, TP, M) of both runs, over the layers timed in both."""

    model: str
    format: str
    tp: int
    m: int
    layers: tuple[str, ...]
    before_us: float
    after_us: float
    vllm_before_us: float
    vllm_after_us: float
    helion_before: int  # layers on Helion
    helion_after: int

    @property
    def gain(self) -> float:
        """before / after (> 1: the after run's step is faster)."""
        return self.before_us / self.after_us

    @property
    def gain_normalized(self) -> float:
        """(before / its vLLM) / (after / its vLLM)."""
        return (self.before_us / self.vllm_before_us) / (self.after_us / self.vllm_after_us)


def compare(
    before: Iterable[BenchResult], after: Iterable[BenchResult], untuned_shapes: str = "nearest"
) -> tuple[list[StepRow], list[str]]:
    """The step rows of the (model, format, TP, M) both runs timed, and notes on what only one run
    has (a layer or a whole step). Rows sorted by model, format, TP, M. ``untuned_shapes``: as
    :func:`dispatched`'s, for both runs."""
    a, b = step_layers(before, untuned_shapes), step_layers(after, untuned_shapes)
    rows, notes = [], []
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            notes.append(
                f"{key[0]} {key[1]} tp{key[2]} M={key[3]}: only in the {'before' if key in a else 'after'} run"
            )
            continue
        layers = sorted(set(a[key]) & set(b[key]))
        if set(a[key]) != set(b[key]):
            notes.append(f"{key[0]} {key[1]} tp{key[2]} M={key[3]}: layers of one run only left out")
        if not layers:
            continue
        la, lb = [a[key][n] for n in layers], [b[key][n] for n in layers]
        rows.append(
            StepRow(
                *key,
                layers=tuple(layers),
                before_us=sum(x.us for x in la),
                after_us=sum(x.us for x in lb),
                vllm_before_us=sum(x.vllm_us for x in la),
                vllm_after_us=sum(x.vllm_us for x in lb),
                helion_before=sum(x.path == "helion" for x in la),
                helion_after=sum(x.path == "helion" for x in lb),
            )
        )
    return rows, notes


#: A layer is listed as slower when the after run's time is above the before run's by more than this,
#: both plainly and normalized (the marks' margin: one process pair is noisier than that per layer).
SLOWER_MARGIN = 0.02


@dataclass(frozen=True)
class SlowerLayer:
    """One linear layer at one (model, format, TP, M), as the before run and each after run (one
    or more processes of the same configs) dispatch it."""

    model: str
    format: str
    tp: int
    m: int
    before: Layer
    after: tuple[Layer, ...]

    @property
    def after_us(self) -> float:
        """The median over the after runs."""
        return statistics.median(x.us for x in self.after)

    @property
    def gain(self) -> float:
        """before / the after runs' median."""
        return self.before.us / self.after_us

    @property
    def gain_normalized(self) -> float:
        """The median over the after runs of (before / its vLLM) / (after / its vLLM)."""
        b = self.before.us / self.before.vllm_us
        return statistics.median(b / (x.us / x.vllm_us) for x in self.after)


def slower_layers(
    before: Iterable[BenchResult],
    *after: Iterable[BenchResult],
    margin: float = SLOWER_MARGIN,
    untuned_shapes: str = "nearest",
) -> list[SlowerLayer]:
    """The layers all runs timed that the after runs run slower, as dispatched: ``gain`` and
    ``gain_normalized`` (:class:`SlowerLayer`: over the after runs' median) both below
    ``1 / (1 + margin)`` (``hltools autotune`` seeds the heuristic so no key should end worse; this
    lists where the processes say otherwise). Sorted by the normalized ratio, worst first.
    ``untuned_shapes``: as :func:`dispatched`'s, for every run."""
    a, bs = step_layers(before, untuned_shapes), [step_layers(x, untuned_shapes) for x in after]
    out = []
    for key in sorted(set(a).intersection(*bs)):
        for name in sorted(set(a[key]).intersection(*(b[key] for b in bs))):
            row = SlowerLayer(*key, a[key][name], tuple(b[key][name] for b in bs))
            if max(row.gain, row.gain_normalized) < 1.0 / (1.0 + margin):
                out.append(row)
    return sorted(out, key=lambda r: r.gain_normalized)


def slower_table(rows: Sequence[SlowerLayer], before: str, after: str) -> ResultTable:
    """One row per layer of :func:`slower_layers` (the after runs' median; their paths)."""
    columns = ["model", "format", "TP", "M", "layer", f"{before} µs", f"{after} µs", f"{after} vs {before}"]
    columns += ["normalized"]
    out = [
        [
            model_label(r.model),
            r.format,
            f"tp{r.tp}",
            str(r.m),
            r.before.layer,
            f"{r.before.us:.2f} ({r.before.path})",
        ]
        + [f"{r.after_us:.2f} ({'/'.join(dict.fromkeys(x.path for x in r.after))})"]
        + [cell(r.gain, ".3f"), cell(r.gain_normalized, ".3f")]
        for r in rows
    ]
    title = f"layers slower in {after} than in {before} by more than {SLOWER_MARGIN * 100:g} % (plain and normalized)"
    return ResultTable(title, columns, out, left=("model", "format", "layer"))


def step_table(rows: Sequence[StepRow], before: str, after: str) -> ResultTable:
    """One row per (model, format, TP, M)."""
    columns = [
        "model",
        "format",
        "TP",
        "M",
        f"{before} µs",
        f"{after} µs",
        "vLLM µs (both runs)",
        "Helion layers",
        f"{after} vs {before}",
        "normalized",
        f"{before} vs vLLM",
        f"{after} vs vLLM",
    ]
    out = []
    for r in rows:
        n = len(r.layers)
        out.append(
            [
                model_label(r.model),
                r.format,
                f"tp{r.tp}",
                str(r.m),
                cell(r.before_us, ".1f"),
                cell(r.after_us, ".1f"),
                f"{r.vllm_before_us:.1f} / {r.vllm_after_us:.1f}",
                f"{r.helion_before}/{n} → {r.helion_after}/{n}",
                cell(r.gain, ".3f"),
                cell(r.gain_normalized, ".3f"),
                cell(r.vllm_before_us / r.before_us, ".3f"),
                cell(r.vllm_after_us / r.after_us, ".3f"),
            ]
        )
    title = f"decode step: the GEMMs of one decoder layer as dispatched, {after} vs {before}"
    return ResultTable(title, columns, out, left=("model", "format"))


def summary_table(rows: Sequence[StepRow], before: str, after: str) -> ResultTable:
    """Per (model, format, TP): the distribution over M of the step gain, plain and normalized."""
    return runs_summary_table([(after, rows)], before, after)


def runs_summary_table(runs: Sequence[tuple[str, Sequence[StepRow]]], before: str, after: str) -> ResultTable:
    """:func:`summary_table` for several after runs (``(name, rows)`` each, e.g. three processes
    of one tuned file): a row per run and (model, format, TP), with a leading ``run`` column when
    there is more than one."""
    columns = ["model", "format", "TP", "M values", "gain min", "gain median", "gain max"]
    columns += ["normalized min", "normalized median", "normalized max", "summed over M"]
    several = len(runs) > 1
    out = []
    for name, rows in runs:
        groups: dict[tuple[str, str, int], list[StepRow]] = {}
        for r in rows:
            groups.setdefault((r.model, r.format, r.tp), []).append(r)
        for (model, fmt, tp), rs in groups.items():
            g = [r.gain for r in rs]
            gn = [r.gain_normalized for r in rs]
            summed = sum(r.before_us for r in rs) / sum(r.after_us for r in rs)
            out.append(
                ([name] if several else [])
                + [model_label(model), fmt, f"tp{tp}", str(len(rs))]
                + [cell(x, ".3f") for x in (min(g), statistics.median(g), max(g))]
                + [cell(x, ".3f") for x in (min(gn), statistics.median(gn), max(gn), summed)]
            )
    left = ("run", "model", "format") if several else ("model", "format")
    return ResultTable(
        f"{after} vs {before}, over M (> 1: {after} faster)",
        (["run"] if several else []) + columns,
        out,
        left=left,
    )
