"""``hltools bench kernels``: Helion's scaled GEMM vs vLLM's default kernel (and torch._scaled_mm)
on every linear (N, K) x num_tokens M of a model, side by side in one process.

Each result is the device time of one ``out[M, N] = dequant(A[M, K]) @ dequant(B[K, N])`` call
(bf16 or fp16 output) of one *provider*:

| provider | ``fp8_dynamic`` | ``w8a8_int8`` | ``block_fp8`` |
| --- | --- | --- | --- |
| ``helion`` | ``hlcore.scaled_mm`` with its picked config (tuned file, else the heuristic) | same | same |
| ``vllm`` (vLLM 0.26's default on Hopper, tried in this order) | CUTLASS ``cutlass_scaled_mm``, else ``torch._scaled_mm`` | CUTLASS ``cutlass_scaled_mm`` (int8) | DeepGEMM ``fp8_gemm_nt``, CUTLASS block ``cutlass_scaled_mm``, Triton ``w8a8_triton_block_scaled_mm`` |
| ``torch`` | ``torch._scaled_mm`` (row-wise scales) | - (fp8 only) | - |

The ``vllm`` and ``torch`` kernels are those of :mod:`hltools.providers` (which says what each
mirrors, and why FlashInfer's block-FP8 kernel, vLLM 0.26's first choice at M < 32, is not among
them; the results say so when FlashInfer is importable). Every provider gets the same pre-quantized
operands. Per (format, N, K) each vLLM kernel processes every weight copy once as vLLM does at load
time (DeepGEMM: ``deepgemm_post_process_fp8_weight_block``, UE8M0 re-quantization when vLLM would use
it, on a private copy), and per M its activation scales once into the layout it reads (column-major
for CUTLASS block, TMA-aligned column-major for DeepGEMM); the timed calls launch the kernel only.

Method (:func:`hltools.timing.time_graph`): a CUDA graph of one call per weight copy, rotating over
``copies_for(N * K)`` distinct random weights (more bytes than 4 x the 60 MB L2, so each call reads
its weight from HBM), warm-up replays, then the median (and 20th/80th percentiles) of ``repeats``
timed replays divided by the number of calls. A timing whose p80 / p20 exceeds
:data:`hlcore.timing.RETIME_SPREAD` (a disturbed one) is timed again, up to
:data:`hlcore.timing.RETIME_TRIES` times (:func:`hlcore.timing.steadiest`), and the row keeps the
timing with the narrowest spread and says so in its ``note``. Weights are random normal values
quantized per format (never zeros). GB/s counts the fewest bytes a call must move
(:func:`gemm_bytes`); % of roofline divides it by the measured device copy bandwidth.

A vLLM candidate that cannot be built, raises, or returns a result more than :data:`SANITY_REL_ERR`
away from the fp32 reference (relative Frobenius) is skipped for the next one; the ``kernel``
field says which one ran and ``note`` why the others did not. The candidates, the inputs and the
timer are parameters of :func:`run_kernel_bench`, so the whole loop runs on the CPU in tests.

This module imports torch; helion, triton and vLLM only inside functions.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hlcore import config_store
from hltools import kernel_results, providers
from hltools.format_names import FORMATS, check_formats
from hltools.kernel_results import BASELINES, FIELDS, BenchResult
from hltools.shapes import linear_shapes, only_layers

BLOCK_CANDIDATES = providers.BLOCK_ORDER  # vLLM 0.26's CUDA order (FlashInfer aside)
SANITY_REL_ERR = 0.1  # a baseline further than this from the fp32 reference is treated as broken

#: The reader of the results (:mod:`hltools.kernel_results`), where ``hltools.bench_configs`` finds it.
read_results = kernel_results.read_results

GemmCall = Callable[[], torch.Tensor]
Timer = Callable[[Sequence[GemmCall]], Any]  # returns an object with median_us, p20_us, p80_us


# --------------------------------------------------------------------------------------------
# Cases and inputs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchShape:
    """One (model, format, N, K) and the M values to time; ``layer`` joins the layers that share it."""

    model: str
    fmt: str
    layer: str
    n: int
    k: int
    ms: tuple[int, ...]
    tp: int = 1


def bench_shapes(
    models: Sequence[tuple[str, Mapping[str, Any]]],
    formats: Sequence[str],
    num_tokens: Sequence[int],
    tp: int = 1,
    layers: Sequence[str] | None = None,
) -> list[BenchShape]:
    """Every (model, format, linear (N, K)) in order: model, format, then :func:`linear_shapes`
    order; layers of one model with the same (N, K) are timed once (``layer`` = ``"a/b"``).
    Raises ``ValueError`` for an unknown format or layer, or a TP size the model cannot be split by."""
    formats = check_formats(formats)
    ms = tuple(sorted(dict.fromkeys(int(m) for m in num_tokens)))
    if not ms or ms[0] < 1:
        raise ValueError(f"num_tokens must be positive integers; got {list(num_tokens)}")
    out = []
    for name, config in models:
        shapes = only_layers(linear_shapes(dict(config), tp=tp), layers)
        merged: dict[tuple[int, int], list[str]] = {}
        for s in shapes:
            merged.setdefault((s.n, s.k), []).append(s.name)
        for fmt in dict.fromkeys(formats):
            out += [BenchShape(name, fmt, "/".join(ls), n, k, ms, tp) for (n, k), ls in merged.items()]
    return out


@dataclass
class GemmInputs:
    """The operands of one (format, N, K): ``a`` ``[max M, K]`` and ``scale_a`` (per token ``[M, 1]``
    or 1x128 groups ``[M, ceil(K/128)]``, row-major), and ``weights``: one ``(b [K, N] column-major,
    scale_b)`` per copy (``[N, 1]`` per channel or ``[ceil(N/128), ceil(K/128)]`` blocks)."""

    fmt: str
    n: int
    k: int
    a: torch.Tensor
    scale_a: torch.Tensor
    weights: list[tuple[torch.Tensor, torch.Tensor]]
    out_dtype: torch.dtype = torch.bfloat16

    @property
    def block_size(self) -> tuple[int, int] | None:
        from hlcore.formats import get_format

        return get_format(self.fmt).block_size

    @property
    def device(self) -> torch.device:
        return self.a.device

    def reference(self, m: int) -> torch.Tensor:
        """fp32 dequantized result for the first ``m`` tokens and weight copy 0, in ``out_dtype``."""
        from hlcore.scaled_mm import scaled_mm_ref

        b, scale_b = self.weights[0]
        return scaled_mm_ref(
            self.a[:m], b, self.scale_a[:m], scale_b, self.out_dtype, block_size=self.block_size
        )


def quantize_weight(fmt: str, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(b [K, N] column-major, scale_b)`` of a ``[N, K]`` weight with the hlcore.quant reference of
    ``fmt`` (:meth:`hlcore.formats.ScaledMMFormat.quantize_weight`, the same math as
    ``generate_scaled_mm_inputs``), on ``w``'s device; ``ValueError`` for an unknown format."""
    from hlcore.formats import get_format

    q, s = get_format(fmt, "quantize_weight").quantize_weight(w)
    return q.t(), s


