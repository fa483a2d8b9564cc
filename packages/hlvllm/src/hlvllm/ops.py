"""Registered torch custom ops (library ``hlvllm``) with fake implementations.

``torch.ops.hlvllm.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias) -> out``
    out[M, N] = scale_a[M, 1] * scale_b[N] * (a[M, K] @ b[K, N]) (+ bias[N]); a, b both
    float8_e4m3fn (FP8_Dynamic) or both int8 (W8A8_INT8, symmetric), b the column-major [K, N]
    weight view, scale_a fp32 [M, 1], scale_b fp32 [N, 1] or [N], bias [N] of out_dtype or None,
    out [M, N] of out_dtype (bf16/fp16). Semantics of vLLM's ``cutlass_scaled_mm``; the op body
    dispatches (see :mod:`hlvllm.dispatch`).

``torch.ops.hlvllm.block_scaled_mm(x, weight, out_dtype, bias) -> out``
    Block_FP8 linear: x [M, K] bf16/fp16 activations (quantized inside, per 1x128 group), weight
    the layer's fp8 [N, K] weight (its 128x128 block scales and vLLM's kernel are found through it:
    ``hlvllm.block_fp8_kernel.layer_for``), out [M, N] of out_dtype. Helion or vLLM's block kernel
    (see there).

Registering is done by :func:`register_ops` (called by ``hlvllm.register()``), never at import.
"""

from __future__ import annotations

import torch

from hlvllm import dispatch
from hlvllm.precompile import ones_like_rows

_lib: torch.library.Library | None = None


def _fallback_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias):
    from vllm import _custom_ops as vllm_ops

    return vllm_ops.cutlass_scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, bias=bias)


def helion_config(fmt: str, m: int, n: int, k: int, device: torch.device) -> dict | None:
    """The config to pass to ``hlcore.scaled_mm``: None (its picker chooses), or with
    ``HL_DETERMINISTIC=1`` the picked config with ``split_k = 1`` and no split-K workspace (each
    output written once by one program, no atomics: bitwise repeatable; slower where the pick
    splits K)."""
    from hlvllm.settings import get_settings

    if not get_settings().deterministic:
        return None
    import json

    from hlcore.scaled_mm_config import pick_scaled_mm_config

    config = json.loads(pick_scaled_mm_config(fmt, m, n, k, device=device).config_json)
    config["split_k"] = 1
    config.pop("split_k_workspace", None)
    return config


def compile_key(fmt: str, m: int, n: int, k: int, device: torch.device) -> tuple[str, int]:
    """What the Helion GEMM compiles for this call: the config it runs (:func:`helion_config`, else
    the picker's) and Triton's specialization class of M (:func:`hlvllm.precompile.triton_class`)."""
    import json

    from hlcore.scaled_mm_config import pick_scaled_mm_config
    from hlvllm.precompile import triton_class

    config = helion_config(fmt, m, n, k, device)
    if config is None:
        text = pick_scaled_mm_config(fmt, m, n, k, device=device).config_json
    else:
        text = json.dumps(config, sort_keys=True)
    return text, triton_class(m)


def _helion_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias):
    from hlcore.scaled_mm import scaled_mm

    fmt = "w8a8_int8" if a.dtype == torch.int8 else "fp8_dynamic"
    config = helion_config(fmt, a.shape[0], b.shape[1], a.shape[1], a.device)
    return scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, config=config)


def scaled_mm_impl(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=a.device)

    def helion_at(size: int) -> torch.Tensor:  # the same call at M = size (hlvllm.precompile)
        a2, sa2 = ones_like_rows(a, m, size), ones_like_rows(scale_a, m, size)
        return _helion_scaled_mm(a2, b, sa2, scale_b, out_dtype, bias)

    fmt = "w8a8_int8" if a.dtype == torch.int8 else "fp8_dynamic"
    return dispatch.run(
        fmt,
        m,
        n,
        k,
        lambda: _helion_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias),
        lambda: _fallback_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias),
        helion_at,
        lambda size: compile_key(fmt, size, n, k, a.device),
    )


def scaled_mm_fake(a, b, scale_a, scale_b, out_dtype, bias=None):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


def block_scaled_mm_impl(
    x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype, bias: torch.Tensor | None = None
) -> torch.Tensor:
    from hlvllm.block_fp8_kernel import layer_for

    kernel, layer = layer_for(weight)
    m, k = x.shape
    n = weight.shape[0]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=x.device)
    return dispatch.run(
        "block_fp8",
        m,
        n,
        k,
        lambda: kernel.helion_path(layer, x, out_dtype, bias),
        lambda: kernel.fallback_path(layer, x, out_dtype, bias),
        lambda size: kernel.helion_gemm_at(layer, size, out_dtype, bias),  # GEMM only, no quant
        lambda size: compile_key("block_fp8", size, n, k, x.device),
    )


def block_scaled_mm_fake(x, weight, out_dtype, bias=None):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=out_dtype)


def register_ops() -> None:
    """Define ``torch.ops.hlvllm.*`` once per process (no CUDA initialisation)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("hlvllm", "FRAGMENT")
    lib.define(
        "scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype, "
        "Tensor? bias=None) -> Tensor"
    )
    lib.impl("scaled_mm", scaled_mm_impl, "CompositeExplicitAutograd")
    torch.library.register_fake("hlvllm::scaled_mm", scaled_mm_fake, lib=lib)
    lib.define("block_scaled_mm(Tensor x, Tensor weight, ScalarType out_dtype, Tensor? bias=None) -> Tensor")
    lib.impl("block_scaled_mm", block_scaled_mm_impl, "CompositeExplicitAutograd")
    torch.library.register_fake("hlvllm::block_scaled_mm", block_scaled_mm_fake, lib=lib)
    _lib = lib
