"""Registered torch custom ops (library ``hlvllm``) with fake implementations.

``torch.ops.hlvllm.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias) -> out``
    out[M, N] = scale_a[M, 1] * scale_b[N] * (a[M, K] @ b[K, N]) (+ bias[N]); a, b both
    float8_e4m3fn (FP8_Dynamic) or both int8 (W8A8_INT8, symmetric), b the column-major [K, N]
    weight view, scale_a fp32 [M, 1], scale_b fp32 [N, 1] or [N], bias [N] of out_dtype or None,
    out [M, N] of out_dtype (bf16/fp16). Semantics of vLLM's ``cutlass_scaled_mm``; the op body
    dispatches (see :mod:`hlvllm.dispatch`). vLLM's implementation: :func:`vllm_scaled_mm`.

``torch.ops.hlvllm.block_scaled_mm(x, weight, weight_scale, helion_scale, out_dtype, bias) -> out``
    Block_FP8 linear: x [M, K] bf16/fp16 activations (quantized inside, per 1x128 group), weight the
    layer's fp8 [N, K] weight, weight_scale its 128x128 block scales as vLLM's block kernel keeps
    them, helion_scale the same scales as fp32 [ceil(N/128), ceil(K/128)] (the same tensor unless
    vLLM's kernel re-laid them out), out [M, N] of out_dtype. Helion or vLLM's block kernel
    (:mod:`hlvllm.block_fp8_kernel`); vLLM's implementation: :func:`vllm_block_scaled_mm`.

Inside vLLM's compiled graph these ops appear only in the compile range up to max_helion_size:
above it :mod:`hlvllm.lowering` replaces each by its vLLM implementation, so large batches and
prefill call vLLM's op with no frame of ours. Registering is done by :func:`register_ops` (called by
``hlvllm.register()``), never at import.
"""

from __future__ import annotations

import torch

from hlvllm import dispatch
from hlvllm.gemm import compile_key, helion_config, scaled_mm_format  # noqa: F401 (ops' names for them)
from hlvllm.gemm import helion_scaled_mm as _helion_scaled_mm
from hlvllm.lowering import register_vllm_impl
from hlvllm.precompile import ones_like_rows

_lib: torch.library.Library | None = None


def vllm_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
    """vLLM's kernel for ``hlvllm.scaled_mm``: ``vllm._custom_ops.cutlass_scaled_mm``, the call
    ``CutlassFP8ScaledMMLinearKernel`` / ``CutlassInt8ScaledMMLinearKernel`` make."""
    from vllm import _custom_ops as vllm_ops

    return vllm_ops.cutlass_scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, bias=bias)


def _fallback_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias):
    return vllm_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)


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
    fmt = scaled_mm_format(a.dtype)

    def helion_at(size: int) -> torch.Tensor:  # the same call at M = size (hlvllm.precompile)
        a2, sa2 = ones_like_rows(a, m, size), ones_like_rows(scale_a, m, size)
        return _helion_scaled_mm(a2, b, sa2, scale_b, out_dtype, bias)

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


def scaled_mm_guard_shape(fmt: str, weight: torch.Tensor, scale_b: torch.Tensor, bias, out_dtype):
    """The speed guard's view of one ``hlvllm.scaled_mm`` layer (:class:`hlvllm.guard.GuardShape`):
    ``weight`` the [K, N] column-major operand, ``scale_b`` its per-channel scales, ``bias`` or None."""
    from hlvllm.guard import GuardShape, weight_copies

    k, n = weight.shape

    def make_calls(m: int, copies: int):
        gen = torch.Generator(device=weight.device).manual_seed(m)
        if fmt == "w8a8_int8":
            a = torch.randint(-127, 128, (m, k), generator=gen, device=weight.device, dtype=torch.int8)
        else:
            a = torch.randn((m, k), generator=gen, device=weight.device).to(weight.dtype)
        scale_a = torch.rand((m, 1), generator=gen, device=weight.device) * 0.01 + 0.001
        ws = weight_copies(weight, copies)
        helion = [lambda w=w: _helion_scaled_mm(a, w, scale_a, scale_b, out_dtype, bias) for w in ws]
        vllm = [lambda w=w: _fallback_scaled_mm(a, w, scale_a, scale_b, out_dtype, bias) for w in ws]
        return helion, vllm

    def gemm_at(m: int) -> torch.Tensor:  # the real call's layouts: [M, K] activations, [M, 1] scales
        a = torch.ones((m, k), dtype=weight.dtype, device=weight.device)
        scale_a = torch.ones((m, 1), dtype=torch.float32, device=weight.device)
        return _helion_scaled_mm(a, weight, scale_a, scale_b, out_dtype, bias)

    return GuardShape(
        fmt, n, k, weight.numel() * weight.element_size(), "cutlass_scaled_mm", make_calls, gemm_at
    )


def register_scaled_mm_layer(fmt: str, weight: torch.Tensor, scale_b: torch.Tensor, layer, out_dtype) -> None:
    """At weight processing: make this layer's GEMM shape known to the speed guard (the last
    processed layer of each (format, N, K) stands for the shape)."""
    from hlvllm import guard

    bias = getattr(layer, "bias", None)
    guard.register_shape(scaled_mm_guard_shape(fmt, weight.data, scale_b.data, bias, out_dtype))


def block_scaled_mm_impl(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    helion_scale: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    from hlvllm.block_fp8_kernel import kernel_for

    m, k = x.shape
    n = weight.shape[0]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=x.device)
    kernel = kernel_for(n, k)
    return dispatch.run(
        "block_fp8",
        m,
        n,
        k,
        lambda: kernel.helion_path(x, weight, helion_scale, out_dtype, bias),
        lambda: kernel.fallback_path(x, weight, weight_scale, out_dtype, bias),
        lambda size: kernel.helion_gemm_at(size, weight, helion_scale, out_dtype, bias),  # GEMM only
        lambda size: compile_key("block_fp8", size, n, k, x.device),
    )


def block_scaled_mm_fake(x, weight, weight_scale, helion_scale, out_dtype, bias=None):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=out_dtype)


def vllm_block_scaled_mm(x, weight, weight_scale, helion_scale, out_dtype, bias=None):
    """vLLM's block kernel for ``hlvllm.block_scaled_mm``: the ``apply_weights`` of the kernel vLLM
    chose for this shape (its own activation quantization included)."""
    from hlvllm.block_fp8_kernel import kernel_for

    return kernel_for(weight.shape[0], x.shape[1]).fallback_path(x, weight, weight_scale, out_dtype, bias)


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
    lib.define(
        "block_scaled_mm(Tensor x, Tensor weight, Tensor weight_scale, Tensor helion_scale, "
        "ScalarType out_dtype, Tensor? bias=None) -> Tensor"
    )
    lib.impl("block_scaled_mm", block_scaled_mm_impl, "CompositeExplicitAutograd")
    torch.library.register_fake("hlvllm::block_scaled_mm", block_scaled_mm_fake, lib=lib)
    register_vllm_impl("scaled_mm", vllm_scaled_mm)
    register_vllm_impl("block_scaled_mm", vllm_block_scaled_mm)
    _lib = lib
