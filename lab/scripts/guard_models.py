"""The speed guard on models outside the shipped config file, checked by a second process.

Issue 20: "Kernel benchmark of two models that are not in the shipped file ... with the guard's
decisions applied: no dispatched shape slower than vLLM's kernel by more than 2 %."

``decide`` (process 1): for Qwen2.5-7B and Qwen2.5-14B (TP 1; their shapes partly match shipped
keys: those are exact and not timed), FP8_Dynamic and W8A8_INT8, every linear shape at the
CUDA-graph sizes 1..32 goes through hlvllm's routing with the shipped H200 file; each shape without
an exact key is timed by the guard (:mod:`hlvllm.guard`: Helion's picked config vs vLLM's
``cutlass_scaled_mm`` on random quantized weights, CUDA-graph replay over weight copies > 4x L2) and
gets its decision. ``verify`` (process 2, fresh): times every such point again the same way and
reports, per point, the dispatched kernel (the decision) against vLLM's kernel, and what running
the picked config everywhere (no guard) would have given; time-weighted per decode step (each shape
once per decoder layer).

Usage (GPU machine): ``python3 lab/scripts/guard_models.py decide`` then ``... verify``; both write
``$OUT/guard_models.json`` (verify adds its columns) and print a table. Block_FP8 is not covered
here (vLLM's block kernel on the H200 is DeepGEMM, whose JIT compile takes minutes).
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch

MODELS = {  # HF config.json fields: hidden, intermediate, q heads, kv heads, layers (head_dim 128)
    "qwen2.5-7b": (3584, 18944, 28, 4, 28),
    "qwen2.5-14b": (5120, 13824, 40, 8, 48),
}
FORMATS = ("fp8_dynamic", "w8a8_int8")
SIZES = (1, 2, 4, 8, 16, 24, 32)


def shapes(hidden, inter, q, kv):
    return {
        "qkv": ((q + 2 * kv) * 128, hidden),
        "o": (hidden, q * 128),
        "gate_up": (2 * inter, hidden),
        "down": (hidden, inter),
    }


def _guard_shape(fmt, n, k):
    from hlvllm.ops import scaled_mm_guard_shape

    g = torch.Generator(device="cuda").manual_seed(n * 7 + k)
    if fmt == "w8a8_int8":
        w = torch.randint(-127, 128, (n, k), generator=g, device="cuda", dtype=torch.int8)
    else:
        w = (torch.randn((n, k), generator=g, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    scale_b = torch.rand((n, 1), generator=g, device="cuda") * 0.01 + 0.001
    return scaled_mm_guard_shape(fmt, w.t(), scale_b, None, torch.bfloat16)


def decide(out_path: str) -> None:
    from hlvllm import guard, precompile, routing

    precompile.set_capture_sizes(SIZES)
    rows = []
    for model, (hidden, inter, q, kv, layers) in MODELS.items():
        for fmt in FORMATS:
            for layer, (n, k) in shapes(hidden, inter, q, kv).items():
                shape = _guard_shape(fmt, n, k)
                guard.register_shape(shape)
                for m in SIZES:
                    route = routing.decide(fmt, m, n, k)
                    row = {
                        "model": model,
                        "layers": layers,
                        "format": fmt,
                        "layer": layer,
                        "N": n,
                        "K": k,
                        "M": m,
                    }
                    row["source"] = route.pick.source if route.pick is not None else None
                    if route.guarded:
                        helion_us, vllm_us = guard.time_shape(shape, m)
                        keep = helion_us * guard.MARGIN <= vllm_us
                        row.update(
                            helion_us=helion_us, vllm_us=vllm_us, decision="helion" if keep else "vllm"
                        )
                    else:
                        row["decision"] = "helion" if route.helion else "vllm"
                        row["why"] = route.reason
                    rows.append(row)
                del shape
                torch.cuda.empty_cache()
            print(f"decided {model} {fmt}", flush=True)
    with open(out_path, "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    timed = [r for r in rows if "helion_us" in r]
    kept = sum(r["decision"] == "helion" for r in timed)
    print(
        f"{len(rows)} points, {len(timed)} without an exact key timed: Helion kept on {kept}, vLLM on {len(timed) - kept}"
    )


def verify(out_path: str) -> None:
    from hlvllm import guard

    with open(out_path) as f:
        payload = json.load(f)
    rows = payload["rows"]
    shapes_cache = {}
    for r in rows:
        if "helion_us" not in r:
            continue
        key = (r["format"], r["N"], r["K"])
        if key not in shapes_cache:
            shapes_cache.clear()
            torch.cuda.empty_cache()
            shapes_cache[key] = _guard_shape(*key)
        h, v = guard.time_shape(shapes_cache[key], r["M"])
        r["helion_us_2"], r["vllm_us_2"] = h, v
        dispatched = h if r["decision"] == "helion" else v
        r["dispatched_vs_vllm"] = v / dispatched
        r["picked_vs_vllm"] = v / h
    with open(out_path, "w") as f:
        json.dump(payload, f, indent=1)
    timed = [r for r in rows if "helion_us_2" in r]
    worst = min(timed, key=lambda r: r["dispatched_vs_vllm"])
    slow = [r for r in timed if r["dispatched_vs_vllm"] < 0.98]
    print(f"{len(timed)} guarded points re-timed in a second process")
    print(
        f"dispatched vs vLLM: min {worst['dispatched_vs_vllm']:.3f} ({worst['model']} {worst['format']} "
        f"{worst['layer']} M={worst['M']}); {len(slow)} points slower than vLLM by > 2 %"
    )
    for r in slow:
        print(f"  SLOWER {r['model']} {r['format']} {r['layer']} M={r['M']}: {r['dispatched_vs_vllm']:.3f}")
    print(
        "| model | format | guarded points | Helion kept | geomean picked/vLLM (no guard) | geomean dispatched | min picked | min dispatched |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in MODELS:
        for fmt in FORMATS:
            sel = [r for r in timed if r["model"] == model and r["format"] == fmt]
            if not sel:
                continue
            gp = math.exp(sum(math.log(r["picked_vs_vllm"]) for r in sel) / len(sel))
            gd = math.exp(sum(math.log(r["dispatched_vs_vllm"]) for r in sel) / len(sel))
            kept = sum(r["decision"] == "helion" for r in sel)
            print(
                f"| {model} | {fmt} | {len(sel)} | {kept} | {gp:.3f} | {gd:.3f} | "
                f"{min(r['picked_vs_vllm'] for r in sel):.3f} | {min(r['dispatched_vs_vllm'] for r in sel):.3f} |"
            )
    print()
    print(
        "Time-weighted per decode step (guarded shapes x decoder layers), µs: vLLM / picked config / dispatched"
    )
    print("| model | format | " + " | ".join(f"M={m}" for m in SIZES) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in SIZES) + " |")
    for model in MODELS:
        for fmt in FORMATS:
            cells = []
            for m in SIZES:
                sel = [r for r in timed if r["model"] == model and r["format"] == fmt and r["M"] == m]
                if not sel:
                    cells.append("-")
                    continue
                layers = sel[0]["layers"]
                v = sum(r["vllm_us_2"] for r in sel) * layers
                p = sum(r["helion_us_2"] for r in sel) * layers
                d = (
                    sum(r["helion_us_2"] if r["decision"] == "helion" else r["vllm_us_2"] for r in sel)
                    * layers
                )
                cells.append(f"{v:.0f} / {p:.0f} / {d:.0f}")
            print(f"| {model} | {fmt} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    path = os.path.join(os.environ.get("OUT", "."), "guard_models.json")
    {"decide": decide, "verify": verify}[sys.argv[1]](path)
