"""The worker of ``hltools bench e2e`` (on the GPU): one engine run per process,
``python -m hltools.e2e worker ...`` (:func:`main`, :func:`worker_main`). It builds ``vllm.LLM`` with
dummy weights, fills them with seeded values (:func:`fill_weights`), records the kernels vLLM chose
and what the plugin captured in every tensor-parallel rank, records teacher-forced logprobs of fixed
sequences (:func:`record_numerics`) and times ``generate`` (:func:`measure_throughput`). See :mod:`hltools.e2e` for the method.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hltools.e2e.plan import (
    AGREEMENT_PROMPTS,
    AGREEMENT_TOKENS,
    DEFAULT_CONCURRENCY,
    MAX_NUM_SEQS,
    NUMERICS_LENGTHS,
    NUMERICS_PROMPTS,
    NUMERICS_TOKENS,
    E2EOptions,
)
from hltools.e2e.settings import HELION_PLUGINS, PLUGINS, TIMED_PLUGINS, TP_ENV, default_env, set_plugin
from hltools.results import VERSION_DISTS


def fill_weights(model) -> int:
    """Overwrite every parameter in place with seeded values (identical across processes): fp8 and
    int8 weights random, weight scales ~ 1/sqrt(K) (so activations keep their size), norms 1.

    Each parameter's generator is seeded from its name alone, never the rank: with tensor parallelism
    every rank fills its shard of a parameter with the same values (shards of one name have one shape),
    the same in every run at one TP size. K is the rank's (sharded) K, so row-parallel layers' outputs
    grow by about sqrt(TP) after the all-reduce (the norms bound it; fine for timing)."""
    import torch

    g = torch.Generator(device="cuda")
    count = 0
    params = dict(model.named_parameters())
    for name, p in sorted(params.items(), key=lambda kv: kv[0]):
        g.manual_seed(zlib.crc32(name.encode()))
        with torch.no_grad():
            if p.dtype == torch.float8_e4m3fn:  # CUTLASS: [K, N] view of [N, K]; block: [N, K]
                p.copy_(torch.randn(p.shape, generator=g, device=p.device).to(p.dtype))
            elif p.dtype == torch.int8:  # vLLM 0.26 leaves dummy int8 weights uninitialised
                p.copy_(torch.randint(-127, 128, p.shape, generator=g, device=p.device, dtype=torch.int8))
            elif name.endswith("weight_scale_inv") or (
                name.endswith("weight_scale") and p.numel() > 1 and p.dim() == 2 and p.shape[1] > 1
            ):
                k = p.shape[1] * 128  # 128x128 block scales [N/128, K/128]
                p.copy_((0.75 + 0.5 * torch.rand(p.shape, generator=g, device=p.device)) / k**0.5)
            elif name.endswith("weight_scale"):
                w = params[name.replace("weight_scale", "weight")]
                k = w.shape[0]  # per-channel formats hold the [K, N] view
                amax = 127.0 if w.dtype == torch.int8 else 1.0
                p.copy_((0.75 + 0.5 * torch.rand(p.shape, generator=g, device=p.device)) / (amax * k**0.5))
            elif "norm" in name:
                p.fill_(1.0)
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g, device=p.device).to(p.dtype))
            else:
                p.copy_((0.02 * torch.randn(p.shape, generator=g, device=p.device)).to(p.dtype))
        count += 1
    return count


def linear_kernels(model) -> dict[str, str]:
    """Layer kind (last name part, e.g. ``qkv_proj``) -> class name of the linear kernel vLLM chose."""
    kinds = {}
    for name, mod in model.named_modules():
        for owner in (getattr(mod, "scheme", None), getattr(mod, "quant_method", None)):
            kernel = getattr(owner, "fp8_linear", None) or getattr(owner, "kernel", None)
            if kernel is not None:
                kinds[name.split(".")[-1]] = type(kernel).__name__
    return kinds


def dispatch_counts(model) -> dict[str, dict[str, list[list[int]]]]:
    """hlvllm's ``CAPTURE_COUNTS`` in the process that holds ``model``: route -> M -> [[N, K, count]]."""
    try:
        from hlvllm.dispatch import CAPTURE_COUNTS
    except ImportError:
        return {}
    out: dict[str, dict[str, list[list[int]]]] = {}
    for (route, m, n, k), c in sorted(CAPTURE_COUNTS.items()):
        out.setdefault(route, {}).setdefault(str(m), []).append([n, k, c])
    return out


