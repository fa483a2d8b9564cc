"""``hltools bench compare``: two ``bench kernels`` runs of a model as decode steps, each layer as the
plugin would dispatch it (:mod:`hltools.bench_compare`)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from hltools import options as opt

Before = Annotated[
    Path,
    typer.Argument(
        metavar="BEFORE",
        help="`kernels.json` of the first `bench kernels` run (or its directory), e.g. without tuned configs.",
    ),
]
After = Annotated[
    list[Path],
    typer.Argument(
        metavar="AFTER",
        help="`kernels.json` of the second run (or its directory), e.g. with `HL_CONFIG_DIR` set; "
        "several: separate processes of the same configs (named <after>1, <after>2, ...), each "
        "summarized, the slower layers taken over their median.",
    ),
]
Names = Annotated[
    str, typer.Option(help="The two runs' names in the tables, comma-separated (before,after).")
]
Markdown = Annotated[Path | None, typer.Option(help="Also write the tables as markdown here.")]


class UntunedShapes(StrEnum):
    """``HL_UNTUNED_SHAPES`` values ``bench compare`` can dispatch by (:data:`hltools.bench_compare.UNTUNED_SHAPES`)."""

    nearest = "nearest"
    heuristic = "heuristic"


UntunedShapesOpt = Annotated[
    UntunedShapes,
    typer.Option(
        help="The plugin's HL_UNTUNED_SHAPES both runs are dispatched by: `nearest` (the default): a "
        "heuristic config (no entry of the format) runs vLLM's kernel; `heuristic`: it runs Helion by the "
        "speed guard's rule, as the plugin does with HL_UNTUNED_SHAPES=heuristic (e.g. on a GPU without a "
        "shipped file, what tuning bought over Helion's untuned configs).",
    ),
]


def compare(
    before: Before,
    after: After,
    names: Names = "before,after",
    markdown: Markdown = None,
    untuned_shapes: UntunedShapesOpt = UntunedShapes.nearest,
) -> None:
    """Decode-step GEMM time of two `bench kernels` runs (for instance the configs an untuned model
    gets, then the file `hltools autotune` wrote, through `HL_CONFIG_DIR`): per (model, format, TP, M),
    the sum over one decoder layer's linear layers of each layer's time as the plugin would run it.
    An exact tuned key runs Helion (vLLM's kernel where it is marked fallback); a heuristic config (the
    file has no entry of the format) runs vLLM's kernel, as the plugin does by default (Helion by the
    speed guard's rule with `--untuned-shapes heuristic`); a nearest
    config runs Helion only with a 2 % win over vLLM's kernel in that run (the speed guard's rule).
    Prints the step per M (plain ratio, and normalized by each run's own vLLM step, which cancels the
    drift between two processes; of the first AFTER run), each run against vLLM's kernel, per model and
    format the spread over M (a row per AFTER run), and the layers the AFTER runs run more than 2 %
    slower (their median; plainly and normalized). Needs no GPU. Exits 1 when a file cannot be read or
    the runs share no timed step, 2 when `--names` is not two names."""
    from hltools import bench_compare as c
    from hltools.kernel_results import read_results

    out = opt.console()
    labels = [s.strip() for s in names.split(",")]
    if len(labels) != 2 or not all(labels):
        opt.fail(f"--names takes two names, before,after; got {names!r}", 2)
    run_names = [labels[1]] if len(after) == 1 else [f"{labels[1]}{i}" for i in range(1, len(after) + 1)]
    runs = []
    for label, path in zip(("BEFORE", *(["AFTER"] * len(after))), (before, *after), strict=True):
        try:
            runs.append(read_results(path))
        except FileNotFoundError:
            opt.fail(
                f"{label}: {path} not found: expected a `bench kernels` output folder or its kernels.json", 1
            )
        except ValueError as exc:
            opt.fail(f"{label}: {exc}", 1)
    per_run = []
    try:
        for name, (_, results) in zip(run_names, runs[1:], strict=True):
            rows, notes = c.compare(runs[0][1], results, untuned_shapes.value)
            per_run.append((name, rows))
            for note in notes:
                out.print(f"[yellow]{name}: {note}" if len(after) > 1 else f"[yellow]{note}")
    except ValueError as exc:
        opt.fail(str(exc))
    empty = [str(p) for p, (_, rows) in zip(after, per_run, strict=True) if not rows]
    if empty:
        opt.fail(f"{before} and {', '.join(empty)} share no (model, format, TP, M) with vLLM timed", 1)
    tables = [
        c.step_table(per_run[0][1], labels[0], run_names[0]),
        c.runs_summary_table(per_run, *labels),
    ]
    slower = c.slower_layers(runs[0][1], *(r for _, r in runs[1:]), untuned_shapes=untuned_shapes.value)
    if slower:
        tables.append(c.slower_table(slower, *labels))
    for t in tables:
        out.print(t.rich())
    none_slower = (
        f"no layer slower in {labels[1]} than in {labels[0]} by more than {c.SLOWER_MARGIN * 100:g} %"
    )
    if not slower:
        out.print(none_slower)
    if markdown is not None:
        from hltools.results import provenance_text, write_text

        lines = [f"# Decode step: {labels[1]} vs {labels[0]}", "", f"Command: `{opt.command_line()}`", ""]
        for label, (meta, _) in zip([labels[0], *run_names], runs, strict=True):
            lines.append(
                f"- {label}: {provenance_text(meta) or '(no metadata)'}; `{meta.get('command', '?')}`"
            )
        lines += ["", c.RULES + (" " + c.RULES_HEURISTIC if untuned_shapes == "heuristic" else ""), ""]
        for t in tables:
            lines += [f"## {t.title}", "", *t.markdown(), ""]
        if not slower:
            lines += [none_slower[0].upper() + none_slower[1:] + ".", ""]
        write_text(markdown, "\n".join(lines))
        out.print(f"wrote {markdown}")
