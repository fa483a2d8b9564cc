"""Where the autotune check's operands cost time (issue 23), on one CUDA GPU, no vLLM needed.

The checker (``hltools.autotune.gpu_checker``) used to draw every key's operands afresh:
``generate_scaled_mm_inputs`` on the CPU (a CPU generator's randn of the N x K fp32 weight and its
quantization) for each of ``copies_for(N * K)`` weight copies, then copied to the GPU, for each of a
shape's 7 M. It now draws a shape's copies once (``hltools.autotune.check_inputs``: copy 0 and the
activations seeded on the CPU as before, copies 1.. on the GPU) and slices the activations per M.

For each (N, K) of the models given (one format): the old way's wall seconds for one key (the 7 M
of a model cost 7 times that) and the new way's for all 7 M, the GPU synchronized after each.

    python3 lab/scripts/check_inputs_probe.py --models qwen3-1.7b,qwen3-32b --format fp8_dynamic
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs
from hltools import autotune as at
from hltools.shapes import linear_shapes, load_model_config
from hltools.timing import copies_for

M_VALUES = (1, 2, 4, 8, 16, 24, 32)


def old_way(fmt: str, n: int, k: int, m: int, seed: int = 0) -> float:
    start = time.perf_counter()
    copies = [
        generate_scaled_mm_inputs(m, n, k, fmt=fmt, device="cuda", seed=seed + i)
        for i in range(copies_for(n * k))
    ]
    torch.cuda.synchronize()
    del copies
    return time.perf_counter() - start


def new_way(fmt: str, n: int, k: int, seed: int = 0) -> float:
    at._CHECK_INPUTS.clear()
    opts = at.TuneOptions(effort="grid", seed=seed)
    start = time.perf_counter()
    for m in M_VALUES:
        at.check_inputs(at.TuneKey(fmt, n, k, m), opts)
    torch.cuda.synchronize()
    at._CHECK_INPUTS.clear()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="qwen3-1.7b,qwen3-32b")
    p.add_argument("--format", default="fp8_dynamic")
    args = p.parse_args()
    print(
        f"{torch.cuda.get_device_name()}; torch {torch.__version__}; {os.cpu_count()} CPUs; "
        f"torch threads {torch.get_num_threads()}; commit {os.environ.get('HL_COMMIT', '?')}"
    )
    new_way(args.format, 256, 256)  # CUDA and generator start-up outside the rows
    rows = []
    for model in args.models.split(","):
        for s in linear_shapes(load_model_config(model)):
            one = old_way(args.format, s.n, s.k, 1)
            new = new_way(args.format, s.n, s.k)
            rows.append((model, s.name, s.n, s.k, copies_for(s.n * s.k), one, 7 * one, new))
    print("| model | layer | N | K | copies | old, one key s | old, 7 M s | new, 7 M s | old / new |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, layer, n, k, c, one, seven, new in rows:
        print(
            f"| {model} | {layer} | {n} | {k} | {c} | {one:.2f} | {seven:.1f} | {new:.2f} | {seven / new:.1f} |"
        )
    for model in dict.fromkeys(r[0] for r in rows):
        old = sum(r[6] for r in rows if r[0] == model)
        new = sum(r[7] for r in rows if r[0] == model)
        print(f"{model} {args.format}: old {old:.1f} s, new {new:.1f} s for its 28 keys' operands")


if __name__ == "__main__":
    main()
