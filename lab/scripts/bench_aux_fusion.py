# ruff: noqa: B023  (closures are called within their loop iteration)
"""Helion's two-launch norm/silu + per-token fp8 quant vs Inductor's fused kernel vs vLLM's CUDA ops,
timed as CUDA-graph replay at decode sizes (one H200 call, < 150 s).

Under vLLM 0.26's default -O2 (Inductor, custom ops off) vLLM runs the torch-native forward of
``RMSNorm`` / ``SiluAndMul`` / ``QuantFP8`` and Inductor fuses the norm (or silu_and_mul) with the
per-token fp8 quantization that follows into one generated kernel; with hlvllm the two are two opaque
Helion launches. This measures, side by side in one process, the PAIRS (bf16 activations):

| pair | where in the model | sizes |
| --- | --- | --- |
| fused_add_rms_norm+quant | input of qkv_proj / gate_up_proj | hidden {2048, 4096, 5120, 8192} |
| silu_and_mul+quant | input of down_proj | intermediate d {6144, 12288, 17408, 25600} (input [M, 2 d]) |
| rms_norm+quant | the first layer's input | hidden {2048, 4096, 5120, 8192} |

x num_tokens {1, 2, 4, 8, 16, 32}, with these providers:

* ``inductor``: ``torch.compile(fullgraph=True, dynamic=False)`` of :func:`native_pair` (vLLM 0.26's
  native math: ``vllm.ir.ops.fused_add_rms_norm`` / ``rms_norm`` native impls, ``SiluAndMul.forward_native``,
  ``QuantFP8.forward_native`` per-token dynamic), one compile per (pair, size, num_tokens);
* ``inductor_dyn``: the same math compiled as vLLM compiles its graph: num_tokens marked dynamic,
  compiled once per (pair, size) at ``--dyn-hint-tokens`` (8192: vLLM's first compile runs at
  max_num_batched_tokens, and Inductor autotunes there), all Dynamo guards skipped, asserts off;
* ``helion``: hlcore's kernels as ``hlvllm.aux_ops`` runs them under capture (norm or silu_and_mul,
  then ``quant_kernels.per_token_fp8_quant``; generic configs picked by ``hlcore.aux_configs``);
* ``helion_fused``: hlcore's one-launch fused kernels (``norm_quant.fused_add_rms_norm_fp8_quant`` /
  ``rms_norm_fp8_quant``, ``activation_quant.silu_and_mul_fp8_quant``: what ``HL_AUX_FUSION=1`` runs);
* ``vllm_cuda``: ``torch.ops._C.fused_add_rms_norm`` (in place) / ``_C.rms_norm`` / ``_C.silu_and_mul``
  then ``_custom_ops.scaled_fp8_quant(use_per_token_if_dynamic=True)`` (custom ops on, no fusion);
* ``vllm_fused`` (norm pairs only): ``_custom_ops.rms_norm_dynamic_per_token_quant`` (what vLLM's
  fusion pass uses with ``+rms_norm,+quant_fp8``).

Each case checks every provider against ``vllm_cuda`` (fraction of equal fp8 bytes, largest
difference of the dequantized values in fp8 steps of the reference, scales' relative difference,
residual' relative difference) and records it; a provider that disagrees (equal bytes < 99 % and
more than 2 fp8 steps apart, or scales > 1e-2 apart) is reported as a mismatch (exit status 1).

Method as ``bench_aux.py``: rotating input copies, CUDA-graph capture of all copies' calls, warm-up
replays, median of repeats (hltools.timing). Everything is compiled first in parallel worker
processes (Inductor's FX-graph and Triton caches, Helion's Triton cache), then once more in this
process before capture. Last, one profiled call per (pair, size) counts each provider's kernels.

Must finish in < 150 s on an H200: a budget (``--budget-s``, default 135 s, precompile included)
skips the cases left (the rms_norm pair comes last) and says so.

Usage (GPU machine, set up as for bench_aux.py, see lab/README.md):
    python3 lab/scripts/bench_aux_fusion.py [--quick] [--pairs a,b] [--providers ...] [--budget-s 135]
Writes ``$OUT/bench_aux_fusion.json`` (or ``./``); the summary table (geomean over sizes of
provider us / helion us: > 1 = Helion faster) is printed last. ``--cpu-smoke``: tiny sizes on the
CPU (Helion interpret mode, Inductor's CPU backend, no CUDA graphs, no vLLM ops): checks that
``inductor`` / ``inductor_dyn`` and ``helion`` agree; the timings mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

PAIRS = ["fused_add_rms_norm+quant", "silu_and_mul+quant", "rms_norm+quant"]
PROVIDERS = ["inductor", "inductor_dyn", "helion", "helion_fused", "vllm_cuda", "vllm_fused"]
NORM_HIDDEN = [2048, 4096, 5120, 8192]
SILU_D = [6144, 12288, 17408, 25600]
DECODE_TOKENS = [1, 2, 4, 8, 16, 32]
QUICK = {"norm": [4096], "silu": [12288]}
SMOKE = {"norm": [256], "silu": [512], "tokens": [1, 3], "hint": 64}
EPS = 1e-6
L2_BYTES = 60 * 1024 * 1024
DEVICE = "cuda"
REFERENCE = "vllm_cuda"  # the provider every other one is checked against (inductor in --cpu-smoke)
PROFILE_TOKENS = 8


# --------------------------------------------------------------------------------------------
# vLLM 0.26's native math (what Inductor compiles under -O2), pure torch
# --------------------------------------------------------------------------------------------
def native_per_token_fp8_quant(x):
    """``QuantFP8(static=False, GroupShape.PER_TOKEN).forward_native(x)`` (vllm/model_executor/layers/
    quantization/input_quant_fp8.py): amax in x's dtype, ``scale = max(amax / 448, 1 / (448 * 512))``,
    ``q = clamp(x_fp32 * (1 / scale), -448, 448)`` (a reciprocal, not a division)."""
    import torch

    fp8 = torch.float8_e4m3fn
    fp8_max = torch.finfo(fp8).max
    fp8_min = torch.finfo(fp8).min
    x_max, _ = x.abs().max(dim=-1)
    x_max = x_max.unsqueeze(-1).to(torch.float32)
    scale = (x_max / fp8_max).clamp(min=1.0 / (fp8_max * 512.0))
    out = x.to(torch.float32) * scale.to(torch.float32).reciprocal()
    return out.clamp(fp8_min, fp8_max).to(fp8), scale


def native_rms_norm(x, weight, eps):
    """``vllm.ir.ops.rms_norm`` native (vllm/ir/ops/layernorm.py)."""
    import torch

    orig_dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    x = x.to(weight.dtype) * weight
    return x.to(orig_dtype)


def native_fused_add_rms_norm(x, residual, weight, eps):
    """``vllm.ir.ops.fused_add_rms_norm`` native: the sum in fp32, normalized in fp32, returned
    rounded to x's dtype as the new residual."""
    import torch

    orig_dtype = x.dtype
    x = x.to(torch.float32)
    x = x + residual.to(torch.float32)
    residual = x.to(orig_dtype)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    x = x.to(weight.dtype) * weight
    return x.to(orig_dtype), residual


