"""vLLM Block_FP8 linear kernel backed by the Helion scaled GEMM, vLLM's default as the fallback.

Block_FP8 = fp8 weights ``[N, K]`` with 128x128 block scales (``weight_scale_inv`` of vLLM's
``fp8`` method with ``weight_block_size: [128, 128]``, or ``weight_scale`` of compressed-tensors
block checkpoints) and fp8 activations quantized per 1x128 group at run time.

``HelionFp8BlockScaledMMKernel`` holds the kernel vLLM would have chosen (``self.fallback``:
DeepGEMM, CUTLASS block or Triton block on CUDA) and lets it process the weights, so the fallback
path is exactly vLLM's. The Helion path reads the same fp8 weight and the fp32 block scales
(DeepGEMM's UE8M0 re-quantization rewrites both in place, so they stay consistent; a fallback that
re-lays out the scales keeps the original fp32 ``[ceil(N/128), ceil(K/128)]`` tensor here).

Dispatch happens inside ``torch.ops.hlvllm.block_scaled_mm(x, weight, weight_scale, helion_scale,
out_dtype, bias)``: ``num_tokens <= max_helion_size`` under CUDA-graph capture -> quantize with
``QuantFP8`` (1x128, row-major fp32 scales) + Helion; otherwise the fallback kernel's own
``apply_weights`` (its own quantization layout, e.g. column-major or UE8M0 scales for DeepGEMM) on a
stand-in layer holding the op's weight and scale tensors (:func:`layer_view`). The op carries every
tensor it uses as an argument and finds its kernel by the weight's (N, K) (:func:`kernel_for`:
layers of one shape have the same kernel config), so every decoder layer's piece of vLLM's compiled
graph is the same graph and Inductor compiles it once, and the compile range above max_helion_size
can call the fallback's code on the graph's own tensors (:mod:`hlvllm.lowering`; all of this with
``HL_DISPATCH_AT=op``). With ``HL_DISPATCH_AT=capture``, the default, the layer runs the
fallback's ``apply_weights`` (vLLM's graph), and :mod:`hlvllm.capture_dispatch` routes its GEMM
op (DeepGEMM's ``fp8_gemm_nt_op`` or CUTLASS's block-scaled ``cutlass_scaled_mm``) while vLLM
captures CUDA graphs: Helion then reads the activations vLLM's kernel quantized, in that kernel's
scale layout.
"""

from __future__ import annotations

import logging

import torch
from vllm.model_executor.kernels.linear.scaled_mm.BlockScaledMMLinearKernel import (
    Fp8BlockScaledMMLinearKernel,
)
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearKernel,
    FP8ScaledMMLinearLayerConfig,
)
from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

from hlcore.formats import get_format
from hlvllm.settings import get_settings
from hlvllm.support import HelionLinearKernelChecks, announce, at_capture, out_dtype_reason

logger = logging.getLogger("vllm.hlvllm")

BLOCK = get_format("block_fp8").block_size  # (128, 128): weight blocks; activation groups 1 x 128

#: (data_ptr, shape) of a layer's fp8 weight -> (kernel, layer); filled by
#: process_weights_after_loading (:func:`layer_for`).
BLOCK_LAYERS: dict[tuple, tuple[HelionFp8BlockScaledMMKernel, torch.nn.Module]] = {}
#: (N, K) -> the kernel of the last processed layer of that shape (:func:`kernel_for`).
BLOCK_KERNELS: dict[tuple[int, int], HelionFp8BlockScaledMMKernel] = {}


def _weight_key(weight: torch.Tensor) -> tuple:
    return (weight.data_ptr(), weight.shape)


def layer_for(weight: torch.Tensor) -> tuple[HelionFp8BlockScaledMMKernel, torch.nn.Module]:
    """The (kernel, layer) whose fp8 weight ``[N, K]`` is ``weight`` (the same storage).

    Raises:
        KeyError: no Block_FP8 layer registered this weight (not processed by
            :class:`HelionFp8BlockScaledMMKernel`, or the weight was replaced after processing)."""
    try:
        return BLOCK_LAYERS[_weight_key(weight)]
    except KeyError:
        raise KeyError(
            f"hlvllm.block_scaled_mm: no Block_FP8 layer holds the weight at {weight.data_ptr():#x} "
            f"(shape {tuple(weight.shape)}, {weight.dtype}, {weight.device}); "
            f"{len(BLOCK_LAYERS)} layers are registered"
        ) from None


