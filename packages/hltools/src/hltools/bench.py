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
timed replays divided by the number of calls. Weights are random normal values quantized per format
(never zeros). GB/s counts the fewest bytes a call must move (:func:`gemm_bytes`); % of roofline
divides it by the measured device copy bandwidth.

A vLLM candidate that cannot be built, raises, or returns a result more than :data:`SANITY_REL_ERR`
away from the fp32 reference (relative Frobenius) is skipped for the next one; the ``kernel``
field says which one ran and ``note`` why the others did not. The candidates, the inputs and the
timer are parameters of :func:`run_kernel_bench`, so the whole loop runs on the CPU in tests.

This module imports torch; helion, triton and vLLM only inside functions.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from hlcore.config_store import write_text_atomic
from hltools import providers
from hltools.provenance import git_commit, versions
from hltools.shapes import linear_shapes

FORMATS = ("fp8_dynamic", "w8a8_int8", "block_fp8")
PROVIDERS = ("helion", "vllm", "torch")
BASELINES = ("vllm", "torch")
BLOCK_CANDIDATES = providers.BLOCK_ORDER  # vLLM 0.26's CUDA order (FlashInfer aside)
BLOCK = (128, 128)
SANITY_REL_ERR = 0.1  # a baseline further than this from the fp32 reference is treated as broken
RESULTS_JSON = "kernels.json"
RESULTS_CSV = "kernels.csv"
SUMMARY_MD = "kernels.md"
VERSION_DISTS = ("torch", "triton", "helion", "vllm")

GemmCall = Callable[[], torch.Tensor]
Timer = Callable[[Sequence[GemmCall]], Any]  # returns an object with median_us, p20_us, p80_us


# --------------------------------------------------------------------------------------------
# Result schema
# --------------------------------------------------------------------------------------------
@dataclass
class BenchResult:
    """One provider at one (model, format, layer, M, N, K): per-call device time and what it means.

    ``provider``: ``helion``, ``vllm`` (vLLM's default kernel for the format) or ``torch``;
    ``kernel``: what actually ran (e.g. ``vllm block deep_gemm fp8_gemm_nt``; ``-`` when nothing
    could run). Times are microseconds per call (None when not measured: ``note`` says why);
    ``speedup_vs_vllm`` = vLLM's median / this median; ``rel_err``: relative Frobenius error of this
    provider's output vs the fp32 dequantized reference (weight copy 0; DeepGEMM's includes vLLM's
    UE8M0 re-quantization of the weight, about 2.6e-2); ``ok``: ran, timed, and (for
    Helion) within the hlcore.testing tolerance. ``config``: for Helion, where the config came from
    and what it was: ``"<source> <compact JSON>"``, e.g. ``exact {"block_sizes":[16,64,128],...}``
    (source: the picker's ``exact``, ``nearest``, ``heuristic``..., plus `` (marked fallback)``
    when the picked entry is marked); results of older benchmarks hold only the source (or only
    the JSON)."""

    model: str
    layer: str
    format: str
    provider: str
    kernel: str
    m: int
    n: int
    k: int
    tp: int = 1
    out_dtype: str = "bf16"
    gpu: str = ""
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    gbps: float | None = None
    roofline_pct: float | None = None
    speedup_vs_vllm: float | None = None
    rel_err: float | None = None
    ok: bool = False
    copies: int = 0
    repeats: int = 0
    config: str = ""
    torch: str = ""
    triton: str = ""
    helion: str = ""
    vllm: str = ""
    commit: str = ""
    date: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BenchResult:
        """Inverse of :meth:`to_dict`; also reads CSV rows (all strings, empty = None). Unknown keys
        are ignored, so older result files stay readable."""
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name not in d:
                continue
            kwargs[f.name] = _coerce(d[f.name], f.type)
        return cls(**kwargs)


def _coerce(value: Any, annotation: str) -> Any:
    if not isinstance(value, str) or annotation == "str":
        return value
    if value == "" and "None" in annotation:
        return None
    if annotation.startswith("int"):
        return int(value)
    if annotation.startswith("float"):
        return float(value)
    if annotation == "bool":
        return value.strip().lower() in ("true", "1", "yes")
    return value