def aux_capture_counts(model) -> dict[str, dict[str, list[list[int]]]]:
    """hlvllm's aux-op ``AUX_CAPTURE_COUNTS`` (RMSNorm, SiluAndMul, quant ops captured into CUDA graphs)
    in the process that holds ``model``: ``"op/path"`` -> num_tokens -> [[hidden, count]]."""
    try:
        from hlvllm.aux_ops import AUX_CAPTURE_COUNTS
    except ImportError:
        return {}
    out: dict[str, dict[str, list[list[int]]]] = {}
    for (op, path, t, h), c in sorted(AUX_CAPTURE_COUNTS.items()):
        out.setdefault(f"{op}/{path}", {}).setdefault(str(t), []).append([h, c])
    return out


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[dict[str, list[int]]]:
    import random

    rng = random.Random(seed)
    hi = max(4, min(vocab, 32000)) - 1
    return [{"prompt_token_ids": [rng.randint(3, hi) for _ in range(length)]} for _ in range(n)]


def numerics_prompts(vocab: int, seed: int) -> list[dict[str, list[int]]]:
    """The sequences the numerics check scores: one list of seeded token ids per length of
    :data:`NUMERICS_LENGTHS` (the same in every run of one seed and vocabulary)."""
    return [_prompts(1, n, vocab, seed + 1000 * i)[0] for i, n in enumerate(NUMERICS_LENGTHS)]


def prompt_logprobs(outputs) -> list[list[float]]:
    """Per ``vllm.RequestOutput`` of a ``prompt_logprobs=0`` request, the logprob of each prompt token
    after the first given the tokens before it (teacher forcing: every engine scores the same tokens,
    whatever it would have generated). vLLM gives position 0 no logprob."""
    rows = []
    for o in outputs:
        ids, lps = list(o.prompt_token_ids), o.prompt_logprobs
        rows.append([float(lps[i][ids[i]].logprob) for i in range(1, len(ids))])
    return rows