def native_silu_and_mul(x):
    """``SiluAndMul.forward_native``: ``F.silu(x[..., :d]) * x[..., d:]`` in x's dtype."""
    import torch.nn.functional as F

    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def _native_fused_add(x, r, w):
    out, residual = native_fused_add_rms_norm(x, r, w, EPS)
    q, scale = native_per_token_fp8_quant(out)
    return q, scale, residual


def _native_rms(x, r, w):
    q, scale = native_per_token_fp8_quant(native_rms_norm(x, w, EPS))
    return q, scale


def _native_silu(x, r, w):
    q, scale = native_per_token_fp8_quant(native_silu_and_mul(x))
    return q, scale


_NATIVE = {
    "fused_add_rms_norm+quant": _native_fused_add,
    "silu_and_mul+quant": _native_silu,
    "rms_norm+quant": _native_rms,
}


def native_pair(pair: str):
    """``fn(x, residual, weight) -> (q, scale[, residual'])``: the pair's native math, uncompiled."""
    return _NATIVE[pair]


# --------------------------------------------------------------------------------------------
# Providers: fn(x, r, w) -> (q fp8 [M, H], scale fp32 [M, 1][, residual' (fused_add pair)])
# --------------------------------------------------------------------------------------------
def _fresh(fn, tag: str):
    """A copy of ``fn`` with its own code object: Dynamo caches compiled graphs per code object, so
    every compile gets its own cache (no recompile limit; guards skipped for one size never serve
    another)."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{tag}", co_qualname=f"{fn.__name__}_{tag}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def compiled_pair(pair: str, tag: str, dynamic: bool):
    """``torch.compile`` of the native pair. ``dynamic``: as vLLM's wrapper compiles (its
    ``TorchCompileWithNoGuardsWrapper``: ``dynamic=False`` with num_tokens marked dynamic by the
    caller, every guard skipped, Inductor's runtime asserts off)."""
    import torch
    import torch._inductor.config as icfg

    options: dict = {
        k: False for k in ("size_asserts", "alignment_asserts", "scalar_asserts") if hasattr(icfg, k)
    }
    if dynamic:
        options["guard_filter_fn"] = getattr(
            torch.compiler, "skip_all_guards_unsafe", lambda guards: [False for _ in guards]
        )
    return torch.compile(_fresh(_NATIVE[pair], tag), fullgraph=True, dynamic=False, options=options)


