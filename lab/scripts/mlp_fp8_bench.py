"""Qwen3-8B's FP8_Dynamic MLP at decode sizes: three launches against hlcore.mlp_fp8's two (issue 22).

Per num_tokens M, µs per MLP under CUDA-graph replay (:func:`hlcore.timing.time_graph`, rotating
over weight copies larger than L2, random bf16 activations quantized per token first):

* ``three``: ``hlcore.scaled_mm`` gate_up (bf16 [M, 2 d]) -> ``hlcore.activation_quant.silu_and_mul_fp8_quant``
  (one kernel: the work of Inductor's fused silu + quant kernel in vLLM's -O2 graph) ->
  ``hlcore.scaled_mm`` down, each GEMM with the shipped config of its (fp8_dynamic, M, N, K);
* ``cutlass_three`` (when vLLM imports): the same with vLLM's ``cutlass_scaled_mm`` for both GEMMs;
* ``two[<gate_up config>]``: ``hlcore.mlp_fp8.gate_up_silu`` (SiLU-and-mul and the per-tile row
  amax in the epilogue) -> ``hlcore.mlp_fp8.silu_down`` (the per-token quantization in the K loop),
  for each candidate gate_up config (``--gate-up``; the shipped gate_up config first), the down
  kernel with the shipped down config;
* ``grouped[<gate_up config>]``: ``gate_up_silu(quantize=True)`` (h leaves as e4m3 in 1 x block_n
  groups) -> ``hlcore.mlp_fp8.group_down`` (no quantization in the K loop; other bytes than
  FP8_Dynamic's, within its tolerance);
* each kernel alone (``gate_up``, ``silu_quant``, ``down``, ``gate_up_silu``, ``silu_down``, ``group_down``).

Every variant's output is checked against the fp32 reference of vLLM's chain (``*_err``, relative
Frobenius). The table gives the best ``two`` or ``grouped`` against ``three`` (and CUTLASS's) per M, and per
decode step (x 36 layers). Usage (GPU machine; helion, hlcore; vLLM optional):
``python3 lab/scripts/mlp_fp8_bench.py [--ms 1,8] [--budget-s 200]``; writes
``$OUT/mlp_fp8_bench.json`` after every M.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

HIDDEN, INTER = 4096, 12288  # Qwen3-8B: K of gate_up, d (N of gate_up is 2 d, K of down)
LAYERS = 36
GATE_UP_CANDIDATES = [
    {"block_sizes": [16, 128, 128], "num_warps": 4, "num_stages": 4},
    {"block_sizes": [16, 32, 128], "num_warps": 4, "num_stages": 4},
    {"block_sizes": [16, 64, 256], "num_warps": 8, "num_stages": 3},
]


def _weights(n: int, k: int, seed: int):
    from hlcore.formats import get_format

    gen = torch.Generator().manual_seed(seed)
    w_q, scale_b = get_format("fp8_dynamic").quantize_weight(
        (torch.randn((n, k), generator=gen) * 0.05).bfloat16()
    )
    return w_q.cuda(), scale_b.cuda().reshape(-1)


def _shipped(m: int, n: int, k: int) -> dict:
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    return json.loads(pick_scaled_mm_config("fp8_dynamic", m, n, k, device=torch.device("cuda")).config_json)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="1,2,4,8,16,32")
    p.add_argument("--budget-s", type=float, default=1e9, help="stop starting new M values after this")
    p.add_argument("--gate-up", type=int, default=len(GATE_UP_CANDIDATES), help="how many extra candidates")
    args = p.parse_args()
    from hlcore.activation_quant import silu_and_mul_fp8_quant
    from hlcore.mlp_fp8 import gate_up_silu, gate_up_silu_ref, group_down, silu_down, silu_down_ref
    from hlcore.quant import per_token_fp8_quant_ref
    from hlcore.scaled_mm import scaled_mm
    from hlcore.testing import rel_error
    from hlcore.timing import copies_for, time_graph

    try:
        from vllm import _custom_ops as vllm_ops
    except Exception:  # noqa: BLE001 - vLLM is optional here
        vllm_ops = None
    t0 = time.monotonic()
    gu_w, gu_s = _weights(2 * INTER, HIDDEN, 1)
    dn_w, dn_s = _weights(HIDDEN, INTER, 2)
    per_copy = gu_w.numel() + dn_w.numel()
    copies = [(gu_w, gu_s, dn_w, dn_s)] + [
        (gu_w.clone(), gu_s.clone(), dn_w.clone(), dn_s.clone()) for _ in range(copies_for(per_copy) - 1)
    ]
    rows = []
    for m in [int(v) for v in args.ms.split(",")]:
        if time.monotonic() - t0 > args.budget_s:
            print(f"budget: M={m} and later not run", flush=True)
            break
        x = (torch.randn((m, HIDDEN), device="cuda") * 2).bfloat16()
        a, sa = per_token_fp8_quant_ref(x)
        cfg_gu, cfg_dn = _shipped(m, 2 * INTER, HIDDEN), _shipped(m, HIDDEN, INTER)
        ref = silu_down_ref(gate_up_silu_ref(a, gu_w.t(), sa, gu_s), dn_w.t(), dn_s, torch.float32)
        row: dict = {"M": m, "gate_up_config": cfg_gu, "down_config": cfg_dn}
        gu_cands = [{k: v for k, v in cfg_gu.items() if k not in ("split_k", "swap_ab")}]
        gu_cands += [c for c in GATE_UP_CANDIDATES if c != gu_cands[0]][: args.gate_up]

        def three(gw, gs, dw, ds, cfg_gu=cfg_gu, cfg_dn=cfg_dn, a=a, sa=sa):
            gu = scaled_mm(a, gw.t(), sa, gs, torch.bfloat16, config=cfg_gu)
            q, s = silu_and_mul_fp8_quant(gu)
            return scaled_mm(q, dw.t(), s, ds, torch.bfloat16, config=cfg_dn)

        def cutlass_three(gw, gs, dw, ds, a=a, sa=sa):
            gu = vllm_ops.cutlass_scaled_mm(a, gw.t(), sa, gs, torch.bfloat16)
            q, s = silu_and_mul_fp8_quant(gu)
            return vllm_ops.cutlass_scaled_mm(q, dw.t(), s, ds, torch.bfloat16)

        def two(cfg, a=a, sa=sa, cfg_dn=cfg_dn):
            def run(gw, gs, dw, ds):
                h, parts = gate_up_silu(a, gw.t(), sa, gs, config=cfg)
                return silu_down(h, parts, dw.t(), ds, config=cfg_dn)

            return run

        gu_out = scaled_mm(a, gu_w.t(), sa, gu_s, torch.bfloat16, config=cfg_gu)
        q_h, s_h = silu_and_mul_fp8_quant(gu_out)
        h0, parts0 = gate_up_silu(a, gu_w.t(), sa, gu_s, config=gu_cands[0])
        variants = {
            "three": three,
            "gate_up": lambda gw, gs, dw, ds, a=a, sa=sa, c=cfg_gu: scaled_mm(
                a, gw.t(), sa, gs, torch.bfloat16, config=c
            ),
            "silu_quant": lambda gw, gs, dw, ds, g=gu_out: silu_and_mul_fp8_quant(g),
            "down": lambda gw, gs, dw, ds, q=q_h, s=s_h, c=cfg_dn: scaled_mm(
                q, dw.t(), s, ds, torch.bfloat16, config=c
            ),
            "silu_down": lambda gw, gs, dw, ds, h=h0, pt=parts0, c=cfg_dn: silu_down(
                h, pt, dw.t(), ds, config=c
            ),
        }
        if vllm_ops is not None:
            variants["cutlass_three"] = cutlass_three

        def grouped(cfg, a=a, sa=sa, cfg_dn=cfg_dn):
            def run(gw, gs, dw, ds):
                q, parts = gate_up_silu(a, gw.t(), sa, gs, quantize=True, config=cfg)
                return group_down(q, parts, dw.t(), ds, config=cfg_dn)

            return run

        q0, qparts0 = gate_up_silu(a, gu_w.t(), sa, gu_s, quantize=True, config=gu_cands[0])
        variants["group_down"] = lambda gw, gs, dw, ds, q=q0, pt=qparts0, c=cfg_dn: group_down(
            q, pt, dw.t(), ds, config=c
        )
        for i, cfg in enumerate(gu_cands):
            variants[f"two[{i}]"] = two(cfg)
            variants[f"grouped[{i}]"] = grouped(cfg)
            variants[f"gate_up_silu[{i}]"] = lambda gw, gs, dw, ds, a=a, sa=sa, c=cfg: gate_up_silu(
                a, gw.t(), sa, gs, config=c
            )
        row["gate_up_candidates"] = gu_cands
        for name, fn in variants.items():
            try:
                out = fn(*copies[0])
                if name in ("three", "cutlass_three") or name.startswith(("two[", "grouped[")):
                    row[f"{name}_err"] = round(rel_error(out, ref), 5)
                calls = [lambda c=c, fn=fn: fn(*c) for c in copies]
                row[f"{name}_us"] = round(time_graph(calls).median_us, 2)
            except Exception as exc:  # noqa: BLE001 - record and go on
                row[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        twos = {k: v for k, v in row.items() if k.startswith(("two[", "grouped[")) and k.endswith("_us")}
        if twos:
            best = min(twos, key=twos.get)
            row["two_best"], row["two_best_us"] = best[:-3], twos[best]
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(os.environ.get("OUT", "."), "mlp_fp8_bench.json"), "w") as f:
            json.dump(
                {"commit": os.environ.get("HL_COMMIT"), "gpu": torch.cuda.get_device_name(), "rows": rows},
                f,
                indent=1,
            )
    _table(rows)


def _table(rows: list[dict]) -> None:
    print(
        "\n| M | three us | cutlass_three | best two | two / three | two / cutlass_three | gate_up + silu_quant + down | gate_up_silu + silu_down | step saving us (x36, vs three) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    nan = float("nan")
    for r in rows:
        three, cut, two = r.get("three_us", nan), r.get("cutlass_three_us", nan), r.get("two_best_us", nan)
        best = r.get("two_best", "two[0]")
        i = best[best.index("[") + 1 : -1]
        parts3 = r.get("gate_up_us", nan) + r.get("silu_quant_us", nan) + r.get("down_us", nan)
        down2 = r.get("group_down_us" if best.startswith("grouped") else "silu_down_us", nan)
        parts2 = r.get(f"gate_up_silu[{i}]_us", nan) + down2
        print(
            f"| {r['M']} | {three:.2f} | {cut:.2f} | {two:.2f} ({r.get('two_best', '-')}) | {two / three:.3f} | "
            f"{two / cut:.3f} | {parts3:.2f} | {parts2:.2f} | {LAYERS * (three - two):.0f} |"
        )


if __name__ == "__main__":
    main()