def kernel_for(n: int, k: int) -> HelionFp8BlockScaledMMKernel:
    """The kernel of the Block_FP8 layers whose weight is ``[n, k]``.

    Raises:
        KeyError: no Block_FP8 layer of that shape was processed by :class:`HelionFp8BlockScaledMMKernel`."""
    try:
        return BLOCK_KERNELS[(int(n), int(k))]
    except KeyError:
        raise KeyError(
            f"hlvllm.block_scaled_mm: no Block_FP8 layer with an fp8 weight of shape [{n}, {k}] was "
            f"processed; registered shapes: {sorted(BLOCK_KERNELS)}"
        ) from None


def layer_view(params_cls, weight: torch.Tensor, scale: torch.Tensor, scale_attr: str):
    """A stand-in for a Block_FP8 layer that vLLM's block kernels read: ``weight``, the block scales
    under ``scale_attr`` (``weight_scale_inv`` or ``weight_scale``), no static input scales."""
    import types

    attrs = {params_cls.WEIGHT: weight, scale_attr: scale, "input_scale": None, "input_scale_ub": None}
    return types.SimpleNamespace(**attrs)


def choose_fallback(config: FP8ScaledMMLinearLayerConfig) -> type[Fp8BlockScaledMMLinearKernel] | None:
    """The block-FP8 kernel vLLM would pick without hlvllm (first supported one in its CUDA list)."""
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    for kernel in vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS.get(PlatformEnum.CUDA, []):
        if kernel is HelionFp8BlockScaledMMKernel or not issubclass(kernel, Fp8BlockScaledMMLinearKernel):
            continue  # ourselves, and the FP8ScaledMMLinearKernel-style ones (Marlin, Humming)
        if issubclass(kernel, FP8ScaledMMLinearKernel):
            continue
        ok, _ = vllm_linear.is_supported_and_can_implement_kernel(kernel, config, None)
        if ok:
            return kernel
    return None