def helion_pair(pair: str):
    """hlcore's kernels as hlvllm.aux_ops calls them under CUDA-graph capture."""
    from hlcore import activation, norm, quant_kernels

    if pair == "fused_add_rms_norm+quant":

        def fused(x, r, w):
            out, residual = norm.fused_add_rms_norm(x, r, w, EPS)
            q, scale = quant_kernels.per_token_fp8_quant(out, None)
            return q, scale, residual

        return fused
    if pair == "rms_norm+quant":
        return lambda x, r, w: quant_kernels.per_token_fp8_quant(norm.rms_norm(x, w, EPS), None)
    return lambda x, r, w: quant_kernels.per_token_fp8_quant(activation.silu_and_mul(x), None)


def helion_fused_pair(pair: str):
    """hlcore's one-launch fused kernels (what ``HL_AUX_FUSION=1`` puts in vLLM's graph)."""
    from hlcore import activation_quant, norm_quant

    if pair == "fused_add_rms_norm+quant":
        return lambda x, r, w: norm_quant.fused_add_rms_norm_fp8_quant(x, r, w, EPS)
    if pair == "rms_norm+quant":
        return lambda x, r, w: norm_quant.rms_norm_fp8_quant(x, w, EPS)
    return lambda x, r, w: activation_quant.silu_and_mul_fp8_quant(x)


def vllm_cuda_pair(pair: str):
    """vLLM's CUDA ops (custom ops on, no fusion pass): the norm / silu op, then the quant op."""
    import torch
    from vllm import _custom_ops as ops

    def quant(y):
        return ops.scaled_fp8_quant(y, None, use_per_token_if_dynamic=True)

    def fused(x, r, w):
        torch.ops._C.fused_add_rms_norm(x, r, w, EPS)  # in place: x <- out, r <- x + r
        q, scale = quant(x)
        return q, scale, r

    def rms(x, r, w):
        out = torch.empty_like(x)
        torch.ops._C.rms_norm(out, x, w, EPS)
        return quant(out)

    def silu(x, r, w):
        out = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype, device=x.device)
        torch.ops._C.silu_and_mul(out, x)
        return quant(out)

    return {"fused_add_rms_norm+quant": fused, "rms_norm+quant": rms, "silu_and_mul+quant": silu}[pair]


