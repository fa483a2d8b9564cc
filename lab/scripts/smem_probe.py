"""Shared memory of the fused norm + GEMM kernels on sm_90, measured on a CPU machine (no GPU).

Helion generates the kernel's Triton code for a config (CPU tensors, the shapes of Qwen3-8B's
norm-fed layers); Triton's CUDA backend compiles it for ``GPUTarget("cuda", 90, 32)`` with its
bundled ptxas, the pointers declared 16-byte aligned (as torch's allocations are, what Triton
specializes on at a launch), and reports the shared memory the kernel needs. The H200 allows
232,448 bytes per block; a config above that fails at its first launch with ``OutOfResources``
(2026-12-02 evening: every fused launch, a block-size order bug). The number is a lower bound: the
GPU's own compile specializes on more than alignment (it reported 498 KB where this gives 280 KB).

Configs: each M's shipped ``scaled_mm`` fp8_dynamic config of the H200 file with the statistics tile
appended (:func:`hlcore.norm_linear.config_from_scaled_mm`), as ``norm_linear_bench.py`` runs them.

Usage (any machine with the workspace): ``python lab/scripts/smem_probe.py [--stats 512]
[--kernels fp8,w8a16]``; exit status 1 when a config needs more than the H200 has.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SHAPES = {"qkv": (6144, 4096), "gate_up": (24576, 4096)}
MS = (1, 2, 4, 8, 16, 32)
H200_SHARED = 232448


def shared_bytes(kernel: str, config: dict, m: int, n: int, k: int) -> int:
    """Shared memory (bytes) of the ``hlcore.norm_linear`` kernel ``kernel`` ("fp8" / "w8a16") for
    ``config`` (documented block order) at M x N x K, compiled for sm_90."""
    import importlib.util
    import tempfile

    import helion
    import torch
    import triton
    from triton.backends.compiler import GPUTarget

    from hlcore import norm_linear

    x = torch.randn(m, k, dtype=torch.bfloat16)
    args = [x, torch.randn_like(x), torch.ones(k, dtype=torch.bfloat16), 1e-6]
    args += [torch.zeros(n, k).to(torch.float8_e4m3fn), torch.ones(n, 1), None, torch.bfloat16]
    if kernel == "w8a16":
        args.append(torch.bfloat16)
    hc = helion.Config(**norm_linear._in_helion_order(config))
    code = helion.kernel(norm_linear._BODIES[kernel], configs=[hc]).bind(tuple(args)).to_triton_code(hc)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location("smem_probe_kernel", f.name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.unlink(f.name)
    host = getattr(mod, [line for line in code.splitlines() if line.startswith("def ")][-1][4:].split("(")[0])
    launch = {}

    def launcher(fn, grid, *a, num_warps, num_stages, **_):
        launch.update(fn=fn, args=a, num_warps=num_warps, num_stages=num_stages)

    host(*args, _launcher=launcher)  # the host code computes the launch arguments, launches nothing
    fn = launch["fn"]
    types = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.float8_e4m3fn: "*fp8e4nv"}
    sig, constexprs = {}, {}
    for param, a in zip(fn.params, launch["args"], strict=True):
        if param.is_constexpr:
            sig[param.name] = "constexpr"
            constexprs[(fn.arg_names.index(param.name),)] = a
        elif isinstance(a, torch.Tensor):
            sig[param.name] = types[a.dtype]
        else:
            sig[param.name] = "i32" if isinstance(a, int) else "fp32"
    aligned = {
        (fn.arg_names.index(p),): [["tt.divisibility", 16]] for p, t in sig.items() if t.startswith("*")
    }
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=aligned)
    options = {"num_warps": launch["num_warps"], "num_stages": launch["num_stages"]}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--stats", type=int, default=512, help="the statistics passes' K tile")
    p.add_argument("--kernels", default="fp8,w8a16")
    args = p.parse_args()
    for var in ("TRITON_INTERPRET", "HELION_INTERPRET"):  # generated code, compiled for the GPU
        os.environ.pop(var, None)
    from hlcore.norm_linear import config_from_scaled_mm
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    over = 0
    print("| layer | M | kernel | config | shared bytes |\n| --- | --- | --- | --- | --- |")
    for layer, (n, k) in SHAPES.items():
        for m in MS:
            gemm = json.loads(pick_scaled_mm_config("fp8_dynamic", m, n, k, gpu="nvidia_h200").config_json)
            config = config_from_scaled_mm(gemm, args.stats)
            for kernel in args.kernels.split(","):
                shared = shared_bytes(kernel, config, m, n, k)
                over += shared > H200_SHARED
                print(
                    f"| {layer} | {m} | {kernel} | `{json.dumps(config, sort_keys=True)}` | {shared} |",
                    flush=True,
                )
    print(f"{over} configs over the H200's {H200_SHARED} bytes")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