def record_numerics(generate, sampling_params, vocab: int, seed: int) -> dict[str, Any]:
    """The numerics record of one run: ``generate([prompt], params)`` (``vllm.LLM.generate``) of each
    of :func:`numerics_prompts` alone (a prefill of num_tokens = its length, in the plugin's CUDA-graph
    range) with ``sampling_params(max_tokens=1, prompt_logprobs=0, ...)``; returns ``{"prompts",
    "tokens", "lengths", "seed", "logprobs"}`` (``logprobs``: per prompt its length - 1 floats,
    :func:`prompt_logprobs`; ``tokens``: their total). :mod:`hltools.e2e.numerics` compares them
    between runs."""
    sp = sampling_params(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    logprobs = [row for p in numerics_prompts(vocab, seed) for row in prompt_logprobs(generate([p], sp))]
    return {
        "prompts": NUMERICS_PROMPTS,
        "tokens": NUMERICS_TOKENS,
        "lengths": list(NUMERICS_LENGTHS),
        "seed": seed,
        "logprobs": logprobs,
    }


def measure_throughput(
    generate, make_prompts, options: E2EOptions, clock=time.perf_counter, progress=None
) -> dict:
    """Per concurrency: tokens/s, TPOT and TTFT from timed ``generate(prompts, max_tokens)`` calls
    (see the module docstring). ``generate`` returns the number of output tokens it produced.
    ``progress(line)``, when given, gets one line after each concurrency's untimed warm-up and one
    after its timed repeats (so a killed engine's log says where the time went)."""
    out = {}
    for c in options.concurrency:
        prompts = make_prompts(c)
        t0 = clock()
        generate(prompts, options.output_len)  # warm-up (first prefill at this batch size)
        if progress:
            progress(f"concurrency {c}: untimed warm-up {clock() - t0:.1f} s")
        full, one = [], []
        for _ in range(options.repeats):
            t0 = clock()
            generate(prompts, 1)
            one.append(clock() - t0)
            t0 = clock()
            produced = generate(prompts, options.output_len)
            full.append(clock() - t0)
        if produced != c * options.output_len:
            raise RuntimeError(
                f"concurrency {c}: {produced} output tokens, expected {c * options.output_len}"
            )
        t_full, t_one = statistics.median(full), statistics.median(one)
        if progress:
            progress(f"concurrency {c}: {options.repeats} repeats, median {t_full:.3f} s per generate")
        out[str(c)] = {
            "tokens_per_s": c * options.output_len / t_full,
            # None: the one-token generates took longer than the full ones (a stall), no TPOT
            "tpot_ms": 1e3 * (t_full - t_one) / (options.output_len - 1) if t_full > t_one else None,
            "ttft_ms": 1e3 * t_one,
            "samples_full_s": full,
            "samples_one_s": one,
        }
    return out


def measure_ttft(generate, make_prompt, options: E2EOptions, clock=time.perf_counter) -> dict:
    """Per prompt length of ``options.ttft_lens``: time to first token of one sequence alone, from
    ``options.ttft_repeats`` timed one-token ``generate`` calls after one untimed (the first prefill
    at that length); ``make_prompt(length)`` gives the prompt list. Returns ``{length: {"ttft_ms":
    median, "samples_ms": [...]}}``."""
    out = {}
    for n in options.ttft_lens:
        prompts = make_prompt(n)
        generate(prompts, 1)  # warm-up
        samples = []
        for _ in range(options.ttft_repeats):
            t0 = clock()
            generate(prompts, 1)
            samples.append(1e3 * (clock() - t0))
        out[str(n)] = {"ttft_ms": statistics.median(samples), "samples_ms": samples}
    return out


def llm_kwargs(model_dir: Path | str, options: E2EOptions) -> dict[str, Any]:
    """The keyword arguments of the worker's ``vllm.LLM(...)`` (see the module docstring)."""
    return {
        "model": str(model_dir),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "dtype": "bfloat16",
        "max_model_len": options.max_model_len,
        "max_num_seqs": options.max_num_seqs,
        "enable_prefix_caching": False,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "seed": options.seed,
        "tensor_parallel_size": options.tensor_parallel_size,
    }


def worker_main(args: argparse.Namespace) -> int:
    """One engine run (on the GPU); writes ``args.out``. Sets the plugin switch of ``args.plugin`` in
    its own environment too (as :func:`hltools.e2e.settings.worker_env` does), before vLLM is imported."""
    default_env(os.environ, args.tensor_parallel_size)
    set_plugin(os.environ, args.plugin)

    from vllm import LLM, SamplingParams

    options = _options(args)
    config = json.loads((Path(args.model_dir) / "config.json").read_text())
    t0 = time.perf_counter()
    llm = LLM(**llm_kwargs(args.model_dir, options))
    startup_s = time.perf_counter() - t0
    # Functions sent to the ranks are pickled by reference: take them from the importable module, not
    # from ``__main__`` (were this module run as a script), which the worker processes cannot resolve.
    import hltools.e2e.worker as rank_fns

    filled_by_rank = list(llm.apply_model(rank_fns.fill_weights))  # one entry per tensor-parallel rank
    kernels_by_rank = list(llm.apply_model(rank_fns.linear_kernels))
    print(
        f"[hltools] engine ready in {startup_s:.1f} s (TP {options.tensor_parallel_size}); parameters "
        f"filled per rank {filled_by_rank}; rank 0 kernels {kernels_by_rank[0]}",
        flush=True,
    )
    vocab = int(config.get("vocab_size", 32000))

    def progress(line: str) -> None:
        print(f"[hltools] {time.perf_counter() - t0:.1f} s: {line}", flush=True)

    measured = _measure(llm, SamplingParams, args.plugin, options, vocab, progress)
    helion_on = args.plugin in HELION_PLUGINS  # on, gemm, aux and fused load the plugin with Helion GEMMs
    captured_by_rank = list(llm.apply_model(rank_fns.dispatch_counts)) if helion_on else []
    # on and gemm (no aux kernel) record them too: they should show no aux op on Helion's path
    aux_by_rank = list(llm.apply_model(rank_fns.aux_capture_counts)) if helion_on else []
    result = {
        **_run_record(args.plugin, options, config),
        "startup_s": startup_s,
        "filled": filled_by_rank[0],
        "filled_by_rank": filled_by_rank,
        "kernels": kernels_by_rank[0],
        "kernels_by_rank": kernels_by_rank,
        "captured": captured_by_rank[0] if captured_by_rank else {},
        "captured_by_rank": captured_by_rank,
        "aux_captured_by_rank": aux_by_rank,
        **measured,
    }
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    summary = {c: round(t["tokens_per_s"], 1) for c, t in measured["throughput"].items()}
    print(f"[hltools] plugin {args.plugin}: start-up {startup_s:.1f} s; tokens/s {summary}", flush=True)
    return 0


def _measure(llm, sampling_params, plugin: str, options: E2EOptions, vocab: int, progress) -> dict[str, Any]:
    """What one engine measures: ``greedy`` tokens of :data:`AGREEMENT_PROMPTS` short prompts,
    ``numerics`` (:func:`record_numerics`), and, for the timed settings (all but ``control``),
    ``throughput`` (:func:`measure_throughput`) and ``ttft`` (:func:`measure_ttft`); ``{}`` for those
    two in a ``control`` run."""

    def generate(prompts, max_tokens: int) -> int:
        sp = sampling_params(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, detokenize=False)
        outs = llm.generate(prompts, sp, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    t1 = time.perf_counter()
    greedy_sp = sampling_params(
        max_tokens=AGREEMENT_TOKENS, temperature=0.0, ignore_eos=True, detokenize=False
    )
    outs = llm.generate(_prompts(AGREEMENT_PROMPTS, 16, vocab, options.seed + 1), greedy_sp, use_tqdm=False)
    greedy = [list(o.outputs[0].token_ids) for o in outs]
    numerics = record_numerics(
        lambda p, sp: llm.generate(p, sp, use_tqdm=False), sampling_params, vocab, options.seed + 3
    )
    progress(f"greedy and numerics prompts done in {time.perf_counter() - t1:.1f} s")
    if plugin not in TIMED_PLUGINS:
        return {"greedy": greedy, "numerics": numerics, "throughput": {}, "ttft": {}}
    throughput = measure_throughput(
        generate,
        lambda c: _prompts(c, options.input_len, vocab, options.seed + 100 + c),
        options,
        progress=progress,
    )
    ttft = measure_ttft(generate, lambda n: _prompts(1, n, vocab, options.seed + 7 + n), options)
    if ttft:
        progress(f"TTFT alone: { {n: round(t['ttft_ms'], 2) for n, t in ttft.items()} } ms")
    return {"greedy": greedy, "numerics": numerics, "throughput": throughput, "ttft": ttft}


#: The environment variables a run records (what decided its kernels).
RECORDED_ENV = (
    "HL_LINEAR_BACKEND",
    "HL_AUX_KERNELS",
    "HL_AUX_FUSION",
    "VLLM_PLUGINS",
    "HL_DETERMINISTIC",
    "HL_PRECOMPILE_THREADS",
    "HL_PRECOMPILE_PROCESSES",
    "HL_FUSED_QUANT",
    "HL_DISPATCH_AT",
    "HL_MAX_HELION_SIZE",
    "HL_UNTUNED_SHAPES",
    "HL_SPEED_GUARD",
    "HL_CONFIG_DIR",
    "VLLM_USE_DEEP_GEMM",
    "VLLM_DEEP_GEMM_WARMUP",
    "DG_JIT_CACHE_DIR",
    "VLLM_DISABLED_KERNELS",
    *TP_ENV,
)


def _options(args: argparse.Namespace) -> E2EOptions:
    return E2EOptions(
        concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        input_len=args.input_len,
        output_len=args.output_len,
        repeats=args.repeats,
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        seed=args.seed,
        tensor_parallel_size=args.tensor_parallel_size,
        ttft_lens=tuple(int(n) for n in args.ttft_lens.split(",") if n.strip()),
        ttft_repeats=args.ttft_repeats,
    )


def _run_record(plugin: str, options: E2EOptions, config: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's result says about where it ran: plugin, GPU, versions, layers, options, env."""
    import importlib.metadata as md

    import torch

    from hltools.provenance import versions

    v = versions()
    return {
        "plugin": plugin,
        "gpu": torch.cuda.get_device_name(),
        "gpu_count": torch.cuda.device_count(),
        "tensor_parallel_size": options.tensor_parallel_size,
        **{d: v.get(d, "") for d in VERSION_DISTS},
        "hlvllm": _dist_version(md, "hlvllm"),
        "layers": config.get("num_hidden_layers"),
        "options": asdict(options),
        "env": {k: os.environ.get(k) for k in RECORDED_ENV},
    }


def _dist_version(md, dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return ""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hltools.e2e worker ...`` (what :func:`worker_command` builds)."""
    p = argparse.ArgumentParser(prog="python -m hltools.e2e", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="one engine run (needs a GPU); the plugin switch is in the environment")
    w.add_argument(
        "--plugin",
        choices=PLUGINS,
        required=True,
        help="off, on (the plugin's defaults: Helion GEMMs only), gemm (Helion GEMMs only, "
        "HL_AUX_KERNELS=none), aux (Helion GEMMs and aux kernels, HL_AUX_KERNELS=all), fused "
        "(HL_AUX_FUSION=1: the aux kernels fused with the fp8 quant) or control (no plugin, vLLM's "
        "second-choice kernel via VLLM_DISABLED_KERNELS; logprobs only, untimed)",
    )
    w.add_argument("--model-dir", required=True)
    w.add_argument("--concurrency", default=",".join(map(str, DEFAULT_CONCURRENCY)))
    w.add_argument("--input-len", type=int, default=128)
    w.add_argument("--output-len", type=int, default=128)
    w.add_argument("--repeats", type=int, default=3)
    w.add_argument("--max-num-seqs", type=int, default=MAX_NUM_SEQS)
    w.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--tensor-parallel-size", type=int, default=1)
    w.add_argument("--ttft-lens", default="")
    w.add_argument("--ttft-repeats", type=int, default=10)
    w.add_argument("--out", required=True)
    args = p.parse_args(argv)
    return worker_main(args)


if __name__ == "__main__":
    sys.exit(main())
