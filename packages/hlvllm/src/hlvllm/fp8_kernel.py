"""vLLM FP8_Dynamic linear kernel backed by the Helion scaled GEMM.

``HelionFP8ScaledMMLinearKernel`` subclasses vLLM's ``CutlassFP8ScaledMMLinearKernel``, so weight
loading, ``process_weights_after_loading`` and the layout (``layer.weight``: the ``[K, N]``
column-major fp8 view; ``weight_scale`` fp32 ``[N, 1]``) are exactly CUTLASS's, and activation
quantization is vLLM's ``QuantFP8`` (dynamic per token). Only the GEMM call changes: it goes
through ``torch.ops.hlvllm.scaled_mm``, whose body picks Helion (num_tokens <=
max_helion_size, under CUDA-graph capture) or ``cutlass_scaled_mm`` (``HL_DISPATCH_AT=op``). With
``HL_DISPATCH_AT=capture``, the default, not even that: the layer runs CUTLASS's code, and
:mod:`hlvllm.capture_dispatch` routes its ``cutlass_scaled_mm`` calls while vLLM captures CUDA
graphs.
"""

from __future__ import annotations

import torch
from vllm.model_executor.kernels.linear.scaled_mm.cutlass import CutlassFP8ScaledMMLinearKernel
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
from vllm.model_executor.layers.quantization.utils.quant_utils import (
    kFp8DynamicTokenSym,
    kFp8StaticChannelSym,
)

from hlcore.formats import get_format
from hlvllm.ops import register_scaled_mm_layer
from hlvllm.support import (
    HelionLinearKernelChecks,
    announce,
    at_capture,
    model_dtype,
    out_dtype_reason,
)


class HelionFP8ScaledMMLinearKernel(HelionLinearKernelChecks, CutlassFP8ScaledMMLinearKernel):
    """FP8_Dynamic (per-token fp8 activations x per-channel fp8 weights) with hybrid dispatch."""

    @classmethod
    def scheme_reason(cls, c: FP8ScaledMMLinearLayerConfig) -> str | None:
        if c.activation_quant_key != kFp8DynamicTokenSym:
            return f"supports dynamic per-token fp8 activations only; got {c.activation_quant_key}"
        if c.weight_quant_key != kFp8StaticChannelSym:
            return f"supports per-channel fp8 weights only; got {c.weight_quant_key}"
        if reason := out_dtype_reason(c.out_dtype):
            return reason
        n, k = c.weight_shape
        if n % 16 or k % 16:
            return f"needs N and K multiples of 16 (CUTLASS pads otherwise); got N={n}, K={k}"
        return None

    def __init__(self, c: FP8ScaledMMLinearLayerConfig, layer_param_names) -> None:
        super().__init__(c, layer_param_names)
        self.at_capture = at_capture()
        announce(get_format("fp8_dynamic").title, "CUTLASS (cutlass_scaled_mm)", self.at_capture)
        if self.at_capture:
            from hlvllm import capture_dispatch

            capture_dispatch.install_for(get_format("fp8_dynamic").title)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        super().process_weights_after_loading(layer)
        w, w_s, _, _ = self._get_layer_params(layer)  # [K, N] column-major fp8, [N, 1] fp32
        if w.shape[1] == self.logical_output_size:  # not padded by CUTLASS
            register_scaled_mm_layer("fp8_dynamic", w, w_s, layer, self.config.out_dtype or model_dtype())

    def apply_scaled_mm(
        self,
        *,
        A: torch.Tensor,
        B: torch.Tensor,
        out_dtype: torch.dtype,
        As: torch.Tensor,
        Bs: torch.Tensor,
        bias: torch.Tensor | None,
        output_shape: list,
    ) -> torch.Tensor:
        if self.at_capture or B.shape[1] != self.logical_output_size or B.shape[0] != A.shape[1]:
            # routed at capture; or CUTLASS padded this layer's weight (can_implement rules that
            # out; stay correct anyway)
            return super().apply_scaled_mm(
                A=A, B=B, out_dtype=out_dtype, As=As, Bs=Bs, bias=bias, output_shape=output_shape
            )
        out = torch.ops.hlvllm.scaled_mm(A, B, As, Bs, out_dtype, bias)
        return out.view(*output_shape)
