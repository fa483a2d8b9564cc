"""``hltools bench kernels``: Helion's scaled GEMM against vLLM's default kernel for each format (and
torch._scaled_mm) per shape (:mod:`hltools.bench`, results :mod:`hltools.kernel_results`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from hltools import options as opt
from hltools.shapes import UnknownLayer

Repeats = Annotated[int, typer.Option(min=3, help="Timed CUDA-graph replays per measurement.")]
Warmup = Annotated[int, typer.Option(min=0, help="Untimed replays first.")]
Baselines = Annotated[
    str, typer.Option(help="Comma-separated baselines to time next to Helion: vllm, torch.")
]
BlockProviders = Annotated[
    str,
    typer.Option(
        help="vLLM block-FP8 kernels to try, in order (the first that works is vLLM's default): "
        "deep_gemm, cutlass, triton; default HL_BLOCK_PROVIDER alone when set, else all three in "
        "that order. DeepGEMM JIT-compiles each shape with nvcc on first use."
    ),
]
Jobs = Annotated[
    int | None,
    typer.Option(
        min=0,
        help="Processes that compile the Helion (and DeepGEMM) kernels in parallel before timing "
        "(fills the on-disk caches); default min(16, CPUs); 0 or 1: compile in the timed loop.",
    ),
]
BlockScaleA = Annotated[
    str,
    typer.Option(
        help="Layout of Block_FP8's activation scales Helion reads: auto (the layout hlvllm's dispatch "
        "mode hands it: tma in capture mode, the default; row with HL_DISPATCH_AT=op), row (row-major, "
        "what hlvllm's op design quantizes into) or tma (vLLM's TMA-aligned column-major, what Helion "
        "reads in capture mode); vLLM's kernels always get their own layout."
    ),
]
List = Annotated[
    bool, typer.Option("--list", help="Print the shapes and candidate kernels and exit; needs no GPU.")
]


def kernels(
    model: opt.Models = "qwen3-8b",
    formats: opt.Formats = "all",
    tp: opt.Tp = 1,
    num_tokens: opt.NumTokens = opt.DEFAULT_NUM_TOKENS,
    output: opt.OutputDir = opt.DEFAULT_OUTPUT,
    out_dtype: opt.OutDtypeOption = opt.OutDtype.bf16,
    layer: opt.Layers = None,
    repeats: Repeats = 20,
    warmup: Warmup = 3,
    baselines: Baselines = "vllm,torch",
    block_providers: BlockProviders = "",
    block_scale_a: BlockScaleA = "auto",
    seed: opt.Seed = 0,
    jobs: Jobs = None,
    plots: opt.Plots = True,
    list_: List = False,
) -> None:
    """Time Helion's scaled GEMM against vLLM's default kernel for each format (and torch._scaled_mm)
    on every linear (N, K) of the model(s) x num_tokens, side by side in one process.

    Each time is the median per-call device time of CUDA-graph replays rotating over weight copies
    larger than 4 x L2 (`hltools.timing`); GB/s and % of the measured copy bandwidth count the fewest
    bytes a call moves. Writes kernels.json / kernels.csv (one row per provider and point, with GPU,
    versions and commit), kernels.md (tables, geomean per format) and `kernels-<format>.png` (speedup
    distribution). Needs a CUDA GPU (exit 2 without one, except --list). Exits 1 if a Helion
    point failed (and prints a command that reruns it).
    """
    from hltools import bench, kernel_results
    from hltools.shapes import linear_shapes

    out = opt.console()
    models = opt.load_models(model)
    fmts = opt.parse_formats(formats)
    tokens = opt.parse_ints(num_tokens, "--num-tokens")
    try:
        block_scale_a = bench.resolve_block_scale_a(block_scale_a)
    except ValueError as exc:
        raise opt.bad_parameter(exc, "--block-scale-a") from None
    try:
        for _, config in models:  # a TP size a model cannot be split by, named as --tp
            linear_shapes(config, tp=tp)
    except ValueError as exc:
        raise opt.bad_parameter(exc, "--tp") from None
    try:
        shapes = bench.bench_shapes(models, fmts, tokens, tp=tp, layers=layer)
        candidates = bench.default_candidates(
            opt.split_names(baselines), opt.split_names(block_providers), block_scale_a
        )
    except UnknownLayer as exc:
        raise opt.bad_parameter(exc, "--layer") from None
    except ValueError as exc:  # an unknown baseline or block provider: the message names it
        raise opt.bad_parameter(exc) from None
    if list_:
        out.print(_points_table(shapes, candidates, tp))
        out.print(f"{len(shapes)} shapes, {sum(len(s.ms) for s in shapes)} points")
        return
    opt.require_gpu(
        "hltools bench kernels", "it times kernels on the device; `--list` shows the points without one"
    )
    import torch

    from hlcore.configs import config_dir
    from hltools.bench_configs import config_file_provenance
    from hltools.results import provenance
    from hltools.timing import copy_bandwidth_gbs

    gpu = torch.cuda.get_device_name()
    bandwidth = copy_bandwidth_gbs()
    shared = provenance(gpu)
    metadata = {
        **shared, "command": opt.command_line(), "models": [m for m, _ in models], "formats": fmts, "tp": tp,
        "num_tokens": tokens, "out_dtype": out_dtype.value, "repeats": repeats, "warmup": warmup,
        "seed": seed, "copy_bandwidth_gbs": bandwidth, "block_scale_a": block_scale_a,
        "candidates": {p: [c.kernel for c in cs] for p, cs in candidates.items()},
        "config_file": config_file_provenance(config_dir(), gpu),
    }  # fmt: skip
    _flashinfer_note(out, metadata)
    out.print(f"GPU {gpu}: measured copy bandwidth {bandwidth:.0f} GB/s; {len(shapes)} shapes -> {output}")
    start = time.monotonic()
    workers = min(16, os.cpu_count() or 1) if jobs is None else jobs
    if workers > 1:
        _precompile(out, shapes, candidates, out_dtype.value, workers, metadata, start, block_scale_a)
    results = _measure(out, shapes, candidates, out_dtype.torch_dtype, seed, shared, metadata, output)
    metadata["seconds"] = round(time.monotonic() - start, 1)
    paths = kernel_results.write_results(output, results, metadata)
    print_summary(out, results)
    out.print(f"wrote {paths['json']}, {paths['csv']}, {paths['md']} ({metadata['seconds']} s)")
    if plots:
        draw_plots(out, results, output, metadata)
    failed = kernel_results.failures(results)
    if failed:
        out.print(f"{len(failed)} Helion point(s) failed; rerun one with:", style="bold red")
        for r in failed:
            cmd = kernel_results.repro_command(r, metadata)
            out.print(f"  {cmd}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _points_table(shapes, candidates, tp: int):
    """``--list``: each shape, its Ms and the kernels each provider tries, in order."""
    from hltools.bench import supported
    from hltools.results import ResultTable

    columns = ["model", "format", "layer", "N", "K", "M", "providers (tried in order)"]
    rows = []
    for s in shapes:
        chains = "; ".join(
            f"{p}: " + " > ".join(c.kernel_on(s.fmt) for c in usable)
            for p, cs in candidates.items()
            if (usable := supported(cs, s.fmt))
        )
        rows.append([s.model, s.fmt, s.layer, str(s.n), str(s.k), ",".join(map(str, s.ms)), chains])
    left = [c for c in columns if c not in ("N", "K")]
    return ResultTable(f"kernel benchmark points (tp {tp})", columns, rows, left=left).rich()


def _flashinfer_note(out: Console, metadata: dict[str, Any]) -> None:
    from hltools import providers

    flash = providers.flashinfer_note()
    if flash:
        metadata["flashinfer"] = flash
        out.print(f"[yellow]{flash}")


def _precompile(
    out: Console,
    shapes,
    candidates,
    out_dtype: str,
    workers: int,
    metadata,
    start,
    block_scale_a: str = "row",
) -> None:
    """Compile every kernel the timed loop runs in ``workers`` processes first (warm on-disk caches),
    fewer where the GPU's free memory budgets fewer (:func:`hltools.bench_compile.workers_for_gpu_memory`)."""
    from hltools import bench_compile

    todo = bench_compile.compile_jobs(
        shapes, out_dtype=out_dtype, candidates=candidates, block_scale_a=block_scale_a
    )
    asked = workers
    # nothing times beside the precompile (its pool is joined before the timed loop starts)
    workers, why = bench_compile.workers_for_gpu_memory(workers, max(s.n * s.k for s in shapes), share=1.0)
    if why:
        out.print(f"precompiling with {workers} processes, not {asked}: {why}")
    with opt.progress(out, "precompiling") as pre:
        ptask = pre.add_task("precompile", total=len(todo))
        errors = bench_compile.precompile(todo, workers, on_done=lambda job, err: pre.advance(ptask))
    metadata["precompile_s"] = round(time.monotonic() - start, 1)
    out.print(
        f"precompiled {len(todo)} kernels in {metadata['precompile_s']} s with {workers} processes"
        + (f"; {len(errors)} failed (the timed loop retries them and reports)" if errors else "")
    )


