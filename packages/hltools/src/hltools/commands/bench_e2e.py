"""``hltools bench e2e``: a real vLLM engine with and without the plugin (:mod:`hltools.e2e`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from hltools import options as opt

Layers = Annotated[
    int | None,
    typer.Option(
        min=1, help="Decoder layers to build (fewer = faster start-up; shapes stay real). Default: all."
    ),
]
Concurrency = Annotated[
    str, typer.Option(help="Comma-separated numbers of sequences decoded together (<= 32).")
]
InputLen = Annotated[int, typer.Option(min=1, help="Prompt tokens per sequence.")]
OutputLen = Annotated[int, typer.Option(min=2, help="Output tokens per sequence (ignore_eos).")]
Repeats = Annotated[int, typer.Option(min=1, help="Timed generate calls per concurrency and length.")]
TtftLens = Annotated[
    str,
    typer.Option(
        help="Comma-separated prompt lengths at which each engine also times the first token of one "
        "sequence alone (--ttft-repeats one-token generates each, after one untimed); e.g. 128,1024. "
        "Default: none."
    ),
]
TtftRepeats = Annotated[int, typer.Option(min=1, help="Timed one-token generates per --ttft-lens length.")]
Rounds = Annotated[
    int, typer.Option(min=1, help="Engine runs per plugin setting; round 1 cold caches, later rounds warm.")
]
Plugins = Annotated[
    str,
    typer.Option(
        help="Which engines (comma-separated, run in turn, reversed every other round): off (no "
        "plugin), on (the plugin's "
        "defaults: Helion GEMMs only, vLLM's norm/activation/quant layers fused by Inductor), gemm "
        "(Helion GEMMs only, explicit HL_AUX_KERNELS=none), aux (Helion GEMMs and aux kernels: "
        "HL_AUX_KERNELS=all), fused (HL_AUX_FUSION=1: the aux kernels, each norm / silu_and_mul "
        "fused with the fp8 quant after it), control (no plugin, vLLM's second-choice kernel: "
        "the yardstick of the logprob check; untimed, round 1 only)."
    ),
]
GpuMemoryUtilization = Annotated[float, typer.Option(help="vLLM's gpu_memory_utilization.")]
Seed = Annotated[int, typer.Option(help="Seed of the prompts and the engine.")]
TensorParallelSize = Annotated[
    int,
    typer.Option(
        "--tensor-parallel-size",
        "--tp",
        help="vLLM's tensor_parallel_size (GPUs per engine); > 1 turns NVLink multicast off "
        "(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 unless "
        "set) and adds `-tp<N>` to the file names.",
    ),
]
Timeout = Annotated[
    float | None, typer.Option(help="Seconds after which one engine run is killed (default: none).")
]
HlKernelCache = Annotated[
    bool,
    typer.Option(
        help="Give every engine its own hlcore kernel cache (HL_KERNEL_CACHE_DIR under the output "
        "directory, emptied with the other caches before round 1; off's engine loads no plugin, so "
        "only the plugin's engines use it), so warm rounds load Helion's generated code instead of "
        "generating it again. --no-hl-kernel-cache sets HL_KERNEL_CACHE_DIR empty (off) in every engine."
    ),
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the engine runs' command lines and exit; needs no GPU.")
]


def e2e(
    model: opt.Model = "qwen3-8b",
    fmt: opt.Format = "fp8_dynamic",
    layers: Layers = None,
    concurrency: Concurrency = "1,2,4,8,16,32",
    input_len: InputLen = 128,
    output_len: OutputLen = 128,
    repeats: Repeats = 3,
    ttft_lens: TtftLens = "",
    ttft_repeats: TtftRepeats = 10,
    rounds: Rounds = 2,
    plugins: Plugins = "off,on,control",
    gpu_memory_utilization: GpuMemoryUtilization = 0.6,
    seed: Seed = 0,
    tensor_parallel_size: TensorParallelSize = 1,
    output: opt.OutputDir = opt.DEFAULT_OUTPUT,
    timeout: Timeout = None,
    hl_kernel_cache: HlKernelCache = True,
    dry_run: DryRun = False,
) -> None:
    """Output tokens/s and per-token latency of a real vLLM engine (dummy weights from the model's
    config.json) with and without the plugin, at each concurrency; engine start-up time with cold
    and warm compile caches. `on` is the plugin's defaults (Helion GEMMs only); `--plugins off,on,aux`
    adds engines with Helion's aux kernels too (HL_AUX_KERNELS=all), to set their effect against
    Inductor's fused norm+quant; `gemm` engines with an explicit HL_AUX_KERNELS=none; `fused` (e.g.
    `--plugins off,on,aux,fused`) engines with hlvllm's aux fusion pass (HL_AUX_FUSION=1, which turns
    the aux kernels on), one launch per norm (activation) + fp8 quant pair.

    Every engine also scores 8 fixed sequences of 2-32 tokens, each alone so that the plugin's
    engine runs them on Helion (teacher-forced logprobs); the summary gives each
    setting's max and mean |Δlogprob| against `off`'s and, with `control` (default `off,on,control`:
    no plugin, vLLM's second-choice kernel, one untimed engine start), fails the plugin where its
    max or mean exceeds 2x the control's.

    Each engine runs in its own process (`python -m hltools.e2e worker`), max_num_seqs 32, prefix
    caching off, fixed input/output lengths, greedy. Writes `e2e-<model>-<format>.{json,csv,md}` and
    a PNG of the speedup vs concurrency. Needs a CUDA GPU (exit 2 without one, except --dry-run;
    --tensor-parallel-size N needs N). Exits 1 if an engine run failed (its log is kept under the
    output directory) or the numerics check says FAIL (after writing the files).
    """
    from hltools import e2e as e

    out = opt.console()
    config = opt.load_model(model)
    fmt = opt.parse_format(fmt)
    try:
        options = e.E2EOptions(
            concurrency=tuple(opt.parse_ints(concurrency, "--concurrency")), input_len=input_len,
            output_len=output_len, repeats=repeats, gpu_memory_utilization=gpu_memory_utilization, seed=seed,
            tensor_parallel_size=tensor_parallel_size,
            ttft_lens=tuple(opt.parse_ints(ttft_lens, "--ttft-lens")) if ttft_lens.strip() else (),
            ttft_repeats=ttft_repeats,
        )  # fmt: skip
        cfg = e.engine_model_config(config, fmt, layers)
        output = output.resolve()
        stem = e.e2e_stem(model, fmt, tensor_parallel_size)
        specs = e.plan_runs(output / stem, opt.split_names(plugins), rounds)
    except ValueError as exc:
        raise opt.bad_parameter(exc) from None
    if dry_run:
        what = f"{model} ({cfg['num_hidden_layers']} layers, {fmt}, TP {tensor_parallel_size})"
        _print_runs(out, specs, output / stem / "model", options, hl_kernel_cache, what)
        return
    _require_gpus(tensor_parallel_size)
    report = e.run_e2e(
        model=model, model_config=config, fmt=fmt, layers=layers, options=options, output=output,
        plugins=opt.split_names(plugins), rounds=rounds, timeout=timeout, kernel_cache=hl_kernel_cache,
        metadata={"command": opt.command_line(), "commit": _commit()}, on_run=lambda s, ev: _on_run(out, s, ev),
    )  # fmt: skip
    summary, meta = report.files["summary"], report.files["metadata"]
    print_summary(
        out, summary, f"{model} {fmt}, {meta['layers']} layers, TP {tensor_parallel_size}: output tokens/s"
    )
    out.print(f"wrote {report.files['json']}, {report.files['csv']}, {report.files['md']}")
    draw_plot(out, summary, output / f"{report.files['stem']}.png", meta)
    for name, msg in report.failed.items():
        out.print(f"[bold red]engine run {name} failed[/]: {msg}", highlight=False)
    if report.failed or numerics_failed(out, summary):
        raise typer.Exit(1)


def numerics_failed(out: Console, summary: dict) -> bool:
    """Whether the numerics check of ``summary`` failed (the plugin's |Δlogprob| over 2x the
    control's); says so in red when it did."""
    failed = (summary.get("numerics") or {}).get("ok") is False
    if failed:
        out.print("[bold red]numerics check FAILED[/]: the plugin's logprobs are further from vLLM's than 2x "
                  "the control's (see the Numerics line)", highlight=False)  # fmt: skip
    return failed


def _print_runs(out: Console, specs, model_dir: Path, options, kernel_cache: bool, what: str) -> None:
    """``--dry-run``: each engine run's command line with the environment it changes."""
    from hltools import e2e as e

    out.print(
        f"{len(specs)} engine runs of {what}; model dir {model_dir} (written by the real run, not by "
        "--dry-run); in this order:"
    )
    tp = options.tensor_parallel_size
    for s in specs:
        cmd = e.worker_command(sys.executable, model_dir, s.plugin, options, s.out)
        line = e.shell_line(
            cmd, e.worker_env(s.plugin, s.cache, tensor_parallel_size=tp, kernel_cache=kernel_cache)
        )
        out.print(f"# {s.name} ({'cold' if s.cold else 'warm'} caches)", highlight=False)
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _require_gpus(count: int) -> None:
    opt.require_gpu(
        "hltools bench e2e", "it starts vLLM engines; `--dry-run` prints their command lines without one"
    )
    gpus = opt.cuda_device_count()
    if count > gpus:
        opt.fail(f"--tensor-parallel-size {count} needs {count} GPUs; {gpus} visible.", opt.NO_GPU_EXIT)


def _commit() -> str:
    from hltools.provenance import git_commit

    return git_commit() or ""


def _on_run(out: Console, spec, event: str) -> None:
    what = f"engine run {spec.name} ({'cold' if spec.cold else 'warm'} compile caches)"
    if event == "start":
        out.print(f"{what}: starting", highlight=False)
    else:
        out.print(f"{what}: [{'green' if event == 'done' else 'bold red'}]{event}", highlight=False)


def print_summary(out: Console, summary: dict, title: str) -> None:
    """What ``<stem>.md`` shows below its heading (:func:`hltools.e2e.summary_parts`): the tables with
    TTFT, spread, TTFT alone, start-up, the numerics check, restart agreement and Helion per rank
    (markdown bold dropped)."""
    from hltools import e2e as e

    for part in e.summary_parts(summary, title):
        if isinstance(part, str):
            out.print(part.replace("**", ""), markup=False, highlight=False)
        else:
            out.print(part.rich())


def show(out: Console, directory: Path, stem: str, meta: dict[str, Any], summary: dict, plots: bool) -> None:
    """A saved e2e result again: its summary (:func:`print_summary`), ``directory/<stem>.md`` (and
    ``<stem>.png``)."""
    from hltools import e2e as e

    print_summary(out, summary, f"{stem}: output tokens/s")
    out.print(f"wrote {e.write_markdown(directory, stem, meta, summary)}")
    if plots:
        draw_plot(out, summary, directory / f"{stem}.png", meta)


def draw_plot(out: Console, summary: dict, path: Path, meta: dict[str, Any]) -> None:
    """The PNG of :func:`hltools.plots.plot_e2e` (none without rows), or why not."""
    from hltools.plots import PlotsUnavailable, plot_e2e

    if not summary["rows"]:
        return
    try:
        out.print(f"wrote {plot_e2e(summary['rows'], path, metadata=meta)}")
    except PlotsUnavailable as exc:
        out.print(f"[yellow]no plot: {exc}")
