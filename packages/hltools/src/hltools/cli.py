"""The ``hltools`` app: ``validate``, ``autotune``, ``bench kernels|e2e|report|gap|compare|merge-e2e|aux-configs``
and ``configs from-bench``, one module per command (:mod:`hltools.commands`), with the shared
options of :mod:`hltools.options`.
"""

from __future__ import annotations

import typer

from hltools import options as opt
from hltools.commands import (
    autotune,
    bench_aux_configs,
    bench_compare,
    bench_e2e,
    bench_gap,
    bench_kernels,
    bench_merge_e2e,
    bench_report,
    validate,
)
from hltools.commands.configs_from_bench import configs_app

app = typer.Typer(
    help="Tools for hl: validate, autotune and bench Helion kernels on a model's shapes.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=opt.help_markup(),
)
bench_app = typer.Typer(
    help="Benchmarks: Helion vs vLLM's default kernels per shape (`kernels`), a vLLM engine with and "
    "without the plugin (`e2e`), tables and plots from saved results (`report`), where Helion misses a "
    "target speedup and what it would need (`gap`), two kernel runs of a model as decode steps, each layer as the plugin "
    "would dispatch it (`compare`), how far the aux kernels' generic configs are from the best "
    "per shape in a saved config sweep (`aux-configs`).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=opt.help_markup(),
)


@app.callback()
def main() -> None:
    """hl tools. Run ``hltools COMMAND --help`` for each command."""


# Short summaries for the command lists of `hltools --help` / `hltools bench --help` (click would cut
# each docstring's first sentence at 45 characters).
app.command(short_help="Check the Helion GEMM on a model's linear layers (CPU: interpreter).")(
    validate.validate
)
app.command(short_help="Tune the Helion GEMM's configs for a model on this GPU; --list its keys.")(
    autotune.autotune
)
app.add_typer(bench_app, name="bench", short_help="Benchmarks: kernels, e2e, and reports from saved results.")
app.add_typer(configs_app, name="configs", short_help="Config files from kernel benchmark results.")
bench_app.command(short_help="Time Helion vs vLLM's kernels per (format, N, K, M) (GPU).")(
    bench_kernels.kernels
)
bench_app.command(short_help="A vLLM engine with and without the plugin: tokens/s, TPOT, TTFT (GPU).")(
    bench_e2e.e2e
)
bench_app.command(short_help="Tables and plots again from saved results.")(bench_report.report)
bench_app.command("merge-e2e", short_help="Join `bench e2e` results run as separate commands.")(
    bench_merge_e2e.merge_e2e
)
bench_app.command(short_help="Where Helion misses a target speedup over vLLM's kernel, and why.")(
    bench_gap.gap
)
bench_app.command(short_help="Two kernel runs as decode steps: what tuning bought.")(bench_compare.compare)
bench_app.command("aux-configs", short_help="Aux kernels' generic configs vs a sweep's best per shape.")(
    bench_aux_configs.aux_configs
)
