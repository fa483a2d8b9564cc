"""vLLM W8A8_INT8 linear kernel backed by the Helion scaled GEMM.

``HelionInt8ScaledMMLinearKernel`` subclasses vLLM's ``CutlassInt8ScaledMMLinearKernel``: weight
processing and layout are CUTLASS's (``layer.weight``: int8 ``[K, N]`` column-major view;
``weight_scale`` fp32 ``[N, 1]``). Activations are quantized dynamically, per token, symmetric: by
``torch.ops.hlvllm.per_token_int8_quant`` (Helion under CUDA-graph capture, else vLLM's
``scaled_int8_quant``; ``HL_AUX_KERNELS`` without ``int8_quant``: always vLLM's), then
``torch.ops.hlvllm.scaled_mm`` picks Helion (num_tokens <= max_helion_size under CUDA-graph
capture) or ``cutlass_scaled_mm`` (``HL_DISPATCH_AT=op``). With ``HL_DISPATCH_AT=capture``, the
default, the layer runs CUTLASS's ``apply_weights`` (vLLM's ``scaled_int8_quant``;
``HL_AUX_KERNELS``' ``int8_quant`` is not used) and :mod:`hlvllm.capture_dispatch` routes its
``cutlass_scaled_mm`` calls while vLLM captures CUDA graphs. Static input scales, asymmetric
activations (azp) and per-tensor weight scales stay on vLLM's kernel.
"""

from __future__ import annotations

import torch
from vllm import _custom_ops as vllm_ops
from vllm.model_executor.kernels.linear.scaled_mm.cutlass import CutlassInt8ScaledMMLinearKernel
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import Int8ScaledMMLinearLayerConfig

from hlcore.formats import get_format
from hlvllm.ops import register_scaled_mm_layer
from hlvllm.settings import get_settings
from hlvllm.support import (
    HelionLinearKernelChecks,
    announce,
    at_capture,
    model_dtype,
)


class HelionInt8ScaledMMLinearKernel(HelionLinearKernelChecks, CutlassInt8ScaledMMLinearKernel):
    """W8A8_INT8 (dynamic symmetric per-token int8 x per-channel int8) with hybrid dispatch."""

    @classmethod
    def scheme_reason(cls, c: Int8ScaledMMLinearLayerConfig) -> str | None:
        if c.is_static_input_scheme:
            return "supports dynamic per-token activation scales only (static input scales use CUTLASS)"
        if not c.input_symmetric:
            return "supports symmetric activations only (asymmetric/azp uses CUTLASS's azp kernel)"
        if not c.is_channelwise:
            return "supports per-channel weight scales only (per-tensor uses CUTLASS)"
        return None

    def __init__(self, c: Int8ScaledMMLinearLayerConfig, layer_param_names) -> None:
        super().__init__(c, layer_param_names)
        self.helion_input_quant = "int8_quant" in get_settings().aux_kernels
        self.at_capture = at_capture()
        announce(get_format("w8a8_int8").title, "CUTLASS (cutlass_scaled_mm)", self.at_capture)
        if self.at_capture:
            from hlvllm import capture_dispatch

            capture_dispatch.install_for(get_format("w8a8_int8").title)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        super().process_weights_after_loading(layer)
        w_q, w_s, _, _, _ = self._get_layer_params(layer)  # [K, N] column-major int8, [N, 1] fp32
        register_scaled_mm_layer("w8a8_int8", w_q, w_s, layer, model_dtype())

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.at_capture:
            return super().apply_weights(layer, x, bias)
        w_q, w_s, _, _, _ = self._get_layer_params(layer)
        x_2d = x.reshape(-1, x.shape[-1])
        if self.helion_input_quant:
            x_q, x_s = torch.ops.hlvllm.per_token_int8_quant(x_2d)
        else:
            x_q, x_s, _ = vllm_ops.scaled_int8_quant(x_2d.contiguous(), None, None, symmetric=True)
        out = torch.ops.hlvllm.scaled_mm(x_q, w_q, x_s, w_s, x.dtype, bias)
        return out.view(*x.shape[:-1], w_q.shape[1])
