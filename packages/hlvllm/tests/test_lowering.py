"""hlvllm.lowering: above max_helion_size the compiled graph calls vLLM's kernel, with no frame of ours.

On the CPU vLLM's CUDA ops are not loaded, so a stand-in for ``torch.ops._C.cutlass_scaled_mm`` with
vLLM's schema (read from its ``_C_stable_libtorch``) and the fp32 reference math is defined here;
``vllm._custom_ops.cutlass_scaled_mm`` (vLLM's own Python wrapper, the call vLLM's CUTLASS kernels
make) is what the pass traces into the graph. The graphs are traced with symbolic num_tokens, as
vLLM's are.
"""

import logging
import sys

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

N, K = 48, 96


@pytest.fixture(scope="module", autouse=True)
def _cutlass_on_cpu(vllm_cutlass_on_cpu):
    yield


@pytest.fixture
def ops(hl_env):
    from hlvllm.plugin import register

    register()
    return torch.ops.hlvllm


def _model(ops):
    def model(a, b, scale_a, scale_b, bias):
        return ops.scaled_mm(a, b, scale_a, scale_b, torch.bfloat16, bias) * 2

    return model


def _inputs(m, seed=0):
    d = generate_scaled_mm_inputs(m, N, K, with_bias=True, seed=seed)
    return (d["a"], d["b"], d["scale_a"], d["scale_b"], d["bias"]), d


def _targets(graph):
    return [n.target for n in graph.nodes if n.op == "call_function"]


