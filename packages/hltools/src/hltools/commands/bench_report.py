"""``hltools bench report``: the tables, markdown and plots of saved ``bench kernels`` / ``bench e2e``
results again (where they were measured without matplotlib, or committed gzipped)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hltools import options as opt

Directory = Annotated[Path, typer.Argument(help="An output directory of `bench kernels` / `bench e2e`.")]
Plots = Annotated[bool, typer.Option(help="(Re)draw the PNGs.")]


def report(directory: Directory, plots: Plots = True) -> None:
    """Print the tables and geomeans of saved results and redraw their markdown and PNGs (for results
    measured where matplotlib is not installed). Reads ``kernels.json`` and ``e2e-*.json``, or their
    gzipped ``.json.gz`` (as committed under lab/results/). Exits 1 when the directory holds no
    results or a result file cannot be read."""
    from hltools import e2e, kernel_results
    from hltools.commands import bench_e2e, bench_kernels
    from hltools.results import read_json, write_text

    out = opt.console()
    found = False
    kernels_file = kernel_results.results_path(directory)
    if kernels_file.is_file():
        found = True
        try:
            metadata, results = kernel_results.read_results(kernels_file)
        except ValueError as exc:
            out.print(f"[bold red]{exc}")
            raise typer.Exit(1) from None
        bench_kernels.print_summary(out, results)
        write_text(directory / kernel_results.SUMMARY_MD, kernel_results.summary_markdown(results, metadata))
        if plots:
            bench_kernels.draw_plots(out, results, directory, metadata)
    e2e_files = {p.name.removesuffix(".gz"): p for p in sorted(directory.glob("e2e-*.json.gz"))}
    e2e_files.update({p.name: p for p in sorted(directory.glob("e2e-*.json"))})  # plain file wins
    for name, path in sorted(e2e_files.items()):
        try:
            payload = read_json(path, "bench e2e result")
        except ValueError as exc:
            out.print(f"[bold red]{exc}")
            raise typer.Exit(1) from None
        if "summary" not in payload:
            continue
        found = True
        stem = name.removesuffix(".json")  # e2e-qwen3-1.7b-fp8_dynamic: no Path.with_suffix (".7b-...")
        summary = e2e.summarize(payload.get("runs", []))
        bench_e2e.show(out, directory, stem, payload.get("metadata", {}), summary, plots)
    if not found:
        out.print(f"[bold red]no kernels.json or e2e-*.json results in {directory}")
        raise typer.Exit(1)