class HelionFp8BlockScaledMMKernel(HelionLinearKernelChecks, Fp8BlockScaledMMLinearKernel):
    """Block_FP8 (1x128 activation groups x 128x128 weight blocks) with hybrid dispatch."""

    @classmethod
    def scheme_reason(cls, config: FP8ScaledMMLinearLayerConfig) -> str | None:
        ok, reason = Fp8BlockScaledMMLinearKernel.can_implement(config)
        if not ok:
            return reason
        if config.activation_quant_key.scale.group_shape != GroupShape(1, BLOCK[1]):
            return "supports 1x128 activation groups only"
        if config.weight_quant_key.scale.group_shape != GroupShape(*BLOCK):
            return f"supports 128x128 weight blocks only; got {config.weight_quant_key.scale.group_shape}"
        if reason := out_dtype_reason(config.out_dtype):
            return reason
        if choose_fallback(config) is None:
            return "no vLLM block-FP8 kernel to fall back to"
        return None

    def __init__(self, config: FP8ScaledMMLinearLayerConfig) -> None:
        super().__init__(config)  # self.quant_fp8: QuantFP8 1x128, row-major fp32 scales
        fallback_cls = choose_fallback(config)
        assert fallback_cls is not None  # can_implement checked it
        self.fallback = fallback_cls(config)
        self.registered = False
        self.at_capture = at_capture()
        announce(get_format("block_fp8").title, fallback_cls.__name__, self.at_capture)
        if self.at_capture:
            from hlvllm import capture_dispatch

            capture_dispatch.install_for(get_format("block_fp8").title)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        params = self._get_layer_params(layer)
        self.scale_attr = params.WEIGHT_SCALE if params.weight_scale_inv is None else params.WEIGHT_SCALE_INV
        scale_before = getattr(layer, self.scale_attr).data  # fp32 [ceil(N/128), ceil(K/128)]
        weight_before = params.weight.data
        self.fallback.process_weights_after_loading(layer)
        weight = getattr(layer, params.WEIGHT)
        scale = getattr(layer, self.scale_attr)
        if weight.data_ptr() != weight_before.data_ptr() or weight.shape != weight_before.shape:
            logger.warning(
                "hlvllm: %s replaced the weight tensor; this layer uses it for every batch size",
                type(self.fallback).__name__,
            )
            return  # not registered: fallback only
        if scale.dtype == torch.float32 and scale.shape == scale_before.shape:
            self.helion_scale = scale.data
        else:  # re-laid-out (e.g. packed UE8M0): the fp32 tensor was re-quantized in place, if at all
            self.helion_scale = scale_before
        n, k = weight.shape
        BLOCK_LAYERS[_weight_key(weight)] = (self, layer)
        BLOCK_KERNELS[(n, k)] = self  # the newest model's kernel (one model per process in vLLM)
        from hlvllm import guard

        guard.register_shape(self.guard_shape(weight.data, scale.data, self.helion_scale))
        self.registered = True

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None, **kwargs
    ) -> torch.Tensor:
        if not self.registered or self.at_capture:  # at capture: vLLM's GEMM op is routed
            return self.fallback.apply_weights(layer, x, bias, **kwargs)
        x_2d = x.reshape(-1, x.shape[-1])
        n = layer.weight.shape[0]
        out_dtype = self.config.out_dtype or x.dtype
        scale = getattr(layer, self.scale_attr)
        out = torch.ops.hlvllm.block_scaled_mm(x_2d, layer.weight, scale, self.helion_scale, out_dtype, bias)
        return out.view(*x.shape[:-1], n)

    # The op body's two paths -------------------------------------------------------------------
    def helion_path(self, x_2d, weight, helion_scale, out_dtype, bias, config=None) -> torch.Tensor:
        if get_settings().fused_quant:  # one kernel: the 1x128 groups quantized inside the GEMM
            from hlcore.fused_linear import block_fp8_linear

            return block_fp8_linear(x_2d, weight.t(), helion_scale, out_dtype, bias, config=config)
        q, scale_a = self.quant_fp8(x_2d)  # fp8 [M, K], fp32 [M, ceil(K/128)], both row-major
        return self.helion_gemm(q, scale_a, weight, helion_scale, out_dtype, bias, config)

    def guard_helion_path(self, x_2d, weight, helion_scale, out_dtype, bias) -> torch.Tensor:
        """The Helion side of this layer as the speed guard times it: :meth:`helion_path` in the op
        design; at capture vLLM's own activation quantization (its ``QuantFP8``, whose scale layout
        the routed Helion GEMM reads: column-major for DeepGEMM, slower than row-major from M = 2)
        and the Helion GEMM on its output."""
        quant = getattr(self.fallback, "quant_fp8", None) if self.at_capture else None
        if quant is None:
            return self.helion_path(x_2d, weight, helion_scale, out_dtype, bias)
        q, scale_a = quant(x_2d)
        return self.helion_gemm(q, scale_a, weight, helion_scale, out_dtype, bias)

    def helion_gemm(self, q, scale_a, weight, helion_scale, out_dtype, bias, config=None) -> torch.Tensor:
        from hlcore.scaled_mm import scaled_mm

        return scaled_mm(
            q, weight.t(), scale_a, helion_scale, out_dtype, bias, block_size=BLOCK, config=config
        )

    def helion_gemm_at(self, m: int, weight, helion_scale, out_dtype, bias) -> torch.Tensor:
        """The Helion GEMM of :meth:`helion_path` at M = ``m`` on operands of ones with the quant's
        layouts (:mod:`hlvllm.precompile`: compiles without running the activation quantization);
        at capture, once per scale_a layout vLLM's graph may hand it at this M
        (:meth:`scale_a_layouts`)."""
        k = weight.shape[1]
        if get_settings().fused_quant:  # the fused kernel reads the bf16/fp16 activations themselves
            x = torch.ones((m, k), dtype=out_dtype, device=weight.device)
            return self.helion_path(x, weight, helion_scale, out_dtype, bias)
        q = torch.ones((m, k), dtype=weight.dtype, device=weight.device)
        out = None
        for scale_a in self.scale_a_layouts(m, -(-k // BLOCK[1]), weight.device):
            out = self.helion_gemm(q, scale_a, weight, helion_scale, out_dtype, bias)
        return out

    def scale_a_layouts(self, m: int, groups: int, device) -> list[torch.Tensor]:
        """fp32 ones ``[m, groups]`` in each layout the Helion GEMM may read at this M (hlcore's kernel
        cache keys on every argument's strides, so a precompiled kernel must see the real call's),
        the usual one first: row-major from our own quantizer in the op design; at capture, the
        layout vLLM's block kernel quantizes into (its ``QuantFP8``'s ``column_major_scales`` /
        ``tma_aligned_scales``; vLLM's ``per_token_group_quant_fp8``: column-major, strides
        ``(1, m)``, or TMA-aligned ``(1, m rounded up to a multiple of 4)``), and with TMA-aligned
        scales and ``m`` not a multiple of 4 also the unpadded ``(1, m)``: vLLM 0.26's SiLU-and-mul +
        group-quant fusion (``ActivationQuantFusionPass``, on by default) allocates the down
        projection's scales as ``empty((groups, M)).permute(1, 0)`` whatever the quant's TMA
        alignment, while the quant itself and the RMSNorm fusion keep the TMA layout."""
        quant = getattr(self.fallback, "quant_fp8", None) if self.at_capture else None
        if quant is None or not getattr(quant, "column_major_scales", False):
            return [torch.ones((m, groups), dtype=torch.float32, device=device)]
        tma = getattr(quant, "tma_aligned_scales", False)
        rows = [-(-m // 4) * 4, m] if tma and m % 4 else [m]
        return [torch.ones((groups, r), dtype=torch.float32, device=device).t()[:m] for r in rows]

    def fallback_path(self, x_2d, weight, weight_scale, out_dtype, bias) -> torch.Tensor:
        """vLLM's kernel on a stand-in layer holding ``weight`` and ``weight_scale``."""
        layer = layer_view(self._params_cls(), weight, weight_scale, self.scale_attr)
        return self.fallback.apply_weights(layer, x_2d, bias).to(out_dtype)

    def _params_cls(self):
        from vllm.model_executor.kernels.linear.scaled_mm.BlockScaledMMLinearKernel import FP8BlockParams

        return FP8BlockParams

    def guard_shape(self, weight, weight_scale, helion_scale):
        """The speed guard's view of this layer shape (:class:`hlvllm.guard.GuardShape`): the whole op
        (1x128 quantization + GEMM) on each side, random bf16 activations; Helion's side as the layer
        runs it (:meth:`guard_helion_path`)."""
        from hlvllm.guard import GuardShape, weight_copies

        n, k = weight.shape
        out_dtype = self.config.out_dtype or torch.bfloat16

        def make_calls(m: int, copies: int):
            gen = torch.Generator(device=weight.device).manual_seed(m)
            x = torch.randn((m, k), generator=gen, device=weight.device).to(out_dtype)
            ws = weight_copies(weight, copies)
            helion = [lambda w=w: self.guard_helion_path(x, w, helion_scale, out_dtype, None) for w in ws]
            vllm = [lambda w=w: self.fallback_path(x, w, weight_scale, out_dtype, None) for w in ws]
            return helion, vllm

        return GuardShape(
            "block_fp8",
            n,
            k,
            weight.numel() * weight.element_size(),
            type(self.fallback).__name__,
            make_calls,
            lambda m: self.helion_gemm_at(m, weight, helion_scale, out_dtype, None),
        )

    def apply_block_scaled_mm(self, A, B, As, Bs):  # abstract in vLLM; unused (apply_weights is ours)
        return self.fallback.apply_block_scaled_mm(A, B, As, Bs)
