"""``hltools bench merge-e2e``: one ``bench e2e`` result from runs of separate commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hltools import options as opt

Files = Annotated[
    list[Path],
    typer.Argument(
        metavar="FILES", help="`e2e-<model>-<format>.json` (or `.json.gz`) files of `bench e2e` runs to join."
    ),
]
Output = Annotated[Path, typer.Option(help="Directory for the merged result.")]
Plots = Annotated[bool, typer.Option(help="Draw the PNG.")]
#: The fields the joined results must agree on.
SAME = ("model", "format", "layers", "tensor_parallel_size", "gpu")


def merge_e2e(files: Files, output: Output = opt.DEFAULT_OUTPUT, plots: Plots = True) -> None:
    """Join `bench e2e` results of the same model, format, layers, TP and GPU that ran as separate
    commands (e.g. `--plugins off` and `--plugins on` in two device calls) into one result with one
    summary: `e2e-<model>-<format>[-tp<N>].{json,csv,md,png}` in --output (a `--plugins control` run
    joined with `off` and `on` ones gives the numerics check its yardstick). Exits 2 when the files
    disagree on those fields, hold the same (plugin, round) twice or are not `bench e2e` results;
    exits 1 (after writing) when the joined numerics check says FAIL."""
    from hltools import e2e
    from hltools.commands import bench_e2e
    from hltools.results import read_json

    out = opt.console()
    metas, runs = [], []
    for path in files:
        try:
            payload = read_json(path, "`bench e2e` result")
        except (OSError, ValueError) as exc:
            raise opt.bad_parameter(exc, "FILES") from None
        if "runs" not in payload:
            raise typer.BadParameter(f"{path}: not a `bench e2e` result (no runs)", param_hint="FILES")
        metas.append(payload.get("metadata", {}))
        runs += payload["runs"]
    for field in SAME:
        values = {json.dumps(m.get(field)) for m in metas}
        if len(values) > 1:
            raise typer.BadParameter(f"the files disagree on {field}: {sorted(values)}", param_hint="FILES")
    seen = [(r.get("plugin"), r.get("round")) for r in runs]
    twice = sorted({k for k in seen if seen.count(k) > 1}, key=str)
    if twice:
        raise typer.BadParameter(f"the same (plugin, round) in several files: {twice}", param_hint="FILES")
    meta = dict(metas[0])
    meta["plugins"] = list(dict.fromkeys(str(r.get("plugin")) for r in runs))
    meta["failed"] = {k: v for m in metas for k, v in (m.get("failed") or {}).items()}
    meta["merged_from"] = [
        {"file": str(p), "command": m.get("command"), "commit": m.get("commit")}
        for p, m in zip(files, metas, strict=True)
    ]
    meta["command"] = opt.command_line()  # this merge; each part's own command is in merged_from
    tp = meta.get("tensor_parallel_size") or 1
    stem = f"e2e-{meta.get('model')}-{meta.get('format')}" + (f"-tp{tp}" if tp > 1 else "")
    output.mkdir(parents=True, exist_ok=True)
    written = e2e.write_e2e(output, stem, meta, runs)
    bench_e2e.show(out, output, stem, meta, written["summary"], plots)
    out.print(f"merged {len(runs)} runs from {len(files)} files into {written['json']}")
    if bench_e2e.numerics_failed(out, written["summary"]):
        raise typer.Exit(1)
