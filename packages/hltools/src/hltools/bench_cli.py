"""``hltools bench``: ``kernels`` (Helion vs vLLM's default kernels, per shape), ``e2e`` (a vLLM
engine with and without the plugin), ``report`` (tables and plots again from saved results) and
``gap`` (where Helion misses a target speedup in ``kernels`` results, and what it would need).

Mounted on the main app by :mod:`hltools.cli`. Heavy imports (torch, helion, vLLM, matplotlib)
happen inside the commands, so ``--help`` is fast.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from hltools.shapes import load_model_config

bench_app = typer.Typer(
    help="Benchmarks: Helion vs vLLM's default kernels per shape (`kernels`), a vLLM engine with and "
    "without the plugin (`e2e`), tables and plots from saved results (`report`), where Helion misses a "
    "target speedup and what it would need (`gap`), how far the aux kernels' generic configs are from the best "
    "per shape in a saved config sweep (`aux-configs`).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)

DEFAULT_NUM_TOKENS = "1,2,4,8,16,24,32"
DEFAULT_OUTPUT = Path("bench-results")
NO_GPU_EXIT = 2


class OutDtype(StrEnum):
    bf16 = "bf16"
    fp16 = "fp16"


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 200))


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated integers, got {text!r}", param_hint=option
        ) from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return list(dict.fromkeys(values))


def _names(text: str) -> list[str]:
    return list(dict.fromkeys(v for v in text.replace(" ", "").split(",") if v))


def _load_models(model: str) -> list[tuple[str, dict]]:
    out = []
    for name in _names(model):
        try:
            out.append((name, load_model_config(name)))
        except (ValueError, FileNotFoundError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--model") from None
    if not out:
        raise typer.BadParameter("no model given", param_hint="--model")
    return out


def _no_gpu(console: Console, what: str, hint: str) -> None:
    console.print(f"[bold red]hltools bench {what} needs a CUDA GPU[/] ({hint}); none was found.")
    raise typer.Exit(NO_GPU_EXIT)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def _command() -> str:
    return shlex.join(["hltools", *sys.argv[1:]])


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------
def kernel_table(rows: list[dict[str, str]], title: str) -> Table:
    """A rich table of :func:`hltools.bench.table_rows` rows."""
    table = Table(title=title)
    cols = [c for c in rows[0] if c != "format"] if rows else []
    for c in cols:
        table.add_column(c, justify="left" if c in ("model", "layer", "vLLM kernel") else "right")
    for r in rows:
        table.add_row(*(r[c] for c in cols))
    return table


def print_kernel_summary(console: Console, results, metadata: dict | None = None) -> None:
    """One table per format, then the geomean speedups per format."""
    from hltools import kernel_results as bench

    rows = bench.table_rows(results)
    for fmt in dict.fromkeys(r["format"] for r in rows):
        console.print(kernel_table([r for r in rows if r["format"] == fmt], f"{fmt}: per-call µs (median)"))
    for baseline, label in (("vllm", "vLLM's default kernel"), ("torch", "torch._scaled_mm")):
        g = bench.geomean_by_format(results, baseline)
        if g:
            line = ", ".join(f"{fmt} {v:.3f}x" for fmt, v in g.items())
            console.print(f"geomean speedup of Helion vs {label}: {line}", style="bold")


def _plot_kernels(console: Console, results, output: Path, metadata: dict) -> None:
    from hltools.plots import PlotsUnavailable, plot_kernel_speedups

    try:
        for path in plot_kernel_speedups(results, output, metadata=metadata):
            console.print(f"wrote {path}")
    except PlotsUnavailable as exc:
        console.print(f"[yellow]no plots: {exc}")


@bench_app.command()
def kernels(
    model: Annotated[
        str,
        typer.Option(
            help="Embedded model name(s), comma-separated (see `hltools validate --list-models`; an HF id "
            "such as Qwen/Qwen3-8B matches by its last part), or paths to config.json files."
        ),
    ] = "qwen3-8b",
    formats: Annotated[
        str, typer.Option(help="Comma-separated formats: fp8_dynamic, w8a8_int8, block_fp8.")
    ] = "fp8_dynamic,w8a8_int8,block_fp8",
    tp: Annotated[
        int, typer.Option(min=1, help="Tensor-parallel size: N/tp column-, K/tp row-parallel.")
    ] = 1,
    num_tokens: Annotated[str, typer.Option(help="Comma-separated M values.")] = DEFAULT_NUM_TOKENS,
    output: Annotated[
        Path, typer.Option(help="Directory for `kernels.{json,csv,md}` and `kernels-<format>.png`.")
    ] = DEFAULT_OUTPUT,
    out_dtype: Annotated[OutDtype, typer.Option(help="Output dtype.")] = OutDtype.bf16,
    layer: Annotated[
        list[str] | None, typer.Option(help="Only these layers (qkv, o, gate_up, down); repeatable.")
    ] = None,
    repeats: Annotated[int, typer.Option(min=3, help="Timed CUDA-graph replays per measurement.")] = 20,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed replays first.")] = 3,
    baselines: Annotated[
        str, typer.Option(help="Comma-separated baselines to time next to Helion: vllm, torch.")
    ] = "vllm,torch",
    block_providers: Annotated[
        str,
        typer.Option(
            help="vLLM block-FP8 kernels to try, in order (the first that works is vLLM's default): "
            "deep_gemm, cutlass, triton; default HL_BLOCK_PROVIDER alone when set, else all three in "
            "that order. DeepGEMM JIT-compiles each shape with nvcc on first use."
        ),
    ] = "",
    seed: Annotated[int, typer.Option(help="Seed of the generated inputs.")] = 0,
    jobs: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Processes that compile the Helion (and DeepGEMM) kernels in parallel before timing "
            "(fills the on-disk caches); default min(16, CPUs); 0 or 1: compile in the timed loop.",
        ),
    ] = None,
    plots: Annotated[bool, typer.Option(help="Write a PNG per format (needs matplotlib).")] = True,
    list_: Annotated[
        bool, typer.Option("--list", help="Print the shapes and candidate kernels and exit; needs no GPU.")
    ] = False,
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
    from hltools import bench, providers

    console = _console()
    models = _load_models(model)
    fmts = _names(formats)
    tokens = _ints(num_tokens, "--num-tokens")
    try:
        shapes = bench.bench_shapes(models, fmts, tokens, tp=tp, layers=layer)
        candidates = bench.default_candidates(_names(baselines), _names(block_providers))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if list_:
        table = Table(title=f"kernel benchmark points (tp {tp})")
        for col in ("model", "format", "layer", "N", "K", "M", "providers (tried in order)"):
            table.add_column(col, justify="right" if col in ("N", "K") else "left")
        for s in shapes:
            chains = "; ".join(
                f"{p}: " + " > ".join(c.kernel for c in cs if s.fmt in c.formats)
                for p, cs in candidates.items()
                if any(s.fmt in c.formats for c in cs)
            )
            table.add_row(s.model, s.fmt, s.layer, str(s.n), str(s.k), ",".join(map(str, s.ms)), chains)
        console.print(table)
        console.print(f"{len(shapes)} shapes, {sum(len(s.ms) for s in shapes)} points")
        return
    if not _cuda_available():
        _no_gpu(console, "kernels", "it times kernels on the device; `--list` shows the points without one")

    import functools

    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hltools import bench_compile, kernel_results
    from hltools.results import provenance
    from hltools.timing import copies_for, copy_bandwidth_gbs, time_graph

    dtype = {OutDtype.bf16: torch.bfloat16, OutDtype.fp16: torch.float16}[out_dtype]
    gpu = torch.cuda.get_device_name()
    bandwidth = copy_bandwidth_gbs()
    shared = provenance(gpu)
    metadata = {
        **shared,
        "command": _command(),
        "models": [m for m, _ in models],
        "formats": fmts,
        "tp": tp,
        "num_tokens": tokens,
        "out_dtype": out_dtype.value,
        "repeats": repeats,
        "warmup": warmup,
        "seed": seed,
        "copy_bandwidth_gbs": bandwidth,
        "candidates": {p: [c.kernel for c in cs] for p, cs in candidates.items()},
    }
    flash = providers.flashinfer_note()
    if flash:
        metadata["flashinfer"] = flash
        console.print(f"[yellow]{flash}")
    console.print(
        f"GPU {gpu}: measured copy bandwidth {bandwidth:.0f} GB/s; {len(shapes)} shapes -> {output}"
    )
    start = time.monotonic()
    workers = min(16, os.cpu_count() or 1) if jobs is None else jobs
    if workers > 1:
        todo = bench_compile.compile_jobs(shapes, out_dtype=out_dtype.value, candidates=candidates)
        with Progress(
            TextColumn("precompiling"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as pre:
            ptask = pre.add_task("precompile", total=len(todo))
            errors = bench_compile.precompile(todo, workers, on_done=lambda job, err: pre.advance(ptask))
        metadata["precompile_s"] = round(time.monotonic() - start, 1)
        console.print(
            f"precompiled {len(todo)} kernels in {metadata['precompile_s']} s with {workers} processes"
            + (f"; {len(errors)} failed (the timed loop retries them and reports)" if errors else "")
        )

    def inputs_for(shape, copies):
        return bench.make_inputs(
            shape.fmt, shape.n, shape.k, max(shape.ms), copies, device="cuda", out_dtype=dtype, seed=seed
        )

    from hlcore.testing import tolerance

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task("kernels", total=sum(len(s.ms) for s in shapes))

        done: list = []  # rows so far, written after each shape (a killed run keeps them)

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

        results = bench.run_kernel_bench(
            shapes,
            candidates=candidates,
            timer=functools.partial(time_graph, repeats=repeats, warmup=warmup),
            inputs_for=inputs_for,
            copies_for=lambda n, k: copies_for(n * k),
            bandwidth_gbs=bandwidth,
            shared=shared,
            repeats=repeats,
            tolerance=tolerance,
            on_result=on_result,
            on_shape=on_shape,
        )
    metadata["seconds"] = round(time.monotonic() - start, 1)
    paths = kernel_results.write_results(output, results, metadata)
    print_kernel_summary(console, results, metadata)
    console.print(f"wrote {paths['json']}, {paths['csv']}, {paths['md']} ({metadata['seconds']} s)")
    if plots:
        _plot_kernels(console, results, output, metadata)
    failed = kernel_results.failures(results)
    if failed:
        console.print(f"{len(failed)} Helion point(s) failed; rerun one with:", style="bold red")
        for r in failed:
            console.print(f"  {repro_command(r, metadata)}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def repro_command(r, metadata: dict) -> str:
    """The ``hltools bench kernels`` command that reruns only the point of result ``r``."""
    parts = ["hltools", "bench", "kernels", "--model", r.model, "--formats", r.format, "--tp", str(r.tp)]
    for name in r.layer.split("/"):
        parts += ["--layer", name]
    parts += ["--num-tokens", str(r.m), "--out-dtype", r.out_dtype, "--seed", str(metadata.get("seed", 0))]
    return shlex.join(parts)


# --------------------------------------------------------------------------------------------
# e2e
# --------------------------------------------------------------------------------------------
def e2e_table(summary: dict, title: str) -> Table:
    """A rich table of :func:`hltools.e2e.summarize`'s rows; per extra setting with runs (``gemm``:
    Helion GEMMs only, ``HL_AUX_KERNELS=none``; ``aux``: Helion GEMMs and aux kernels,
    ``HL_AUX_KERNELS=all``; ``fused``: ``HL_AUX_FUSION=1``) its tokens/s, speedup over vLLM and TPOT
    too, headed by its label ("GEMM only", "GEMM+aux", "fused aux")."""
    from hltools.e2e import extra_settings

    def f(v, spec):
        return "-" if v is None else format(v, spec)

    extras = extra_settings(summary)
    table = Table(title=title)
    cols = ["concurrency", "tok/s vLLM", "tok/s hlvllm", "speedup", "TPOT ms vLLM", "TPOT ms hlvllm"]
    for x in extras:
        cols += [f"tok/s {x.label}", f"speedup {x.label}", f"TPOT ms {x.label}"]
    for c in cols:
        table.add_column(c, justify="right")
    for r in summary["rows"]:
        cells = [
            str(r["concurrency"]),
            f(r["tokens_per_s_off"], ".0f"),
            f(r["tokens_per_s_on"], ".0f"),
            f(r["speedup"], ".3f"),
            f(r["tpot_ms_off"], ".2f"),
            f(r["tpot_ms_on"], ".2f"),
        ]
        for x in extras:
            cells += [
                f(r.get(f"tokens_per_s{x.suffix}"), ".0f"),
                f(r.get(f"speedup{x.suffix}"), ".3f"),
                f(r.get(f"tpot_ms{x.suffix}"), ".2f"),
            ]
        table.add_row(*cells)
    return table


@bench_app.command()
def e2e(
    model: Annotated[
        str,
        typer.Option(
            help="Embedded model name (see `hltools validate --list-models`; an HF id such as "
            "Qwen/Qwen3-8B matches by its last part) or a path to a config.json (architecture only; "
            "no weights)."
        ),
    ] = "qwen3-8b",
    fmt: Annotated[
        str, typer.Option("--format", help="fp8_dynamic, w8a8_int8 or block_fp8.")
    ] = "fp8_dynamic",
    layers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Decoder layers to build (fewer = faster start-up; shapes stay real). Default: all."
        ),
    ] = None,
    concurrency: Annotated[
        str, typer.Option(help="Comma-separated numbers of sequences decoded together (<= 32).")
    ] = "1,2,4,8,16,32",
    input_len: Annotated[int, typer.Option(min=1, help="Prompt tokens per sequence.")] = 128,
    output_len: Annotated[int, typer.Option(min=2, help="Output tokens per sequence (ignore_eos).")] = 128,
    repeats: Annotated[int, typer.Option(min=1, help="Timed generate calls per concurrency and length.")] = 3,
    rounds: Annotated[
        int,
        typer.Option(min=1, help="Engine runs per plugin setting; round 1 cold caches, later rounds warm."),
    ] = 2,
    plugins: Annotated[
        str,
        typer.Option(
            help="Which engines (comma-separated, run alternating): off (no plugin), on (the plugin's "
            "defaults: Helion GEMMs only, vLLM's norm/activation/quant layers fused by Inductor), gemm "
            "(Helion GEMMs only, explicit HL_AUX_KERNELS=none), aux (Helion GEMMs and aux kernels: "
            "HL_AUX_KERNELS=all), fused (HL_AUX_FUSION=1: the aux kernels, each norm / silu_and_mul "
            "fused with the fp8 quant after it)."
        ),
    ] = "off,on",
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's gpu_memory_utilization.")] = 0.6,
    seed: Annotated[int, typer.Option(help="Seed of the prompts and the engine.")] = 0,
    tensor_parallel_size: Annotated[
        int,
        typer.Option(
            "--tensor-parallel-size",
            "--tp",
            help="vLLM's tensor_parallel_size (GPUs per engine); > 1 turns NVLink multicast off "
            "(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 unless "
            "set) and adds `-tp<N>` to the file names.",
        ),
    ] = 1,
    output: Annotated[
        Path, typer.Option(help="Directory for `e2e-<model>-<format>[-tp<N>].{json,csv,md,png}`.")
    ] = DEFAULT_OUTPUT,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds after which one engine run is killed (default: none).")
    ] = None,
    hl_kernel_cache: Annotated[
        bool,
        typer.Option(
            help="Give every engine its own hlcore kernel cache (HL_KERNEL_CACHE_DIR under the output "
            "directory, emptied with the other caches before round 1; off's engine loads no plugin, so "
            "only the plugin's engines use it), so warm rounds load Helion's generated code instead of "
            "generating it again. --no-hl-kernel-cache sets HL_KERNEL_CACHE_DIR empty (off) in every engine."
        ),
    ] = True,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the engine runs' command lines and exit; needs no GPU.")
    ] = False,
) -> None:
    """Output tokens/s and per-token latency of a real vLLM engine (dummy weights from the model's
    config.json) with and without the plugin, at each concurrency; engine start-up time with cold
    and warm compile caches. `on` is the plugin's defaults (Helion GEMMs only); `--plugins off,on,aux`
    adds engines with Helion's aux kernels too (HL_AUX_KERNELS=all), to set their effect against
    Inductor's fused norm+quant; `gemm` engines with an explicit HL_AUX_KERNELS=none; `fused` (e.g.
    `--plugins off,on,aux,fused`) engines with hlvllm's aux fusion pass (HL_AUX_FUSION=1, which turns
    the aux kernels on), one launch per norm (activation) + fp8 quant pair.

    Each engine runs in its own process (`python -m hltools.e2e worker`), max_num_seqs 32, prefix
    caching off, fixed input/output lengths, greedy. Writes `e2e-<model>-<format>.{json,csv,md}` and
    a PNG of the speedup vs concurrency. Needs a CUDA GPU (exit 2 without one, except --dry-run;
    --tensor-parallel-size N needs N). Exits 1 if an engine run failed (its log is kept under the
    output directory).
    """
    from hltools import e2e as e

    console = _console()
    try:
        config = load_model_config(model)
    except (ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None
    try:
        options = e.E2EOptions(
            concurrency=tuple(_ints(concurrency, "--concurrency")),
            input_len=input_len,
            output_len=output_len,
            repeats=repeats,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            tensor_parallel_size=tensor_parallel_size,
        )
        cfg = e.engine_model_config(config, fmt, layers)
        output = output.resolve()
        stem = e.e2e_stem(model, fmt, tensor_parallel_size)
        specs = e.plan_runs(output / stem, _names(plugins), rounds)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if dry_run:
        console.print(
            f"{len(specs)} engine runs of {model} ({cfg['num_hidden_layers']} layers, {fmt}, TP "
            f"{tensor_parallel_size}); model dir {output / stem / 'model'} (written by the real run, not by "
            "--dry-run); in this order:"
        )
        for s in specs:
            cmd = e.worker_command(sys.executable, output / stem / "model", s.plugin, options, s.out)
            line = e.shell_line(
                cmd,
                e.worker_env(
                    s.plugin, s.cache, tensor_parallel_size=tensor_parallel_size, kernel_cache=hl_kernel_cache
                ),
            )
            console.print(f"# {s.name} ({'cold' if s.cold else 'warm'} caches)", highlight=False)
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    if not _cuda_available():
        _no_gpu(console, "e2e", "it starts vLLM engines; `--dry-run` prints their command lines without one")
    gpus = _cuda_device_count()
    if tensor_parallel_size > gpus:
        console.print(
            f"[bold red]--tensor-parallel-size {tensor_parallel_size} needs {tensor_parallel_size} GPUs; "
            f"{gpus} visible.",
            highlight=False,
        )
        raise typer.Exit(NO_GPU_EXIT)

    from hltools.provenance import git_commit

    def on_run(spec, event):
        what = f"engine run {spec.name} ({'cold' if spec.cold else 'warm'} compile caches)"
        if event == "start":
            console.print(f"{what}: starting", highlight=False)
        else:
            console.print(f"{what}: [{'green' if event == 'done' else 'bold red'}]{event}", highlight=False)

    report = e.run_e2e(
        model=model,
        model_config=config,
        fmt=fmt,
        layers=layers,
        options=options,
        output=output,
        plugins=_names(plugins),
        rounds=rounds,
        timeout=timeout,
        metadata={"command": _command(), "commit": git_commit() or ""},
        on_run=on_run,
        kernel_cache=hl_kernel_cache,
    )
    summary, meta = report.files["summary"], report.files["metadata"]
    title = f"{model} {fmt}, {meta['layers']} layers, TP {tensor_parallel_size}: output tokens/s"
    console.print(e2e_table(summary, title))
    s = summary["startup"]
    console.print(f"start-up (s): {s}")
    if summary.get("helion_ranks"):
        console.print(e.helion_line(summary["helion_ranks"]), highlight=False)
    console.print(f"wrote {report.files['json']}, {report.files['csv']}, {report.files['md']}")
    _plot_e2e(console, summary, output / f"{report.files['stem']}.png", meta)
    if report.failed:
        for name, msg in report.failed.items():
            console.print(f"[bold red]engine run {name} failed[/]: {msg}", highlight=False)
        raise typer.Exit(1)


def _plot_e2e(console: Console, summary: dict, path: Path, meta: dict) -> None:
    from hltools.plots import PlotsUnavailable, plot_e2e

    if not summary["rows"]:
        return
    try:
        console.print(f"wrote {plot_e2e(summary['rows'], path, metadata=meta)}")
    except PlotsUnavailable as exc:
        console.print(f"[yellow]no plot: {exc}")


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
def _read_json(path: Path) -> dict:
    """A result file, plain or gzipped (``.json.gz``, as committed under docs/benchmarks/)."""
    import gzip
    import json

    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def _show_e2e(console: Console, directory: Path, stem: str, meta: dict, summary: dict, plots: bool) -> None:
    """Print a bench e2e summary's table (and Helion line) and write ``<stem>.md`` (and ``.png``)."""
    from hltools import e2e as e

    console.print(e2e_table(summary, f"{stem}: output tokens/s"))
    if summary.get("helion_ranks"):
        console.print(e.helion_line(summary["helion_ranks"]), highlight=False)
    (directory / f"{stem}.md").write_text(e.summary_markdown(meta, summary))
    if plots:
        _plot_e2e(console, summary, directory / f"{stem}.png", meta)