def make_inputs(
    fmt: str,
    n: int,
    k: int,
    max_m: int,
    copies: int,
    *,
    device: str | torch.device = "cuda",
    out_dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> GemmInputs:
    """Copy 0 and the activations from :func:`hlcore.scaled_mm.generate_scaled_mm_inputs` (seeded);
    copies 1.. drawn on ``device`` (``N(0, 0.05)`` weights, quantized by :func:`quantize_weight`)."""
    from hlcore.scaled_mm import generate_scaled_mm_inputs

    d = generate_scaled_mm_inputs(max_m, n, k, fmt=fmt, device=device, out_dtype=out_dtype, seed=seed)
    weights = [(d["b"], d["scale_b"])]
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    for _ in range(copies - 1):
        w = torch.randn((n, k), generator=gen, device=device, dtype=torch.float32).mul_(0.05)
        weights.append(quantize_weight(fmt, w.to(torch.bfloat16)))
    return GemmInputs(fmt, n, k, d["a"], d["scale_a"], weights, out_dtype)


def gemm_bytes(fmt: str, m: int, n: int, k: int, out_bytes: int = 2) -> int:
    """Fewest bytes one call moves (:func:`hlcore.formats.scaled_mm_bytes`)."""
    from hlcore.formats import scaled_mm_bytes

    return scaled_mm_bytes(fmt, m, n, k, out_bytes)


# --------------------------------------------------------------------------------------------
# Candidates (what each provider may run)
# --------------------------------------------------------------------------------------------
PreparedGemm = Callable[[int], Sequence[GemmCall]]  # M -> one call per weight copy


@dataclass(frozen=True)
class Candidate:
    """One kernel a provider may run. ``prepare(inputs)`` does the once-per-(format, N, K) set-up
    (imports, weight re-layout) and returns ``for_m(M) -> [call per weight copy]`` (activation-side
    set-up for M tokens, outside the timed region); either may raise, which skips the candidate.
    ``formats``: the formats it handles; ``config(M)`` (optional): a label of the config it uses;
    ``block_tag``: the end of ``kernel`` that names Block_FP8's ``scale_a`` layout (a Helion
    candidate reading a layout other than row-major); :meth:`kernel_on` leaves it out of the other
    formats' rows."""

    provider: str
    kernel: str
    formats: tuple[str, ...]
    prepare: Callable[[GemmInputs], PreparedGemm]
    config: Callable[[GemmInputs, int], str] | None = None
    block_tag: str = ""

    def kernel_on(self, fmt: str) -> str:
        """The kernel's name on a ``fmt`` row: ``kernel``, less ``block_tag`` on a format without
        block scales."""
        return self.kernel if fmt == "block_fp8" else self.kernel.removesuffix(self.block_tag)


#: Layouts of Block_FP8's ``scale_a`` the Helion candidate can read (the names config entries record,
#: :mod:`hlcore.config_store`): ``row`` (row-major, what hlvllm's op design quantizes into) or ``tma``
#: (vLLM's TMA-aligned column-major, what its DeepGEMM path writes and the Helion GEMM reads in
#: capture mode, ``HL_DISPATCH_AT=capture``).
BLOCK_SCALE_A_LAYOUTS = config_store.BLOCK_SCALE_A_LAYOUTS


def resolve_block_scale_a(layout: str) -> str:
    """The layout a command's ``--block-scale-a`` names: ``auto`` is the one hlvllm's dispatch mode
    hands the Helion GEMM (:data:`hlvllm.routing.BLOCK_SCALE_A_OF_MODE` of ``HL_DISPATCH_AT``:
    ``tma`` in capture mode, the default; ``row`` with ``HL_DISPATCH_AT=op``); otherwise one of
    :data:`BLOCK_SCALE_A_LAYOUTS`. ``ValueError`` for anything else (or a bad ``HL_DISPATCH_AT``;
    the other ``HL_*`` variables are not read)."""
    if layout == "auto":
        from hlvllm.routing import BLOCK_SCALE_A_OF_MODE
        from hlvllm.settings import dispatch_at_env

        return BLOCK_SCALE_A_OF_MODE[dispatch_at_env()]
    check_block_scale_a(layout, auto=True)
    return layout


def check_block_scale_a(layout: str, *, auto: bool = False) -> None:
    """``ValueError`` unless ``layout`` is one of :data:`BLOCK_SCALE_A_LAYOUTS` (the message names
    ``auto`` too where the caller takes it, ``auto``)."""
    if layout not in BLOCK_SCALE_A_LAYOUTS:
        one_of = "auto or one of" if auto else "one of"
        raise ValueError(
            f"block scale_a layout must be {one_of} {list(BLOCK_SCALE_A_LAYOUTS)}; got {layout!r}"
        )


def block_scale_a(scale_a: torch.Tensor, fmt: str, layout: str) -> torch.Tensor:
    """``scale_a`` in ``layout`` (:data:`BLOCK_SCALE_A_LAYOUTS`) for Block_FP8; other formats' per-token
    scales as given. ``ValueError`` for an unknown layout."""
    check_block_scale_a(layout)
    if fmt != "block_fp8" or layout == "row":
        return scale_a
    return providers.tma_aligned_column_major(scale_a)


def _helion_prepare(inputs: GemmInputs, layout: str = "row") -> PreparedGemm:
    from hlcore import scaled_mm as sm

    def for_m(m: int) -> list[GemmCall]:
        config = _helion_pick(inputs, m).config_json
        a, sa = inputs.a[:m], block_scale_a(inputs.scale_a[:m], inputs.fmt, layout)
        bs = inputs.block_size
        return [
            lambda b=b, sb=sb: sm.scaled_mm(a, b, sa, sb, inputs.out_dtype, block_size=bs, config=config)
            for b, sb in inputs.weights
        ]

    return for_m


def _helion_pick(inputs: GemmInputs, m: int):
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    return pick_scaled_mm_config(inputs.fmt, m, inputs.n, inputs.k, device=inputs.device)


def helion_config_label(pick) -> str:
    """``"<source>[ (marked fallback)] <config as compact JSON>"`` of a
    :class:`hlcore.scaled_mm_config.ScaledMMConfigPick`: where the config came from and what it
    was (``hltools configs from-bench`` reads the config back from the JSON)."""
    label = pick.source + (" (marked fallback)" if pick.fallback else "")
    config = json.loads(pick.config_json)  # the config _helion_prepare runs (the same pick)
    return f"{label} {json.dumps(config, sort_keys=True, separators=(',', ':'))}"


def _helion_config(inputs: GemmInputs, m: int) -> str:
    return helion_config_label(_helion_pick(inputs, m))


def helion_candidate(layout: str = "row") -> Candidate:
    """Helion's :class:`Candidate`; ``layout``: the Block_FP8 ``scale_a`` layout it reads
    (:data:`BLOCK_SCALE_A_LAYOUTS`; the kernel name says which when not row-major)."""
    check_block_scale_a(layout)
    tag = "" if layout == "row" else f" (block scale_a {layout})"
    return Candidate(
        "helion",
        "helion scaled_mm" + tag,
        FORMATS,
        functools.partial(_helion_prepare, layout=layout),
        _helion_config,
        block_tag=tag,
    )


HELION = helion_candidate()


def _provider_prepare(cls: type[providers.ScaledMMProvider], inputs: GemmInputs) -> PreparedGemm:
    """``cls`` built for the inputs' format, out dtype and (N, K), every weight copy prepared once
    (vLLM's load-time processing); per M the activation scales once in the kernel's layout."""
    p = cls(inputs.fmt, inputs.out_dtype, inputs.n, inputs.k)
    weights = [p.prepare_weight(b, sb) for b, sb in inputs.weights]

    def for_m(m: int) -> list[GemmCall]:
        return p.calls(inputs.a[:m], p.prepare_scale_a(inputs.scale_a[:m]), weights)

    return for_m


def provider_candidate(provider: str, cls: type[providers.ScaledMMProvider]) -> Candidate:
    """A :class:`Candidate` of ``provider`` that runs the :mod:`hltools.providers` kernel ``cls``."""
    return Candidate(provider, cls.name, cls.formats, functools.partial(_provider_prepare, cls))


VLLM_BLOCK = {key: provider_candidate("vllm", cls) for key, cls in providers.BLOCK_PROVIDERS.items()}
TORCH_SCALED_MM = provider_candidate("torch", providers.TorchScaledMM)


def default_candidates(
    baselines: Sequence[str] = BASELINES,
    block_order: Sequence[str] | None = None,
    block_scale_a_layout: str = "row",
) -> dict[str, list[Candidate]]:
    """Provider -> candidates in the order tried: Helion; vLLM's default kernels
    (:func:`hltools.providers.candidates` of every format: CUTLASS, torch._scaled_mm for fp8, the
    block kernels in ``block_order``, default ``HL_BLOCK_PROVIDER`` or vLLM's order);
    torch._scaled_mm. ``baselines`` picks among vllm/torch; ``block_scale_a_layout``: the Block_FP8
    scale_a layout Helion reads (:data:`BLOCK_SCALE_A_LAYOUTS`)."""
    order = providers.block_order(block_order)
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise ValueError(f"unknown baseline(s) {bad}; choose from {list(BASELINES)}")
    out: dict[str, list[Candidate]] = {"helion": [helion_candidate(block_scale_a_layout)]}
    if "vllm" in baselines:
        chain = dict.fromkeys(cls for fmt in FORMATS for cls in providers.candidates(fmt, order))
        out["vllm"] = [provider_candidate("vllm", cls) for cls in chain]
    if "torch" in baselines:
        out["torch"] = [TORCH_SCALED_MM]
    return out


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------
InputsFactory = Callable[[BenchShape, int], GemmInputs]  # (shape, copies) -> inputs


def run_kernel_bench(
    shapes: Sequence[BenchShape],
    *,
    candidates: Mapping[str, Sequence[Candidate]],
    timer: Timer,
    inputs_for: InputsFactory,
    copies_for: Callable[[int, int], int],
    bandwidth_gbs: float | None,
    shared: Mapping[str, str] | None = None,
    repeats: int = 0,
    tolerance: Callable[[str, torch.dtype], float] | None = None,
    on_result: Callable[[BenchResult], None] | None = None,
    on_shape: Callable[[BenchShape], None] | None = None,
) -> list[BenchResult]:
    """Time every provider of ``candidates`` on every (shape, M); return the results in order
    shape, M, provider (``helion`` first, then the baselines as given).

    For each shape: ``inputs_for(shape, copies_for(N, K))`` once, each candidate's ``prepare`` once
    (cached, failures too), then per M the first candidate (in order) that builds, runs, gives a
    finite result within :data:`SANITY_REL_ERR` of the fp32 reference (Helion: any result, its
    error vs ``tolerance(fmt, out_dtype)`` sets ``ok``) and times without raising. A provider with no
    candidate for the format gives no row; one whose candidates all fail gives a row with kernel
    ``-`` and the reasons. ``shared``: the provenance fields (:func:`hltools.results.provenance`)
    of every row."""
    shared = {k: v for k, v in (shared or {}).items() if k in FIELDS}
    results: list[BenchResult] = []
    for shape in shapes:
        if on_shape:
            on_shape(shape)
        run = _ShapeRun(shape, inputs_for(shape, copies_for(shape.n, shape.k)), timer)
        fields = {"copies": len(run.inputs.weights), "repeats": repeats, **shared}
        for m in shape.ms:
            ref = run.inputs.reference(m)
            rows = [
                _provider_row(run, m, ref, provider, usable, fields)
                for provider, chain in candidates.items()
                if (usable := supported(chain, shape.fmt))
            ]
            for row in rows:
                _judge(row, run.inputs.out_dtype, bandwidth_gbs, tolerance)
            base = next((r.median_us for r in rows if r.provider == "vllm" and r.median_us), None)
            for r in rows:
                if base and r.median_us:
                    r.speedup_vs_vllm = base / r.median_us
                if on_result:
                    on_result(r)
            results += rows
        del run  # the inputs and prepared weights of this shape
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results


def supported(chain: Sequence[Candidate], fmt: str) -> list[Candidate]:
    """The candidates of ``chain`` that handle ``fmt``, in order."""
    return [c for c in chain if fmt in c.formats]


@dataclass
class _ShapeRun:
    """One shape's inputs and its candidates prepared so far (or the exception that prevented it)."""

    shape: BenchShape
    inputs: GemmInputs
    timer: Timer
    prepared: dict[str, PreparedGemm | Exception] = field(default_factory=dict)


def _provider_row(run: _ShapeRun, m: int, ref, provider: str, usable, fields) -> BenchResult:
    """``provider``'s row at ``m``: its first candidate that runs, or kernel ``-`` and every reason."""
    s = run.shape
    out_dtype = _dtype_name(run.inputs.out_dtype)
    row = BenchResult(s.model, s.layer, s.fmt, provider, "-", m, s.n, s.k, s.tp, out_dtype, **fields)
    reasons = []
    for cand in usable:
        try:
            reason = _run_candidate(cand, run, m, ref, row)
        except Exception as exc:  # noqa: BLE001 - a failing kernel is a result, not a crash
            reason = f"{type(exc).__name__}: {exc}"
        if reason is None:
            break
        reasons.append(f"{cand.kernel_on(s.fmt)}: {reason}"[:300])
        row.kernel, row.config = "-", ""
        row.median_us = row.p20_us = row.p80_us = row.rel_err = None
    if reasons:
        row.note = ("skipped " if row.kernel != "-" else "failed: ") + "; ".join(reasons)
    return row


def _judge(row: BenchResult, out_dtype: torch.dtype, bandwidth_gbs, tolerance) -> None:
    """A timed row's GB/s, % of the copy bandwidth and ``ok`` (Helion: within ``tolerance``)."""
    if row.median_us is None:
        return
    out_bytes = torch.finfo(out_dtype).bits // 8
    row.gbps = gemm_bytes(row.format, row.m, row.n, row.k, out_bytes) / (row.median_us * 1e3)
    if bandwidth_gbs:
        row.roofline_pct = 100.0 * row.gbps / bandwidth_gbs
    row.ok = True
    if row.provider == "helion" and tolerance is not None and row.rel_err is not None:
        tol = tolerance(row.format, out_dtype)
        if not row.rel_err <= tol:
            row.ok = False
            row.note = (row.note + "; " if row.note else "") + (
                f"relative error {row.rel_err:.3g} above the tolerance {tol:.1g}"
            )


def _run_candidate(cand: Candidate, run: _ShapeRun, m: int, ref, row: BenchResult) -> str | None:
    """Fill ``row`` from ``cand`` at ``m``; return None on success, else why it was skipped."""
    from hlcore.numerics import rel_error

    key = cand.kernel
    if key not in run.prepared:
        try:
            run.prepared[key] = cand.prepare(run.inputs)
        except Exception as exc:  # noqa: BLE001
            run.prepared[key] = exc
    prep = run.prepared[key]
    if isinstance(prep, Exception):
        return f"unavailable ({type(prep).__name__}: {prep})"
    calls = list(prep(m))
    out = calls[0]()
    row.kernel = cand.kernel_on(row.format)
    row.rel_err = rel_error(out, ref)
    if cand.provider != "helion" and not row.rel_err <= SANITY_REL_ERR:
        return f"wrong result (relative error {row.rel_err:.3g} vs the fp32 reference)"
    if cand.config is not None:
        row.config = cand.config(run.inputs, m)
    t = _steady_timing(run.timer, calls, row)
    row.median_us, row.p20_us, row.p80_us = t.median_us, t.p20_us, t.p80_us
    return None


def _steady_timing(timer: Timer, calls: Sequence[GemmCall], row: BenchResult):
    """:func:`hlcore.timing.steadiest` of ``timer`` over ``calls``, with a note on ``row`` when
    more than one timing was taken."""
    from hlcore.timing import RETIME_SPREAD, spread, steadiest

    t, taken = steadiest(timer, calls)
    if taken > 1:
        state = "kept the steadiest" if spread(t) <= RETIME_SPREAD else "all disturbed, kept the steadiest"
        row.note = (row.note + "; " if row.note else "") + (
            f"timed {taken} times (p80/p20 above {RETIME_SPREAD}): {state}"
        )
    return t


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))
