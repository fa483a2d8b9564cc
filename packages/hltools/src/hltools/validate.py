"""Correctness and speed of :func:`hlcore.scaled_mm.scaled_mm` on every linear shape of a model.

For each format, each linear (N, K) of :func:`hltools.shapes.linear_shapes` and each num_tokens M,
with the config :func:`hlcore.scaled_mm_config.pick_scaled_mm_config` picks (bf16/fp16 output):

* ``fp8_dynamic``: A ``[M, K]`` fp8 e4m3 + ``[M, 1]`` fp32 per-token scales, B ``[K, N]`` column-major
  fp8 e4m3 + ``[N, 1]`` fp32 per-channel scales;
* ``w8a8_int8``: the same with int8 (symmetric per token, per channel);
* ``block_fp8``: fp8 with ``[M, ceil(K/128)]`` 1x128 activation and ``[ceil(N/128), ceil(K/128)]``
  128x128 weight block scales.

* correctness: relative Frobenius error ``||out - ref||_F / ||ref||_F`` against the fp32 dequantized
  :func:`hlcore.scaled_mm.scaled_mm_ref` of the same quantized inputs, within
  :func:`hlcore.numerics.tolerance` (``"fp8_dynamic"``, per out dtype);
* cross-check (GPU only): the same relative error between Helion's output and the fallback kernel's
  (vLLM's default kernel for the format and layer shape, :func:`hltools.providers.vllm_default`),
  which catches a reference and kernel that agree on wrong semantics. Both multiply the same
  operands: where the fallback re-quantizes the weight at load time as vLLM does (DeepGEMM's UE8M0
  scales), Helion is run once more on the re-quantized weight for this check. The fallback has its
  own error (CUTLASS accumulates fp8 products imprecisely on sm90: ~2e-3 at K = 8192, above the fp16
  tolerance), so this check uses :func:`cross_check_tolerance`, the bf16 tolerance that
  hlcore.numerics sizes for it;
* speed (GPU only): CUDA-graph replay over ``copies_for(N * K)`` distinct random weights (more bytes
  than L2), Helion vs the fallback (each weight copy processed once beforehand as vLLM does at load
  time, activation scales once in the layout it reads), and Helion's share of the HBM roofline
  ``scaled_mm_bytes / time / copy_bandwidth``.

Inputs: one :func:`hlcore.scaled_mm.generate_scaled_mm_inputs` draw per layer with
``max(32, max(M))`` tokens (seeded); the row for M uses its first M tokens, so a repro run with
``--num-tokens M`` sees the same data.

Without a GPU (or with ``TRITON_INTERPRET=1``) the caller sets ``TRITON_INTERPRET=1`` before
``hlcore.scaled_mm`` is imported and passes scaled-down shapes (:func:`scaled_down`); no timing.
This module imports torch but never helion or triton at import time.
"""

from __future__ import annotations

import math
import shlex
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from hlcore.numerics import max_abs_error, rel_error, tolerance
from hltools.providers import ScaledMMProvider, vllm_default
from hltools.results import ResultTable, cell
from hltools.shapes import LinearShape

FORMAT = "fp8_dynamic"  # the default format
MIN_TOKENS_DRAWN = 32  # activations drawn per layer, at least (see module docstring)
MIN_SCALED_DIM = 32


@dataclass
class Row:
    """One (layer, M) result. ``n``/``k`` are the shapes run; ``model_n``/``model_k`` the model's.
    Timing fields are None on the CPU or when that measurement failed (``note`` says why)."""

    layer: str
    n: int
    k: int
    model_n: int
    model_k: int
    m: int
    max_abs_err: float
    rel_err: float
    tolerance: float
    passed: bool
    fallback_rel_err: float | None = None  # Helion vs fallback, on the operands the fallback multiplies
    fallback_ref_err: float | None = None  # fallback vs the fp32 reference of them (for information)
    fallback_tolerance: float | None = None
    helion_us: float | None = None
    fallback_us: float | None = None
    speedup: float | None = None
    roofline_pct: float | None = None
    note: str = ""
    format: str = FORMAT

    def to_dict(self) -> dict:
        return asdict(self)