def vllm_fused_pair(pair: str):
    """vLLM's fused CUDA kernel (norm pairs only; None for silu_and_mul)."""
    import torch
    from vllm import _custom_ops as ops

    fp8 = torch.float8_e4m3fn
    if pair == "fused_add_rms_norm+quant":

        def fused(x, r, w):  # r <- x + r in place
            q, scale = ops.rms_norm_dynamic_per_token_quant(x, w, EPS, fp8, residual=r)
            return q, scale, r

        return fused
    if pair == "rms_norm+quant":
        return lambda x, r, w: ops.rms_norm_dynamic_per_token_quant(x, w, EPS, fp8)
    return None


# --------------------------------------------------------------------------------------------
# Inputs, bytes, agreement
# --------------------------------------------------------------------------------------------
def make_inputs(pair: str, m: int, h: int, copies: int, seed: int):
    """``copies`` of ``(x, residual or None)`` and one weight: random normal with per-row
    magnitudes (as bench_aux.py); x is ``[m, 2 h]`` for silu_and_mul."""
    import torch

    inputs = []
    for i in range(copies):
        g = torch.Generator(device=DEVICE).manual_seed(seed * 1000 + i)
        width = 2 * h if pair.startswith("silu") else h
        x = torch.randn(m, width, generator=g, device=DEVICE)
        x = (x * torch.exp(0.5 * torch.randn(m, 1, generator=g, device=DEVICE))).to(torch.bfloat16)
        r = (
            torch.randn(m, h, generator=g, device=DEVICE).to(torch.bfloat16)
            if pair.startswith("fused")
            else None
        )
        inputs.append((x, r))
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    w = (1 + 0.1 * torch.randn(h, generator=g, device=DEVICE)).to(torch.bfloat16) if "norm" in pair else None
    return inputs, w


def pair_bytes(pair: str, m: int, h: int) -> int:
    """Fewest bytes the fused pair moves (bf16 in, fp8 + fp32 scales out, + weight / residual')."""
    act = 2 * m * h
    out = m * h + 4 * m
    if pair.startswith("fused"):
        return 3 * act + out + 2 * h
    if pair.startswith("rms"):
        return act + out + 2 * h
    return 2 * act + out


def _clone(t):
    return None if t is None else t.clone()


def agreement(ref, got) -> dict:
    """How ``got`` = (q, scale[, residual']) agrees with ``ref``. ``steps``: the largest difference
    of the dequantized values, in e4m3 steps at the reference's magnitude (after rescaling got's
    values to ref's scale)."""
    import torch

    qr, qg = ref[0].float(), got[0].float()
    sr, sg = ref[1].float().reshape(-1, 1), got[1].float().reshape(-1, 1)
    equal = (ref[0].view(torch.uint8) == got[0].view(torch.uint8)).float().mean().item()
    scale_rel = ((sg - sr).abs() / sr.abs()).max().item()
    qg_in_ref = qg * (sg / sr)
    mag = torch.maximum(qr.abs(), qg_in_ref.abs()).clamp(min=2.0**-6)  # e4m3 subnormal step 2^-9
    step = torch.exp2(torch.floor(torch.log2(mag)) - 3)
    steps = ((qg_in_ref - qr).abs() / step).max().item()
    res = {"equal_bytes": equal, "steps": steps, "scale_rel": scale_rel}
    if len(ref) > 2 and len(got) > 2:
        a, b = got[2].float(), ref[2].float()
        res["residual_rel"] = ((a - b).abs() / b.abs().clamp(min=1e-2)).max().item()
    finite = all(math.isfinite(v) for v in res.values())
    res["ok"] = bool(
        finite
        and scale_rel < 1e-2
        and (equal >= 0.99 or steps <= 2.0)
        and res.get("residual_rel", 0.0) < 1e-2
    )
    return res


# --------------------------------------------------------------------------------------------
# Compile-ahead workers
# --------------------------------------------------------------------------------------------
def _sizes(pair: str, quick: bool, smoke: bool) -> list[int]:
    key = "silu" if pair.startswith("silu") else "norm"
    if smoke:
        return SMOKE[key]
    if quick:
        return QUICK[key]
    return SILU_D if key == "silu" else NORM_HIDDEN


def _mark_dynamic(x, r) -> None:
    import torch

    torch._dynamo.mark_dynamic(x, 0)
    if r is not None:
        torch._dynamo.mark_dynamic(r, 0)


