"""The decode linear layer with its producer, FP8_Dynamic Qwen3-8B: two kernels (vLLM's, hlcore's)
against one fused Helion kernel, per layer type and num_tokens M (issue 22).

Time per call under CUDA-graph replay, rotating over weight copies larger than 4x L2
(:func:`hlcore.timing.time_graph`), random bf16 activations, for the producer each GEMM has in a
decoder layer:

* qkv, gate_up (K = 4096) follow add + RMSNorm:
  ``vllm_two``: vLLM's fused CUDA op ``rms_norm_dynamic_per_token_quant`` with the residual (what
  its ``RMSNormQuantFusionPass`` puts in the graph; Inductor's fused kernel does the same work in one
  launch) + ``cutlass_scaled_mm``; ``helion_two``: ``hlcore.norm_quant.fused_add_rms_norm_fp8_quant``
  + ``hlcore.scaled_mm``; ``fused_s512`` / ``fused_s1024``: ``hlcore.norm_linear.rms_norm_fp8_linear``
  (one kernel, FP8_Dynamic arithmetic, statistics tile 512 / 1024); ``w8a16``:
  ``hlcore.norm_linear.rms_norm_w8a16_linear`` (one kernel, activation kept in bf16).
* down (K = 12288) follows SiLU-and-mul: ``vllm_two``: ``hlcore.activation_quant.silu_and_mul_fp8_quant``
  (one kernel, the work of Inductor's fused silu + quant kernel under vLLM's -O2) + CUTLASS;
  ``helion_two``: the same + ``hlcore.scaled_mm``; ``w8a16``:
  ``hlcore.w8a16_linear.silu_and_mul_w8a16_linear`` (one kernel).
* o (K = 4096) follows attention (bf16 output): ``vllm_two``: vLLM's ``scaled_fp8_quant`` per token +
  CUTLASS; ``helion_two``: the same + ``hlcore.scaled_mm``; ``w8a16``: ``hlcore.w8a16_linear.w8a16_linear``.

Every Helion GEMM uses the shipped config of its (fp8_dynamic, M, N, K). Each variant's output is
checked against the fp32 reference of the FP8_Dynamic chain first (``<variant>_err``; w8a16 also
against its own unquantized reference, ``w8a16_err_unquantized``). The last table weighs each layer
once per decoder layer (36): a decode step's linear layers with their producers. Usage (GPU
machine): ``python3 lab/scripts/norm_linear_bench.py [--layers qkv,gate_up]``; writes
``$OUT/norm_linear_bench-<layers>.json`` (a table over several files: their rows together).
"""

from __future__ import annotations

import json
import os

import torch

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
PRODUCER = {"qkv": "norm", "gate_up": "norm", "o": "none", "down": "silu"}
MS = (1, 2, 4, 8, 16, 32)
LAYERS = 36
EPS = 1e-6
NAMES = ("vllm_two", "helion_two", "fused_s512", "fused_s1024", "w8a16")


def _norm_variants(x, res, norm_w, cfg) -> dict:
    from vllm import _custom_ops as vllm_ops

    from hlcore.norm_linear import config_from_scaled_mm, rms_norm_fp8_linear, rms_norm_w8a16_linear
    from hlcore.norm_quant import fused_add_rms_norm_fp8_quant
    from hlcore.scaled_mm import scaled_mm

    own_residual = res.clone()  # vLLM's op adds x into its residual in place on every call

    def vllm_two(w, s):
        q, sa = vllm_ops.rms_norm_dynamic_per_token_quant(
            x, norm_w, EPS, torch.float8_e4m3fn, None, own_residual
        )
        return vllm_ops.cutlass_scaled_mm(q, w.t(), sa, s, torch.bfloat16)

    def helion_two(w, s):
        q, sa, _ = fused_add_rms_norm_fp8_quant(x, res, norm_w, EPS)
        return scaled_mm(q, w.t(), sa, s, torch.bfloat16, config=cfg)

    def fused(stats):
        c = config_from_scaled_mm(cfg, stats)
        return lambda w, s: rms_norm_fp8_linear(x, norm_w, EPS, w.t(), s, res, config=c)[0]

    c512 = config_from_scaled_mm(cfg, 512)
    return {
        "vllm_two": vllm_two,
        "helion_two": helion_two,
        "fused_s512": fused(512),
        "fused_s1024": fused(1024),
        "w8a16": lambda w, s: rms_norm_w8a16_linear(x, norm_w, EPS, w.t(), s, res, config=c512)[0],
    }


def _silu_variants(gu, cfg) -> dict:
    from vllm import _custom_ops as vllm_ops

    from hlcore.activation_quant import silu_and_mul_fp8_quant
    from hlcore.scaled_mm import scaled_mm
    from hlcore.w8a16_linear import silu_and_mul_w8a16_linear

    def vllm_two(w, s):
        q, sa = silu_and_mul_fp8_quant(gu)
        return vllm_ops.cutlass_scaled_mm(q, w.t(), sa, s, torch.bfloat16)

    def helion_two(w, s):
        q, sa = silu_and_mul_fp8_quant(gu)
        return scaled_mm(q, w.t(), sa, s, torch.bfloat16, config=cfg)

    return {
        "vllm_two": vllm_two,
        "helion_two": helion_two,
        "w8a16": lambda w, s: silu_and_mul_w8a16_linear(gu, w.t(), s, config=cfg),
    }


def _plain_variants(x, cfg) -> dict:
    from vllm import _custom_ops as vllm_ops

    from hlcore.scaled_mm import scaled_mm
    from hlcore.w8a16_linear import w8a16_linear

    def vllm_two(w, s):
        q, sa = vllm_ops.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
        return vllm_ops.cutlass_scaled_mm(q, w.t(), sa, s, torch.bfloat16)

    def helion_two(w, s):
        q, sa = vllm_ops.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
        return scaled_mm(q, w.t(), sa, s, torch.bfloat16, config=cfg)

    return {
        "vllm_two": vllm_two,
        "helion_two": helion_two,
        "w8a16": lambda w, s: w8a16_linear(x, w.t(), s, config=cfg),
    }


