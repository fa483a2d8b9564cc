"""HelionFp8BlockScaledMMKernel against the real vLLM 0.26 package on the CPU."""

import pytest
import torch

from hlcore.quant import per_block_fp8_quant_ref
from hlcore.scaled_mm import scaled_mm_ref
from hlcore.testing import rel_error, tolerance


def _block_config(*, static=False, weight_group=(128, 128), out_dtype=torch.bfloat16, n=256, k=384):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        QuantKey,
        ScaleDesc,
        kFp8Dynamic128Sym,
    )

    fp8 = torch.float8_e4m3fn
    act = (
        QuantKey(fp8, ScaleDesc(torch.float32, True, GroupShape(1, 128)), symmetric=True)
        if static
        else kFp8Dynamic128Sym
    )
    weight = QuantKey(fp8, ScaleDesc(torch.float32, True, GroupShape(*weight_group)), symmetric=True)
    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=weight,
        activation_quant_key=act,
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=out_dtype,
    )


def test_register_puts_block_kernel_first(hl_env):
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.plugin import register

    saved = list(vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA])
    try:
        register()
        kernels = vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA]
        assert kernels[0] is HelionFp8BlockScaledMMKernel and kernels.count(HelionFp8BlockScaledMMKernel) == 1
    finally:
        vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA] = saved


def test_block_can_implement_reasons(cuda_like, graphs_on_config):
    from vllm.config import CUDAGraphMode

    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel as K

    ok, reason = K.can_implement(_block_config())
    assert ok, reason
    from hlvllm.block_fp8_kernel import choose_fallback

    assert choose_fallback(_block_config()).__name__ in {
        "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
        "DeepGemmFp8BlockScaledMMKernel",
        "CutlassFp8BlockScaledMMKernel",
        "TritonFp8BlockScaledMMKernel",
    }
    ok, reason = K.can_implement(_block_config(static=True))
    assert not ok and "dynamic" in reason
    ok, reason = K.can_implement(_block_config(weight_group=(64, 128)))
    assert not ok and "128x128 weight blocks" in reason
    ok, reason = K.can_implement(_block_config(out_dtype=torch.float32))
    assert not ok and "bf16/fp16" in reason
    graphs_on_config.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    ok, reason = K.can_implement(_block_config())
    assert not ok and "CUDA graphs are off" in reason


@pytest.mark.parametrize("m", [1, 17, 40])
def test_block_layer_end_to_end_on_cpu(cuda_like, graphs_on_config, m):
    """Helion path (M <= 32) equals the fp32 reference of the layer's own quantized activations and
    block weights; M = 40 goes to vLLM's block kernel (its apply_weights, stubbed: CPU)."""
    from hlvllm import dispatch
    from hlvllm.block_fp8_kernel import BLOCK_LAYERS, HelionFp8BlockScaledMMKernel
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    register()
    cuda_like.setenv("HL_HELION_EAGER", "1")
    get_settings.cache_clear()
    n, k = 200, 300  # partial last blocks
    gen = torch.Generator().manual_seed(m)
    w_q, w_s = per_block_fp8_quant_ref(torch.randn(n, k, generator=gen) * 0.05)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q.clone(), requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(w_s.clone(), requires_grad=False)
    layer.input_scale = None
    layer.weight_block_size = [128, 128]
    kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
    fallback_calls = []

    def fake_fallback(layer_, x_2d, bias):
        fallback_calls.append(x_2d.shape[0])
        q, s = kernel.quant_fp8(x_2d)
        return scaled_mm_ref(q, layer_.weight.t(), s, w_s, torch.bfloat16, bias, block_size=(128, 128))

    cuda_like.setattr(kernel.fallback, "apply_weights", fake_fallback)
    kernel.process_weights_after_loading(layer)
    assert kernel.layer_id is not None and BLOCK_LAYERS[kernel.layer_id][1] is layer
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    out = kernel.apply_weights(layer, x, bias)
    q, s = kernel.quant_fp8(x.reshape(-1, k))
    assert s.shape == (m, 3)
    ref = scaled_mm_ref(q, w_q.t(), s, w_s, torch.bfloat16, bias, block_size=(128, 128))
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_error(out, ref) <= tolerance("block_fp8", torch.bfloat16)
    path = "helion" if m <= 32 else "fallback"
    assert dispatch.DISPATCH_COUNTS[(path, m, n, k)] == 1
    assert fallback_calls == [m]  # up to 32: Helion's first call is checked against it; above: the path