def _lower(gm):
    from torch._guards import detect_fake_mode
    from torch._inductor.virtualized import V

    from hlvllm.lowering import lower_to_vllm

    mode = detect_fake_mode([n.meta["val"] for n in gm.graph.nodes if "val" in n.meta])
    with V.set_fake_mode(mode):
        result = lower_to_vllm(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return result


def test_lowering_replaces_the_op_by_vllms_cutlass_call(ops):
    """The hlvllm op node becomes vLLM's ``cutlass_scaled_mm`` (an ``empty`` and the CUTLASS op on
    it), with symbolic M; the lowered graph computes the reference at an M it was not traced at."""
    args, _ = _inputs(40)
    gm = make_fx(_model(ops), tracing_mode="symbolic")(*args)
    assert ops.scaled_mm.default in _targets(gm.graph)
    assert _lower(gm) == (1, [])
    targets = _targets(gm.graph)
    assert ops.scaled_mm.default not in targets
    assert torch.ops._C.cutlass_scaled_mm.default in targets
    args, d = _inputs(77, seed=1)
    out = gm(*args)
    assert out.shape == (77, N)
    assert rel_error(out, 2 * scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)


def test_a_node_that_cannot_be_lowered_stays_and_is_reported(ops, monkeypatch):
    from hlvllm import lowering

    def broken(*args):
        raise RuntimeError("cannot trace")

    monkeypatch.setitem(lowering.VLLM_IMPLS, "scaled_mm", broken)
    lowering._patterns.cache_clear()
    try:
        args, _ = _inputs(40)
        gm = make_fx(_model(ops), tracing_mode="symbolic")(*args)
        lowered, errors = _lower(gm)
    finally:
        lowering._patterns.cache_clear()
    assert lowered == 0 and errors == ["scaled_mm: RuntimeError: cannot trace"]
    assert ops.scaled_mm.default in _targets(gm.graph)  # the op stays: correct, with its host cost


def test_pass_applies_only_to_ranges_above_max_helion_size(ops, hl_env):
    from vllm.config.utils import Range

    from hlvllm import routing
    from hlvllm.lowering import _pass_class

    lowering_pass = _pass_class()()
    assert routing.max_helion_m() == 32
    assert lowering_pass.is_applicable_for_range(Range(start=33, end=8192))
    assert not lowering_pass.is_applicable_for_range(Range(start=1, end=32))
    assert not lowering_pass.is_applicable_for_range(Range(start=1, end=8192))  # no split: op keeps its test
    routing.set_capture_limit(16)  # vLLM's largest CUDA-graph size caps max_helion_size
    assert lowering_pass.is_applicable_for_range(Range(start=17, end=8192))
    assert lowering_pass.uuid().endswith("-max16")


def test_kernels_split_vllms_compile_ranges_at_max_helion_size(
    op_dispatch, cuda_like, graphs_on_config, fp8_layer_config
):
    """Building an hlvllm linear kernel adds max_helion_size to vLLM's compile-range endpoints, so
    vLLM compiles num_tokens <= 32 and > 32 as two graphs."""
    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.graphs import add_compile_range_endpoint

    cc = graphs_on_config.compilation_config
    limit = graphs_on_config.scheduler_config.max_num_batched_tokens
    before = cc.get_compile_ranges()
    HelionFP8ScaledMMLinearKernel(
        fp8_layer_config(), ["weight", "weight_scale", "input_scale", "input_scale_ub"]
    )
    ranges = [(r.start, r.end) for r in cc.get_compile_ranges()]
    assert (1, 32) in ranges and (33, limit) in ranges, (before, ranges)
    assert add_compile_range_endpoint(graphs_on_config, 32)  # idempotent
    assert [(r.start, r.end) for r in cc.get_compile_ranges()] == ranges
    assert not add_compile_range_endpoint(graphs_on_config, limit)  # no larger range to split off
    assert not add_compile_range_endpoint(graphs_on_config, 1)


def test_compiled_graph_above_the_threshold_calls_vllms_op_and_no_frame_of_ours(ops):
    """The pass as Inductor's post-grad pass (where vLLM's pass manager runs it) in the range above
    max_helion_size, on a ``torch.compile`` with dynamic M: the generated code calls
    ``torch.ops._C.cutlass_scaled_mm`` directly, a call of the compiled function runs no Python frame
    of hlvllm (profiled), and the results equal the reference; in the range up to max_helion_size the
    op stays."""
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.config.utils import Range

    from hlvllm import dispatch
    from hlvllm.lowering import _pass_class

    model = _model(ops)
    codes, ours, ran = {}, {}, {}
    for name, compile_range, m in (
        ("large", Range(start=33, end=4096), 64),
        ("small", Range(start=1, end=32), 8),
    ):
        torch._dynamo.reset()
        args, d = _inputs(m)
        torch._dynamo.mark_dynamic(args[0], 0)
        torch._dynamo.mark_dynamic(args[2], 0)
        lowering_pass = _pass_class()()
        only_in_range = lowering_pass if lowering_pass.is_applicable_for_range(compile_range) else None
        with pass_context(compile_range), inductor_config.patch(post_grad_custom_post_pass=only_in_range):
            compiled = torch.compile(model, fullgraph=True, dynamic=True)
            out, (code, *_) = run_and_get_code(compiled, *args)
        codes[name] = code
        assert rel_error(out, 2 * scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
        dispatch.reset()
        frames = set()
        args2, d2 = _inputs(100 if name == "large" else 5, seed=2)

        def profile(frame, event, arg, frames=frames):
            if event == "call":
                frames.add(frame.f_code.co_filename)

        sys.setprofile(profile)
        try:
            out2 = compiled(*args2)
        finally:
            sys.setprofile(None)
        ours[name] = sorted(f for f in frames if "/hlvllm/src/" in f or "/site-packages/hlvllm/" in f)
        ran[name] = sum(dispatch.DISPATCH_COUNTS.values())
        assert rel_error(out2, 2 * scaled_mm_ref(**d2)) <= tolerance("fp8_dynamic", torch.bfloat16)
    assert not ours["large"] and ran["large"] == 0, ours["large"]  # the op body never ran
    assert ours["small"] and ran["small"] == 1  # the profile sees our frames where they are
    assert "torch.ops._C.cutlass_scaled_mm.default(" in codes["large"]
    assert "torch.ops.hlvllm.scaled_mm" not in codes["large"]
    assert "torch.ops.hlvllm.scaled_mm.default(" in codes["small"]


def test_install_adds_the_pass_to_vllms_pass_manager_with_cuda(hl_env, monkeypatch, caplog):
    from vllm.compilation.passes.pass_manager import PostGradPassManager
    from vllm.config import DeviceConfig, VllmConfig

    from hlvllm import lowering

    monkeypatch.setattr(PostGradPassManager, "configure", PostGradPassManager.configure)
    monkeypatch.setattr(lowering, "_installed", False)
    lowering.install()  # no CUDA device: nothing to lower, nothing installed
    assert not lowering._installed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    lowering.install()
    lowering.install()  # idempotent
    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    manager = PostGradPassManager()
    manager.configure(cfg)
    names = [type(p).__name__ for p in manager.passes]
    assert names.count("HlvllmLinearLoweringPass") == 1


def _block_config(n, k):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        QuantKey,
        ScaleDesc,
        kFp8Dynamic128Sym,
    )

    weight = QuantKey(
        torch.float8_e4m3fn, ScaleDesc(torch.float32, True, GroupShape(128, 128)), symmetric=True
    )
    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=weight,
        activation_quant_key=kFp8Dynamic128Sym,
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
    )


