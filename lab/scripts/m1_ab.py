"""The Helion GEMM at M = 1 and 8 on Qwen3-8B's FP8_Dynamic shapes, with whichever hlcore is
importable: run once per wheel (lab/runs/2026-12-13.sh AB) to compare two commits' kernels side by
side, CUDA-graph replay over weight copies larger than L2 (hlcore.timing), the shipped config of
each key. Prints one JSON line: {"commit", "rows": [[layer, M, median µs, p20, p80], ...]}."""

from __future__ import annotations

import json
import os

import torch

from hlcore import timing
from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}


def main() -> None:
    rows = []
    for layer, (n, k) in SHAPES.items():
        for m in (1, 8):
            d = generate_scaled_mm_inputs(m, n, k, device="cuda", seed=m)
            copies = timing.copies_for(n * k)
            ws = [d["b"].t().contiguous().t() for _ in range(copies)]
            calls = [
                lambda w=w, d=d: scaled_mm(d["a"], w, d["scale_a"], d["scale_b"], torch.bfloat16) for w in ws
            ]
            t = timing.time_graph(calls, repeats=50)
            rows.append([layer, m, round(t.median_us, 2), round(t.p20_us, 2), round(t.p80_us, 2)])
    print(json.dumps({"commit": os.environ.get("HL_COMMIT", "?"), "rows": rows}), flush=True)


if __name__ == "__main__":
    main()
