"""``hltools`` command line: ``hltools validate`` (correctness and speed of every linear shape) and
``hltools autotune`` (tuned configs for a model's shapes on this GPU).

Heavy imports (torch, helion, vLLM) happen inside the commands, so ``--help`` is fast and
``TRITON_INTERPRET`` can be set before Triton is imported.
"""

from __future__ import annotations

import math
import os
import shlex
import statistics
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from hlcore.config_store import write_json_atomic
from hltools.bench_cli import bench_app
from hltools.bench_configs import configs_app
from hltools.provenance import git_commit, versions
from hltools.shapes import linear_shapes, list_models, load_model_config

app = typer.Typer(
    help="Tools for hl: validate, autotune and bench Helion kernels on a model's shapes.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)
app.add_typer(bench_app, name="bench")
app.add_typer(configs_app, name="configs")

DEFAULT_NUM_TOKENS = "1,2,4,8,16,24,32"  # vLLM's CUDA-graph decode sizes up to 32 (design §4)
DEFAULT_CPU_SCALE = 64


class OutDtype(StrEnum):
    bf16 = "bf16"
    fp16 = "fp16"


@app.callback()
def main() -> None:
    """hl tools. Run ``hltools COMMAND --help`` for each command."""


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 200))


def _parse_tokens(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"num tokens must be positive integers, got {text!r}")
    return list(dict.fromkeys(values))


def _parse_formats(text: str, option: str = "--formats") -> list[str]:
    """Comma-separated formats (``all`` = the three), deduplicated, in the given order."""
    from hltools.format_names import FORMATS

    values = [f for f in text.replace(" ", "").split(",") if f]
    if values == ["all"]:
        return list(FORMATS)
    unknown = [f for f in values if f not in FORMATS]
    if not values or unknown:
        raise typer.BadParameter(
            f"unknown format(s) {unknown or text!r}; choose from {FORMATS} or all", param_hint=option
        )
    return list(dict.fromkeys(values))


def _print_models(console: Console) -> None:
    table = Table(title="embedded models (hltools/models/*.json)")
    for col in (
        "model",
        "architecture",
        "hidden",
        "intermediate",
        "q heads",
        "kv heads",
        "head_dim",
        "layers",
    ):
        table.add_column(col, justify="left" if col in ("model", "architecture") else "right")
    for name in list_models():
        c = load_model_config(name)
        table.add_row(
            name,
            ",".join(c.get("architectures", [])),
            *(
                str(c.get(key))
                for key in (
                    "hidden_size",
                    "intermediate_size",
                    "num_attention_heads",
                    "num_key_value_heads",
                    "head_dim",
                    "num_hidden_layers",
                )
            ),
        )
    console.print(table)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _table(rows, provider: str | None, fmt: str = "fp8_dynamic") -> Table:
    """The result table; ``provider`` (the fallback's name) set adds the GPU comparison and timing."""
    title = f"{fmt}: Helion scaled_mm vs fp32 reference" + (f" and {provider}" if provider else "")
    table = Table(title=title)
    columns = ["layer", "N", "K", "M", "max abs err", "rel err", "tolerance"]
    if provider:
        columns += [f"rel err vs {provider}", "Helion µs", f"{provider} µs", "speedup", "% HBM roofline"]
    for col in [*columns, "status"]:
        table.add_column(col, justify="left" if col in ("layer", "status") else "right")
    for r in rows:
        cells = [r.layer, str(r.n), str(r.k), str(r.m), _fmt(r.max_abs_err, ".3g"), _fmt(r.rel_err, ".2e")]
        cells.append(f"{r.tolerance:.1e}")
        if provider:
            cells += [_fmt(r.fallback_rel_err, ".2e"), _fmt(r.helion_us, ".1f"), _fmt(r.fallback_us, ".1f")]
            cells += [_fmt(r.speedup, ".2f"), _fmt(r.roofline_pct, ".0f")]
        cells.append("[green]PASS" if r.passed else "[bold red]FAIL")
        table.add_row(*cells)
    return table


