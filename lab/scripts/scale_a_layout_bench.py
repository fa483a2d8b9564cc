"""Does the layout of Block_FP8's activation scales slow the Helion GEMM, and does prefetching them
help? (issue 20)

In capture mode (``HL_DISPATCH_AT=capture``) the Helion Block_FP8 GEMM reads the scale_a that
vLLM's group quantization wrote for DeepGEMM: column-major ``[M, K/128]``, column stride M rounded
up to 4 (TMA-aligned) or M (the SiLU-and-mul fusion's down_proj scales); the shipped configs were
tuned and the op design ran on row-major scale_a. 2026-12-04: the capture-mode Block engine decoded
3.90 / 4.19 ms per token at concurrency 2 / 4 against 3.55 / 3.63 for the op design (2026-12-02).

Per Qwen3-8B Block_FP8 GEMM shape and M: ``hlcore.scaled_mm`` with the shipped config on the same
values in each variant, under CUDA-graph replay over weight copies larger than L2
(:func:`hlcore.timing.time_graph`), the variants interleaved A B C .. C B A over ``--rounds``;
medians in µs and each variant's time over row-major's. Variants: ``row``, ``tma_col``, ``col``
(the layouts), ``tma_copy`` (TMA-aligned, copied to row-major inside each call: one more launch),
and with ``+pf`` the same config with ``prefetch_scales`` (the next group's scale_a loaded one K
step ahead). ``maxdiff``: largest |difference| from row-major's output (split-K's atomics may add
in another order). Usage (GPU machine; helion, hlcore): ``python3 lab/scripts/scale_a_layout_bench.py
[--ms 2,4,8] [--variants row,col,...] [--budget-s 150]``; writes ``$OUT/scale_a_layout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

SHAPES = [(24576, 4096), (4096, 12288), (6144, 4096), (4096, 4096)]  # gate_up, down, qkv, o
VARIANTS = ["row", "tma_col", "col", "tma_copy", "row+pf", "tma_col+pf", "col+pf"]


def tma_aligned_column_major(t: torch.Tensor) -> torch.Tensor:
    """vLLM's ``QuantFP8(tma_aligned_scales=True)`` layout: column stride M rounded up to 4."""
    m, g = t.shape
    padded = torch.empty((g, -(-m // 4) * 4), dtype=t.dtype, device=t.device)
    padded[:, :m] = t.t()
    return padded[:, :m].t()


LAYOUTS = {
    "row": lambda t: t.contiguous(),
    "tma_col": tma_aligned_column_major,
    "col": lambda t: t.t().contiguous().t(),
    "tma_copy": tma_aligned_column_major,
}


def graph_calls(sm, a, scale_a, weights, out_dtype, config, copy=False):
    """One ``hlcore.scaled_mm`` call per weight copy on ``a`` and ``scale_a`` with ``config``
    (``copy``: on a row-major copy of ``scale_a`` made inside each call, one more launch)."""
    return [
        lambda b=b, sb=sb: sm.scaled_mm(
            a,
            b,
            scale_a.contiguous() if copy else scale_a,
            sb,
            out_dtype,
            block_size=(128, 128),
            config=config,
        )
        for b, sb in weights
    ]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="2,4,8")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=150.0)
    args = p.parse_args()
    from hlcore import scaled_mm as sm
    from hlcore.formats import get_format
    from hlcore.scaled_mm import generate_scaled_mm_inputs
    from hlcore.scaled_mm_config import pick_scaled_mm_config
    from hlcore.timing import copies_for, time_graph

    variants = args.variants.split(",")
    bad = [v for v in variants if v.removesuffix("+pf") not in LAYOUTS]
    if bad or "row" not in variants:
        raise SystemExit(f"--variants: unknown {bad} or no 'row'; choose from {VARIANTS}")
    ms = [int(m) for m in args.ms.split(",")]
    start = time.monotonic()
    rows = []
    for n, k in SHAPES:
        if time.monotonic() - start > args.budget_s:
            print(f"budget: stopped before N={n} K={k}")
            break
        d = generate_scaled_mm_inputs(max(ms), n, k, fmt="block_fp8", device="cuda", seed=0)
        weights = [(d["b"], d["scale_b"])]
        for _ in range(copies_for(n * k) - 1):
            w = torch.randn((n, k), device="cuda").mul_(0.05).to(torch.bfloat16)
            q, sb = get_format("block_fp8").quantize_weight(w)
            weights.append((q.t(), sb))
        for m in ms:
            pick = pick_scaled_mm_config("block_fp8", m, n, k, device=d["a"].device)
            config = json.loads(pick.config_json)
            a, sa = d["a"][:m], d["scale_a"][:m]
            outs, samples = {}, {v: [] for v in variants}
            for _ in range(args.rounds):
                for v in variants + variants[::-1]:
                    layout = v.removesuffix("+pf")
                    cfg = {**config, "prefetch_scales": v.endswith("+pf")}
                    calls = graph_calls(
                        sm, a, LAYOUTS[layout](sa), weights, d["out_dtype"], cfg, copy=layout == "tma_copy"
                    )
                    if v not in outs:
                        outs[v] = calls[0]().float()
                    samples[v].append(time_graph(calls, repeats=30, warmup=3).median_us)
            row = {"n": n, "k": k, "m": m, "fallback_marked": bool(pick.fallback), "config": config}
            for v in variants:
                row[f"{v}_us"] = round(statistics.median(samples[v]), 2)
                row[f"{v}_maxdiff"] = float((outs[v] - outs["row"]).abs().max())
            rows.append(row)
            print(json.dumps(row), flush=True)
        del d, weights
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "scale_a_layout.json"), "w") as f:
        json.dump(
            {"gpu": torch.cuda.get_device_name(), "commit": os.environ.get("HL_COMMIT"), "rows": rows}, f
        )
    print("| N | K | M | marked | row µs | " + " | ".join(f"{v}/row" for v in variants if v != "row") + " |")
    for r in rows:
        ratios = " | ".join(f"{r[f'{v}_us'] / r['row_us']:.3f}" for v in variants if v != "row")
        print(f"| {r['n']} | {r['k']} | {r['m']} | {r['fallback_marked']} | {r['row_us']} | {ratios} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
