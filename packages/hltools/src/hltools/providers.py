"""The kernel vLLM 0.26 runs by default for each scaled-GEMM format on CUDA, as a plain call.

Every provider has the signature ``call(a, b, scale_a, scale_b, out_dtype) -> [M, N]`` with the
tensors of :func:`hlcore.scaled_mm.generate_scaled_mm_inputs` (``b`` is the ``[K, N]`` column-major
weight view; block scales ``scale_a`` ``[M, ceil(K/128)]`` and ``scale_b`` ``[ceil(N/128),
ceil(K/128)]``), so the same rotating-weight timing loop drives Helion and every provider.

| format | vLLM's default on Hopper (the order tried here) |
| --- | --- |
| ``fp8_dynamic`` | ``cutlass_scaled_mm`` (``CutlassFP8ScaledMMLinearKernel``), else ``torch._scaled_mm`` |
| ``w8a8_int8`` | ``cutlass_scaled_mm`` with int8 inputs (``CutlassInt8ScaledMMLinearKernel``) |
| ``block_fp8`` | DeepGEMM ``fp8_gemm_nt`` (``DeepGemmFp8BlockScaledMMKernel``, fp32 scales), else CUTLASS block ``cutlass_scaled_mm`` (``CutlassFp8BlockScaledMMKernel``), else Triton ``w8a8_triton_block_scaled_mm`` |

vLLM would route block-FP8 at M < 32 to FlashInfer's ``fp8_blockscale_gemm_sm90`` when FlashInfer is
installed; the GPU bundle has none, so DeepGEMM is the default there. ``HL_BLOCK_PROVIDER`` =
``deep_gemm`` | ``cutlass`` | ``triton`` forces one block provider (``VLLM_USE_DEEP_GEMM=0`` skips
DeepGEMM as vLLM does). Activation block scales are handed over column-major, as vLLM's
``QuantFP8(column_major_scales=True)`` produces them for these kernels (one copy at set-up, not per call).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

Provider = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]
BLOCK_PROVIDERS = ("deep_gemm", "cutlass", "triton")


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same values with column-major strides (``t.t().contiguous().t()``), as vLLM's group quant
    writes activation scales for its CUTLASS and DeepGEMM block kernels."""
    return t.t().contiguous().t()


def _cutlass() -> Provider:
    from vllm import _custom_ops as ops

    _ = torch.ops._C.cutlass_scaled_mm  # raises when vLLM's compiled ops are missing

    def call(a, b, scale_a, scale_b, out_dtype):
        return ops.cutlass_scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)

    return call


def _torch_scaled_mm(a, b, scale_a, scale_b, out_dtype):
    return torch._scaled_mm(
        a, b, scale_a=scale_a.reshape(-1, 1), scale_b=scale_b.reshape(1, -1), out_dtype=out_dtype
    )


def _block_deep_gemm() -> Provider:
    if os.environ.get("VLLM_USE_DEEP_GEMM", "1") == "0":
        raise RuntimeError("VLLM_USE_DEEP_GEMM=0")
    from vllm.utils.deep_gemm import fp8_gemm_nt, is_deep_gemm_supported

    if not is_deep_gemm_supported():
        raise RuntimeError("DeepGEMM is not supported on this GPU / install")

    def call(a, b, scale_a, scale_b, out_dtype):
        out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
        fp8_gemm_nt((a, scale_a), (b.t(), scale_b), out, is_deep_gemm_e8m0_used=False)
        return out

    return call


def _block_cutlass() -> Provider:
    from vllm import _custom_ops as ops
    from vllm.platforms import current_platform

    if not ops.cutlass_scaled_mm_supports_block_fp8(current_platform.get_device_capability().to_int()):
        raise RuntimeError("CUTLASS block FP8 is not supported on this GPU")

    def call(a, b, scale_a, scale_b, out_dtype):
        return ops.cutlass_scaled_mm(a, b, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b.t())

    return call


def _block_triton() -> Provider:
    from vllm.model_executor.layers.quantization.utils.fp8_utils import w8a8_triton_block_scaled_mm

    def call(a, b, scale_a, scale_b, out_dtype):
        return w8a8_triton_block_scaled_mm(a, b.t(), scale_a, scale_b, [128, 128], out_dtype)

    return call


_BLOCK = {"deep_gemm": _block_deep_gemm, "cutlass": _block_cutlass, "triton": _block_triton}


def vllm_default(fmt: str) -> tuple[str, Provider]:
    """``(name, call)`` of vLLM's default kernel for ``fmt`` that imports and supports this GPU.

    Raises ``RuntimeError`` listing why each candidate was skipped when none is usable, and
    ``ValueError`` for an unknown ``fmt`` or ``HL_BLOCK_PROVIDER``."""
    if fmt in ("fp8_dynamic", "w8a8_int8"):
        try:
            return "vllm cutlass_scaled_mm", _cutlass()
        except Exception as exc:
            if fmt == "w8a8_int8":
                raise RuntimeError(f"vLLM's cutlass_scaled_mm is not usable: {exc}") from exc
            return "torch._scaled_mm", _torch_scaled_mm
    if fmt != "block_fp8":
        raise ValueError(f"unknown format {fmt!r}; expected fp8_dynamic, w8a8_int8 or block_fp8")
    forced = os.environ.get("HL_BLOCK_PROVIDER")
    if forced is not None and forced not in BLOCK_PROVIDERS:
        raise ValueError(f"HL_BLOCK_PROVIDER must be one of {BLOCK_PROVIDERS}; got {forced!r}")
    reasons = []
    for name in [forced] if forced else BLOCK_PROVIDERS:
        try:
            return f"vllm block {name}", _BLOCK[name]()
        except Exception as exc:
            reasons.append(f"{name}: {type(exc).__name__}: {exc}")
    raise RuntimeError("no vLLM block-FP8 kernel is usable here: " + "; ".join(reasons))


def tma_aligned_column_major(t: torch.Tensor) -> torch.Tensor:
    """Column-major ``[M, G]`` values whose column stride is M rounded up to 4 (16 bytes), as vLLM's
    ``QuantFP8(tma_aligned_scales=True)`` writes them for DeepGEMM (it copies other layouts)."""
    m, g = t.shape
    padded = torch.empty((g, -(-m // 4) * 4), dtype=t.dtype, device=t.device)
    padded[:, :m] = t.t()
    return padded[:, :m].t()


def provider_scale_a(provider: str, scale_a: torch.Tensor) -> torch.Tensor:
    """``scale_a`` in the layout ``provider`` (a name from :func:`vllm_default`) reads: block scales
    column-major (TMA-aligned for DeepGEMM), per-token scales unchanged."""
    if provider == "vllm block deep_gemm":
        return tma_aligned_column_major(scale_a)
    if provider.startswith("vllm block"):
        return column_major(scale_a)
    return scale_a
