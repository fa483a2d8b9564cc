"""Issue 22: the activation quantization and the GEMM in ONE launch, split by a grid barrier.

Every fused kernel measured so far put the producer's work inside the GEMM's programs (each program
recomputing its rows' statistics, or quantizing in the K loop) and paid more than the launch it
saved (docs/scaled-mm.md). Helion 1.5.0's ``hl.barrier()`` offers the other shape: one persistent,
cooperatively launched kernel whose first phase is the producer (here FP8_Dynamic's per-token
quantization: amax per row, scale = amax / 448, e4m3 bytes written to a workspace) spread over the
programs, a grid-wide barrier (``torch._inductor``'s ``x_grid_barrier``: a flip-bit semaphore), then
the GEMM phase on the quantized bytes, read back from L2. What it can save per linear layer: one
launch and its ramp; what it costs: the barrier, a persistent GEMM without split-K (each
program's N tiles in turn), and the semaphore Helion allocates per call (``torch.zeros(1)``: a fill
kernel in a CUDA graph).

Modes:

* ``--codegen`` (any machine): Helion's Triton code of the kernel for one config on CPU tensors, and
  whether it compiles for sm_90 (no launch);
* default (GPU): for Qwen3-8B's FP8_Dynamic shapes at ``--ms``, under CUDA-graph replay with the
  weight rotated past L2 (``hlcore.timing.time_graph``): the one-launch kernel against the two
  launches it replaces (``hlcore.quant_kernels.per_token_fp8_quant``, then ``hlcore.scaled_mm``
  with the shipped config, and with the same tiles and ``split_k = 1``), its error against
  ``hlcore.scaled_mm_ref`` on the two-launch bytes and whether its bytes are those. Prints one line
  per point and one JSON line.

Usage: ``python lab/scripts/one_launch_bench.py --codegen`` (CPU) /
``python lab/scripts/one_launch_bench.py [--ms 1,8,32] [--block-n 64] [--block-k 256]`` (GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import helion
import helion.language as hl
import torch

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}
FP8_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)  # vLLM's per-token floor (FP8_MIN_SCALING_FACTOR)


def quant_gemm_body(x, w, scale_b, xq, scale_a):
    """out[M, N] = (q(x) @ w) * scale_a[:, None] * scale_b[None, :] in bf16, q per token (e4m3,
    scale = max(amax / 448, MIN_SCALE)); x [M, K] bf16, w [K, N] e4m3 (column-major, vLLM's),
    scale_b [N] fp32; xq [M, K] e4m3 and scale_a [M] fp32 are workspaces this call writes."""
    m, k = x.size()
    n = w.size(1)
    out = torch.empty([m, n], dtype=torch.bfloat16, device=x.device)
    for tile_m in hl.tile(m, block_size=1):  # phase 1: one row per program
        row = x[tile_m, :].to(torch.float32)
        amax = torch.amax(torch.abs(row), dim=-1)
        s = torch.clamp(amax / FP8_MAX, min=MIN_SCALE)
        xq[tile_m, :] = torch.clamp(row / s[:, None], -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        scale_a[tile_m] = s
    hl.barrier()
    for tile_m, tile_n in hl.tile([m, n]):  # phase 2: the GEMM on the bytes of phase 1
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = acc + hl.dot(xq[tile_m, tile_k], w[tile_k, tile_n])
        out[tile_m, tile_n] = (acc * scale_a[tile_m][:, None] * scale_b[tile_n][None, :]).to(torch.bfloat16)
    return out


def make_kernel(block_m: int, block_n: int, block_k: int, num_warps: int = 4, num_stages: int = 3):
    """The kernel with one config: block_sizes = [phase-2 M, N, K] (phase 1's M is fixed at 1),
    persistent blocked programs (what hl.barrier requires)."""
    config = helion.Config(
        block_sizes=[block_m, block_n, block_k],
        pid_type="persistent_blocked",
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return helion.kernel(quant_gemm_body, config=config, static_shapes=True)


def inputs(m: int, n: int, k: int, device: str, seed: int = 0) -> dict:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 2).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) * 0.05).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return {
        "x": x.to(device),
        "w": w.to(device).t(),  # [K, N], column-major as vLLM passes it
        "scale_b": (torch.rand(n, generator=g) * 0.01 + 0.001).to(device),
        "xq": torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device),
        "scale_a": torch.empty(m, dtype=torch.float32, device=device),
    }


def codegen(block_n: int, block_k: int) -> None:
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget

    m, (n, k) = 8, SHAPES["o"]
    d = inputs(m, n, k, "cpu")
    kernel = make_kernel(16, block_n, block_k)
    bound = kernel.bind(tuple(d.values()))
    code = bound.to_triton_code(kernel.configs[0])
    print(code)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    print(f"# code in {f.name}; sm_90 compile: ", end="")
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("one_launch_code", f.name)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        jit = next(v for kname, v in vars(mod).items() if isinstance(v, triton.runtime.jit.JITFunction))
        print(jit.fn.__name__, "found;", GPUTarget("cuda", 90, 32))
    except Exception as e:  # noqa: BLE001 - reported
        print(f"failed: {e!r}")


def bench(ms: list[int], block_n: int, block_k: int) -> None:
    from hlcore import timing
    from hlcore.quant_kernels import per_token_fp8_quant
    from hlcore.scaled_mm import scaled_mm, scaled_mm_ref

    same_tiles = {
        "block_sizes": [16, block_n, block_k],
        "split_k": 1,
        "swap_ab": False,
        "num_warps": 4,
        "num_stages": 3,
    }
    rows = []
    for layer, (n, k) in SHAPES.items():
        for m in ms:
            d = inputs(m, n, k, "cuda", seed=m)
            one = make_kernel(16, block_n, block_k)
            copies = timing.copies_for(n * k)
            ws = [d["w"].t().contiguous().t() for _ in range(copies)]
            out = one(d["x"], d["w"], d["scale_b"], d["xq"], d["scale_a"])
            q, sa = per_token_fp8_quant(d["x"])
            ref = scaled_mm_ref(q, d["w"], sa, d["scale_b"][:, None], torch.bfloat16)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            same_bytes = bool(torch.equal(d["xq"].view(torch.uint8), q.view(torch.uint8)))

            def two(w, d=d, config=None):
                q, sa = per_token_fp8_quant(d["x"])
                return scaled_mm(q, w, sa, d["scale_b"][:, None], torch.bfloat16, config=config)

            times = {}
            for name, calls in {
                "one": [
                    lambda w=w, d=d, one=one: one(d["x"], w, d["scale_b"], d["xq"], d["scale_a"]) for w in ws
                ],
                "two_shipped": [lambda w=w: two(w) for w in ws],
                "two_same_tiles": [lambda w=w: two(w, config=same_tiles) for w in ws],
            }.items():
                try:
                    times[name] = timing.time_graph(calls, repeats=50).median_us
                except Exception as e:  # noqa: BLE001 - e.g. a cooperative launch refused in a graph
                    print(f"{layer} M={m} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    times[name] = float("nan")
            rows.append(
                {
                    "layer": layer,
                    "m": m,
                    **{f"{k}_us": round(v, 2) for k, v in times.items()},
                    "one_vs_shipped": round(times["one"] / times["two_shipped"], 3),
                    "one_vs_same_tiles": round(times["one"] / times["two_same_tiles"], 3),
                    "rel_err": round(err, 5),
                    "same_bytes": same_bytes,
                }
            )
            print(rows[-1], flush=True)
    print(
        json.dumps(
            {
                "commit": os.environ.get("HL_COMMIT", "?"),
                "gpu": torch.cuda.get_device_name(),
                "block_n": block_n,
                "block_k": block_k,
                "geomean_one_vs_shipped": round(
                    statistics.geometric_mean(r["one_vs_shipped"] for r in rows), 3
                ),
                "geomean_one_vs_same_tiles": round(
                    statistics.geometric_mean(r["one_vs_same_tiles"] for r in rows), 3
                ),
                "rows": rows,
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--codegen", action="store_true")
    p.add_argument("--ms", default="1,8,32")
    p.add_argument("--block-n", type=int, default=64)
    p.add_argument("--block-k", type=int, default=256)
    a = p.parse_args()
    if a.codegen:
        codegen(a.block_n, a.block_k)
    else:
        bench([int(v) for v in a.ms.split(",")], a.block_n, a.block_k)


if __name__ == "__main__":
    main()
