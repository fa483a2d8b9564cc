"""HelionFp8BlockScaledMMKernel against the real vLLM 0.26 package on the CPU."""

import pytest
import torch

from hlcore.quant import per_block_fp8_quant_ref, per_token_group_fp8_quant_ref
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


def _block_layer(n, k, seed):
    """A Block_FP8 layer as vLLM's fp8 method leaves it: fp8 weight [N, K], fp32 128x128 block scales
    (``weight_scale_inv``); returns the generator (for the activations), the weight, scales, layer."""
    gen = torch.Generator().manual_seed(seed)
    w_q, w_s = per_block_fp8_quant_ref(torch.randn(n, k, generator=gen) * 0.05)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q.clone(), requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(w_s.clone(), requires_grad=False)
    layer.input_scale = None
    layer.weight_block_size = [128, 128]
    return gen, w_q, w_s, layer


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
def test_block_layer_end_to_end_on_cpu(op_dispatch, cuda_like, graphs_on_config, m, caplog):
    """Helion path (M <= 32) equals the fp32 reference of the layer's own quantized activations and
    block weights; M = 40 goes to vLLM's block kernel (its apply_weights, stubbed: CPU). At M = 17
    with HL_PRECOMPILE_THREADS=2 the first call precompiles the shape's other sizes first."""
    import logging

    from hlvllm import dispatch, precompile
    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel, layer_for
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    register()
    cuda_like.setenv("HL_HELION_EAGER", "1")
    if m == 17:
        cuda_like.setenv("HL_PRECOMPILE_THREADS", "2")
    get_settings.cache_clear()
    caplog.set_level(logging.INFO, logger="vllm.hlvllm")
    n, k = 200, 300  # partial last blocks
    gen, w_q, w_s, layer = _block_layer(n, k, seed=m)
    kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
    fallback_calls = []

    def fake_fallback(layer_, x_2d, bias):
        fallback_calls.append(x_2d.shape[0])
        q, s = kernel.quant_fp8(x_2d)
        return scaled_mm_ref(q, layer_.weight.t(), s, w_s, torch.bfloat16, bias, block_size=(128, 128))

    cuda_like.setattr(kernel.fallback, "apply_weights", fake_fallback)
    kernel.process_weights_after_loading(layer)
    assert kernel.registered and layer_for(layer.weight) == (kernel, layer)
    assert layer_for(layer.weight.view(n, k))[1] is layer  # found by storage, not by object
    with pytest.raises(KeyError, match=r"no Block_FP8 layer holds the weight at .*shape \(200, 300\)"):
        layer_for(w_q.clone())
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    precompile.set_compilation_config(None)
    precompile.set_capture_sizes([1, 2, 17, 32])
    out = kernel.apply_weights(layer, x, bias)
    if m == 17:  # the GEMM alone at the other sizes (ones), then the real call
        assert "precompiled block_fp8 N=200 K=300 at M=" in caplog.text and "failed" not in caplog.text
    else:
        assert "precompiled" not in caplog.text
    q, s = kernel.quant_fp8(x.reshape(-1, k))
    assert s.shape == (m, 3)
    ref = scaled_mm_ref(q, w_q.t(), s, w_s, torch.bfloat16, bias, block_size=(128, 128))
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_error(out, ref) <= tolerance("block_fp8", torch.bfloat16)
    path = "helion" if m <= 32 else "fallback"
    assert dispatch.DISPATCH_COUNTS[(path, m, n, k)] == 1
    assert fallback_calls == [m]  # up to 32: Helion's first call is checked against it; above: the path
    # hlvllm.precompile's job: the GEMM alone at another M, on ones laid out as the quant lays out
    assert q.is_contiguous() and s.is_contiguous() and q.dtype == torch.float8_e4m3fn
    ones = kernel.helion_gemm_at(5, layer.weight, kernel.helion_scale, torch.bfloat16, bias)
    ref_ones = scaled_mm_ref(
        torch.ones(5, k).to(torch.float8_e4m3fn), w_q.t(), torch.ones(5, 3), w_s, torch.bfloat16, bias,
        block_size=(128, 128),
    )  # fmt: skip
    assert rel_error(ones, ref_ones) <= tolerance("block_fp8", torch.bfloat16)


