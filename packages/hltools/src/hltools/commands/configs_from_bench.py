"""``hltools configs from-bench``: a scaled_mm config file from side-by-side kernel results
(:mod:`hltools.bench_configs` holds the rules)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from hlcore.config_store import SCALED_MM_KERNEL, config_file_path, stats_file_path
from hltools import bench_configs as bc
from hltools import options as opt

configs_app = typer.Typer(
    help="Config files: `from-bench` (a scaled_mm config file from `hltools bench kernels` results).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=opt.help_markup(),
)


@configs_app.callback()
def _configs() -> None:
    """Config files of the Helion kernels."""


KernelsJson = Annotated[
    list[Path],
    typer.Argument(
        metavar="KERNELS_JSON",
        help="kernels.json (or .csv, or a folder with kernels.json) of `hltools bench kernels`.",
    ),
]
Output = Annotated[
    Path,
    typer.Option(
        help="Config directory: writes `<output>/scaled_mm/<gpu>.json` (merged): key, config, fallback "
        "mark and `_metadata` provenance, the file the hlcore wheel ships."
    ),
]
StatsOutput = Annotated[
    Path | None,
    typer.Option(
        "--stats-output",
        metavar="<path>",
        help="Directory of the per-key measurements (Helion and vLLM medians, per-process ratios, "
        "config source, layers): writes `<stats-output>/scaled_mm/<gpu>.stats.json` (merged, keyed as "
        "the config file), never shipped. Default: for a checkout's `configs` (a `lab/` folder beside it) "
        "`configs/../lab/results/config-stats`, beside the benchmark results; for any other --output "
        "that directory itself (the sidecar beside the config file).",
    ),
]
ConfigDir = Annotated[
    Path | None,
    typer.Option(
        "--config-dir",
        metavar="<path>",
        exists=True,
        file_okay=False,
        help="The config directory the benchmark ran with (its HL_CONFIG_DIR): label-only rows of older "
        "benchmarks (`exact`, `nearest`...) are resolved with the picker against its file for the rows' "
        "GPU (else they are skipped), and the file is named in `configs_from` with the command that "
        "made it (newer benchmarks record it themselves).",
    ),
]
OnlyNew = Annotated[
    bool,
    typer.Option(
        "--only-new",
        help="Keys already in the output file are left untouched (config, fallback mark, stats); "
        "default: the benchmark's entries replace them.",
    ),
]
Force = Annotated[
    bool, typer.Option(help="Replace an existing file whose metadata names another GPU or helion version.")
]
Margin = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="A key is marked fallback when vLLM's kernel is faster by more than this fraction in the "
        "median over processes (each input file is one process), or faster in every process.",
    ),
]
Models = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="<names>",
        help="Only the rows of these models (comma-separated, as the benchmark rows name them, e.g. "
        "`qwen3-32b`): ships one model of a benchmark that ran several. Default: every row.",
    ),
]
MinProcesses = Annotated[
    int,
    typer.Option(
        min=1,
        help="Processes (input files) a key must be measured in to be written; keys measured in fewer "
        "are skipped (hlvllm's speed guard then times them at warm-up).",
    ),
]


def from_bench(
    kernels_json: KernelsJson,
    output: Output = Path("configs"),
    stats_output: StatsOutput = None,
    config_dir: ConfigDir = None,
    only_new: OnlyNew = False,
    force: Force = False,
    margin: Margin = bc.MARGIN,
    min_processes: MinProcesses = 3,
    model: Models = None,
) -> None:
    """Write the scaled_mm config file of the benchmark's GPU from side-by-side kernel results.

    Each (format, N, K, M) gets the Helion config that was measured; a key is marked
    `"fallback": true` (dispatch keeps vLLM's kernel there) when vLLM's default kernel is faster
    by more than --margin in the median of at least --min-processes independent benchmark
    processes (one per input file), or faster in every one of them; keys measured in fewer
    processes are skipped. GPU, versions and
    date come from the benchmark rows. These configs are what the benchmark ran: the heuristic
    defaults, or the entries of the config file it ran with (an autotuned one, for instance); the
    file's `configs_from` names those files and the commands that made them (from the benchmarks'
    metadata, or from --config-dir). The measurements behind each key go to a stats sidecar
    (`--stats-output`), not the config file.
    """
    console = opt.console()
    results, bench_meta, processes = bc.read_bench(kernels_json)
    if model is not None:
        results, processes = bc.rows_of_models(results, processes, model)
    command = shlex.join(
        ["hltools", "configs", "from-bench", *map(str, kernels_json), "--output", str(output)]
        + ["--margin", str(margin), "--min-processes", str(min_processes)]
        + (["--stats-output", str(stats_output)] if stats_output is not None else [])
        + (["--config-dir", str(config_dir)] if config_dir is not None else [])
        + (["--model", model] if model is not None else [])
        + (["--only-new"] if only_new else [])
        + (["--force"] if force else [])
    )
    try:
        metadata = bc.bench_metadata(results, bench_meta, command, config_dir)
    except bc.BenchConfigError as exc:
        opt.fail(f"{exc}", 2)
    skipped: list[str] = []
    entries = bc.entries_from_bench(
        results,
        skipped,
        config_dir=config_dir,
        processes=processes,
        margin=margin,
        min_processes=min_processes,
        block_scale_a={i: m.get("block_scale_a", "row") for i, m in enumerate(bench_meta)},
    )
    if not entries:
        console.print(
            "[bold red]nothing written: no key has a (Helion, vLLM) pair measured in at least "
            f"--min-processes {min_processes} process(es) (each kernels.json given is one process); "
            "the skipped keys say why"
        )
        for reason in skipped:
            console.print(f"  skipped {reason}", markup=False, highlight=False)
        raise typer.Exit(1)
    path = config_file_path(SCALED_MM_KERNEL, metadata["gpu"], output)
    merge, present = bc.merge_target(path, metadata, force)
    kept = [e for e in entries if e.id in present] if only_new else []
    written = [e for e in entries if not (only_new and e.id in present)]
    if written:
        stats_dir = stats_output if stats_output is not None else bc.default_stats_dir(output)
        stats_path = stats_file_path(SCALED_MM_KERNEL, metadata["gpu"], stats_dir)
        bc.write_config_and_stats(path, stats_path, written, metadata, merge=merge)
    bc.print_summary(console, path, kernels_json, entries, written, kept, skipped)
    if written:
        console.print(f"measurements of the {len(written)} keys -> {stats_path}", style="green")


configs_app.command("from-bench", short_help="A scaled_mm config file from `bench kernels` results (CPU).")(
    from_bench
)