@bench_app.command()
def report(
    directory: Annotated[Path, typer.Argument(help="An output directory of `bench kernels` / `bench e2e`.")],
    plots: Annotated[bool, typer.Option(help="(Re)draw the PNGs.")] = True,
) -> None:
    """Print the tables and geomeans of saved results and redraw their markdown and PNGs (for results
    measured where matplotlib is not installed). Reads ``kernels.json`` and ``e2e-*.json``, or their
    gzipped ``.json.gz`` (as committed under docs/benchmarks/). Exits 1 when the directory holds no
    results."""

    from hltools import e2e as e
    from hltools import kernel_results

    console = _console()
    found = False
    kernels_file = kernel_results.results_path(directory)
    if kernels_file.is_file():
        found = True
        try:
            metadata, results = kernel_results.read_results(kernels_file)
        except ValueError as exc:
            console.print(f"[bold red]{exc}")
            raise typer.Exit(1) from None
        print_kernel_summary(console, results, metadata)
        (directory / kernel_results.SUMMARY_MD).write_text(kernel_results.summary_markdown(results, metadata))
        if plots:
            _plot_kernels(console, results, directory, metadata)
    e2e_files = {p.name.removesuffix(".gz"): p for p in sorted(directory.glob("e2e-*.json.gz"))}
    e2e_files.update({p.name: p for p in sorted(directory.glob("e2e-*.json"))})  # plain file wins
    for name, path in sorted(e2e_files.items()):
        payload = _read_json(path)
        if "summary" not in payload:
            continue
        found = True
        meta, runs = payload.get("metadata", {}), payload.get("runs", [])
        summary = e.summarize(runs)
        stem = name.removesuffix(".json")  # e2e-qwen3-1.7b-fp8_dynamic: no Path.with_suffix (".7b-...")
        _show_e2e(console, directory, stem, meta, summary, plots)
    if not found:
        console.print(f"[bold red]no kernels.json or e2e-*.json results in {directory}")
        raise typer.Exit(1)