def cross_check_tolerance(out_dtype: torch.dtype, fmt: str = FORMAT) -> float:
    """Largest Helion-vs-fallback relative error accepted: ``max(tolerance(out_dtype), bf16 tolerance)``."""
    return max(tolerance(fmt, out_dtype), tolerance(fmt, torch.bfloat16))


def scaled_down(dim: int, scale: int) -> int:
    """``ceil(dim / scale)``, at least 32 (the CPU interpreter's stand-in for a model dimension)."""
    if scale < 1:
        raise ValueError(f"scale must be >= 1; got {scale}")
    return max(MIN_SCALED_DIM, math.ceil(dim / scale))


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------
def _random_weights(
    n: int, k: int, copies: int, device: torch.device, seed: int, fmt: str = FORMAT
) -> list[tuple]:
    """``copies`` independent ``N(0, 0.05)`` weights quantized as ``fmt`` stores them: ``(B [K, N]
    col-major, scale_b)`` each (per channel ``[N, 1]`` or 128x128 blocks,
    :func:`hltools.bench.quantize_weight`), drawn on ``device`` (never zeros)."""
    from hltools.bench import quantize_weight

    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for _ in range(copies):
        w = torch.randn((n, k), generator=gen, device=device, dtype=torch.float32).mul_(0.05)
        out.append(quantize_weight(fmt, w.to(torch.bfloat16)))
    return out