def _measure(out: Console, shapes, candidates, dtype, seed: int, shared, metadata, output: Path) -> list:
    """The timed loop (:func:`hltools.bench.run_kernel_bench`) under a progress bar; the rows so far
    are written after each shape (a killed run keeps them)."""
    import functools

    from hlcore.numerics import tolerance
    from hltools import bench, kernel_results
    from hltools.timing import copies_for, time_graph

    def inputs_for(shape, copies):
        return bench.make_inputs(
            shape.fmt, shape.n, shape.k, max(shape.ms), copies, device="cuda", out_dtype=dtype, seed=seed
        )

    done: list = []
    with opt.progress(out) as progress:
        task = progress.add_task("kernels", total=sum(len(s.ms) for s in shapes))

        def on_shape(s):
            progress.update(task, description=f"{s.model} {s.fmt} {s.layer} N={s.n} K={s.k}")
            if done:
                kernel_results.write_results(output, done, {**metadata, "partial": True})

        def on_result(r):
            done.append(r)
            if r.provider == "helion":
                progress.advance(task)
            if r.note and not r.ok:
                progress.console.print(
                    f"[yellow]{r.format} {r.layer} M={r.m} {r.provider}: {r.note}", highlight=False
                )

        return bench.run_kernel_bench(
            shapes, candidates=candidates, inputs_for=inputs_for, copies_for=lambda n, k: copies_for(n * k),
            timer=functools.partial(time_graph, repeats=metadata["repeats"], warmup=metadata["warmup"]),
            bandwidth_gbs=metadata["copy_bandwidth_gbs"], shared=shared, repeats=metadata["repeats"],
            tolerance=tolerance, on_result=on_result, on_shape=on_shape,
        )  # fmt: skip


def print_summary(out: Console, results) -> None:
    """One table per format, then the geomean speedups per format."""
    from hltools.kernel_results import geomean_lines, kernel_tables

    for table in kernel_tables(results):
        out.print(table.rich())
    for line in geomean_lines(results):
        out.print(line, style="bold")


def draw_plots(out: Console, results, output: Path, metadata: dict) -> None:
    """``kernels-<format>.png`` (:func:`hltools.plots.plot_kernel_speedups`), or why not."""
    from hltools.plots import PlotsUnavailable, plot_kernel_speedups

    try:
        for path in plot_kernel_speedups(results, output, metadata=metadata):
            out.print(f"wrote {path}")
    except PlotsUnavailable as exc:
        out.print(f"[yellow]no plots: {exc}")