@bench_app.command("merge-e2e")
def merge_e2e(
    files: Annotated[
        list[Path],
        typer.Argument(help="`e2e-<model>-<format>.json` (or `.json.gz`) files of `bench e2e` runs to join."),
    ],
    output: Annotated[Path, typer.Option(help="Directory for the merged result.")] = Path("bench-results"),
    plots: Annotated[bool, typer.Option(help="Draw the PNG.")] = True,
) -> None:
    """Join `bench e2e` results of the same model, format, layers, TP and GPU that ran as separate
    commands (e.g. `--plugins off` and `--plugins on` in two device calls) into one result with one
    summary: `e2e-<model>-<format>[-tp<N>].{json,csv,md,png}` in --output. Exits 2 when the files
    disagree on those fields or hold the same (plugin, round) twice."""
    import json

    from hltools import e2e as e

    console = _console()
    metas, runs = [], []
    for path in files:
        payload = _read_json(path)
        if "runs" not in payload:
            raise typer.BadParameter(f"{path}: not a `bench e2e` result (no runs)", param_hint="FILES")
        metas.append(payload.get("metadata", {}))
        runs += payload["runs"]
    same = ("model", "format", "layers", "tensor_parallel_size", "gpu")
    for field in same:
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
    meta["command"] = _command()  # this merge; each part's own command is in merged_from
    tp = meta.get("tensor_parallel_size") or 1
    stem = f"e2e-{meta.get('model')}-{meta.get('format')}" + (f"-tp{tp}" if tp > 1 else "")
    output.mkdir(parents=True, exist_ok=True)
    written = e.write_e2e(output, stem, meta, runs)
    _show_e2e(console, output, stem, meta, written["summary"], plots)
    console.print(f"merged {len(runs)} runs from {len(files)} files into {written['json']}")