@app.command()
def validate(
    model: Annotated[
        str,
        typer.Option(
            help="Embedded model name (see --list-models; an HF id whose last part names one, e.g. "
            "Qwen/Qwen3-8B, also matches; nothing is downloaded), or a path to a config.json or its folder."
        ),
    ] = "qwen3-8b",
    num_tokens: Annotated[
        str, typer.Option(help="Comma-separated M values (decode batch sizes).")
    ] = DEFAULT_NUM_TOKENS,
    formats: Annotated[
        str, typer.Option(help="Comma-separated formats: fp8_dynamic, w8a8_int8, block_fp8 (or all).")
    ] = "fp8_dynamic",
    tp: Annotated[int, typer.Option(help="Tensor-parallel size: shards N of qkv/gate_up, K of o/down.")] = 1,
    out_dtype: Annotated[OutDtype, typer.Option(help="Output dtype.")] = OutDtype.bf16,
    output: Annotated[
        Path | None, typer.Option(help="Write the rows (and run metadata) to this JSON file.")
    ] = None,
    layer: Annotated[
        list[str] | None, typer.Option(help="Only these layers (qkv, o, gate_up, down); repeatable.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the generated inputs.")] = 0,
    cpu_scale: Annotated[
        int, typer.Option(min=1, help="CPU interpret mode only: divide N and K by this (result at least 32).")
    ] = DEFAULT_CPU_SCALE,
    list_models_: Annotated[
        bool, typer.Option("--list-models", help="List the embedded models and exit.")
    ] = False,
) -> None:
    """Check the Helion scaled_mm (each --formats, picked config) on every linear (N, K) of a model.

    Each row compares the kernel with the fp32 dequantized reference (relative Frobenius error
    within the per-dtype tolerance of hlcore.testing). On a CUDA GPU it also compares with and
    times against vLLM's default kernel for the format (cutlass_scaled_mm for fp8_dynamic and
    w8a8_int8, DeepGEMM / CUTLASS block / Triton block for block_fp8) under
    CUDA-graph replay with rotating weights, and reports % of the measured HBM copy bandwidth.
    Without a GPU (or with TRITON_INTERPRET=1) it runs the Triton interpreter on the CPU on shapes
    divided by --cpu-scale. Exits 1 if any row fails and prints a repro command for each.
    """
    console = _console()
    if list_models_:
        _print_models(console)
        return
    try:
        config = load_model_config(model)
    except (ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None
    try:
        shapes = linear_shapes(config, tp=tp)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--tp") from None
    try:
        tokens = _parse_tokens(num_tokens)
    except typer.BadParameter as exc:
        raise typer.BadParameter(exc.message, param_hint="--num-tokens") from None
    fmts = _parse_formats(formats)
    if layer:
        unknown = sorted(set(layer) - {s.name for s in shapes})
        if unknown:
            raise typer.BadParameter(
                f"unknown layer(s) {unknown}; choose from {[s.name for s in shapes]}", param_hint="--layer"
            )
        shapes = [s for s in shapes if s.name in layer]

    import torch  # here, not at module level: keeps --help fast

    helion_interpret = os.environ.get("HELION_INTERPRET") == "1"
    interpret = helion_interpret or os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available()
    if interpret and not helion_interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before hlcore.scaled_mm (helion, triton) is imported
    from hltools import validate as v

    dtype = {OutDtype.bf16: torch.bfloat16, OutDtype.fp16: torch.float16}[out_dtype]
    metadata_ = {
        "model": model,
        "tp": tp,
        "out_dtype": out_dtype.value,
        "formats": fmts,
        "num_tokens": tokens,
        "seed": seed,
        "versions": versions(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["hltools", *sys.argv[1:]]),
        "commit": git_commit(),
    }
    fallbacks: dict = {}  # format -> hltools.providers.ScaledMMProvider
    bandwidth = None
    if interpret:
        device = torch.device("cpu")
        mode = (
            "Helion interpret mode (HELION_INTERPRET=1)"
            if helion_interpret
            else "Triton interpret mode (TRITON_INTERPRET=1)"
        )
        console.print(
            f"[bold yellow]Running on the CPU in {mode} on scaled-down shapes: N and K divided by {cpu_scale} "
            f"(at least {v.MIN_SCALED_DIM}); correctness only, no timing."
        )
        metadata_.update(
            mode="helion-interpret" if helion_interpret else "triton-interpret", cpu_scale=cpu_scale
        )
    else:
        from hltools.providers import vllm_default
        from hltools.timing import copy_bandwidth_gbs

        device = torch.device("cuda")
        bandwidth = copy_bandwidth_gbs()
        gpu = torch.cuda.get_device_name()
        for fmt in fmts:
            try:
                fallbacks[fmt] = vllm_default(fmt, dtype)
            except (RuntimeError, ValueError) as exc:
                console.print(f"[bold red]{fmt}: {exc}")
                raise typer.Exit(1) from None
            for reason in fallbacks[fmt].skipped:
                console.print(f"[dim]{fmt}: skipped {reason}")
        names = {fmt: p.name for fmt, p in fallbacks.items()}
        console.print(f"GPU {gpu}: measured copy bandwidth {bandwidth:.0f} GB/s; fallbacks: {names}")
        metadata_.update(mode="gpu", gpu=gpu, fallbacks=names, copy_bandwidth_gbs=bandwidth)
    console.print(
        f"model {model}, tp {tp}, out {out_dtype.value}, formats {', '.join(fmts)}; tolerance (relative "
        f"Frobenius): {v.tolerance(fmts[0], dtype):.1e} vs the fp32 reference"
        + ("" if interpret else f", {v.cross_check_tolerance(dtype, fmts[0]):.1e} vs vLLM's kernel")
    )

    rows: list[v.Row] = []
    summaries = []
    with console.status("validating...") as status:
        for fmt in fmts:
            fallback = fallbacks.get(fmt)
            provider = fallback.name if fallback else ""
            fmt_rows: list[v.Row] = []
            for shape in shapes:
                n, k = shape.n, shape.k
                if interpret:
                    n, k = v.scaled_down(n, cpu_scale), v.scaled_down(k, cpu_scale)
                status.update(f"validating {fmt} {shape.name} N={n} K={k}")
                fmt_rows += v.validate_layer(
                    shape.name,
                    n,
                    k,
                    tokens,
                    dtype,
                    device=device,
                    seed=seed,
                    model_nk=(shape.n, shape.k),
                    fallback=fallback,
                    bandwidth_gbs=bandwidth,
                    fmt=fmt,
                )
            console.print(_table(fmt_rows, None if interpret else provider, fmt))
            passed = sum(r.passed for r in fmt_rows)
            line = f"{fmt}: {passed}/{len(fmt_rows)} rows passed"
            speedups = [r.speedup for r in fmt_rows if r.speedup]
            if speedups:
                line += f"; geomean speedup vs {provider}: {statistics.geometric_mean(speedups):.2f}x"
            summaries.append(line)
            rows += fmt_rows

    failed = [r for r in rows if not r.passed]
    for line in summaries:
        console.print(line, style="bold red" if failed else "bold green")
    for r in rows:
        if r.note:
            console.print(f"note {r.layer} M={r.m}: {r.note}", markup=False, highlight=False)
    if output is not None:
        write_json_atomic(
            output, {"metadata": metadata_, "rows": [r.to_dict() for r in rows]}, allow_nan=True
        )
        console.print(f"wrote {output}")
    if failed:
        console.print("repro commands for the failing rows:", style="bold")
        for r in failed:
            cmd = v.repro_command(
                model,
                tp,
                out_dtype.value,
                r,
                seed,
                max(tokens),
                cpu_scale if interpret else None,
                helion_interpret,
            )
            console.print(f"  {cmd}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


class Effort(StrEnum):
    quick = "quick"
    full = "full"


def _parse_ints(text: str, option: str) -> list[int]:
    try:
        return _parse_tokens(text)
    except typer.BadParameter as exc:
        raise typer.BadParameter(exc.message, param_hint=option) from None


def _default_output() -> Path:
    raw = os.environ.get("HL_CONFIG_DIR", "").strip()
    return Path(raw).expanduser() if raw else Path("hl-configs")


@app.command()
def autotune(
    model: Annotated[
        str,
        typer.Option(
            help="Embedded model name (see `hltools validate --list-models`; an HF id such as Qwen/Qwen3-8B "
            "matches by its last part; nothing is downloaded), or a path to a config.json or its folder."
        ),
    ],
    formats: Annotated[
        str, typer.Option(help="Comma-separated formats: fp8_dynamic, w8a8_int8, block_fp8.")
    ] = "fp8_dynamic",
    tp: Annotated[
        str, typer.Option(help="Comma-separated tensor-parallel sizes (N/tp column-, K/tp row-parallel).")
    ] = "1",
    num_tokens: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated M values; default 1,2,4,8,16,24,32, plus vLLM's capture sizes up to "
            "HL_MAX_HELION_SIZE when that is above 32."
        ),
    ] = None,
    effort: Annotated[Effort, typer.Option(help="Helion autotune effort per key.")] = Effort.quick,
    budget_minutes: Annotated[
        float | None,
        typer.Option(
            min=0, help="Wall-clock budget for the whole run; keys left over resume on the next run."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the search and of the generated inputs.")] = 0,
    output: Annotated[
        Path | None,
        typer.Option(
            help="Config directory written as `<output>/scaled_mm/<gpu>.json`; default $HL_CONFIG_DIR, else "
            "./hl-configs (use `--output configs` in a checkout to update the shipped configs)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Retune keys that are already in the file.")] = False,
    list_: Annotated[
        bool,
        typer.Option(
            "--list",
            help='Print the keys (and which are done; a done key marked "fallback": true runs vLLM\'s '
            "kernel) and exit; needs no GPU.",
        ),
    ] = False,
    gpu: Annotated[
        str | None,
        typer.Option(
            help="With --list only: mark the keys done in this GPU's file (e.g. nvidia_h200) instead of "
            "this machine's GPU's; the file is `<output>/scaled_mm/<gpu>.json`, where without --output "
            "the directory is the one the plugin reads ($HL_CONFIG_DIR, else the shipped configs)."
        ),
    ] = None,
) -> None:
    """Tune the Helion scaled GEMM for every (format, N, K, M) of a model on this GPU.

    For each key: Helion's autotuner (default config seeded into the search, candidates checked
    against the fp32 reference, CUDA-graph benchmarking), then a check of the result against the
    reference and a timing against the default config and vLLM's kernel for the format (a key where
    vLLM's kernel is faster is saved with "fallback": true). Each key is saved as soon as it is done;
    rerunning resumes, --force retunes. Needs a CUDA GPU (except --list; `--list --gpu nvidia_h200`
    marks the keys that the shipped H200 file holds). Exits 1 if a key failed.
    """
    from hltools import autotune as at

    console = _console()
    try:
        config = load_model_config(model)
    except (ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None
    fmts = [f for f in formats.replace(" ", "").split(",") if f]
    tps = _parse_ints(tp, "--tp")
    if num_tokens is None:
        from hlvllm.settings import get_settings

        try:
            tokens = at.decode_num_tokens(get_settings().max_helion_size)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="HL_MAX_HELION_SIZE") from None
    else:
        tokens = _parse_ints(num_tokens, "--num-tokens")
    try:
        keys = at.build_keys(config, fmts, tps, tokens)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--formats/--tp") from None
    if gpu is not None and not list_:
        raise typer.BadParameter("only with --list (tuning runs on this machine's GPU)", param_hint="--gpu")
    if gpu is not None and output is None:
        from hlcore.configs import config_dir

        output = config_dir()  # $HL_CONFIG_DIR, else the shipped configs
    output = output if output is not None else _default_output()

    backend = None if list_ else at.gpu_backend()
    if list_:
        import torch

        if gpu is not None:
            gpu_name = gpu
        else:
            gpu_name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        try:
            path = at.output_path(output, gpu_name) if gpu_name else None
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpu") from None
        try:
            existing = at.load_existing(path) if path else None
        except at.AutotuneError as exc:
            console.print(f"[yellow]{exc}")
            existing = None
        done, fallback = at.done_keys(existing), at.fallback_keys(existing)
        table = Table(title=f"autotune keys for {model} (tp {','.join(map(str, tps))})")
        for col in ("format", "N", "K", "M", "layers", "status"):
            table.add_column(col, justify="right" if col in ("N", "K", "M") else "left")
        for row in at.keys_table_rows(keys, done, fallback):
            table.add_row(*row)
        console.print(table)
        where = (
            f" in {path}" + ("" if path.exists() else " (no such file yet)")
            if path
            else " (no GPU: the file is named after the GPU, so nothing is marked done; --gpu NAME picks one)"
        )
        n_fallback = sum(at._kid(k) in fallback for k in keys)
        marked = f" ({n_fallback} of them fallback: vLLM's kernel runs there)" if n_fallback else ""
        console.print(f"{len(keys)} keys, {sum(at._kid(k) in done for k in keys)} done{marked}{where}")
        return
    if backend is None:
        console.print(
            "[bold red]hltools autotune needs a CUDA GPU[/] (Helion's autotuner compiles and times every "
            "candidate on the device); none was found. `hltools autotune --list ...` prints the keys without one.",
        )
        raise typer.Exit(2)
    gpu_name, tune, check = backend
    path = at.output_path(output, gpu_name)
    parts = [
        "hltools",
        "autotune",
        "--model",
        model,
        "--formats",
        ",".join(fmts),
        "--tp",
        ",".join(map(str, tps)),
    ]
    parts += ["--num-tokens", ",".join(map(str, tokens)), "--effort", effort.value, "--seed", str(seed)]
    parts += ["--output", str(output)]
    if budget_minutes is not None:
        parts += ["--budget-minutes", f"{budget_minutes:g}"]
    command = shlex.join(parts)  # without --force: a rerun resumes
    meta = at.provenance(gpu_name, command=command, seed=seed, effort=effort.value, model=model)
    meta["commit"] = git_commit()
    at.apply_benchmark_env()
    console.print(f"GPU {gpu_name} -> {path}; {len(keys)} keys; effort {effort.value}; seed {seed}")

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )

    def on_start(key) -> None:
        progress.update(task, description=f"tuning {key.label}")

    def on_done(status) -> None:
        r = status.result
        if status.status == "tuned":
            line = (
                f"[green]tuned[/] {status.key.label} in {status.seconds:.0f} s: {_fmt(r.helion_us, '.1f')} µs"
            )
            line += f" (default {_fmt(r.default_us, '.1f')}, {r.fallback_name or 'vLLM'} {_fmt(r.fallback_us, '.1f')})"
            if r.fallback:
                line += " [yellow]slower than vLLM's kernel: marked fallback"
        elif status.status == "failed":
            line = f"[bold red]FAILED[/] {status.key.label}: {status.message}"
        else:
            line = f"[dim]{status.status}[/] {status.key.label}: {status.message}"
        progress.console.print(line, highlight=False)
        progress.advance(task)

    budget = None if budget_minutes is None else budget_minutes * 60
    options = at.TuneOptions(effort=effort.value, seed=seed)
    with progress:
        task = progress.add_task("autotune", total=len(keys))
        try:
            summary = at.run_autotune(
                keys,
                path,
                tune=tune,
                check=check,
                metadata=meta,
                options=options,
                force=force,
                budget_seconds=budget,
                on_start=on_start,
                on_done=on_done,
            )
        except at.AutotuneError as exc:
            console.print(f"[bold red]{exc}")
            raise typer.Exit(2) from None

    table = Table(title=f"autotune summary ({path})")
    for col in ("format", "N", "K", "M", "status", "Helion µs", "default µs", "vLLM µs", "speedup", "note"):
        table.add_column(col, justify="left" if col in ("format", "status", "note") else "right")
    for s in summary.statuses:
        r = s.result
        speedup = r.fallback_us / r.helion_us if r and r.fallback_us and r.helion_us else None
        status = s.status + (" (fallback)" if r and r.fallback and s.status == "tuned" else "")
        table.add_row(
            s.key.fmt,
            str(s.key.n),
            str(s.key.k),
            str(s.key.m),
            status,
            _fmt(r.helion_us if r else None, ".1f"),
            _fmt(r.default_us if r else None, ".1f"),
            _fmt(r.fallback_us if r else None, ".1f"),
            _fmt(speedup, ".2f"),
            s.message,
        )
    console.print(table)
    counts = ", ".join(f"{summary.count(c)} {c}" for c in ("tuned", "skipped", "failed", "not run"))
    console.print(f"{counts} -> {path}", style="bold red" if summary.failed else "bold green")
    if summary.count("not run"):
        console.print("budget spent: rerun the same command to resume", style="yellow")
    if summary.failed:
        console.print(
            "rerun the same command to retry the failed keys (done keys are skipped):", style="bold"
        )
        console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
