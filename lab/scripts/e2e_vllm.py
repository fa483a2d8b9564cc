"""End-to-end check of hlvllm in a real vLLM 0.26 engine (dummy weights, one GPU).

``--quant fp8-dynamic`` (default), ``int8`` (compressed-tensors W8A8) or ``block-fp8`` (vLLM's fp8
method with 128x128 weight blocks; add VLLM_USE_DEEP_GEMM=0 to skip DeepGEMM's JIT).

  python lab/scripts/e2e_vllm.py run --plugin on  --out on.json    # HL_LINEAR_BACKEND=helion
  python lab/scripts/e2e_vllm.py run --plugin off --out off.json   # VLLM_PLUGINS= (no plugin)
  python lab/scripts/e2e_vllm.py compare on.json off.json

A Qwen3 model with Qwen3-8B's dimensions (fewer layers) as compressed-tensors FP8_DYNAMIC,
built from a config.json with load_format="dummy". vLLM 0.26 fills dummy fp8 weights with values
that round to zero, so after start-up every parameter is overwritten in place with seeded random
values (same in both runs; CUDA graphs keep pointing at the same storage). The engine runs
in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so hlvllm's dispatch counters are readable.
Recorded: engine start-up time, which kernel each captured size used, top-5 logprobs of greedy
decoding for a batch of 4 and of 64 sequences, tokens/s at batch 1 and 8.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

for _k, _v in {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
}.items():
    os.environ.setdefault(_k, _v)

try:  # the engine-building pieces live in hltools (``hltools bench e2e`` uses them too)
    from hltools.e2e import QUANT_CONFIGS, fill_weights, linear_kernels
except ImportError:  # a checkout without the packages installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "hltools" / "src"))
    from hltools.e2e import QUANT_CONFIGS, fill_weights, linear_kernels

#: ``--compile``: vLLM compile / CUDA-graph modes (issue 7: correct results in each; Helion only
#: where CUDA graphs are on, the fallback path otherwise). Each is a dict of ``vllm.LLM`` keywords.
COMPILE_MODES = {
    "O2": {},  # vLLM's default: -O2, torch.compile, FULL_AND_PIECEWISE CUDA graphs, custom ops off
    "piecewise": {"compilation_config": {"cudagraph_mode": "PIECEWISE"}},
    "full-decode": {"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
    "custom-ops-all": {"compilation_config": {"custom_ops": ["all"]}},
    "custom-ops-none": {"compilation_config": {"custom_ops": ["none"]}},
    "O0": {"optimization_level": 0},  # no compile, no CUDA graphs: hlvllm declines (fallback path)
    "eager": {"enforce_eager": True},  # likewise
}
#: The modes without CUDA graphs, where hlvllm must decline and nothing of Helion runs.
NO_GRAPH_MODES = ("O0", "eager")

QUANT = {
    "fp8-dynamic": QUANT_CONFIGS["fp8_dynamic"],
    "int8": QUANT_CONFIGS["w8a8_int8"],
    "block-fp8": QUANT_CONFIGS["block_fp8"],
}


def model_dir(layers: int, quant: str = "fp8-dynamic") -> str:
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "dtype": "bfloat16",
        "quantization_config": QUANT[quant],
    }
    d = tempfile.mkdtemp(prefix="hl-e2e-qwen3-8b-")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return d


def aux_layer_classes(model) -> dict[str, str]:
    """Class and forward of each norm / activation / activation-quant layer kind (which implementation
    the engine built: vLLM's or hlvllm's register_oot subclass)."""
    out = {}
    for _, mod in model.named_modules():
        name = type(mod).__name__
        if any(t in name for t in ("RMSNorm", "SiluAndMul", "QuantFP8")):
            fwd = getattr(mod, "_forward_method", None)
            out[name] = getattr(fwd, "__qualname__", str(fwd))
    for _, mod in model.named_modules():  # QuantFP8 instances held by linear kernels
        for owner in (getattr(mod, "scheme", None), getattr(mod, "quant_method", None)):
            kernel = getattr(owner, "fp8_linear", None) or getattr(owner, "kernel", None)
            q = getattr(kernel, "quant_fp8", None)
            if q is not None:
                fwd = getattr(q, "_forward_method", None)
                out["kernel." + type(q).__name__] = getattr(fwd, "__qualname__", str(fwd))
    return out


def engine_kwargs(args) -> dict:
    """``vllm.LLM`` keywords of every engine these scripts start: the dummy-weight model of
    ``--layers`` / ``--quant``, max_model_len 1024, max_num_seqs 64, seed 0, and the memory options."""
    return {
        "model": model_dir(args.layers, args.quant),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "dtype": "bfloat16",
        "max_model_len": 1024,
        "max_num_seqs": 64,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_memory_bytes": None if args.kv_cache_gib is None else int(args.kv_cache_gib * 2**30),
        "seed": 0,
    }


def run(args) -> int:
    plugin_on = args.plugin == "on"
    if plugin_on:
        os.environ["HL_LINEAR_BACKEND"] = "helion"
    else:
        os.environ["VLLM_PLUGINS"] = ""
        os.environ.pop("HL_LINEAR_BACKEND", None)
    if args.aux_kernels is not None:  # e.g. none: the GEMM plugin without the auxiliary kernels
        os.environ["HL_AUX_KERNELS"] = args.aux_kernels
    if args.aux_fusion:
        os.environ["HL_AUX_FUSION"] = "1"
        # what hlvllm infers from HL_AUX_FUSION=1 alone, explicit (HL_AUX_KERNELS defaults to none)
        if args.aux_kernels is None:
            os.environ.setdefault("HL_AUX_KERNELS", "all")
    if args.disable_kernels:  # e.g. CutlassFP8ScaledMMLinearKernel: a control with another vLLM kernel
        os.environ["VLLM_DISABLED_KERNELS"] = args.disable_kernels
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(**engine_kwargs(args), **COMPILE_MODES[args.compile])
    startup_s = time.perf_counter() - t0
    nfilled = llm.apply_model(fill_weights)[0]
    kernels = llm.apply_model(linear_kernels)[0]
    aux_layers = llm.apply_model(aux_layer_classes)[0]
    print(f"engine ready in {startup_s:.1f} s; filled {nfilled} parameters; kernels {kernels}", flush=True)

    g = torch.Generator().manual_seed(1234)

    def prompts(n, length):
        return [
            {"prompt_token_ids": torch.randint(3, 32000, (length,), generator=g).tolist()} for _ in range(n)
        ]

    sp = SamplingParams(max_tokens=4, temperature=0.0, logprobs=5, ignore_eos=True, detokenize=False)
    logprobs = {}
    for batch in (4, 64):
        outs = llm.generate(prompts(batch, 16), sp, use_tqdm=False)
        logprobs[str(batch)] = [
            {
                "tokens": list(o.outputs[0].token_ids),
                "logprobs": [
                    {str(t): lp.logprob for t, lp in step.items()} for step in o.outputs[0].logprobs
                ],
            }
            for o in outs
        ]
    throughput = {}
    for batch in (1, 8):
        ps = prompts(batch, 32)
        tp = SamplingParams(max_tokens=256, temperature=0.0, ignore_eos=True, detokenize=False)
        llm.generate(ps, tp, use_tqdm=False)
        samples = []
        for _ in range(3):
            t1 = time.perf_counter()
            outs = llm.generate(ps, tp, use_tqdm=False)
            samples.append(time.perf_counter() - t1)
        dt = sorted(samples)[1]  # median of 3
        ntok = sum(len(o.outputs[0].token_ids) for o in outs)
        throughput[str(batch)] = {
            "tokens_per_s": ntok / dt,
            "ms_per_step": 1e3 * dt / 256,
            "samples_s": samples,
        }
    dispatch, captured, aux_captured = {}, {}, {}
    if plugin_on:
        from hlvllm.aux_ops import AUX_CAPTURE_COUNTS

        for (op, route, m, hidden), c in sorted(AUX_CAPTURE_COUNTS.items()):
            aux_captured.setdefault(op, {}).setdefault(route, []).append([m, hidden, c])
        from hlvllm.dispatch import CAPTURE_COUNTS, DISPATCH_COUNTS

        for (route, m, n, k), c in sorted(DISPATCH_COUNTS.items()):
            dispatch.setdefault(route, {}).setdefault(str(m), []).append([n, k, c])
        for (route, m, n, k), c in sorted(CAPTURE_COUNTS.items()):
            captured.setdefault(route, {}).setdefault(str(m), []).append([n, k, c])
    result = {
        "plugin": args.plugin,
        "disabled_kernels": args.disable_kernels,
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "layers": args.layers,
        "quant": args.quant,
        "compile": args.compile,
        "aux_fusion": args.aux_fusion,
        "startup_s": startup_s,
        "kernels": kernels,
        "dispatch": dispatch,
        "captured": captured,
        "aux_layers": aux_layers,
        "aux_captured": aux_captured,
        "logprobs": logprobs,
        "throughput": throughput,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("plugin", "startup_s", "kernels", "throughput")}, indent=1))
    if plugin_on:
        for route, ms in dispatch.items():
            print(f"dispatch {route}: M = {sorted(int(m) for m in ms)}")
        for route, ms in captured.items():
            print(f"captured into CUDA graphs, {route}: M = {sorted(int(m) for m in ms)}")
        print(f"aux layer classes: {aux_layers}")
        for op, routes in aux_captured.items():
            print(
                f"aux {op} captured: "
                + "; ".join(f"{r} at M = {sorted({v[0] for v in vs})}" for r, vs in routes.items())
            )
    return 0


# Both engines quantize activations identically; their GEMMs differ by accumulation order and
# rounding (Helion vs CUTLASS, each ~4e-3 relative to fp32). Each layer re-quantizes its input to
# fp8 (12.5 % steps), so such differences flip some fp8 roundings and grow to ~0.1 in the logprobs
# of this flat random model after 4 layers; the --control run (another correct vLLM kernel) shows
# the same size. A wrong kernel (missing scale, wrong layout) moves them by O(1) or gives NaN.
LOGPROB_TOL = 0.25


def logprob_diff(a: dict, b: dict, batch: str) -> tuple[int, float, int]:
    """(prompts with identical greedy tokens, max |d logprob| over the shared top-5 tokens of the
    steps whose earlier tokens agree, number of such steps) of two runs at one batch size."""
    same_tokens, max_diff, compared = 0, 0.0, 0
    for x, y in zip(a["logprobs"][batch], b["logprobs"][batch], strict=True):
        same_tokens += x["tokens"] == y["tokens"]
        for j, (la, lb) in enumerate(zip(x["logprobs"], y["logprobs"], strict=False)):
            if x["tokens"][:j] != y["tokens"][:j]:  # step j is comparable while the tokens agree
                break
            shared = set(la) & set(lb)
            compared += 1
            if shared:
                max_diff = max(max_diff, max(abs(la[t] - lb[t]) for t in shared))
    return same_tokens, max_diff, compared


def compare(args) -> int:
    on, off = (json.loads(Path(p).read_text()) for p in (args.on, args.off))
    ok = True
    print(f"GPU {on['gpu']}  vLLM {on['vllm']}  torch {on['torch']}  layers {on['layers']} (Qwen3-8B dims)")
    print(
        f"kernels with plugin: {sorted(set(on['kernels'].values()))}; without: {sorted(set(off['kernels'].values()))}"
    )
    cap = on.get("captured") or on["dispatch"]  # older result files only have dispatch counts
    helion_m = sorted(int(m) for m in cap.get("helion", {}))
    fallback_m = sorted(int(m) for m in cap.get("fallback", {}))
    print(f"captured into CUDA graphs: Helion at M = {helion_m}; CUTLASS at M = {fallback_m}")
    mode = on.get("compile", "O2")
    if mode in NO_GRAPH_MODES:  # hlvllm must decline: nothing of Helion may run, vLLM's kernels do
        aux_helion = any("helion" in routes for routes in on.get("aux_captured", {}).values())
        print(
            f"compile mode {mode}: no CUDA graphs, so Helion must not run; Helion dispatches {cap.get('helion')}"
        )
        ok &= not helion_m and not on["dispatch"].get("helion") and not aux_helion
        ok &= not any("Helion" in k for k in on["kernels"].values())
    else:
        print(f"compile mode {mode}")
        ok &= bool(helion_m) and max(helion_m) <= 32 and min(set(fallback_m) - set(helion_m), default=33) > 32
        aux_ops = sorted(op for op, routes in on.get("aux_captured", {}).items() if "helion" in routes)
        print(f"aux ops captured with Helion: {aux_ops}")
        if on.get("aux_fusion"):  # HL_AUX_FUSION=1: the graph pass must have put the fused ops in
            fused = [op for op in aux_ops if op.endswith("_fp8_quant") and op != "per_token_fp8_quant"]
            print(f"fused aux ops (HL_AUX_FUSION=1): {fused}")
            ok &= bool(fused)
    ctrl = json.loads(Path(args.control).read_text()) if args.control else None
    for batch in ("4", "64"):
        same_tokens, max_diff, compared = logprob_diff(on, off, batch)
        n = len(on["logprobs"][batch])
        print(
            f"batch {batch:>2}: identical greedy tokens {same_tokens}/{n}; max |d logprob| over shared top-5 "
            f"in {compared} comparable steps: {max_diff:.4f}"
        )
        if ctrl is None:
            ok &= max_diff < LOGPROB_TOL
            continue
        # The control is another correct vLLM configuration (another kernel, or vLLM's CUDA custom
        # ops instead of Inductor's native code): its distance from the plugin-off run is the noise
        # of this flat random model. The plugin run passes when it is as close to one of the two
        # vLLM runs as they are to each other (or within LOGPROB_TOL).
        noise = logprob_diff(ctrl, off, batch)[1]
        to_ctrl = logprob_diff(on, ctrl, batch)[1]
        tol = max(LOGPROB_TOL, noise)
        passed = min(max_diff, to_ctrl) <= tol
        kinds = sorted(set(ctrl["kernels"].values()))
        print(
            f"batch {batch:>2}: control ({kinds}, compile {ctrl.get('compile', 'O2')}) vs vLLM: {noise:.4f}; "
            f"plugin vs control: {to_ctrl:.4f}; tolerance {tol:.4f}: {'ok' if passed else 'FAILED'}"
        )
        ok &= passed
    for extra in args.repeat:
        r = json.loads(Path(extra).read_text())
        tps = ", ".join(f"batch {b}: {v['tokens_per_s']:.1f} tok/s" for b, v in r["throughput"].items())
        print(f"run {extra} (plugin {r['plugin']}, kernels {sorted(set(r['kernels'].values()))}): {tps}")
    print(f"{'batch':>5} {'tok/s plugin':>13} {'tok/s vLLM':>11} {'speedup':>8}")
    for batch in ("1", "8"):
        a, b = on["throughput"][batch]["tokens_per_s"], off["throughput"][batch]["tokens_per_s"]
        print(f"{batch:>5} {a:13.1f} {b:11.1f} {a / b:8.3f}")
    print(f"start-up: plugin {on['startup_s']:.1f} s, vLLM {off['startup_s']:.1f} s")
    print("E2E OK" if ok else "E2E FAILED")
    return 0 if ok else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--plugin", choices=["on", "off"], required=True)
    r.add_argument("--layers", type=int, default=4)
    r.add_argument("--quant", choices=sorted(QUANT), default="fp8-dynamic")
    r.add_argument("--out", required=True)
    r.add_argument("--disable-kernels", default="", help="VLLM_DISABLED_KERNELS for this run (control runs)")
    r.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.45,
        help="vLLM's; lower it to run several engines per GPU",
    )
    r.add_argument(
        "--kv-cache-gib",
        type=float,
        default=None,
        help="fixed KV-cache size (vLLM's kv_cache_memory_bytes; skips memory profiling, safe next to other engines)",
    )
    r.add_argument("--aux-kernels", default=None, help="HL_AUX_KERNELS for this run (e.g. none)")
    r.add_argument(
        "--aux-fusion", action="store_true", help="HL_AUX_FUSION=1: fused norm/silu + quant Helion ops"
    )
    r.add_argument(
        "--compile", choices=sorted(COMPILE_MODES), default="O2", help="vLLM compile / CUDA-graph mode"
    )
    c = sub.add_parser("compare")
    c.add_argument("on")
    c.add_argument("off")
    c.add_argument(
        "--control",
        help="a plugin-off run with another vLLM FP8 kernel: the noise between two correct kernels",
    )
    c.add_argument("--repeat", nargs="*", default=[], help="more runs (any kind) whose tokens/s to list")
    return p


def main() -> int:
    args = parser().parse_args()
    return run(args) if args.cmd == "run" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
