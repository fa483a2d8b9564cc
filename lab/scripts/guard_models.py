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
``$OUT/guard_models.json`` (verify adds its columns) and print a table. ``--formats block_fp8``
(file ``guard_models-block_fp8.json``) does the same for Block_FP8: each shape is a layer of vLLM's
fp8 method (fp8 weight, 128x128 block scales) processed by ``HelionFp8BlockScaledMMKernel`` as the
engine processes it (its vLLM fallback, DeepGEMM on the H200, post-processes the weight), and the
guard times the whole op on each side (1x128 quantization + GEMM), inside a vLLM config with CUDA
graphs on. Set ``DG_JIT_CACHE_DIR`` so that verify finds decide's DeepGEMM kernels compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os

import torch

MODELS = {  # HF config.json fields: hidden, intermediate, q heads, kv heads, layers (head_dim 128)
    "qwen2.5-7b": (3584, 18944, 28, 4, 28),
    "qwen2.5-14b": (5120, 13824, 40, 8, 48),
}
FORMATS = ("fp8_dynamic", "w8a8_int8")  # the default; block_fp8 on request (--formats)
SIZES = (1, 2, 4, 8, 16, 24, 32)
DEVICE = "cuda"


def shapes(hidden, inter, q, kv):
    return {
        "qkv": ((q + 2 * kv) * 128, hidden),
        "o": (hidden, q * 128),
        "gate_up": (2 * inter, hidden),
        "down": (hidden, inter),
    }


_KEEP = []  # the Block_FP8 kernels and layers behind the guard shapes (their weights stay alive)


def _vllm_context(formats):
    """vLLM's current config with CUDA graphs on, for the Block_FP8 kernel (its can_implement and its
    activation quant op read it); nothing for the per-token formats."""
    if "block_fp8" not in formats:
        return contextlib.nullcontext()
    from vllm.config import CUDAGraphMode, VllmConfig, set_current_vllm_config

    cfg = VllmConfig()
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg.compilation_config.max_cudagraph_capture_size = max(SIZES)
    return set_current_vllm_config(cfg)


def _block_guard_shape(n, k):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        QuantKey,
        ScaleDesc,
        kFp8Dynamic128Sym,
    )

    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel

    fp8 = torch.float8_e4m3fn
    config = FP8ScaledMMLinearLayerConfig(
        weight_quant_key=QuantKey(fp8, ScaleDesc(torch.float32, True, GroupShape(128, 128)), symmetric=True),
        activation_quant_key=kFp8Dynamic128Sym,
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
    )
    g = torch.Generator(device=DEVICE).manual_seed(n * 7 + k)
    layer = torch.nn.Module()
    w = (torch.randn((n, k), generator=g, device=DEVICE) * 0.5).to(fp8)
    s = torch.rand((-(-n // 128), -(-k // 128)), generator=g, device=DEVICE) * 0.01 + 0.001
    layer.weight = torch.nn.Parameter(w, requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(s, requires_grad=False)
    layer.input_scale = None
    layer.weight_block_size = [128, 128]
    kernel = HelionFp8BlockScaledMMKernel(config)
    kernel.process_weights_after_loading(layer)  # registers the shape with the guard, as in the engine
    if not kernel.registered:
        raise RuntimeError(f"block_fp8 N={n} K={k}: HelionFp8BlockScaledMMKernel did not register the layer")
    _KEEP.append((kernel, layer))
    scale = getattr(layer, kernel.scale_attr)
    return kernel.guard_shape(layer.weight.data, scale.data, kernel.helion_scale)


def _guard_shape(fmt, n, k):
    if fmt == "block_fp8":
        return _block_guard_shape(n, k)
    from hlvllm.ops import scaled_mm_guard_shape

    g = torch.Generator(device="cuda").manual_seed(n * 7 + k)
    if fmt == "w8a8_int8":
        w = torch.randint(-127, 128, (n, k), generator=g, device="cuda", dtype=torch.int8)
    else:
        w = (torch.randn((n, k), generator=g, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    scale_b = torch.rand((n, 1), generator=g, device="cuda") * 0.01 + 0.001
    return scaled_mm_guard_shape(fmt, w.t(), scale_b, None, torch.bfloat16)


def decide(out_path: str, formats=FORMATS) -> None:
    from hlvllm import guard, precompile, routing

    precompile.set_capture_sizes(SIZES)
    rows = []
    for model, (hidden, inter, q, kv, layers) in MODELS.items():
        for fmt in formats:
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
                _KEEP.clear()
                torch.cuda.empty_cache()
            print(f"decided {model} {fmt}", flush=True)
    with open(out_path, "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    timed = [r for r in rows if "helion_us" in r]
    kept = sum(r["decision"] == "helion" for r in timed)
    print(
        f"{len(rows)} points, {len(timed)} without an exact key timed: Helion kept on {kept}, vLLM on {len(timed) - kept}"
    )


def verify(out_path: str, formats=FORMATS) -> None:
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
            _KEEP.clear()
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
        for fmt in formats:
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
        for fmt in formats:
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("step", choices=["decide", "verify"])
    p.add_argument("--formats", default=",".join(FORMATS))
    args = p.parse_args()
    formats = tuple(args.formats.split(","))
    name = "guard_models.json" if formats == FORMATS else f"guard_models-{'-'.join(formats)}.json"
    path = os.path.join(os.environ.get("OUT", "."), name)
    with _vllm_context(formats):
        {"decide": decide, "verify": verify}[args.step](path, formats)


if __name__ == "__main__":
    main()
