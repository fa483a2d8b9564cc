"""The kernel vLLM 0.26 runs by default for each scaled-GEMM format on CUDA, as plain calls.

The one place that says which of vLLM's kernels Helion is compared with: ``hltools validate``
(cross-check and speed), ``hltools bench kernels`` (the ``vllm`` and ``torch`` providers),
``hltools autotune`` (the kernel a tuned config must beat), ``lab/scripts/sweep_scaled_mm.py`` and the
GPU tests all take their providers from here.

Every provider computes ``out[M, N] = (A * scale_a) @ (B * scale_b)`` in ``out_dtype`` (bf16 or fp16)
on the tensors of :func:`hlcore.scaled_mm.generate_scaled_mm_inputs`: ``a`` ``[M, K]`` fp8 e4m3 or
int8, row-major; ``b`` ``[K, N]`` the column-major view of the ``[N, K]`` weight; fp32 scales
``scale_a`` ``[M, 1]`` per token or ``[M, ceil(K/128)]`` per 1x128 group (row-major) and ``scale_b``
``[N, 1]`` per channel or ``[ceil(N/128), ceil(K/128)]`` per 128x128 block. A call is split as vLLM
splits it, so that a timing loop over rotating weight copies times only the per-token work:

* ``prepare_weight(b, scale_b) -> PreparedWeight``: what vLLM does to the weight at load time
  (``process_weights_after_loading``), once per weight copy, on a copy where it writes;
* ``prepare_scale_a(scale_a)``: the activation-scale layout vLLM's ``QuantFP8`` writes for the
  kernel, once per activation;
* ``call(a, scale_a, w)``: the kernel launch only;
* ``provider(a, b, scale_a, scale_b)``: the three at once, for one-off checks.

| format | vLLM's default on Hopper (the order tried here) |
| --- | --- |
| ``fp8_dynamic`` | ``cutlass_scaled_mm`` (``CutlassFP8ScaledMMLinearKernel``), else ``torch._scaled_mm`` (row-wise) |
| ``w8a8_int8`` | ``cutlass_scaled_mm`` with int8 inputs (``CutlassInt8ScaledMMLinearKernel``) |
| ``block_fp8`` | DeepGEMM ``fp8_gemm_nt`` (``DeepGemmFp8BlockScaledMMKernel``), else CUTLASS block ``cutlass_scaled_mm`` (``CutlassFp8BlockScaledMMKernel``), else Triton ``w8a8_triton_block_scaled_mm`` (``TritonFp8BlockScaledMMKernel``) |

vLLM 0.26 puts ``FlashInferFp8DeepGEMMDynamicBlockScaledKernel`` first for block FP8 (FlashInfer's
``fp8_blockscale_gemm_sm90`` at M < 32, bf16 activations quantized inside); the GPU bundle has no
FlashInfer, so it is not a provider here (:func:`flashinfer_note` says when it would be used).

Choosing (:func:`vllm_default`): the candidates of :func:`candidates` in order; each answers "can I
take this (format, out dtype, N, K) here?" by raising :class:`Unsupported` with the reason, the
first that does not is returned and keeps the others' reasons in ``skipped``. ``HL_BLOCK_PROVIDER``
= ``deep_gemm`` | ``cutlass`` | ``triton`` forces one block kernel; ``VLLM_USE_DEEP_GEMM=0`` skips
DeepGEMM, as in vLLM.

Correctness: ``PreparedWeight.b`` / ``scale_b`` are the operands the kernel multiplies, in the layout
above: the given ones, except that DeepGEMM re-quantizes the weight to power-of-two (UE8M0) block
scales when vLLM does (``VLLM_USE_DEEP_GEMM_E8M0=1``, its default), which moves its result about
2.6e-2 (relative Frobenius) from the fp32 reference of the original weight.
:meth:`ScaledMMProvider.reference` is the fp32 reference of the operands the kernel multiplies.

This module imports torch; vLLM (and hlcore's reference) only inside the providers.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from hlcore.formats import FORMAT_NAMES, get_format
from hltools.format_names import FORMATS

BLOCK = get_format("block_fp8").block_size  # (128, 128): vLLM's weight_block_size
OUT_DTYPES = (torch.bfloat16, torch.float16)


class Unsupported(RuntimeError):
    """A provider that cannot run here (import, GPU, install, env) or for this format, out dtype or
    shape; the message says why."""


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same values with column-major strides (``t.t().contiguous().t()``), as vLLM's group quant
    writes activation scales for its CUTLASS block kernel."""
    return t.t().contiguous().t()


