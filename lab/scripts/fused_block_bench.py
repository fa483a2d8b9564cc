"""Block_FP8 decode linear: activation quantization + GEMM as two kernels vs one (issue 22).

For each Qwen3-8B linear shape (qkv, o, gate_up, down) and num_tokens M, the time per call under
CUDA-graph replay, rotating over weight copies larger than 4x L2 (:func:`hlcore.timing.time_graph`),
random bf16 activations, of:

* ``vllm_cutlass``: vLLM's ``per_token_group_quant_fp8`` (column-major scales) + CUTLASS's block
  ``cutlass_scaled_mm`` (the pair vLLM's CUTLASS block kernel runs; DeepGEMM, vLLM's H200 default,
  JIT-compiles per shape and is left out here);
* ``helion_two``: vLLM's ``per_token_group_quant_fp8`` (row-major scales) + ``hlcore.scaled_mm``
  with the shipped config (what hlvllm runs today);
* ``helion_fused``: ``hlcore.fused_linear.block_fp8_linear`` with the same config (one kernel).

Each variant's output is checked against the fp32 reference of the unfused chain first (relative
Frobenius error printed). The last table weighs each shape once per decoder layer (36) for a decode
step's linear time. Usage (GPU machine): ``python3 lab/scripts/fused_block_bench.py``; writes
``$OUT/fused_block_bench.json``.
"""

from __future__ import annotations

import json
import os

import torch

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
MS = (1, 2, 4, 8, 16, 32)
LAYERS = 36


def main() -> None:
    from vllm import _custom_ops as vllm_ops
    from vllm.model_executor.layers.quantization.utils.fp8_utils import per_token_group_quant_fp8

    from hlcore.formats import get_format
    from hlcore.fused_linear import block_fp8_linear, block_fp8_linear_ref
    from hlcore.scaled_mm import scaled_mm
    from hlcore.testing import rel_error
    from hlcore.timing import copies_for, time_graph

    rows = []
    for layer, (n, k) in SHAPES.items():
        gen = torch.Generator().manual_seed(n + k)
        w_q, scale_b = get_format("block_fp8").quantize_weight(
            (torch.randn((n, k), generator=gen) * 0.05).to(torch.bfloat16)
        )
        w_q, scale_b = w_q.cuda(), scale_b.cuda()
        copies = [(w_q, scale_b)] + [
            (w_q.clone(), scale_b.clone()) for _ in range(copies_for(w_q.numel()) - 1)
        ]
        for m in MS:
            x = torch.randn((m, k), device="cuda").to(torch.bfloat16)

            def vllm_cutlass(w, s, x=x):
                q, sa = per_token_group_quant_fp8(x, 128, column_major_scales=True)
                return vllm_ops.cutlass_scaled_mm(q, w.t(), sa, s.t(), torch.bfloat16)

            def helion_two(w, s, x=x):
                q, sa = per_token_group_quant_fp8(x, 128)
                return scaled_mm(q, w.t(), sa, s, torch.bfloat16, block_size=(128, 128))

            def helion_fused(w, s, x=x):
                return block_fp8_linear(x, w.t(), s)

            ref = block_fp8_linear_ref(x, w_q.t(), scale_b)
            row = {"layer": layer, "N": n, "K": k, "M": m}
            for name, fn in (
                ("vllm_cutlass", vllm_cutlass),
                ("helion_two", helion_two),
                ("helion_fused", helion_fused),
            ):
                try:
                    row[f"{name}_err"] = round(rel_error(fn(w_q, scale_b), ref), 5)
                    row[f"{name}_us"] = round(
                        time_graph([lambda w=w, s=s, fn=fn: fn(w, s) for w, s in copies]).median_us, 2
                    )
                except Exception as exc:  # noqa: BLE001 - record and go on
                    row[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
        del copies
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "fused_block_bench.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    names = ("vllm_cutlass", "helion_two", "helion_fused")
    print("\n| M | " + " | ".join(f"{n} us/step" for n in names) + " | fused vs two | fused vs vllm |")
    print("| --- | --- | --- | --- | --- | --- |")
    for m in MS:
        tot = {nm: LAYERS * sum(r.get(f"{nm}_us", float("nan")) for r in rows if r["M"] == m) for nm in names}
        print(
            f"| {m} | "
            + " | ".join(f"{tot[nm]:.0f}" for nm in names)
            + f" | {tot['helion_two'] / tot['helion_fused']:.3f} | {tot['vllm_cutlass'] / tot['helion_fused']:.3f} |"
        )


if __name__ == "__main__":
    main()
