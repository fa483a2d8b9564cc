"""``hltools bench report``: the tables, markdown and plots of saved ``bench kernels`` / ``bench e2e``
results again (where they were measured without matplotlib, or committed gzipped), written to
``--output`` (default ``DIR/report``), never over the results' own files or a committed file unless
``--in-place``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from hltools import options as opt

#: The default output folder, inside the results folder (git-ignored under lab/results/ and bench-results/).
REPORT_DIR = "report"

Directory = Annotated[
    Path, typer.Argument(metavar="DIR", help="An output directory of `bench kernels` / `bench e2e`.")
]
Output = Annotated[
    Path | None,
    typer.Option(
        help=f"Folder for the markdown and PNGs; default DIR/{REPORT_DIR} (git-ignored in the checkout; "
        "rewritten on each run). Exits 2 for a folder that holds results (such as DIR) or where a "
        "committed file would be overwritten."
    ),
]
InPlace = Annotated[
    bool,
    typer.Option(
        "--in-place",
        help="Rewrite DIR's own markdown and PNGs (beside its results, committed or not) instead; "
        "not with --output.",
    ),
]
Plots = Annotated[bool, typer.Option(help="(Re)draw the PNGs.")]


def report(
    directory: Directory, output: Output = None, in_place: InPlace = False, plots: Plots = True
) -> None:
    """Print the tables and geomeans of saved results and write their markdown and PNGs again (for
    results measured where matplotlib is not installed) into --output, default DIR/report. Reads
    `kernels.json` and `e2e-*.json`, or their gzipped `.json.gz` (as committed under
    lab/results/). Writes nothing into DIR itself, into another results folder or over a committed
    file unless --in-place (exit 2; so does a DIR that does not exist). Exits 1 when the directory
    holds no results or a result file cannot be read."""
    from hltools import kernel_results
    from hltools.commands import bench_e2e, bench_kernels
    from hltools.results import write_text

    if not directory.is_dir():
        what = "is not a folder" if directory.exists() else "does not exist"
        raise typer.BadParameter(f"{directory} {what}", param_hint="DIR")
    out = opt.console()
    kernels = _read_kernels(out, directory)
    e2e_results = _read_e2e(out, directory)
    if kernels is None and not e2e_results:
        opt.fail(f"no kernels.json or e2e-*.json results in {directory}", 1)
    names = _file_names(kernels, [stem for stem, _, _ in e2e_results], plots)
    dest = _destination(directory, output, in_place, names)
    if kernels is not None:
        metadata, results = kernels
        bench_kernels.print_summary(out, results)
        path = dest / kernel_results.SUMMARY_MD
        write_text(path, kernel_results.summary_markdown(results, metadata))
        out.print(f"wrote {path}")
        if plots:
            bench_kernels.draw_plots(out, results, dest, metadata)
    for stem, metadata, summary in e2e_results:
        bench_e2e.show(out, dest, stem, metadata, summary, plots)


def _read_kernels(out: Console, directory: Path) -> tuple[dict[str, Any], list] | None:
    """``(metadata, results)`` of DIR's ``kernels.json[.gz]``; None without one; exit 1 unreadable."""
    from hltools import kernel_results

    path = kernel_results.results_path(directory)
    if not path.is_file():
        return None
    try:
        return kernel_results.read_results(path)
    except ValueError as exc:
        opt.fail(str(exc))


def _read_e2e(out: Console, directory: Path) -> list[tuple[str, dict[str, Any], dict]]:
    """``(stem, metadata, summary)`` of each ``e2e-*.json[.gz]`` with a summary (the plain file wins
    over its ``.gz``); exit 1 for one that cannot be read."""
    from hltools import e2e
    from hltools.results import read_json

    files = {p.name.removesuffix(".gz"): p for p in sorted(directory.glob("e2e-*.json.gz"))}
    files.update({p.name: p for p in sorted(directory.glob("e2e-*.json"))})
    found = []
    for name, path in sorted(files.items()):
        try:
            payload = read_json(path, "bench e2e result")
        except ValueError as exc:
            opt.fail(str(exc))
        if "summary" in payload:
            stem = name.removesuffix(".json")  # e2e-qwen3-1.7b-fp8_dynamic: no Path.with_suffix (".7b-...")
            found.append((stem, payload.get("metadata", {}), e2e.summarize(payload.get("runs", []))))
    return found


def _file_names(kernels: tuple | None, e2e_stems: list[str], plots: bool) -> list[str]:
    """The names of the files the report may write (the PNGs of every format, drawn or not)."""
    from hltools import kernel_results

    names = []
    if kernels is not None:
        names.append(kernel_results.SUMMARY_MD)
        names += (
            [f"kernels-{fmt}.png" for fmt in dict.fromkeys(r.format for r in kernels[1])] if plots else []
        )
    for stem in e2e_stems:
        names += [f"{stem}.md", *([f"{stem}.png"] if plots else [])]
    return names


def _destination(directory: Path, output: Path | None, in_place: bool, names: list[str]) -> Path:
    """Where the report goes: DIR with --in-place, else --output (default DIR/report); exit 2 for
    --in-place with another --output, an output folder that holds results, or a committed file among
    ``names`` there."""
    from hltools.provenance import tracked_by_git

    if in_place:
        if output is not None and output.resolve() != directory.resolve():
            raise typer.BadParameter("rewrites DIR's own files; leave out --output", param_hint="--in-place")
        return directory
    dest = output if output is not None else directory / REPORT_DIR
    if _holds_results(dest):
        raise typer.BadParameter(
            f"{dest} holds bench results of its own: write the report to another folder, or run "
            f"`bench report {dest} --in-place` to rewrite that folder's own tables",
            param_hint="--output",
        )
    committed = tracked_by_git(dest / n for n in names)
    if committed:
        more = f" and {len(committed) - 1} more" if len(committed) > 1 else ""
        raise typer.BadParameter(
            f"would write over the committed file {committed[0]}{more}; choose another --output",
            param_hint="--output",
        )
    return dest


def _holds_results(folder: Path) -> bool:
    """Whether ``folder`` holds ``bench kernels`` / ``bench e2e`` results (plain or gzipped)."""
    from hltools import kernel_results

    if not folder.is_dir():
        return False
    return kernel_results.results_path(folder).is_file() or any(folder.glob("e2e-*.json*"))