def tma_aligned_column_major(t: torch.Tensor) -> torch.Tensor:
    """Column-major ``[M, G]`` values whose column stride is M rounded up to 4 (16 bytes), as vLLM's
    ``QuantFP8(tma_aligned_scales=True)`` writes them for DeepGEMM (it copies other layouts)."""
    m, g = t.shape
    padded = torch.empty((g, -(-m // 4) * 4), dtype=t.dtype, device=t.device)
    padded[:, :m] = t.t()
    return padded[:, :m].t()


@dataclass(frozen=True)
class PreparedWeight:
    """One weight as a provider holds it after load-time processing.

    ``b`` ``[K, N]`` column-major and ``scale_b`` (``[N, 1]`` or ``[ceil(N/128), ceil(K/128)]``, fp32):
    the operands the kernel multiplies, in the reference layout (the given tensors unless
    ``requantized``); ``kernel_b`` / ``kernel_scale_b``: the same in the kernel's own layout."""

    b: torch.Tensor
    scale_b: torch.Tensor
    kernel_b: torch.Tensor
    kernel_scale_b: torch.Tensor
    requantized: bool = False


class ScaledMMProvider:
    """One of vLLM's kernels for some formats. The constructor imports and checks everything
    (raises :class:`Unsupported` with the reason); ``n``/``k`` given, also the layer shape
    (vLLM's ``can_implement``). ``skipped``: why the candidates before it were passed over."""

    name: ClassVar[str]  # what ran, as results record it
    mirrors: ClassVar[str]  # the vLLM kernel class whose apply path this reproduces
    formats: ClassVar[tuple[str, ...]]

    def __init__(
        self, fmt: str, out_dtype: torch.dtype = torch.bfloat16, n: int | None = None, k: int | None = None
    ) -> None:
        if fmt not in self.formats:
            raise Unsupported(f"{self.name} does not take {fmt}; it takes {', '.join(self.formats)}")
        if out_dtype not in OUT_DTYPES:
            raise Unsupported(f"out_dtype must be bf16 or fp16; got {out_dtype}")
        self.fmt, self.out_dtype = fmt, out_dtype
        self.skipped: tuple[str, ...] = ()
        self._setup()
        if n is not None and k is not None:
            reason = self.can_implement(n, k)
            if reason:
                raise Unsupported(reason)

    @property
    def block_size(self) -> tuple[int, int] | None:
        return get_format(self.fmt).block_size

    def _setup(self) -> None:
        """Imports and "is this kernel usable here" checks; raises :class:`Unsupported`."""

    def can_implement(self, n: int, k: int) -> str | None:
        """None when the kernel takes an ``[N, K]`` weight, else why not."""
        return None

    def prepare_weight(self, b: torch.Tensor, scale_b: torch.Tensor) -> PreparedWeight:
        """The weight after vLLM's load-time processing for this kernel (``b``, ``scale_b`` as above)."""
        return PreparedWeight(b, scale_b, b, scale_b)

    def prepare_scale_a(self, scale_a: torch.Tensor) -> torch.Tensor:
        """``scale_a`` (row-major) in the layout the kernel reads; the values are unchanged."""
        return scale_a

    def call(self, a: torch.Tensor, scale_a: torch.Tensor, w: PreparedWeight) -> torch.Tensor:
        """``[M, N]`` in ``out_dtype``; ``scale_a`` from :meth:`prepare_scale_a`, ``w`` from
        :meth:`prepare_weight`."""
        raise NotImplementedError

    def calls(
        self, a: torch.Tensor, scale_a: torch.Tensor, weights: Sequence[PreparedWeight]
    ) -> list[Callable[[], torch.Tensor]]:
        """One argument-free :meth:`call` per prepared weight (``scale_a`` already prepared): what a
        timing loop over rotating weight copies replays."""
        return [functools.partial(self.call, a, scale_a, w) for w in weights]

    def __call__(
        self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
    ) -> torch.Tensor:
        """One-off call on the given operands (weight processing and scale layout included)."""
        return self.call(a, self.prepare_scale_a(scale_a), self.prepare_weight(b, scale_b))

    def reference(self, a: torch.Tensor, scale_a: torch.Tensor, w: PreparedWeight) -> torch.Tensor:
        """fp32 dequantized ``(A * scale_a) @ (w.b * w.scale_b)`` in ``out_dtype``
        (:func:`hlcore.scaled_mm.scaled_mm_ref`): what :meth:`call` should return."""
        from hlcore.scaled_mm import scaled_mm_ref

        return scaled_mm_ref(a, w.b, scale_a, w.scale_b, self.out_dtype, block_size=self.block_size)


def _cutlass_ops():
    from vllm import _custom_ops as ops

    try:
        _ = torch.ops._C.cutlass_scaled_mm
    except (AttributeError, RuntimeError) as exc:
        raise Unsupported(f"vLLM's compiled ops are missing ({exc})") from None
    return ops


class CutlassScaledMM(ScaledMMProvider):
    """``cutlass_scaled_mm(A, B [K, N] col-major, scale_a [M, 1], scale_b [N, 1])``: vLLM's
    ``CutlassFP8ScaledMMLinearKernel`` (fp8) and ``CutlassInt8ScaledMMLinearKernel`` (symmetric int8)."""

    name = "vllm cutlass_scaled_mm"
    mirrors = "CutlassFP8ScaledMMLinearKernel / CutlassInt8ScaledMMLinearKernel"
    formats = tuple(n for n in FORMAT_NAMES if get_format(n).block_size is None)  # per token x channel

    def _setup(self) -> None:
        self._ops = _cutlass_ops()

    def call(self, a, scale_a, w):
        return self._ops.cutlass_scaled_mm(a, w.kernel_b, scale_a, w.kernel_scale_b, self.out_dtype)


class TorchScaledMM(ScaledMMProvider):
    """``torch._scaled_mm(A, B [K, N] col-major, scale_a [M, 1], scale_b [1, N])`` with row-wise scales
    (the math of vLLM's ``RowWiseTorchFP8ScaledMMLinearKernel``); vLLM's fp8 fallback when its
    compiled CUTLASS ops are missing."""

    name = "torch._scaled_mm"
    mirrors = "RowWiseTorchFP8ScaledMMLinearKernel"
    formats = ("fp8_dynamic",)

    def _setup(self) -> None:
        if not hasattr(torch, "_scaled_mm"):
            raise Unsupported("this torch has no torch._scaled_mm")

    def prepare_weight(self, b, scale_b):
        return PreparedWeight(b, scale_b, b, scale_b.reshape(1, -1))

    def prepare_scale_a(self, scale_a):
        return scale_a.reshape(-1, 1)

    def call(self, a, scale_a, w):
        return torch._scaled_mm(
            a, w.kernel_b, scale_a=scale_a, scale_b=w.kernel_scale_b, out_dtype=self.out_dtype
        )


class DeepGemmBlock(ScaledMMProvider):
    """DeepGEMM ``fp8_gemm_nt((A, As), (W [N, K], Ws), out)``: vLLM's ``DeepGemmFp8BlockScaledMMKernel``.

    At load time the weight goes through vLLM's ``deepgemm_post_process_fp8_weight_block`` (UE8M0
    re-quantization when ``is_deep_gemm_e8m0_used()``, which works in place: on copies here, then
    DeepGEMM's scale layout); activation scales are TMA-aligned column-major. Activations keep their
    fp32 scales (the same operands as every provider; vLLM would quantize them with power-of-two
    scales under UE8M0, which changes values, not time). bf16 output only; N a multiple of 64 and K
    of 128 (``should_use_deepgemm_for_fp8_linear``), else vLLM picks the next kernel."""

    name = "vllm block deep_gemm fp8_gemm_nt"
    mirrors = "DeepGemmFp8BlockScaledMMKernel"
    formats = ("block_fp8",)

    def _setup(self) -> None:
        if os.environ.get("VLLM_USE_DEEP_GEMM", "1") == "0":
            raise Unsupported("VLLM_USE_DEEP_GEMM=0")
        if self.out_dtype != torch.bfloat16:
            raise Unsupported("DeepGEMM supports bf16 output only (vLLM then picks the next kernel)")
        from vllm.utils import deep_gemm

        if not deep_gemm.is_deep_gemm_supported():
            raise Unsupported("DeepGEMM is not supported here (vLLM's is_deep_gemm_supported() is False)")
        self._dg = deep_gemm
        self.e8m0 = bool(deep_gemm.is_deep_gemm_e8m0_used())

    def can_implement(self, n, k):
        if not self._dg.should_use_deepgemm_for_fp8_linear(self.out_dtype, (n, k)):
            return f"vLLM does not use DeepGEMM for N={n}, K={k} (N % 64 and K % 128 must be 0)"
        return None

    def prepare_weight(self, b, scale_b):
        from vllm.model_executor.layers.quantization.utils.fp8_utils import (
            deepgemm_post_process_fp8_weight_block,
        )

        wq = b.t().clone() if self.e8m0 else b.t()  # [N, K] row-major; re-quantized in place
        ws = scale_b.clone()
        kernel_b, kernel_scale_b = deepgemm_post_process_fp8_weight_block(wq, ws, BLOCK, self.e8m0)
        if self.e8m0:
            return PreparedWeight(wq.t(), ws, kernel_b, kernel_scale_b, requantized=True)
        return PreparedWeight(b, scale_b, kernel_b, kernel_scale_b)

    def prepare_scale_a(self, scale_a):
        return tma_aligned_column_major(scale_a)

    def call(self, a, scale_a, w):
        out = torch.empty((a.shape[0], w.kernel_b.shape[0]), dtype=self.out_dtype, device=a.device)
        self._dg.fp8_gemm_nt(
            (a, scale_a), (w.kernel_b, w.kernel_scale_b), out, is_deep_gemm_e8m0_used=self.e8m0
        )
        return out


class CutlassBlock(ScaledMMProvider):
    """``cutlass_scaled_mm(A, W.T [K, N], As column-major [M, K/128], Ws.T [K/128, N/128])``: vLLM's
    ``CutlassFp8BlockScaledMMKernel`` (needs a GPU whose CUTLASS build has block FP8: SM90+)."""

    name = "vllm block cutlass_scaled_mm"
    mirrors = "CutlassFp8BlockScaledMMKernel"
    formats = ("block_fp8",)

    def _setup(self) -> None:
        from vllm.platforms import current_platform

        self._ops = _cutlass_ops()
        cap = current_platform.get_device_capability()
        if cap is None or not self._ops.cutlass_scaled_mm_supports_block_fp8(cap.to_int()):
            raise Unsupported("CUTLASS block FP8 is not supported on this GPU")

    def prepare_weight(self, b, scale_b):
        return PreparedWeight(b, scale_b, b, scale_b.t())

    def prepare_scale_a(self, scale_a):
        return column_major(scale_a)

    def call(self, a, scale_a, w):
        return self._ops.cutlass_scaled_mm(a, w.kernel_b, scale_a, w.kernel_scale_b, self.out_dtype)


class TritonBlock(ScaledMMProvider):
    """``w8a8_triton_block_scaled_mm(A, W [N, K], As [M, K/128] row-major, Ws)``: vLLM's
    ``TritonFp8BlockScaledMMKernel``."""

    name = "vllm block w8a8_triton_block_scaled_mm"
    mirrors = "TritonFp8BlockScaledMMKernel"
    formats = ("block_fp8",)

    def _setup(self) -> None:
        from vllm.model_executor.layers.quantization.utils.fp8_utils import w8a8_triton_block_scaled_mm

        self._mm = w8a8_triton_block_scaled_mm

    def prepare_weight(self, b, scale_b):
        return PreparedWeight(b, scale_b, b.t(), scale_b)

    def call(self, a, scale_a, w):
        return self._mm(a, w.kernel_b, scale_a, w.kernel_scale_b, list(BLOCK), self.out_dtype)


BLOCK_PROVIDERS: dict[str, type[ScaledMMProvider]] = {
    "deep_gemm": DeepGemmBlock,
    "cutlass": CutlassBlock,
    "triton": TritonBlock,
}
BLOCK_ORDER = tuple(BLOCK_PROVIDERS)  # vLLM 0.26's CUDA order (FlashInfer aside)


def block_order(order: Sequence[str] | None = None) -> tuple[str, ...]:
    """The block kernels to try: ``order`` when given, else ``HL_BLOCK_PROVIDER`` alone when set,
    else :data:`BLOCK_ORDER`. Raises ``ValueError`` naming the valid ones for an unknown name."""
    source = "block provider(s)"
    if not order:
        forced = os.environ.get("HL_BLOCK_PROVIDER")
        order, source = ((forced,), "HL_BLOCK_PROVIDER") if forced else (BLOCK_ORDER, "")
    bad = [b for b in order if b not in BLOCK_PROVIDERS]
    if bad:
        raise ValueError(f"unknown {source} {bad}; choose from {list(BLOCK_PROVIDERS)}")
    return tuple(dict.fromkeys(order))


def candidates(fmt: str, order: Sequence[str] | None = None) -> list[type[ScaledMMProvider]]:
    """vLLM's kernels for ``fmt`` in the order vLLM tries them (block ones per :func:`block_order`).
    Raises ``ValueError`` for an unknown format or block provider."""
    if fmt == "fp8_dynamic":
        return [CutlassScaledMM, TorchScaledMM]
    if fmt == "w8a8_int8":
        return [CutlassScaledMM]
    if fmt == "block_fp8":
        return [BLOCK_PROVIDERS[b] for b in block_order(order)]
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def vllm_default(
    fmt: str,
    out_dtype: torch.dtype = torch.bfloat16,
    n: int | None = None,
    k: int | None = None,
    order: Sequence[str] | None = None,
) -> ScaledMMProvider:
    """vLLM's default kernel for ``fmt`` and ``out_dtype`` (and the ``[N, K]`` weight, when given)
    that imports and runs here: the first of :func:`candidates` that builds, with the reasons of
    those skipped in ``skipped``. Raises :class:`Unsupported` listing every reason when none
    builds, ``ValueError`` for an unknown format or block provider."""
    reasons = []
    for cls in candidates(fmt, order):
        try:
            provider = cls(fmt, out_dtype, n, k)
        except Exception as exc:  # noqa: BLE001 - an import or probe failure skips the candidate
            reasons.append(f"{cls.name}: {type(exc).__name__}: {exc}"[:300])
            continue
        provider.skipped = tuple(reasons)
        return provider
    raise Unsupported(f"no vLLM kernel for {fmt} is usable here: " + "; ".join(reasons))


def flashinfer_note() -> str:
    """Why vLLM's first block-FP8 choice (FlashInfer at M < 32) is not a provider here, or ""."""
    try:
        from vllm.utils.flashinfer import has_flashinfer_fp8_blockscale_gemm

        if has_flashinfer_fp8_blockscale_gemm():
            return (
                "FlashInfer fp8_blockscale_gemm_sm90 is installed: vLLM would use it for block FP8 at "
                "M < 32 (bf16 input, quantization inside); not benchmarked here"
            )
    except Exception:
        pass
    return ""