def _compile_job(job):
    """Worker: compile one (pair, size) for every num_tokens: Inductor static and dynamic (fills the
    FX-graph, autotune and Triton caches on disk) and Helion's kernels (Triton's cache)."""
    pair, h, tokens, providers, hint = job
    errors = []
    try:
        import torch

        if "inductor_dyn" in providers:
            try:
                hx, hr = make_inputs(pair, hint, h, 1, seed=7)[0][0]
                w = make_inputs(pair, 1, h, 1, seed=7)[1]
                _mark_dynamic(hx, hr)
                compiled_pair(pair, f"dyn_{h}", dynamic=True)(hx, hr, w)
                del hx, hr
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{pair} H{h} inductor_dyn: {type(exc).__name__}: {str(exc)[:300]}")
        for m in tokens:
            inputs, w = make_inputs(pair, m, h, 1, seed=m + h)
            x, r = inputs[0]
            if "inductor" in providers:
                try:
                    compiled_pair(pair, f"s_{h}_{m}", dynamic=False)(x, r, w)
                except Exception as exc:  # noqa: BLE001
                    errors.append(f"{pair} H{h} M{m} inductor: {type(exc).__name__}: {str(exc)[:300]}")
            if "helion" in providers:
                try:
                    helion_pair(pair)(x, r, w)
                except Exception as exc:  # noqa: BLE001
                    errors.append(f"{pair} H{h} M{m} helion: {type(exc).__name__}: {str(exc)[:300]}")
            if "helion_fused" in providers:
                try:
                    helion_fused_pair(pair)(x, r, w)
                except Exception as exc:  # noqa: BLE001
                    errors.append(f"{pair} H{h} M{m} helion_fused: {type(exc).__name__}: {str(exc)[:300]}")
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        errors.append(f"{pair} H{h}: {type(exc).__name__}: {str(exc)[:300]}")
    return errors


# --------------------------------------------------------------------------------------------
# Reporting helpers (as bench_aux.py)
# --------------------------------------------------------------------------------------------
def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(statistics.fmean(map(math.log, values))) if values else None