FIELDS = [f.name for f in dataclasses.fields(BenchResult)]


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------
def provenance(gpu: str) -> dict[str, str]:
    """The fields every result of one run shares: GPU, versions, commit, date (UTC)."""
    v = versions()
    return {
        "gpu": gpu,
        **{d: v.get(d, "") for d in VERSION_DISTS},
        "commit": git_commit() or "",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


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
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {list(FORMATS)}")
    ms = tuple(sorted(dict.fromkeys(int(m) for m in num_tokens)))
    if not ms or ms[0] < 1:
        raise ValueError(f"num_tokens must be positive integers; got {list(num_tokens)}")
    out = []
    for name, config in models:
        shapes = linear_shapes(dict(config), tp=tp)
        if layers:
            bad = sorted(set(layers) - {s.name for s in shapes})
            if bad:
                raise ValueError(f"unknown layer(s) {bad}; choose from {[s.name for s in shapes]}")
            shapes = [s for s in shapes if s.name in layers]
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
        return BLOCK if self.fmt == "block_fp8" else None

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
    ``fmt`` (the same math as ``generate_scaled_mm_inputs``), on ``w``'s device."""
    from hlcore import quant

    if fmt == "fp8_dynamic":
        q, s = quant.per_channel_fp8_quant_ref(w)
    elif fmt == "w8a8_int8":
        q, s = quant.per_token_int8_quant_ref(w)
    elif fmt == "block_fp8":
        q, s = quant.per_block_fp8_quant_ref(w, BLOCK)
    else:
        raise ValueError(f"unknown format {fmt!r}; choose from {list(FORMATS)}")
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
    """Fewest bytes one call moves: A and B (1 byte each), fp32 scales, the output."""
    if fmt == "block_fp8":
        gk, gn = -(-k // BLOCK[1]), -(-n // BLOCK[0])
        scales = 4 * (m * gk + gn * gk)
    else:
        scales = 4 * (m + n)
    return m * k + n * k + scales + out_bytes * m * n


# --------------------------------------------------------------------------------------------
# Candidates (what each provider may run)
# --------------------------------------------------------------------------------------------
PreparedGemm = Callable[[int], Sequence[GemmCall]]  # M -> one call per weight copy


@dataclass(frozen=True)
class Candidate:
    """One kernel a provider may run. ``prepare(inputs)`` does the once-per-(format, N, K) set-up
    (imports, weight re-layout) and returns ``for_m(M) -> [call per weight copy]`` (activation-side
    set-up for M tokens, outside the timed region); either may raise, which skips the candidate.
    ``formats``: the formats it handles; ``config(M)`` (optional): a label of the config it uses."""

    provider: str
    kernel: str
    formats: tuple[str, ...]
    prepare: Callable[[GemmInputs], PreparedGemm]
    config: Callable[[GemmInputs, int], str] | None = None


def _helion_prepare(inputs: GemmInputs) -> PreparedGemm:
    from hlcore import scaled_mm as sm

    def for_m(m: int) -> list[GemmCall]:
        config = _helion_pick(inputs, m).config_json
        a, sa = inputs.a[:m], inputs.scale_a[:m]
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


HELION = Candidate("helion", "helion scaled_mm", FORMATS, _helion_prepare, _helion_config)


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
    baselines: Sequence[str] = BASELINES, block_order: Sequence[str] | None = None
) -> dict[str, list[Candidate]]:
    """Provider -> candidates in the order tried: Helion; vLLM's default kernels
    (:func:`hltools.providers.candidates` of every format: CUTLASS, torch._scaled_mm for fp8, the
    block kernels in ``block_order``, default ``HL_BLOCK_PROVIDER`` or vLLM's order);
    torch._scaled_mm. ``baselines`` picks among vllm/torch."""
    order = providers.block_order(block_order)
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise ValueError(f"unknown baseline(s) {bad}; choose from {list(BASELINES)}")
    out: dict[str, list[Candidate]] = {"helion": [HELION]}
    if "vllm" in baselines:
        chain = dict.fromkeys(cls for fmt in FORMATS for cls in providers.candidates(fmt, order))
        out["vllm"] = [provider_candidate("vllm", cls) for cls in chain]
    if "torch" in baselines:
        out["torch"] = [TORCH_SCALED_MM]
    return out


# --------------------------------------------------------------------------------------------
# Parallel precompile (fills the on-disk compile caches before the timed loop)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileJob:
    """Compile one kernel for a (format, N, K) at the given Ms: ``kind`` ``helion`` (``config``: the
    picked config's JSON) or ``deep_gemm`` (vLLM's DeepGEMM JIT)."""

    kind: str
    fmt: str
    n: int
    k: int
    ms: tuple[int, ...]
    config: str = ""
    out_dtype: str = "bf16"


def compile_jobs(
    shapes: Sequence[BenchShape],
    *,
    out_dtype: str = "bf16",
    candidates: Mapping[str, Sequence[Candidate]] | None = None,
    pick: Callable[[str, int, int, int], str] | None = None,
) -> list[CompileJob]:
    """One Helion job per (format, N, K, picked config) with the Ms that use it (Triton specializes
    M = 1, multiples of 16 and the rest: all of them run), and one DeepGEMM job per block-FP8 (N, K)
    when DeepGEMM is among the vLLM candidates. ``pick(fmt, m, n, k) -> config JSON`` defaults to
    :func:`hlcore.scaled_mm_config.pick_scaled_mm_config` for the current GPU."""
    if pick is None:
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        def pick(fmt, m, n, k):
            return pick_scaled_mm_config(fmt, m, n, k).config_json

    kernels = {c.kernel for cs in (candidates or {}).values() for c in cs}
    jobs: dict[tuple, list[int]] = {}
    for s in shapes:
        for m in s.ms:
            jobs.setdefault(("helion", s.fmt, s.n, s.k, pick(s.fmt, m, s.n, s.k)), []).append(m)
        if s.fmt == "block_fp8" and providers.DeepGemmBlock.name in kernels:
            jobs.setdefault(("deep_gemm", s.fmt, s.n, s.k, ""), []).extend(s.ms)
    return [
        CompileJob(kind, fmt, n, k, tuple(sorted(set(ms))), cfg, out_dtype)
        for (kind, fmt, n, k, cfg), ms in jobs.items()
    ]


def _compile_inputs(job: CompileJob, m: int, device: str) -> GemmInputs:
    """Cheap random operands of the right dtypes and layouts (values do not matter for compiling)."""
    dtype = torch.int8 if job.fmt == "w8a8_int8" else torch.float8_e4m3fn
    out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[job.out_dtype]

    def q(rows):
        x = torch.randn((rows, job.k), device=device)
        return x.mul(64).round().clamp(-127, 127).to(dtype) if dtype == torch.int8 else x.to(dtype)

    if job.fmt == "block_fp8":
        sa = torch.rand((m, -(-job.k // BLOCK[1])), device=device) + 0.5
        sb = torch.rand((-(-job.n // BLOCK[0]), -(-job.k // BLOCK[1])), device=device) + 0.5
    else:
        sa, sb = torch.rand((m, 1), device=device) + 0.5, torch.rand((job.n, 1), device=device) + 0.5
    return GemmInputs(job.fmt, job.n, job.k, q(m), sa, [(q(job.n).t(), sb)], out_dtype)


def run_compile_job(job: CompileJob, device: str = "cuda") -> str | None:
    """Compile (and run once) ``job`` in this process; None on success, else the error (short)."""
    try:
        for m in job.ms:
            inputs = _compile_inputs(job, m, device)
            if job.kind == "helion":
                from hlcore.scaled_mm import scaled_mm

                b, sb = inputs.weights[0]
                scaled_mm(
                    inputs.a,
                    b,
                    inputs.scale_a,
                    sb,
                    inputs.out_dtype,
                    block_size=inputs.block_size,
                    config=job.config,
                )
            elif job.kind == "deep_gemm":
                b, sb = inputs.weights[0]
                providers.DeepGemmBlock(job.fmt, inputs.out_dtype, job.n, job.k)(
                    inputs.a, b, inputs.scale_a, sb
                )
            else:
                raise ValueError(f"unknown compile job kind {job.kind!r}")
        if device == "cuda":
            torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - reported; the timed loop then skips or fails the kernel
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def precompile(
    jobs: Sequence[CompileJob],
    workers: int,
    on_done: Callable[[CompileJob, str | None], None] | None = None,
    device: str = "cuda",
) -> dict[CompileJob, str]:
    """Run ``jobs`` in ``workers`` spawned processes (each imports torch/helion once) so the timed
    loop finds Triton's and DeepGEMM's on-disk caches warm; returns the failed jobs' errors.
    ``workers <= 1`` runs them here, one after the other."""
    errors: dict[CompileJob, str] = {}
    run = functools.partial(run_compile_job, device=device)
    if workers <= 1:
        results = map(run, jobs)
    else:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(min(workers, len(jobs)) or 1)
        results = pool.imap(run, jobs, chunksize=1)
    try:
        for job, err in zip(jobs, results, strict=True):
            if err:
                errors[job] = err
            if on_done:
                on_done(job, err)
    finally:
        if workers > 1:
            pool.close()
            pool.join()
    return errors


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
    ``-`` and the reasons. ``shared``: the provenance fields (:func:`provenance`) of every row."""
    from hlcore.testing import rel_error

    shared = dict(shared or {})
    results: list[BenchResult] = []
    for shape in shapes:
        if on_shape:
            on_shape(shape)
        inputs = inputs_for(shape, copies_for(shape.n, shape.k))
        prepared: dict[str, PreparedGemm | Exception] = {}
        out_dtype = _dtype_name(inputs.out_dtype)
        out_bytes = torch.finfo(inputs.out_dtype).bits // 8
        for m in shape.ms:
            ref = inputs.reference(m)
            rows = []
            for provider, chain in candidates.items():
                usable = [c for c in chain if shape.fmt in c.formats]
                if not usable:
                    continue
                row = BenchResult(
                    shape.model, shape.layer, shape.fmt, provider, "-", m, shape.n, shape.k, shape.tp,
                    out_dtype, copies=len(inputs.weights), repeats=repeats,
                    **{k: v for k, v in shared.items() if k in FIELDS},
                )  # fmt: skip
                reasons = []
                for cand in usable:
                    try:
                        reason = _run_candidate(cand, inputs, m, ref, prepared, timer, row, rel_error)
                    except Exception as exc:  # noqa: BLE001 - a failing kernel is a result, not a crash
                        reason = f"{type(exc).__name__}: {exc}"
                    if reason is None:
                        break
                    reasons.append(f"{cand.kernel}: {reason}"[:300])
                    row.kernel, row.config = "-", ""
                    row.median_us = row.p20_us = row.p80_us = row.rel_err = None
                if reasons:
                    row.note = ("skipped " if row.kernel != "-" else "failed: ") + "; ".join(reasons)
                if row.median_us is not None:
                    row.gbps = gemm_bytes(shape.fmt, m, shape.n, shape.k, out_bytes) / (row.median_us * 1e3)
                    if bandwidth_gbs:
                        row.roofline_pct = 100.0 * row.gbps / bandwidth_gbs
                    row.ok = True
                    if provider == "helion" and tolerance is not None and row.rel_err is not None:
                        tol = tolerance(shape.fmt, inputs.out_dtype)
                        if not row.rel_err <= tol:
                            row.ok = False
                            row.note = (row.note + "; " if row.note else "") + (
                                f"relative error {row.rel_err:.3g} above the tolerance {tol:.1g}"
                            )
                rows.append(row)
            base = next((r.median_us for r in rows if r.provider == "vllm" and r.median_us), None)
            for r in rows:
                if base and r.median_us:
                    r.speedup_vs_vllm = base / r.median_us
                if on_result:
                    on_result(r)
            results += rows
        del inputs, prepared
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return results


def _run_candidate(cand, inputs, m, ref, prepared, timer, row, rel_error) -> str | None:
    """Fill ``row`` from ``cand`` at ``m``; return None on success, else why it was skipped."""
    key = cand.kernel
    if key not in prepared:
        try:
            prepared[key] = cand.prepare(inputs)
        except Exception as exc:  # noqa: BLE001
            prepared[key] = exc
    prep = prepared[key]
    if isinstance(prep, Exception):
        return f"unavailable ({type(prep).__name__}: {prep})"
    calls = list(prep(m))
    out = calls[0]()
    row.kernel = cand.kernel
    row.rel_err = rel_error(out, ref)
    if cand.provider != "helion" and not row.rel_err <= SANITY_REL_ERR:
        return f"wrong result (relative error {row.rel_err:.3g} vs the fp32 reference)"
    if cand.config is not None:
        row.config = cand.config(inputs, m)
    t = timer(calls)
    row.median_us, row.p20_us, row.p80_us = t.median_us, t.p20_us, t.p80_us
    return None


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Speedup:
    """Helion vs a baseline at one (model, format, layer, M): ``value`` = baseline µs / Helion µs."""

    model: str
    format: str
    layer: str
    m: int
    n: int
    k: int
    baseline: str  # the baseline's kernel
    value: float


def speedups(results: Iterable[BenchResult], baseline: str = "vllm") -> list[Speedup]:
    """Helion's speedup over ``baseline`` (a provider) at every point where both were timed."""
    results = list(results)
    base = {_point(r): r for r in results if r.provider == baseline and r.median_us}
    out = []
    for r in results:
        b = base.get(_point(r))
        if r.provider == "helion" and r.median_us and b is not None:
            out.append(
                Speedup(r.model, r.format, r.layer, r.m, r.n, r.k, b.kernel, b.median_us / r.median_us)
            )
    return out


def _point(r: BenchResult) -> tuple:
    return (r.model, r.format, r.layer, r.n, r.k, r.m, r.tp, r.out_dtype)


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive finite values (None when there are none)."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return statistics.geometric_mean(vals) if vals else None


def geomean_by_format(results: Iterable[BenchResult], baseline: str = "vllm") -> dict[str, float]:
    """Format -> geomean of Helion's speedups over ``baseline`` (formats without any left out)."""
    groups: dict[str, list[float]] = {}
    for s in speedups(results, baseline):
        groups.setdefault(s.format, []).append(s.value)
    return {fmt: g for fmt, vals in groups.items() if (g := geomean(vals)) is not None}


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Atomic JSON write: sorted keys, indent 2, trailing newline (NaN written as null)."""
    write_text_atomic(Path(path), json.dumps(_nan_to_none(payload), indent=2, sort_keys=True) + "\n")


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_nan_to_none(v) for v in x]
    return x


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> None:
    """Atomic CSV write with a header row; None and NaN are written as empty cells."""
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if _nan_to_none(v) is None else v) for k, v in r.items()})
    write_text_atomic(Path(path), buf.getvalue())


def write_results(
    output: Path, results: Sequence[BenchResult], metadata: Mapping[str, Any]
) -> dict[str, Path]:
    """``output/kernels.json`` (``{"metadata", "geomean_speedup", "results"}``), ``kernels.csv`` (one
    row per result, :class:`BenchResult` field order) and ``kernels.md`` (summary tables)."""
    output = Path(output)
    payload = {
        "metadata": dict(metadata),
        "geomean_speedup": {
            b: geomean_by_format(results, b) for b in BASELINES if any(r.provider == b for r in results)
        },
        "results": [r.to_dict() for r in results],
    }
    paths = {"json": output / RESULTS_JSON, "csv": output / RESULTS_CSV, "md": output / SUMMARY_MD}
    write_json(paths["json"], payload)
    write_csv(paths["csv"], [r.to_dict() for r in results], FIELDS)
    write_text_atomic(paths["md"], summary_markdown(results, metadata))
    return paths


def read_results(path: Path) -> tuple[dict[str, Any], list[BenchResult]]:
    """``(metadata, results)`` of a ``kernels.json`` (or a directory holding one) or a ``kernels.csv``
    (metadata empty). Raises ``FileNotFoundError``/``ValueError`` for a missing or malformed file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_JSON
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return {}, [BenchResult.from_dict(r) for r in csv.DictReader(f)]
    try:
        payload = json.loads(path.read_text())
        return dict(payload.get("metadata", {})), [BenchResult.from_dict(r) for r in payload["results"]]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"{path}: not a kernel benchmark result file ({type(exc).__name__}: {exc})"
        ) from None


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def table_rows(results: Sequence[BenchResult]) -> list[dict[str, str]]:
    """One row per (model, format, layer, M): the providers' medians side by side, Helion's speedups
    and share of the copy bandwidth (strings, for the printed and the markdown tables)."""
    points: dict[tuple, dict[str, BenchResult]] = {}
    for r in results:
        points.setdefault(_point(r), {})[r.provider] = r
    out = []
    for (model, fmt, layer, n, k, m, _tp, _dt), by in points.items():
        h, v, t = by.get("helion"), by.get("vllm"), by.get("torch")
        out.append(
            {
                "model": model,
                "format": fmt,
                "layer": layer,
                "N": str(n),
                "K": str(k),
                "M": str(m),
                "Helion µs": _f(h.median_us if h else None, ".1f"),
                "vLLM µs": _f(v.median_us if v else None, ".1f"),
                "vLLM kernel": _short_kernel(v.kernel) if v else "-",
                "torch µs": _f(t.median_us if t else None, ".1f"),
                "vs vLLM": _f(h.speedup_vs_vllm if h else None, ".2f"),
                "vs torch": _f(_ratio(t, h), ".2f"),
                "Helion % HBM": _f(h.roofline_pct if h else None, ".0f"),
            }
        )
    return out


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}×"


def _ratio(base: BenchResult | None, r: BenchResult | None) -> float | None:
    return base.median_us / r.median_us if base and r and base.median_us and r.median_us else None


def _short_kernel(kernel: str) -> str:
    return kernel.removeprefix("vllm ").replace("block ", "").replace("deep_gemm fp8_gemm_nt", "deep_gemm")


def summary_markdown(results: Sequence[BenchResult], metadata: Mapping[str, Any]) -> str:
    """Markdown: provenance line, geomean speedup per format, one table per format."""
    results = list(results)
    lines = ["# Kernel benchmark", ""]
    meta = {k: metadata.get(k) for k in ("gpu", "torch", "triton", "helion", "vllm", "commit", "date")}
    lines.append(" · ".join(f"{k} {v}" for k, v in meta.items() if v))
    if metadata.get("copy_bandwidth_gbs"):
        lines.append(f"\nMeasured copy bandwidth: {metadata['copy_bandwidth_gbs']:.0f} GB/s.")
    if metadata.get("command"):
        lines.append(f"\nCommand: `{metadata['command']}`")
    lines += [
        "",
        "| format | geomean vs vLLM | geomean vs torch._scaled_mm | points |",
        "| --- | --- | --- | --- |",
    ]
    gv, gt = geomean_by_format(results, "vllm"), geomean_by_format(results, "torch")
    for fmt in dict.fromkeys(r.format for r in results):
        n = len([s for s in speedups(results, "vllm") if s.format == fmt])
        lines.append(f"| {fmt} | {_x(gv.get(fmt))} | {_x(gt.get(fmt))} | {n} |")
    rows = table_rows(results)
    for fmt in dict.fromkeys(r["format"] for r in rows):
        sub = [r for r in rows if r["format"] == fmt]
        cols = [c for c in sub[0] if c != "format"]
        lines += ["", f"## {fmt}", "", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
        lines += ["| " + " | ".join(r[c] for c in cols) + " |" for r in sub]
    notes: dict[tuple[str, str, str], list[str]] = {}  # (format, provider, note) -> points
    for r in results:
        if r.note:
            notes.setdefault((r.format, r.provider, r.note), []).append(f"{r.model} {r.layer} M={r.m}")
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {fmt} {prov} ({', '.join(pts)}): {note}" for (fmt, prov, note), pts in notes.items()]
    return "\n".join(lines) + "\n"


def failures(results: Iterable[BenchResult]) -> list[BenchResult]:
    """Helion rows that did not run, were not timed or exceeded the tolerance."""
    return [r for r in results if r.provider == "helion" and not r.ok]
