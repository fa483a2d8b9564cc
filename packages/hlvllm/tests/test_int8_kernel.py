"""HelionInt8ScaledMMLinearKernel against the real vLLM 0.26 package on the CPU."""

import pytest
import torch

from hlcore.quant import per_token_int8_quant_ref
from hlcore.scaled_mm import scaled_mm_ref
from hlcore.testing import rel_error, tolerance


def _int8_config(*, static=False, channelwise=True, symmetric=True):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        Int8ScaledMMLinearLayerConfig,
    )

    return Int8ScaledMMLinearLayerConfig(
        is_static_input_scheme=static, is_channelwise=channelwise, input_symmetric=symmetric
    )


def test_register_puts_int8_kernel_first(hl_env):
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    from hlvllm.int8_kernel import HelionInt8ScaledMMLinearKernel
    from hlvllm.plugin import register

    saved = list(vllm_linear._POSSIBLE_INT8_KERNELS[PlatformEnum.CUDA])
    try:
        register()
        kernels = vllm_linear._POSSIBLE_INT8_KERNELS[PlatformEnum.CUDA]
        assert (
            kernels[0] is HelionInt8ScaledMMLinearKernel
            and kernels.count(HelionInt8ScaledMMLinearKernel) == 1
        )
    finally:
        vllm_linear._POSSIBLE_INT8_KERNELS[PlatformEnum.CUDA] = saved


def test_int8_can_implement_reasons(hl_env, graphs_on_config):
    from vllm.config import CUDAGraphMode

    from hlvllm.int8_kernel import HelionInt8ScaledMMLinearKernel as K

    assert K.can_implement(_int8_config()) == (True, None)
    ok, reason = K.can_implement(_int8_config(static=True))
    assert not ok and "static input scales" in reason
    ok, reason = K.can_implement(_int8_config(symmetric=False))
    assert not ok and "asymmetric" in reason
    ok, reason = K.can_implement(_int8_config(channelwise=False))
    assert not ok and "per-tensor" in reason
    graphs_on_config.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    ok, reason = K.can_implement(_int8_config())
    assert not ok and "CUDA graphs are off" in reason


@pytest.mark.triton_interpret  # no CPU int8 matmul in Helion's eager mode
@pytest.mark.parametrize("m,aux", [(1, "all"), (5, "all"), (40, "all"), (1, None), (40, None)])
def test_int8_layer_end_to_end_on_cpu(op_dispatch, cuda_like, graphs_on_config, m, aux):
    """The op design: a W8A8 int8 layer processed by CUTLASS's weight code, applied through the Helion
    kernel (M <= 32) or the fallback (M = 40), equals the fp32 reference of the same quantized tensors.
    The activations are quantized by our op with ``HL_AUX_KERNELS=all`` (``int8_quant``), by vLLM's
    ``scaled_int8_quant`` by default (no aux kernel)."""
    import hlvllm.int8_kernel as int8_kernel
    import hlvllm.ops as ops
    from hlvllm import dispatch
    from hlvllm.plugin import register

    if aux is not None:
        cuda_like.setenv("HL_AUX_KERNELS", aux)
    register()
    cuda_like.setenv("HL_HELION_EAGER", "1")
    from hlvllm.settings import get_settings

    get_settings.cache_clear()

    vllm_quant_calls = []

    def quant(x, scale, azp, symmetric):  # vLLM's scaled_int8_quant is CUDA-only
        assert scale is None and azp is None and symmetric
        vllm_quant_calls.append(x.shape[0])
        q, s = per_token_int8_quant_ref(x)
        return q, s, None

    fallback_calls = []

    def fake_cutlass(a, b, scale_a, scale_b, out_dtype, bias):
        fallback_calls.append(a.shape[0])
        return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias)

    cuda_like.setattr(int8_kernel.vllm_ops, "scaled_int8_quant", quant)
    cuda_like.setattr(ops, "_fallback_scaled_mm", fake_cutlass)

    n, k = 48, 96
    gen = torch.Generator().manual_seed(m)
    w_q, w_s = per_token_int8_quant_ref(torch.randn(n, k, generator=gen) * 0.05)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q.clone(), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(w_s.clone(), requires_grad=False)
    layer.input_scale = layer.input_zero_point = layer.azp_adj = None
    layer.logical_widths = [n]
    kernel = int8_kernel.HelionInt8ScaledMMLinearKernel(
        _int8_config(), ["weight", "weight_scale", "input_scale", "input_zero_point", "azp_adj"]
    )
    kernel.process_weights_after_loading(layer)
    assert layer.weight.shape == (k, n) and layer.weight.stride(0) == 1  # CUTLASS's [K, N] column-major view
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    out = kernel.apply_weights(layer, x, bias)
    x_q, x_s = per_token_int8_quant_ref(x)
    ref = scaled_mm_ref(x_q, w_q.t(), x_s, w_s, torch.bfloat16, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_error(out, ref) <= tolerance("w8a8_int8", torch.bfloat16)
    path = "helion" if m <= 32 else "fallback"
    assert dispatch.DISPATCH_COUNTS[(path, m, n, k)] == 1
    assert fallback_calls == [m]  # up to 32: Helion's first call is checked against it; above: the path
    from hlvllm import aux_ops

    if aux == "all":  # int8_quant on: the activations go through our op too
        assert kernel.helion_input_quant and not vllm_quant_calls
        assert {("per_token_int8_quant", path, m, k): 1} == aux_ops.AUX_COUNTS
    else:  # the default: vLLM's quantization, no aux op
        assert not kernel.helion_input_quant and vllm_quant_calls == [m]
        assert not aux_ops.AUX_COUNTS