def _fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def _commit() -> str:
    if os.environ.get("HL_COMMIT"):
        return os.environ["HL_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _helion_configs(pair: str, m: int, h: int) -> dict:
    from hlcore import aux_configs

    first = {"fused_add_rms_norm+quant": "fused_add_rms_norm", "rms_norm+quant": "rms_norm"}.get(
        pair, "silu_and_mul"
    )

    def name(kernel):
        picked = getattr(aux_configs, f"pick_{kernel}_config")(m, h)
        return next((n for n, c in aux_configs.ALL_CONFIGS[kernel].items() if c == picked), str(picked))

    return {first: name(first), "per_token_fp8_quant": name("per_token_fp8_quant")}


def _inductor_counters() -> dict:
    """Inductor's counters in this process (``fxgraph_cache_hit`` / ``_miss``: whether the workers'
    compiles served this process)."""
    try:
        from torch._dynamo.utils import counters

        return {k: int(v) for k, v in counters["inductor"].items() if k.startswith("fxgraph")}
    except Exception:  # noqa: BLE001
        return {}


def _unique_graphs() -> int | None:
    """Graphs Dynamo compiled in this process (one per static case, one per (pair, size) dynamic:
    more means a recompile)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001
        return None


def _count_kernels(fn, x, r, w) -> int | None:
    """CUDA kernels one call launches (torch profiler; memcpy / memset not counted)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(x, r, w)
        torch.cuda.synchronize()
    names = [
        e.name
        for e in prof.events()
        if str(getattr(e, "device_type", "")).endswith("CUDA")
        and "memcpy" not in e.name.lower()
        and "memset" not in e.name.lower()
    ]
    return len(names)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def main() -> int:
    global DEVICE, REFERENCE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="hidden 4096 / intermediate 12288 only")
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"comma list of {PAIRS}")
    ap.add_argument(
        "--providers", default=",".join(PROVIDERS), help=f"comma list of {PROVIDERS} (helion always)"
    )
    ap.add_argument("--tokens", default=",".join(map(str, DECODE_TOKENS)), help="num_tokens, comma list")
    ap.add_argument(
        "--dyn-hint-tokens", type=int, default=8192, help="num_tokens inductor_dyn is compiled at"
    )
    ap.add_argument(
        "--budget-s", type=float, default=float(os.environ.get("BENCH_AUX_FUSION_BUDGET_S", "135"))
    )
    ap.add_argument("--jobs", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU, Helion interpret mode")
    args = ap.parse_args()
    t0 = time.time()
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    if "helion" not in providers:
        providers.append("helion")
    bad = sorted(set(pairs) - set(PAIRS)) + sorted(set(providers) - set(PROVIDERS))
    if bad:
        ap.error(f"unknown pair(s)/provider(s) {bad}; pairs {PAIRS}, providers {PROVIDERS}")
    tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    hint = args.dyn_hint_tokens
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # as vLLM sets it; no compile pool
    if args.cpu_smoke:
        # before helion / triton are imported (see the root conftest.py)
        os.environ["HELION_INTERPRET"] = "1"
        os.environ.pop("TRITON_INTERPRET", None)
        DEVICE = "cpu"
        REFERENCE = "inductor"
        providers = [p for p in providers if not p.startswith("vllm")]
        tokens, hint = SMOKE["tokens"], SMOKE["hint"]
    order = [(p, h) for p in pairs for h in _sizes(p, args.quick, args.cpu_smoke)]
    # pairs 1-2 hidden-interleaved first, then the (optional) rms_norm pair: a budget cut drops that
    order.sort(
        key=lambda ph: (ph[0] == "rms_norm+quant", _sizes(ph[0], args.quick, args.cpu_smoke).index(ph[1]))
    )

    if not args.cpu_smoke:
        # Helion's generated code cached on disk (hlcore.kernel_cache): the workers' binds and
        # codegen serve this process too
        os.environ.setdefault("HL_KERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="hl_kernel_cache_"))
    compile_errors: list[str] = []
    if not args.cpu_smoke and args.jobs > 0:
        jobs = [(p, h, tuple(tokens), tuple(providers), hint) for p, h in order]
        with mp.get_context("spawn").Pool(min(args.jobs, len(jobs))) as pool:
            pending = pool.map_async(_compile_job, jobs, chunksize=1)
            try:  # a hung worker must not eat the budget: what did not compile compiles below
                for errs in pending.get(timeout=max(30.0, 0.6 * args.budget_s)):
                    compile_errors += errs
            except mp.TimeoutError:
                compile_errors.append(
                    f"precompile timed out after {time.time() - t0:.0f} s (workers terminated)"
                )
        print(
            f"precompiled {len(jobs)} (pair, size) jobs with {args.jobs} workers in {time.time() - t0:.0f} s"
        )
        for err in compile_errors[:8]:
            print("  compile failed:", err, flush=True)

    import torch
    import torch._dynamo.config as dcfg

    from hltools.timing import Timing, copies_for, time_graph

    for key in (
        "recompile_limit",
        "cache_size_limit",
        "accumulated_recompile_limit",
        "accumulated_cache_size_limit",
    ):
        if hasattr(dcfg, key):
            setattr(dcfg, key, max(getattr(dcfg, key), 1024))

    if args.cpu_smoke:

        def timer(calls, repeats, warmup):
            calls[0]()
            t = time.perf_counter()
            calls[0]()
            us = (time.perf_counter() - t) * 1e6
            return Timing(us, us, us)

        gpu = "cpu (--cpu-smoke)"
    else:
        timer = time_graph
        gpu = torch.cuda.get_device_name()
    print(f"device {gpu}; pairs {pairs}; providers {providers}; reference {REFERENCE}", flush=True)

    cases, skipped, failures, mismatches = [], [], [], []
    compiled_dyn: dict[tuple[str, int], object] = {}
    to_count: dict[str, tuple] = {}

    def provider_fn(provider, pair, h, m, example):
        x, r, w = example
        if provider == "helion":
            return helion_pair(pair)
        if provider == "helion_fused":
            return helion_fused_pair(pair)
        if provider == "vllm_cuda":
            return vllm_cuda_pair(pair)
        if provider == "vllm_fused":
            return vllm_fused_pair(pair)
        if provider == "inductor":
            fn = compiled_pair(pair, f"s_{h}_{m}", dynamic=False)
            fn(x, _clone(r), w)  # compile now, before capture
            return fn
        if (pair, h) not in compiled_dyn:  # inductor_dyn: once per (pair, size), at the hint size
            inputs, _ = make_inputs(pair, hint, h, 1, seed=7)
            hx, hr = inputs[0]
            _mark_dynamic(hx, hr)
            fn = compiled_pair(pair, f"dyn_{h}", dynamic=True)
            fn(hx, hr, w)
            compiled_dyn[(pair, h)] = fn
        return compiled_dyn[(pair, h)]

    for pair, h in order:
        if time.time() - t0 > args.budget_s:
            skipped.append(f"{pair} H{h}")
            continue
        for m in tokens:
            if time.time() - t0 > args.budget_s:
                skipped.append(f"{pair} H{h} M{m}")
                continue
            nbytes = pair_bytes(pair, m, h)
            copies = 2 if args.cpu_smoke else copies_for(nbytes, rotate_bytes=2 * L2_BYTES, max_copies=32)
            inputs, w = make_inputs(pair, m, h, copies, seed=m + h)
            x0, r0 = inputs[0]
            fns, outs = {}, {}
            for provider in providers:
                try:
                    fn = provider_fn(provider, pair, h, m, (x0, r0, w))
                    if fn is None:
                        continue
                    fns[provider] = fn
                    outs[provider] = fn(x0.clone(), _clone(r0), w)
                except Exception as exc:  # noqa: BLE001 - report and go on
                    failures.append(f"{pair} H{h} M{m} {provider}: {type(exc).__name__}: {str(exc)[:300]}")
                    print("  FAILED", failures[-1], flush=True)
            ref = REFERENCE if REFERENCE in outs else ("inductor" if "inductor" in outs else None)
            agree = {}
            if ref is not None:
                for provider, out in outs.items():
                    if provider != ref:
                        agree[provider] = agreement(outs[ref], out)
                        if not agree[provider]["ok"]:
                            mismatches.append(f"{pair} H{h} M{m} {provider} vs {ref}: {agree[provider]}")
                            print("  MISMATCH", mismatches[-1], flush=True)
            del outs
            timings = {}
            for provider, fn in fns.items():
                try:
                    timings[provider] = timer(
                        [lambda x=x, r=r: fn(x, r, w) for x, r in inputs], repeats=args.repeats, warmup=3
                    )
                except Exception as exc:  # noqa: BLE001
                    failures.append(
                        f"{pair} H{h} M{m} {provider} timing: {type(exc).__name__}: {str(exc)[:300]}"
                    )
                    print("  FAILED", failures[-1], flush=True)
            us = {p: t.median_us for p, t in timings.items()}
            ratios = {f"{p}/helion": us[p] / us["helion"] for p in us if p != "helion" and us.get("helion")}
            cases.append(
                {
                    "pair": pair,
                    "size": h,
                    "num_tokens": m,
                    "dtype": "bfloat16",
                    "copies": copies,
                    "bytes": nbytes,
                    "us": us,
                    "p20_us": {p: t.p20_us for p, t in timings.items()},
                    "p80_us": {p: t.p80_us for p, t in timings.items()},
                    "ratios": ratios,
                    "reference": ref,
                    "agreement": agree,
                    "helion_configs": _helion_configs(pair, m, h),
                }
            )
            print(
                f"{pair:25s} H={h:5d} M={m:3d}  "
                + "  ".join(f"{p} {t:7.2f}" for p, t in us.items())
                + " us  "
                + "  ".join(f"{k} x{v:.2f}" for k, v in ratios.items()),
                flush=True,
            )
            if not args.cpu_smoke and m == PROFILE_TOKENS:
                # counted at the end (the profiler attaches CUPTI: no timing after it)
                to_count[f"{pair} H{h}"] = (pair, h, m, fns)

    # kernels per call (optional, last: the profiler is not left attached to any timing)
    counted: dict[str, dict] = {}
    for key, (pair, h, m, fns) in to_count.items():
        if time.time() - t0 > args.budget_s:
            counted[key] = {"skipped": "budget"}
            continue
        entry: dict = {}
        try:
            inputs, w = make_inputs(pair, m, h, 1, seed=1)
            x, r = inputs[0]
            for provider, fn in fns.items():
                fn(x.clone(), _clone(r), w)
                entry[provider] = _count_kernels(fn, x.clone(), _clone(r), w)
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        counted[key] = entry

    # summary: per pair, geomean over sizes of provider us / helion us (> 1: Helion faster)
    summary = {}
    for pair in pairs:
        mine = [c for c in cases if c["pair"] == pair]
        keys = sorted({k for c in mine for k in c["ratios"]})
        summary[pair] = {
            k: {
                "geomean": _geomean([c["ratios"][k] for c in mine if k in c["ratios"]]),
                "min": min((c["ratios"][k] for c in mine if k in c["ratios"]), default=None),
                "max": max((c["ratios"][k] for c in mine if k in c["ratios"]), default=None),
                "helion_slower": sum(c["ratios"][k] < 1 for c in mine if k in c["ratios"]),
                "cases": sum(k in c["ratios"] for c in mine),
            }
            for k in keys
        }
        summary[pair]["all_agree"] = all(a["ok"] for c in mine for a in c["agreement"].values())
    out_dir = (
        Path(os.environ["OUT"])
        if os.environ.get("OUT")
        else (Path(tempfile.gettempdir()) if args.cpu_smoke else Path("."))
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "_metadata": {
            "gpu": gpu,
            "cpu_smoke": args.cpu_smoke,
            "quick": args.quick,
            "pairs": pairs,
            "providers": providers,
            "reference": REFERENCE,
            "tokens": tokens,
            "dyn_hint_tokens": hint,
            "versions": {p: _version(p) for p in ("torch", "triton", "helion", "vllm", "hlcore")},
            "commit": _commit(),
            "elapsed_s": time.time() - t0,
            "compile_errors": compile_errors,
            "skipped": skipped,
            "failures": failures,
            "mismatches": mismatches,
            "kernels_per_call": counted,
            "dynamo_unique_graphs": _unique_graphs(),
            "inductor_counters": _inductor_counters(),
            "expected_unique_graphs": sum(1 for c in cases if "inductor" in c["us"]) + len(compiled_dyn),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
        "summary": summary,
        "cases": cases,
    }
    path = out_dir / "bench_aux_fusion.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")

    if counted:
        print(f"\nkernels per call (profiler, num_tokens {PROFILE_TOKENS}):")
        for key, entry in counted.items():
            print(f"  {key:32s} " + "  ".join(f"{p} {n}" for p, n in entry.items()))
    ratio_keys = [f"{p}/helion" for p in providers if p != "helion"]
    print(
        "\ngeomean over sizes of provider us / helion us (> 1: Helion faster); [min-max] helion-slower/cases"
    )
    print(f"{'pair':25s} " + " ".join(f"{k:>26s}" for k in ratio_keys) + "  agree")
    for pair in pairs:
        s = summary[pair]
        cells = []
        for k in ratio_keys:
            e = s.get(k)
            cells.append(
                f"{_fmt(e['geomean'], '.2f')}x [{_fmt(e['min'], '.2f')}-{_fmt(e['max'], '.2f')}] {e['helion_slower']}/{e['cases']}"
                if e
                else "-"
            )
        print(
            f"{pair:25s} " + " ".join(f"{c:>26s}" for c in cells) + f"  {'yes' if s['all_agree'] else 'NO'}"
        )
    print(
        f"{len(cases)} cases, {len(skipped)} groups/cases skipped by the budget, {len(failures)} failures, "
        f"{len(mismatches)} mismatches; {time.time() - t0:.0f} s; wrote {path}"
    )
    return 1 if failures or mismatches or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
