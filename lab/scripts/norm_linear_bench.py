"""FP8_Dynamic decode linear with its producer: add + RMSNorm + per-token fp8 quant + GEMM as vLLM's
two kernels, hlcore's two kernels, and one fused Helion kernel (issue 22).

For the two Qwen3-8B linear layers that follow a fused add + RMSNorm (qkv and gate_up, K = 4096) and
num_tokens M, the time per call under CUDA-graph replay, rotating over weight copies larger than 4x
L2 (:func:`hlcore.timing.time_graph`), random bf16 activations and residuals, of:

* ``vllm_two``: vLLM's fused CUDA op ``rms_norm_dynamic_per_token_quant`` (with the residual: what
  vLLM's ``RMSNormQuantFusionPass`` puts in the graph; Inductor's fused kernel does the same work in
  one launch) + ``cutlass_scaled_mm``;
* ``helion_two``: ``hlcore.norm_quant.fused_add_rms_norm_fp8_quant`` + ``hlcore.scaled_mm`` with the
  shipped config (the pick for (fp8_dynamic, M, N, K));
* ``fused_s512`` / ``fused_s1024``: ``hlcore.norm_linear.rms_norm_fp8_linear``, one kernel, the
  same GEMM config with a statistics tile of 512 / 1024;
* ``w8a16``: ``hlcore.norm_linear.rms_norm_w8a16_linear``, one kernel, the activation kept in bf16
  (no quantization; another arithmetic than FP8_Dynamic's), the same GEMM config, statistics tile
  512 (used with split-K); its error is also given against its own fp32 reference
  (``w8a16_err_unquantized``).

Each variant's output is checked against the fp32 reference of the unfused chain first (relative
Frobenius error printed; vLLM's op updates its residual in place, so its check runs on a copy). The
last table weighs each shape once per decoder layer (36). Usage (GPU machine):
``python3 lab/scripts/norm_linear_bench.py``; writes ``$OUT/norm_linear_bench.json``.
"""

from __future__ import annotations

import json
import os

import torch

SHAPES = {"qkv": (6144, 4096), "gate_up": (24576, 4096)}
MS = (1, 2, 4, 8, 16, 32)
LAYERS = 36
EPS = 1e-6
NAMES = ("vllm_two", "helion_two", "fused_s512", "fused_s1024", "w8a16")


def _variants(x, res, norm_w, gemm_cfg) -> dict:
    """The variants as ``fn(weight, scale_b)`` over one (x, residual)."""
    from vllm import _custom_ops as vllm_ops

    from hlcore.norm_linear import config_from_scaled_mm, rms_norm_fp8_linear, rms_norm_w8a16_linear
    from hlcore.norm_quant import fused_add_rms_norm_fp8_quant
    from hlcore.scaled_mm import scaled_mm

    own_residual = res.clone()  # vLLM's op adds x into its residual in place on every call

    def vllm_two(w, s, residual=own_residual):
        q, sa = vllm_ops.rms_norm_dynamic_per_token_quant(x, norm_w, EPS, torch.float8_e4m3fn, None, residual)
        return vllm_ops.cutlass_scaled_mm(q, w.t(), sa, s, torch.bfloat16)

    def helion_two(w, s):
        q, sa, _ = fused_add_rms_norm_fp8_quant(x, res, norm_w, EPS)
        return scaled_mm(q, w.t(), sa, s, torch.bfloat16, config=gemm_cfg)

    def fused(stats):
        cfg = config_from_scaled_mm(gemm_cfg, stats)
        return lambda w, s: rms_norm_fp8_linear(x, norm_w, EPS, w.t(), s, res, config=cfg)[0]

    return {
        "vllm_two": vllm_two,
        "helion_two": helion_two,
        "fused_s512": fused(512),
        "fused_s1024": fused(1024),
        "w8a16": lambda w, s: rms_norm_w8a16_linear(
            x, norm_w, EPS, w.t(), s, res, config=config_from_scaled_mm(gemm_cfg, 512)
        )[0],
    }


def main() -> None:
    from hlcore.formats import get_format
    from hlcore.norm_linear import rms_norm_fp8_linear_ref, rms_norm_w8a16_linear_ref
    from hlcore.scaled_mm_config import pick_scaled_mm_config
    from hlcore.testing import rel_error
    from hlcore.timing import copies_for, time_graph

    rows = []
    for layer, (n, k) in SHAPES.items():
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
            x = torch.randn((m, k), device="cuda").to(torch.bfloat16)
            res = torch.randn((m, k), device="cuda").to(torch.bfloat16)
            gemm_cfg = json.loads(pick_scaled_mm_config("fp8_dynamic", m, n, k, device=x.device).config_json)

            ref, _ = rms_norm_fp8_linear_ref(x, norm_w, EPS, w_q.t(), scale_b, res)
            row = {"layer": layer, "N": n, "K": k, "M": m, "gemm_config": gemm_cfg}
            fns = _variants(x, res, norm_w, gemm_cfg)
            for name, fn in fns.items():
                try:
                    # vLLM's op updates its residual in place: its check runs on a copy
                    out = fn(w_q, scale_b, res.clone()) if name == "vllm_two" else fn(w_q, scale_b)
                    row[f"{name}_err"] = round(rel_error(out, ref), 5)
                    if name == "w8a16":
                        ref16, _ = rms_norm_w8a16_linear_ref(x, norm_w, EPS, w_q.t(), scale_b, res)
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
    with open(os.path.join(out_dir, "norm_linear_bench.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    print(
        "\n| M | "
        + " | ".join(f"{nm} us/step" for nm in NAMES)
        + " | best fp8 fused vs helion_two | vs vllm_two | w8a16 vs vllm_two |"
    )
    print("| --- " * (len(NAMES) + 4) + "|")
    for m in MS:
        tot = {nm: LAYERS * sum(r.get(f"{nm}_us", float("nan")) for r in rows if r["M"] == m) for nm in NAMES}
        best = min(tot["fused_s512"], tot["fused_s1024"])
        print(
            f"| {m} | "
            + " | ".join(f"{tot[nm]:.0f}" for nm in NAMES)
            + f" | {tot['helion_two'] / best:.3f} | {tot['vllm_two'] / best:.3f} | {tot['vllm_two'] / tot['w8a16']:.3f} |"
        )


if __name__ == "__main__":
    main()