# --------------------------------------------------------------------------------------------
# gap
# --------------------------------------------------------------------------------------------
def _rich_table(rows: list[dict[str, str]], title: str) -> Table:
    table = Table(title=title)
    left = ("file", "format", "model", "layer", "vLLM kernel", "verdict")
    for c in rows[0] if rows else []:
        table.add_column(c, justify="left" if c in left else "right", overflow="fold")
    for r in rows:
        table.add_row(*r.values())
    return table


@bench_app.command()
def gap(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="`kernels.json` files of `bench kernels` (or their directories; a missing `kernels.json` "
            "is read from `kernels.json.gz` next to it)."
        ),
    ],
    target: Annotated[
        float, typer.Option(min=1.0, help="Speedup over vLLM's default kernel to reach.")
    ] = 1.25,
    markdown: Annotated[
        Path | None, typer.Option(help="Also write the report (with the per-point tables) as markdown here.")
    ] = None,
    points: Annotated[bool, typer.Option(help="Print the per-point tables too.")] = False,
    read_floor: Annotated[
        Path | None,
        typer.Option(
            help="`stream_floor.json` of `ci/gpu/stream_floor.py`: per (N, K), the best measured time of its "
            "Triton kernels that only read the weight (a measured floor, not a hardware bound; measure it on "
            "the same GPU model). Adds a table per format: points where vLLM µs / target < read µs, the "
            "geomean vLLM / read and Helion / read, and the Helion / read the target needs. Shapes not in the "
            "file count as 'no floor' and are left out."
        ),
    ] = None,
) -> None:
    """Where Helion misses the --target speedup over vLLM's default kernel, and what it would need
    (`hltools.bench_gap`). Per point timed for both: bytes moved (`bench.gemm_bytes`), the copy-bandwidth
    floor bytes / copy BW, the time needed vLLM / target, and the verdict: met, needs X µs less fixed
    cost, or beyond copy bandwidth (no kernel reaches the target). Per file and format: geomean, as
    dispatched (slower keys 1.0), the floor-limited best geomean, median % of copy bandwidth for weights
    of at least 16 MiB, verdict counts; per format a fit t = bytes / BW_eff + c for Helion and vLLM. With
    --read-floor, per format: points beyond a weight read (a GEMM that streams its weight no faster than
    that read kernel cannot meet the target), the best geomean at the read's speed (vLLM / read) and
    Helion's time over the read's. Needs no GPU. Exits 1 when a file cannot be read or holds no Helion/vLLM pair."""
    from hltools import bench_gap as g
    from hltools.kernel_results import read_results

    console = _console()
    rows, sources = [], {}
    for path in files:
        try:
            metadata, results = read_results(path)
        except (FileNotFoundError, ValueError) as exc:
            console.print(f"[bold red]{exc}")
            raise typer.Exit(1) from None
        label = g.file_label(path)
        bw = g.copy_bandwidth_gbs(metadata, results)
        if not bw:
            console.print(f"[bold red]{path}: no copy bandwidth in its metadata or rows")
            raise typer.Exit(1)
        got, skipped = g.gap_rows(results, bw, target, label)
        if not got:
            console.print(f"[bold red]{path}: no point timed for both Helion and vLLM")
            raise typer.Exit(1)
        if skipped:
            console.print(f"[yellow]{label}: {skipped} Helion/vLLM rows without a timed partner left out")
        rows += got
        sources[label] = metadata
    summaries = g.summarize(rows)
    fits = g.fit_by_format(rows)
    floor_summaries, floor_source = None, ""
    if read_floor is not None:
        try:
            floor_meta, floor = g.load_read_floor(read_floor)
        except (FileNotFoundError, ValueError) as exc:
            console.print(f"[bold red]{exc}")
            raise typer.Exit(1) from None
        floor_summaries = g.read_floor_summary(rows, floor, target)
        floor_source = f"`{read_floor.name}` ({floor_meta.get('gpu', '?')}, {len(floor)} shapes)"
    if points:
        for s in summaries:
            sub = [r for r in rows if (r.file, r.format) == (s.file, s.format)]
            console.print(_rich_table(g.point_table(sub), f"{s.file}: {s.format}"))
    console.print(
        _rich_table(g.summary_table(summaries), f"Helion vs vLLM's default kernel, target {target:g}x")
    )
    console.print(_rich_table(g.fit_table(fits), "t = bytes / BW_eff + c (least squares, per format)"))
    if floor_summaries:
        console.print(
            _rich_table(g.read_floor_table(floor_summaries), f"Against a weight read: {floor_source}")
        )
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(
            g.markdown(rows, summaries, fits, target, _command(), sources, floor_summaries, floor_source)
        )
        console.print(f"wrote {markdown}")