def test_block_layers_compile_to_one_graph_piece(op_dispatch, cuda_like, graphs_on_config):
    """Two Block_FP8 layers under torch.compile call the op with their weight as a graph input and
    no per-layer constant, so each layer's stretch of the graph is the same (what lets Inductor and
    vLLM compile one decoder-layer piece once for all layers); both still compute their own layer."""
    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    register()
    cuda_like.setenv("HL_HELION_EAGER", "1")
    get_settings.cache_clear()
    n = k = 256
    layers, kernels = [], []
    for seed in (1, 2):
        w_q, w_s = per_block_fp8_quant_ref(
            torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
        )
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(w_q, requires_grad=False)
        layer.weight_scale_inv = torch.nn.Parameter(w_s, requires_grad=False)
        layer.input_scale = None
        layer.weight_block_size = [128, 128]
        kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))

        def reference(layer_, x_2d, bias=None, kernel=kernel):  # vLLM's kernel, on the CPU
            q, s = kernel.quant_fp8(x_2d)
            w_s = layer_.weight_scale_inv  # the layer's own scales (the op passes them in)
            return scaled_mm_ref(q, layer_.weight.t(), s, w_s, torch.bfloat16, bias, block_size=(128, 128))

        cuda_like.setattr(kernel.fallback, "apply_weights", reference)
        kernel.process_weights_after_loading(layer)
        layers.append(layer)
        kernels.append(kernel)

    def two_layers(x):
        return kernels[1].apply_weights(layers[1], kernels[0].apply_weights(layers[0], x))

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(4, k, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    out = torch.compile(two_layers, backend=backend, fullgraph=True)(x)
    (gm,) = graphs
    op = torch.ops.hlvllm.block_scaled_mm
    calls = [nd for nd in gm.graph.nodes if nd.target in (op, op.default)]
    assert len(calls) == 2, gm.code
    for nd in calls:
        assert nd.args[1].op == "placeholder"  # the weight is an input of the graph
        assert not [a for a in nd.args if isinstance(a, int) and not isinstance(a, bool)]
    assert calls[0].args[1] is not calls[1].args[1]
    expected = kernels[1].fallback.apply_weights(layers[1], kernels[0].fallback.apply_weights(layers[0], x))
    assert rel_error(out, expected) <= 2 * tolerance("block_fp8", torch.bfloat16)


def test_block_layer_with_the_quantization_inside_the_gemm(op_dispatch, cuda_like, graphs_on_config):
    """HL_FUSED_QUANT=1: the Helion path is one kernel (hlcore.fused_linear.block_fp8_linear on the
    bf16 activations), equal to hlcore's 1x128 quant + Helion GEMM with the same config (the same
    quantized bytes in either interpreter), and the first call is still checked against vLLM's."""
    import hlcore.fused_linear as fl
    from hlcore.quant_kernels import per_token_group_fp8_quant
    from hlcore.scaled_mm import scaled_mm
    from hlvllm import dispatch
    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    register()
    cuda_like.setenv("HL_HELION_EAGER", "1")
    cuda_like.setenv("HL_FUSED_QUANT", "1")
    get_settings.cache_clear()
    n, k, m = 200, 300, 3
    gen, w_q, w_s, layer = _block_layer(n, k, seed=11)
    kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
    cfg = {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": True, "num_warps": 4, "num_stages": 1}
    fused_calls, fallback_calls = [], []
    real = fl.block_fp8_linear

    def spy(x, b, scale_b, out_dtype, bias, config=None):
        fused_calls.append(x.shape[0])
        return real(x, b, scale_b, out_dtype, bias, config=cfg)

    def fake_fallback(layer_, x_2d, bias):  # vLLM's block kernel is CUDA-only: the fp32 reference on
        fallback_calls.append(x_2d.shape[0])  # hlcore's quantized bytes (Triton's CPU interpreter
        q, s = per_token_group_fp8_quant(x_2d)  # rounds fp8 casts its own way, in both kernels alike)
        return scaled_mm_ref(q, layer_.weight.t(), s, w_s, torch.bfloat16, bias, block_size=(128, 128))

    cuda_like.setattr(fl, "block_fp8_linear", spy)
    cuda_like.setattr(kernel.fallback, "apply_weights", fake_fallback)
    kernel.process_weights_after_loading(layer)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    out = kernel.apply_weights(layer, x)
    assert fused_calls == [m] and fallback_calls == [m]
    assert dispatch.DISPATCH_COUNTS[("helion", m, n, k)] == 1  # agreed with vLLM's kernel: not a fallback
    q, s = per_token_group_fp8_quant(x)
    two = scaled_mm(q, w_q.t(), s, w_s, torch.bfloat16, block_size=(128, 128), config=cfg)
    torch.testing.assert_close(out, two, rtol=0, atol=0)


def test_block_precompile_sees_the_scale_layout_vllms_quantizer_writes(cuda_like, graphs_on_config):
    """Helion specializes on strides: the GEMM that hlvllm.precompile records at weight processing
    reads scale_a in the layout of the real call, row-major from our own quantizer in the op design,
    at capture the layout vLLM's block kernel quantizes into (DeepGEMM's TMA-aligned column-major:
    strides (1, M rounded up to 4)); the GEMM on those strides equals the fp32 reference."""
    import types

    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.settings import get_settings

    n, k = 200, 300
    _, w_q, w_s, layer = _block_layer(n, k, seed=3)
    cuda_like.setenv("HL_DISPATCH_AT", "op")
    get_settings.cache_clear()
    op_kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
    assert not op_kernel.at_capture and op_kernel.scale_a_layouts(3, 3, "cpu")[0].stride() == (3, 1)
    cuda_like.setenv("HL_DISPATCH_AT", "capture")
    get_settings.cache_clear()
    kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
    assert kernel.at_capture
    layouts = {}
    for column_major, tma in [(False, False), (True, False), (True, True)]:
        quant = types.SimpleNamespace(column_major_scales=column_major, tma_aligned_scales=tma)
        cuda_like.setattr(kernel.fallback, "quant_fp8", quant, raising=False)
        layouts[column_major, tma] = [kernel.scale_a_layouts(m, 3, "cpu")[0].stride() for m in (1, 3, 5)]
    assert layouts == {
        (False, False): [(3, 1)] * 3,
        (True, False): [(1, 1), (1, 3), (1, 5)],
        (True, True): [(1, 4), (1, 4), (1, 8)],
    }
    # the precompile's layouts: with TMA-aligned scales also the unpadded one vLLM's SiLU-and-mul +
    # quant fusion allocates for the down projection, where M is not a multiple of 4
    strides = {m: [t.stride() for t in kernel.scale_a_layouts(m, 3, "cpu")] for m in (1, 3, 4, 5)}
    assert strides == {1: [(1, 4), (1, 1)], 3: [(1, 4), (1, 3)], 4: [(1, 4)], 5: [(1, 8), (1, 5)]}
    ones = kernel.helion_gemm_at(5, w_q, w_s, torch.bfloat16, None)
    ref = scaled_mm_ref(
        torch.ones(5, k).to(torch.float8_e4m3fn), w_q.t(), torch.ones(5, 3), w_s, torch.bfloat16,
        block_size=(128, 128),
    )  # fmt: skip
    assert rel_error(ones, ref) <= tolerance("block_fp8", torch.bfloat16)


def test_block_guard_times_helion_on_the_scales_it_will_read(cuda_like, graphs_on_config, monkeypatch):
    """The speed guard's Helion side is the layer's Helion path: our quantizer's row-major scales in
    the op design; at capture vLLM's own quantizer (DeepGEMM's TMA-aligned column-major scales,
    which cost the Helion GEMM 3-18 % on the H200 from M = 2), then the Helion GEMM. Both equal the
    fp32 reference of the layer."""
    from hlcore import scaled_mm as sm
    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.settings import get_settings

    n, k, m = 200, 300, 3
    _, w_q, w_s, _ = _block_layer(n, k, seed=7)
    seen, real = [], sm.scaled_mm
    monkeypatch.setattr(
        sm, "scaled_mm", lambda a, b, sa, *r, **kw: seen.append(sa.stride()) or real(a, b, sa, *r, **kw)
    )

    def vllm_quant(x):  # vLLM's QuantFP8(tma_aligned_scales=True) for DeepGEMM: [M, 3], strides (1, 4)
        q, scale_a = per_token_group_fp8_quant_ref(x)
        return q, torch.empty_strided(scale_a.shape, (1, 4)).copy_(scale_a)

    for mode, strides in (("op", (3, 1)), ("capture", (1, 4))):
        cuda_like.setenv("HL_DISPATCH_AT", mode)
        get_settings.cache_clear()
        kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
        cuda_like.setattr(kernel.fallback, "quant_fp8", vllm_quant, raising=False)
        shape = kernel.guard_shape(w_q, w_s, w_s)
        helion_calls, _ = shape.make_calls(m, 2)
        seen.clear()
        out = helion_calls[0]()
        assert seen == [strides], mode
        x = torch.randn((m, k), generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
        q, scale_a = per_token_group_fp8_quant_ref(x)
        ref = scaled_mm_ref(q, w_q.t(), scale_a, w_s, torch.bfloat16, block_size=(128, 128))
        assert rel_error(out, ref) <= tolerance("block_fp8", torch.bfloat16), mode


@pytest.mark.triton_interpret  # the kernel cache stores generated code
def test_block_precompile_entry_is_the_one_the_captured_call_loads(cuda_like, graphs_on_config, tmp_path):
    """At capture vLLM's DeepGEMM op hands over the layer's own ``nn.Parameter``s (weight,
    ``weight_scale_inv``) and a TMA-aligned column-major scale_a; the precompile workers ran the GEMM
    on plain tensors of the same metadata. The captured call must load their kernel-cache entry
    (the H200 on 2026-12-04 compiled all 21 Block_FP8 kernels again at capture: a Parameter keyed
    apart from a tensor)."""
    import types

    from hlcore import kernel_cache, kernel_pool
    from hlcore import scaled_mm as sm
    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.gemm import helion_scaled_mm
    from hlvllm.settings import get_settings

    n, k, m = 200, 300, 3
    gen, w_q, w_s, layer = _block_layer(n, k, seed=5)
    cuda_like.setenv("HL_DISPATCH_AT", "capture")
    cuda_like.setenv("HL_KERNEL_CACHE_DIR", str(tmp_path / "kc"))
    get_settings.cache_clear()
    sm._kernel_for.cache_clear()
    try:
        kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
        quant = types.SimpleNamespace(column_major_scales=True, tma_aligned_scales=True)
        cuda_like.setattr(kernel.fallback, "quant_fp8", quant, raising=False)
        with kernel_pool.recording() as jobs:  # what hlvllm.precompile hands the workers
            kernel.helion_gemm_at(m, layer.weight.data, layer.weight_scale_inv.data, torch.bfloat16, None)
        assert len(jobs) == 2 and [r["error"] for r in kernel_pool.run_jobs(jobs)] == [None, None]
        sm._kernel_for.cache_clear()  # a new process's kernels: only the files remain

        x = torch.randn(m, k, generator=gen)
        q, scale_a = per_token_group_fp8_quant_ref(x)
        ref = scaled_mm_ref(q, w_q.t(), scale_a, w_s, torch.bfloat16, block_size=(128, 128))
        # the quant's TMA-aligned scales (o, and qkv / gate_up after the RMSNorm fusion), and the
        # unpadded column-major ones of the SiLU-and-mul fusion (down)
        for rows in (4, m):
            scale_a_vllm = torch.empty_strided((m, scale_a.shape[1]), (1, rows)).copy_(scale_a)
            out = torch.empty((m, n), dtype=torch.bfloat16)
            before = kernel_cache.stats()
            helion_scaled_mm(  # the routed call (hlvllm.gemm.scaled_mm_into) on vLLM's own arguments
                q, layer.weight.t(), scale_a_vllm, layer.weight_scale_inv, torch.bfloat16, None,
                out=out, fmt="block_fp8",
            )  # fmt: skip
            after = kernel_cache.stats()
            assert (after["disk_hits"] - before["disk_hits"], after["misses"] - before["misses"]) == (1, 0)
            assert rel_error(out, ref) <= tolerance("block_fp8", torch.bfloat16)
    finally:
        sm._kernel_for.cache_clear()
