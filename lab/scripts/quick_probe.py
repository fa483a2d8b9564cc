"""Why `hltools autotune --effort quick` failed Qwen3-4B FP8_Dynamic gate_up (19456 x 2560, M = 8)
with NoConfigFound on an H100 (lab/results/2026-12-05-i): Helion's tuner, as ``helion_tuner`` runs
it, on one key with the kernel's ``out`` argument NaN-filled (what an empty tensor may hold) and
zero-filled (what ``_kernel_args`` passes since this probe's commit).

Helion's autotuner takes an argument for mutated when its clone, run through the custom baseline,
no longer ``torch.equal``s it; a tensor holding NaN never equals its clone. It then hands every
candidate's arguments to the accuracy check as well as its output. Printed per case: whether Helion
saw ``out`` mutated, and the tuned config or the error.

    python3 lab/scripts/quick_probe.py [--n 19456 --k 2560 --m 8 --budget 40]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HELION_BENCHMARK_CUDAGRAPH", "1")  # as hltools autotune sets it


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fmt", default="fp8_dynamic")
    p.add_argument("--n", type=int, default=19456)
    p.add_argument("--k", type=int, default=2560)
    p.add_argument("--m", type=int, default=8)
    p.add_argument("--budget", type=int, default=40, help="seconds of Helion's search per case")
    args = p.parse_args()

    import torch

    from hltools import autotune as at

    key = at.TuneKey(args.fmt, args.n, args.k, args.m)
    options = at.TuneOptions(effort="quick", budget_seconds=args.budget, block_scale_a="tma")
    zero_args = at._kernel_args
    rows = []
    for fill in ("nan", "zero"):

        def kernel_args(inputs, fill=fill):
            a = zero_args(inputs)
            if fill == "nan":
                a[5].fill_(float("nan"))
            out = a[5]
            print(
                f"[{fill}] out {tuple(out.shape)} {out.dtype}: torch.equal(out, out.clone()) = "
                f"{torch.equal(out, out.clone())}",
                flush=True,
            )
            return a

        at._kernel_args = kernel_args
        start = time.perf_counter()
        try:
            config = at.helion_tuner(key, options)
            result = f"tuned: block_sizes {config.get('block_sizes')} split_k {config.get('split_k')}"
        except Exception as e:  # noqa: BLE001 - the probe reports what Helion raised
            result = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        finally:
            at._kernel_args = zero_args
        rows.append((fill, f"{time.perf_counter() - start:.0f} s", result))
        print(f"[{fill}] {rows[-1][2]}", flush=True)
    print(f"\n{key.label} on {torch.cuda.get_device_name()}, budget {args.budget} s a case")
    for row in rows:
        print(" | ".join(row))


if __name__ == "__main__":
    main()
