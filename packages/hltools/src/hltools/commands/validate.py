"""``hltools validate``: correctness (and on a GPU, speed against vLLM's kernel) of the Helion
scaled_mm on every linear shape of a model (:mod:`hltools.validate`)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from hltools import options as opt
from hltools.provenance import git_commit, versions
from hltools.results import write_json
from hltools.shapes import LinearShape, UnknownLayer, linear_shapes, models_table, only_layers

DEFAULT_CPU_SCALE = 64

Output = Annotated[Path | None, typer.Option(help="Write the rows (and run metadata) to this JSON file.")]
CpuScale = Annotated[
    int, typer.Option(min=1, help="CPU interpret mode only: divide N and K by this (result at least 32).")
]
ListModels = Annotated[bool, typer.Option("--list-models", help="List the embedded models and exit.")]


def validate(
    model: opt.Model = "qwen3-8b",
    num_tokens: opt.NumTokens = opt.DEFAULT_NUM_TOKENS,
    formats: opt.ModelFormats = None,
    tp: opt.Tp = 1,
    out_dtype: opt.OutDtypeOption = opt.OutDtype.bf16,
    output: Output = None,
    layer: opt.Layers = None,
    seed: opt.Seed = 0,
    cpu_scale: CpuScale = DEFAULT_CPU_SCALE,
    list_models_: ListModels = False,
) -> None:
    """Check the Helion scaled_mm (each --formats, picked config) on every linear (N, K) of a model.

    Each row compares the kernel with the fp32 dequantized reference (relative Frobenius error
    within the per-dtype tolerance of hlcore.numerics). On a CUDA GPU it also compares with and
    times against vLLM's default kernel for the format (cutlass_scaled_mm for fp8_dynamic and
    w8a8_int8, DeepGEMM / CUTLASS block / Triton block for block_fp8) under
    CUDA-graph replay with rotating weights, and reports % of the measured HBM copy bandwidth.
    Without a GPU (or with TRITON_INTERPRET=1) it runs the Triton interpreter on the CPU on shapes
    divided by --cpu-scale. Exits 1 if any row fails and prints a repro command for each.
    """
    out = opt.console()
    if list_models_:
        out.print(models_table().rich())
        return
    source = opt.resolve_model(model)
    config = source.config
    try:
        shapes = linear_shapes(config, tp=tp)
    except ValueError as exc:
        raise opt.bad_parameter(exc, "--tp") from None
    tokens = opt.parse_ints(num_tokens, "--num-tokens")
    fmts = opt.model_formats(formats, source)
    shapes = _only_layers(shapes, layer)
    mode = _run_mode()  # before hltools.validate imports hlcore.scaled_mm (helion, triton)
    from hltools import validate as v

    dtype = out_dtype.torch_dtype
    metadata: dict[str, Any] = {
        "model": model, "model_source": source.source, "tp": tp, "out_dtype": out_dtype.value,
        "formats": fmts, "num_tokens": tokens,
        "seed": seed, "versions": versions(), "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": opt.command_line(), "commit": git_commit(),
    }  # fmt: skip
    interpret = mode != "gpu"
    if interpret:
        fallbacks, bandwidth = _cpu_mode(out, mode, cpu_scale, metadata)
    else:
        fallbacks, bandwidth = _gpu_mode(out, fmts, dtype, metadata)
    out.print(
        f"model {model}, tp {tp}, out {out_dtype.value}, formats {', '.join(fmts)}; tolerance (relative "
        f"Frobenius): {v.tolerance(fmts[0], dtype):.1e} vs the fp32 reference"
        + ("" if interpret else f", {v.cross_check_tolerance(dtype, fmts[0]):.1e} vs vLLM's kernel")
    )
    rows, summaries = [], []
    with out.status("validating...") as status:
        for fmt in fmts:
            fallback = fallbacks.get(fmt)
            fmt_rows = v.validate_format(
                fmt, shapes, tokens, dtype, device="cpu" if interpret else "cuda", seed=seed,
                cpu_scale=cpu_scale if interpret else None, fallback=fallback, bandwidth_gbs=bandwidth,
                on_layer=lambda name, n, k, fmt=fmt: status.update(f"validating {fmt} {name} N={n} K={k}"),
            )  # fmt: skip
            out.print(v.result_table(fmt_rows, None if interpret else fallback.name, fmt).rich())
            summaries.append(v.summary_line(fmt, fmt_rows, fallback.name if fallback else ""))
            rows += fmt_rows
    _report(out, rows, summaries, metadata, output)
    failed = [r for r in rows if not r.passed]
    if failed:
        out.print("repro commands for the failing rows:", style="bold")
        scale, helion = (cpu_scale if interpret else None), mode == "helion-interpret"
        for r in failed:
            cmd = v.repro_command(model, tp, out_dtype.value, r, seed, max(tokens), scale, helion)
            out.print(f"  {cmd}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _only_layers(shapes: list[LinearShape], layers: list[str] | None) -> list[LinearShape]:
    try:
        return only_layers(shapes, layers)
    except UnknownLayer as exc:
        raise opt.bad_parameter(exc, "--layer") from None


def _run_mode() -> str:
    """``gpu``, ``helion-interpret`` (HELION_INTERPRET=1) or ``triton-interpret`` (TRITON_INTERPRET=1 or
    no GPU; sets TRITON_INTERPRET=1, so call it before Triton is imported)."""
    import torch

    if os.environ.get("HELION_INTERPRET") == "1":
        return "helion-interpret"
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
        return "triton-interpret"
    return "gpu"


def _cpu_mode(out: Console, mode: str, cpu_scale: int, metadata: dict) -> tuple[dict, None]:
    from hltools.validate import MIN_SCALED_DIM

    what = {"helion-interpret": "Helion", "triton-interpret": "Triton"}[mode]
    what += f" interpret mode ({what.upper()}_INTERPRET=1)"
    out.print(
        f"[bold yellow]Running on the CPU in {what} on scaled-down shapes: N and K divided by {cpu_scale} "
        f"(at least {MIN_SCALED_DIM}); correctness only, no timing."
    )
    metadata.update(mode=mode, cpu_scale=cpu_scale)
    return {}, None


def _gpu_mode(out: Console, fmts: list[str], dtype, metadata: dict) -> tuple[dict, float]:
    """vLLM's default kernel per format (the fallback each row is checked and timed against) and the
    measured copy bandwidth; exit 1 when a format has no usable kernel."""
    import torch

    from hltools.providers import vllm_default
    from hltools.timing import copy_bandwidth_gbs

    bandwidth = copy_bandwidth_gbs()
    gpu = torch.cuda.get_device_name()
    fallbacks = {}
    for fmt in fmts:
        try:
            fallbacks[fmt] = vllm_default(fmt, dtype)
        except (RuntimeError, ValueError) as exc:
            opt.fail(f"{fmt}: {exc}", 1)
        for reason in fallbacks[fmt].skipped:
            out.print(f"[dim]{fmt}: skipped {reason}")
    names = {fmt: p.name for fmt, p in fallbacks.items()}
    out.print(f"GPU {gpu}: measured copy bandwidth {bandwidth:.0f} GB/s; fallbacks: {names}")
    metadata.update(mode="gpu", gpu=gpu, fallbacks=names, copy_bandwidth_gbs=bandwidth)
    return fallbacks, bandwidth


def _report(out: Console, rows: list, summaries: list[str], metadata: dict, output: Path | None) -> None:
    """The per-format summaries, the rows' notes and the JSON file (NaN errors kept as NaN)."""
    failed = any(not r.passed for r in rows)
    for line in summaries:
        out.print(line, style="bold red" if failed else "bold green")
    for r in rows:
        if r.note:
            out.print(f"note {r.layer} M={r.m}: {r.note}", markup=False, highlight=False)
    if output is not None:
        write_json(output, {"metadata": metadata, "rows": [r.to_dict() for r in rows]}, keep_nan=True)
        out.print(f"wrote {output}")