def _case(layer: str, m: int, k: int, norm_w, w_q, scale_b, cfg):
    """``(variants, the FP8_Dynamic chain's fp32 reference, the unquantized chain's fp32 reference)``
    for one layer at M tokens (random bf16 producer inputs)."""
    from hlcore.activation_quant import silu_and_mul_fp8_quant_ref
    from hlcore.norm_linear import rms_norm_fp8_linear_ref, rms_norm_w8a16_linear_ref
    from hlcore.quant import per_token_fp8_quant_ref
    from hlcore.scaled_mm import scaled_mm_ref
    from hlcore.w8a16_linear import silu_and_mul_w8a16_linear_ref, w8a16_linear_ref

    b, sb = w_q.t(), scale_b
    if PRODUCER[layer] == "norm":
        x = torch.randn((m, k), device="cuda").to(torch.bfloat16)
        res = torch.randn((m, k), device="cuda").to(torch.bfloat16)
        ref = rms_norm_fp8_linear_ref(x, norm_w, EPS, b, sb, res)[0]
        return (
            _norm_variants(x, res, norm_w, cfg),
            ref,
            rms_norm_w8a16_linear_ref(x, norm_w, EPS, b, sb, res)[0],
        )
    if PRODUCER[layer] == "silu":
        gu = torch.randn((m, 2 * k), device="cuda").to(torch.bfloat16)
        q, sa = silu_and_mul_fp8_quant_ref(gu)
        ref = scaled_mm_ref(q, b, sa, sb.reshape(-1), torch.bfloat16)
        return _silu_variants(gu, cfg), ref, silu_and_mul_w8a16_linear_ref(gu, b, sb)
    x = torch.randn((m, k), device="cuda").to(torch.bfloat16)
    q, sa = per_token_fp8_quant_ref(x)
    ref = scaled_mm_ref(q, b, sa, sb.reshape(-1), torch.bfloat16)
    return _plain_variants(x, cfg), ref, w8a16_linear_ref(x, b, sb)


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--layers", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    layers = p.parse_args().layers.split(",")
    from hlcore.formats import get_format
    from hlcore.scaled_mm_config import pick_scaled_mm_config
    from hlcore.testing import rel_error
    from hlcore.timing import copies_for, time_graph

    rows = []
    for layer, (n, k) in ((name, SHAPES[name]) for name in layers):
        gen = torch.Generator().manual_seed(n + k)
        w_q, scale_b = get_format("fp8_dynamic").quantize_weight(
            (torch.randn((n, k), generator=gen) * 0.05).to(torch.bfloat16)
        )
        w_q, scale_b = w_q.cuda(), scale_b.cuda().reshape(n, 1)
        norm_w = (1 + 0.2 * torch.randn((k,), generator=gen)).to(torch.bfloat16).cuda()
        copies = [(w_q, scale_b)] + [
            (w_q.clone(), scale_b.clone()) for _ in range(copies_for(w_q.numel()) - 1)
        ]
        for m in MS:
            cfg = json.loads(pick_scaled_mm_config("fp8_dynamic", m, n, k, device=w_q.device).config_json)
            fns, ref, ref16 = _case(layer, m, k, norm_w, w_q, scale_b, cfg)
            row = {"layer": layer, "N": n, "K": k, "M": m, "gemm_config": cfg}
            for name, fn in fns.items():
                try:
                    out = fn(w_q, scale_b)
                    row[f"{name}_err"] = round(rel_error(out, ref), 5)
                    if name == "w8a16":
                        row["w8a16_err_unquantized"] = round(rel_error(out, ref16), 5)
                    row[f"{name}_us"] = round(
                        time_graph([lambda w=w, s=s, fn=fn: fn(w, s) for w, s in copies]).median_us, 2
                    )
                except Exception as exc:  # noqa: BLE001 - record and go on
                    row[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
        del copies
        torch.cuda.empty_cache()
    out_dir = os.environ.get("OUT", ".")
    with open(os.path.join(out_dir, f"norm_linear_bench-{'-'.join(layers)}.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    _table(rows)


def _table(rows: list[dict]) -> None:
    """Per M: µs per decode step (36 layers) of the linear layers run (``--layers``) with their producers, with
    each layer's best fused variant where it has one (``fused_best``: the lower of the FP8 fused
    kernels and w8a16 per layer; ``fp8_only``: the FP8_Dynamic fused kernel where one exists, else
    helion_two)."""

    def us(r, name):
        return r.get(f"{name}_us", float("nan"))

    print(
        "\n| M | vllm_two us/step | helion_two | w8a16 (the layers run) | fp8 fused on qkv/gate_up | w8a16 vs vllm_two | fp8 fused vs vllm_two |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for m in MS:
        at_m = [r for r in rows if r["M"] == m]
        vllm = LAYERS * sum(us(r, "vllm_two") for r in at_m)
        two = LAYERS * sum(us(r, "helion_two") for r in at_m)
        w16 = LAYERS * sum(us(r, "w8a16") for r in at_m)
        fp8 = LAYERS * sum(
            min(us(r, "fused_s512"), us(r, "fused_s1024")) if "fused_s512_us" in r else us(r, "helion_two")
            for r in at_m
        )
        print(
            f"| {m} | {vllm:.0f} | {two:.0f} | {w16:.0f} | {fp8:.0f} | {vllm / w16:.3f} | {vllm / fp8:.3f} |"
        )


if __name__ == "__main__":
    main()