def _time_row(sm, fb_calls, a, scale_a, weights, out_dtype, row: Row, bandwidth_gbs, block_size):
    """Fill the timing fields of ``row`` (CUDA-graph replay, rotating weights): Helion over
    ``weights``, the fallback's ``fb_calls`` (one per prepared weight copy; none: not timed)."""
    from hlcore.formats import scaled_mm_bytes
    from hltools.timing import time_graph

    m, n, k = row.m, row.n, row.k
    helion_calls = [
        lambda b=b, s=s: sm.scaled_mm(a, b, scale_a, s, out_dtype, block_size=block_size) for b, s in weights
    ]
    row.helion_us = time_graph(helion_calls).median_us
    nbytes = scaled_mm_bytes(row.format, m, n, k, out_bytes=torch.finfo(out_dtype).bits // 8)
    row.roofline_pct = 100.0 * nbytes / (row.helion_us * 1e-6) / (bandwidth_gbs * 1e9)
    if not fb_calls:
        return
    try:
        row.fallback_us = time_graph(fb_calls).median_us
        row.speedup = row.fallback_us / row.helion_us
    except Exception as exc:  # the fallback may not support a shape; report, do not fail
        row.note = f"fallback timing failed: {type(exc).__name__}: {exc}"[:200]


def _layer_fallback(fallback: ScaledMMProvider, fmt, out_dtype, n, k, weights):
    """``(provider, [prepared weight per copy])``: ``fallback`` when it takes this ``[N, K]``, else
    vLLM's next choice for it (:func:`hltools.providers.vllm_default`); each copy processed once."""
    if fallback.can_implement(n, k) is not None:
        fallback = vllm_default(fmt, out_dtype, n, k)
    return fallback, [fallback.prepare_weight(b, s) for b, s in weights]


def _cross_check(sm, fallback: ScaledMMProvider, w0, a, scale_a, fb_scale_a, out, row: Row):
    """Helion (``out``) vs the fallback on weight copy 0, both on the operands the fallback multiplies
    (Helion rerun on the weight the fallback re-quantized, if it did)."""
    theirs = fallback.call(a, fb_scale_a, w0)
    ours = out
    if w0.requantized:
        ours = sm.scaled_mm(a, w0.b, scale_a, w0.scale_b, fallback.out_dtype, block_size=fallback.block_size)
    row.fallback_rel_err = rel_error(ours, theirs)
    row.fallback_ref_err = rel_error(theirs, fallback.reference(a, scale_a, w0))
    row.fallback_tolerance = cross_check_tolerance(fallback.out_dtype, row.format)
    row.passed = row.passed and row.fallback_rel_err <= row.fallback_tolerance


def validate_layer(
    layer: str,
    n: int,
    k: int,
    num_tokens: Sequence[int],
    out_dtype: torch.dtype,
    *,
    device: torch.device,
    seed: int = 0,
    model_nk: tuple[int, int] | None = None,
    fallback: ScaledMMProvider | None = None,
    bandwidth_gbs: float | None = None,
    fmt: str = FORMAT,
) -> list[Row]:
    """Check (and on CUDA, with ``fallback`` (:func:`hltools.providers.vllm_default` of ``fmt`` and
    ``out_dtype``) and ``bandwidth_gbs``, cross-check and time) one linear at each M.

    Kernel exceptions become failing rows (``note`` holds the message); nothing is raised for a
    wrong result. ``hlcore.scaled_mm`` is imported here, so set ``TRITON_INTERPRET`` first.
    """
    from hlcore import scaled_mm as sm
    from hltools.timing import copies_for

    tol = tolerance(fmt, out_dtype)
    model_n, model_k = model_nk or (n, k)
    drawn = max(MIN_TOKENS_DRAWN, *num_tokens)
    inputs = sm.generate_scaled_mm_inputs(drawn, n, k, fmt=fmt, device=device, out_dtype=out_dtype, seed=seed)
    b, scale_b, block_size = inputs["b"], inputs["scale_b"], inputs["block_size"]
    timed = device.type == "cuda" and fallback is not None and bandwidth_gbs is not None
    weights, fb_weights, fb_note = None, [], ""
    if timed:
        weights = [(b, scale_b)] + _random_weights(n, k, copies_for(n * k) - 1, device, seed + 1, fmt)
        try:
            chosen, fb_weights = _layer_fallback(fallback, fmt, out_dtype, n, k, weights)
            if chosen is not fallback:
                fb_note = f"fallback for N={n} K={k}: {chosen.name} ({fallback.name} cannot take it)"
            fallback = chosen
        except Exception as exc:
            fb_note = f"fallback unavailable: {type(exc).__name__}: {exc}"[:200]
    rows = []
    for m in num_tokens:
        a, scale_a = inputs["a"][:m], inputs["scale_a"][:m]
        row = Row(layer, n, k, model_n, model_k, m, math.nan, math.nan, tol, False, format=fmt)
        try:
            out = sm.scaled_mm(a, b, scale_a, scale_b, out_dtype, block_size=block_size)
        except Exception as exc:
            row.note = f"kernel raised {type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            continue
        ref = sm.scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, block_size=block_size)
        row.max_abs_err, row.rel_err = max_abs_error(out, ref), rel_error(out, ref)
        row.passed = row.rel_err <= tol
        if timed:
            row.note, fb_scale_a = fb_note, None
            if fb_weights:
                try:
                    fb_scale_a = fallback.prepare_scale_a(scale_a)
                    _cross_check(sm, fallback, fb_weights[0], a, scale_a, fb_scale_a, out, row)
                except Exception as exc:
                    row.note = f"fallback failed: {type(exc).__name__}: {exc}"[:200]
            fb_calls = fallback.calls(a, fb_scale_a, fb_weights) if fb_scale_a is not None else []
            try:
                _time_row(sm, fb_calls, a, scale_a, weights, out_dtype, row, bandwidth_gbs, block_size)
            except Exception as exc:
                row.passed = False
                row.note = f"Helion timing failed: {type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows


def validate_format(
    fmt: str,
    shapes: Sequence[LinearShape],
    num_tokens: Sequence[int],
    out_dtype: torch.dtype,
    *,
    device: str | torch.device,
    seed: int = 0,
    cpu_scale: int | None = None,
    fallback: ScaledMMProvider | None = None,
    bandwidth_gbs: float | None = None,
    on_layer: Callable[[str, int, int], None] | None = None,
) -> list[Row]:
    """:func:`validate_layer` of ``fmt`` on every shape (N and K :func:`scaled_down` by ``cpu_scale``
    when it is given); ``on_layer(name, N, K)`` before each."""
    device = torch.device(device)
    rows: list[Row] = []
    for shape in shapes:
        n, k = shape.n, shape.k
        if cpu_scale is not None:
            n, k = scaled_down(n, cpu_scale), scaled_down(k, cpu_scale)
        if on_layer:
            on_layer(shape.name, n, k)
        rows += validate_layer(
            shape.name, n, k, num_tokens, out_dtype, device=device, seed=seed, model_nk=(shape.n, shape.k),
            fallback=fallback, bandwidth_gbs=bandwidth_gbs, fmt=fmt,
        )  # fmt: skip
    return rows


def result_table(rows: Sequence[Row], provider: str | None, fmt: str = FORMAT) -> ResultTable:
    """The rows of one format; ``provider`` (the fallback's name) set adds the comparison with it
    and the timing (GPU runs)."""
    title = f"{fmt}: Helion scaled_mm vs fp32 reference" + (f" and {provider}" if provider else "")
    columns = ["layer", "N", "K", "M", "max abs err", "rel err", "tolerance"]
    if provider:
        columns += [f"rel err vs {provider}", "Helion µs", f"{provider} µs", "speedup", "% HBM roofline"]
    cells = []
    for r in rows:
        row = [r.layer, str(r.n), str(r.k), str(r.m), cell(r.max_abs_err, ".3g"), cell(r.rel_err, ".2e")]
        row.append(f"{r.tolerance:.1e}")
        if provider:
            row += [cell(r.fallback_rel_err, ".2e"), cell(r.helion_us, ".1f"), cell(r.fallback_us, ".1f")]
            row += [cell(r.speedup, ".2f"), cell(r.roofline_pct, ".0f")]
        cells.append([*row, "[green]PASS" if r.passed else "[bold red]FAIL"])
    return ResultTable(title, [*columns, "status"], cells, left=("layer", "status"))


def summary_line(fmt: str, rows: Sequence[Row], provider: str = "") -> str:
    """``<format>: <passed>/<rows> rows passed[; geomean speedup vs <provider>: <x>x]``."""
    line = f"{fmt}: {sum(r.passed for r in rows)}/{len(rows)} rows passed"
    speedups = [r.speedup for r in rows if r.speedup]
    if speedups:
        line += f"; geomean speedup vs {provider}: {statistics.geometric_mean(speedups):.2f}x"
    return line


def repro_command(
    model: str,
    tp: int,
    out_dtype: str,
    row: Row,
    seed: int,
    max_tokens: int,
    cpu_scale: int | None,
    helion_interpret: bool = False,
) -> str:
    """The ``hltools validate`` command that reruns exactly ``row`` (same inputs); ``cpu_scale`` set
    means the row ran in an interpret mode on the CPU (Helion's if ``helion_interpret``)."""
    tokens = str(row.m) if max_tokens <= MIN_TOKENS_DRAWN else f"{row.m},{max_tokens}"
    parts = ["hltools", "validate", "--model", model, "--formats", row.format, "--tp", str(tp)]
    parts += ["--out-dtype", out_dtype]
    parts += ["--layer", row.layer, "--num-tokens", tokens, "--seed", str(seed)]
    prefix = ""
    if cpu_scale is not None:
        parts += ["--cpu-scale", str(cpu_scale)]
        prefix = "HELION_INTERPRET=1 " if helion_interpret else "TRITON_INTERPRET=1 "
    return prefix + shlex.join(parts)