@bench_app.command("aux-configs")
def aux_configs(
    sweep: Annotated[
        Path,
        typer.Argument(
            help="`sweep_aux_configs.json` (or `.json.gz`) written by `ci/gpu/sweep_aux_configs.py` on a GPU."
        ),
    ],
    tolerance: Annotated[
        float,
        typer.Option(
            min=0.0, help="A derived config set may be this much slower than the best (0.05 = 5 %)."
        ),
    ] = 0.05,
) -> None:
    """How far the aux kernels' generic configs are from the best per shape (`hltools.aux_sweep`): from a
    saved sweep that timed every config of each kernel's set and vLLM's op over hidden sizes x num_tokens
    (measured on a GPU with `ci/gpu/sweep_aux_configs.py`), re-derive per kernel the smallest set within
    --tolerance of the per-shape best and its rule (num_tokens, hidden) -> config, the picked config's
    slowdown against the best (geomean, max and where) and the speedups over vLLM's op. Needs no GPU.
    Exits 1 when the file cannot be read or holds no timings."""
    import gzip
    import json

    from hltools import aux_sweep

    console = _console()
    try:
        opener = gzip.open if sweep.suffix == ".gz" else open
        with opener(sweep, "rt") as f:
            records = json.load(f).get("results") or []
    except (OSError, ValueError, AttributeError) as exc:
        console.print(f"[bold red]{sweep}: not a sweep_aux_configs.json ({exc})")
        raise typer.Exit(1) from None
    if not records:
        console.print(f"[bold red]{sweep}: no timings (its 'results' list is empty)")
        raise typer.Exit(1)
    for line in aux_sweep.summary_lines(aux_sweep.analyze(records, tolerance=tolerance)):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