def test_block_op_is_lowered_to_the_block_kernels_own_apply(cuda_like, graphs_on_config):
    """``hlvllm.block_scaled_mm`` becomes the ``apply_weights`` of the block kernel vLLM chose (here
    stubbed with the reference math on the stand-in layer it is given: CPU), on the graph's own
    weight and scale tensors."""
    from hlcore.quant import per_block_fp8_quant_ref
    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.plugin import register

    register()
    n, k = 256, 384
    w_q, w_s = per_block_fp8_quant_ref(torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.05)
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(w_q, requires_grad=False)
    layer.weight_scale_inv = torch.nn.Parameter(w_s, requires_grad=False)
    layer.input_scale = None
    layer.weight_block_size = [128, 128]
    kernel = HelionFp8BlockScaledMMKernel(_block_config(n=n, k=k))
    seen = []

    def fake_fallback(layer_, x_2d, bias=None):  # vLLM's block kernel: quantize 1x128, block GEMM
        seen.append(type(layer_).__name__)
        from hlcore.quant import per_token_group_fp8_quant_ref

        q, s = per_token_group_fp8_quant_ref(x_2d, 128)
        return scaled_mm_ref(
            q, layer_.weight.t(), s, layer_.weight_scale_inv, torch.bfloat16, bias, block_size=(128, 128)
        )

    cuda_like.setattr(kernel.fallback, "apply_weights", fake_fallback)
    kernel.process_weights_after_loading(layer)
    ops = torch.ops.hlvllm

    def model(x, weight, scale):
        return ops.block_scaled_mm(x, weight, scale, scale, torch.bfloat16, None)

    x = torch.randn(40, k, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    gm = make_fx(model, tracing_mode="symbolic")(x, layer.weight, layer.weight_scale_inv)
    assert _lower(gm) == (1, [])
    assert ops.block_scaled_mm.default not in _targets(gm.graph)
    x2 = torch.randn(50, k, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    out = gm(x2, layer.weight, layer.weight_scale_inv)
    want = fake_fallback(layer, x2)
    assert torch.equal(out, want)
    assert seen and set(seen) <= {"SimpleNamespace", "Module"}


def test_compile_cache_key_logging_is_quiet(ops, caplog):
    """Lowering a graph without hlvllm ops changes nothing and logs no warning."""
    from hlvllm.lowering import _pass_class

    def plain(x):
        return x * 2

    gm = make_fx(plain, tracing_mode="symbolic")(torch.randn(40, 8))
    before = [n.format_node() for n in gm.graph.nodes]
    with caplog.at_level(logging.WARNING, logger="vllm.hlvllm"):
        _pass_class()()(gm.graph)
    assert [n.format_node() for n in gm.graph.nodes] == before
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
