"""``hltools`` command line: ``hltools validate`` (correctness and speed of every linear shape).

Heavy imports (torch, helion, vLLM) happen inside the commands, so ``--help`` is fast and
``TRITON_INTERPRET`` can be set before Triton is imported.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from hltools.shapes import linear_shapes, list_models, load_model_config

app = typer.Typer(
    help="Tools for hl: validate (and later autotune, bench) Helion kernels on a model's shapes.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)

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


def _table(rows, provider: str | None) -> Table:
    """The result table; ``provider`` (the fallback's name) set adds the GPU comparison and timing."""
    table = Table(title="Helion scaled_mm vs fp32 reference" + (f" and {provider}" if provider else ""))
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


def _write_json(path: Path, payload: dict) -> None:
    """Atomic write (temp file + rename): sorted keys, indent 2, trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True, allow_nan=True)
        f.write("\n")
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("torch", "helion", "triton", "vllm", "hlcore", "hltools"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def _git_commit() -> str | None:
    """HEAD of the checkout this package runs from, if it is one (None for an installed wheel)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


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
    """Check the Helion scaled_mm (FP8_Dynamic, default config) on every linear (N, K) of a model.

    Each row compares the kernel with the fp32 dequantized reference (relative Frobenius error
    within the per-dtype tolerance of hlcore.testing). On a CUDA GPU it also compares with and
    times against the fallback kernel (vLLM's cutlass_scaled_mm, else torch._scaled_mm) under
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
        "format": v.FORMAT,
        "num_tokens": tokens,
        "seed": seed,
        "versions": _versions(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["hltools", *sys.argv[1:]]),
        "commit": _git_commit(),
    }
    fallback = bandwidth = None
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
        from hltools.timing import copy_bandwidth_gbs

        device = torch.device("cuda")
        provider, fallback = v.pick_fallback()
        bandwidth = copy_bandwidth_gbs()
        gpu = torch.cuda.get_device_name()
        console.print(f"GPU {gpu}: measured copy bandwidth {bandwidth:.0f} GB/s; fallback: {provider}")
        metadata_.update(mode="gpu", gpu=gpu, fallback=provider, copy_bandwidth_gbs=bandwidth)
    line = (
        f"model {model}, tp {tp}, out {out_dtype.value}, format {v.FORMAT}; tolerance (relative Frobenius): "
        f"{v.tolerance(v.FORMAT, dtype):.1e} vs the fp32 reference"
    )
    if not interpret:
        line += f", {v.cross_check_tolerance(dtype):.1e} vs {provider}"
    console.print(line)

    rows: list[v.Row] = []
    with console.status("validating...") as status:
        for shape in shapes:
            n, k = shape.n, shape.k
            if interpret:
                n, k = v.scaled_down(n, cpu_scale), v.scaled_down(k, cpu_scale)
            status.update(f"validating {shape.name} N={n} K={k}")
            rows += v.validate_layer(
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
            )
    console.print(_table(rows, None if interpret else provider))

    failed = [r for r in rows if not r.passed]
    speedups = [r.speedup for r in rows if r.speedup]
    summary = f"{len(rows) - len(failed)}/{len(rows)} rows passed"
    if speedups:
        summary += f"; geomean speedup vs {provider}: {statistics.geometric_mean(speedups):.2f}x"
    console.print(summary, style="bold red" if failed else "bold green")
    for r in rows:
        if r.note:
            console.print(f"note {r.layer} M={r.m}: {r.note}", markup=False, highlight=False)
    if output is not None:
        _write_json(output, {"metadata": metadata_, "rows": [r.to_dict() for r in rows]})
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
