"""hlvllm.aux_fusion: the norm / silu_and_mul + per-token fp8 quant graph pass, on a graph traced
with fake tensors (as vLLM's post-grad graphs are); its result against the unfused graph's on the
CPU (``HL_HELION_EAGER=1``: both graphs run the Helion kernels, in the interpret mode); its
installation in vLLM's PostGradPassManager."""

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hlcore.testing import fp8_bytes_differ


@pytest.fixture
def ops(hl_env):
    from hlvllm import aux_ops
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    register()
    aux_ops.register_aux_ops()
    hl_env.setenv("HL_HELION_EAGER", "1")  # every call runs Helion (not only each size's first)
    get_settings.cache_clear()
    return torch.ops.hlvllm


def _model(ops):
    def model(x, residual, w, w2, gate_up, ub):
        out, res = ops.fused_add_rms_norm(x, residual, w, 1e-6)
        # qkv input: fused (residual kept), through vLLM's no-op x.view(-1, H)
        q1, s1 = ops.per_token_fp8_quant(out.view(-1, out.shape[-1]), None)
        n2 = ops.rms_norm(res, w2, 1e-6)
        q2, s2 = ops.per_token_fp8_quant(n2, ub)  # first layer's input, with scale_ub: fused
        act = ops.silu_and_mul(gate_up)
        q3, s3 = ops.per_token_fp8_quant(act, None)  # down_proj input: fused
        n4 = ops.rms_norm(x, w, 1e-6)
        q4, s4 = ops.per_token_fp8_quant(n4, None)  # n4 has another user below: not fused
        return q1, s1, q2, s2, q3, s3, res * 2, q4, s4, n4 + 1

    return model


def _inputs(m=3, h=256, d=384):
    g = torch.Generator().manual_seed(0)
    bf = torch.bfloat16
    return (
        torch.randn((m, h), generator=g).to(bf),
        torch.randn((m, h), generator=g).to(bf),
        (1 + 0.1 * torch.randn(h, generator=g)).to(bf),
        (1 + 0.1 * torch.randn(h, generator=g)).to(bf),
        (2 * torch.randn((m, 2 * d), generator=g)).to(bf),
        torch.tensor([0.5], dtype=torch.float32),
    )


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def test_pass_fuses_the_pairs_and_keeps_the_results(ops):
    from hlvllm.aux_fusion import fuse_norm_quant

    model = _model(ops)
    inputs = _inputs()
    gm = make_fx(model, tracing_mode="fake")(*inputs)
    assert fuse_norm_quant(gm.graph) == 3
    gm.graph.lint()
    gm.recompile()
    targets = _targets(gm)
    assert targets.count(ops.fused_add_rms_norm_fp8_quant.default) == 1
    assert targets.count(ops.rms_norm_fp8_quant.default) == 1
    assert targets.count(ops.silu_and_mul_fp8_quant.default) == 1
    assert ops.fused_add_rms_norm.default not in targets and ops.silu_and_mul.default not in targets
    assert torch.ops.aten.view.default not in targets  # the no-op view went with the pair
    # the pair whose norm output is also used elsewhere stays as it was
    assert targets.count(ops.rms_norm.default) == 1 and targets.count(ops.per_token_fp8_quant.default) == 1
    fused_node = next(n for n in gm.graph.nodes if n.target is ops.fused_add_rms_norm_fp8_quant.default)
    assert (
        isinstance(fused_node.meta["val"], tuple) and fused_node.meta["val"][0].dtype == torch.float8_e4m3fn
    )

    got, want = gm(*inputs), model(*inputs)
    for i in (0, 2, 4, 7):  # fp8 bytes of the four quantizations
        assert got[i].dtype == torch.float8_e4m3fn and got[i].shape == want[i].shape
        assert fp8_bytes_differ(got[i], want[i]) <= 0.02, i
    for i in (1, 3, 5, 8):  # scales
        torch.testing.assert_close(got[i], want[i], rtol=2.0**-6, atol=0)
    assert torch.allclose(got[3], torch.full_like(got[3], 0.5 / 448)) or (got[3] <= 0.5 / 448 + 1e-12).all()
    torch.testing.assert_close(got[6], want[6], rtol=2.0**-7, atol=0)  # the residual, through the fused op
    torch.testing.assert_close(got[9], want[9], rtol=2.0**-6, atol=1e-5)


def test_pass_leaves_graphs_without_pairs_alone(ops):
    from hlvllm.aux_fusion import fuse_norm_quant

    def model(x, w):
        return ops.rms_norm(x, w, 1e-6) * 2, ops.per_token_fp8_quant(x, None)[0]

    x, _, w, *_ = _inputs()
    gm = make_fx(model, tracing_mode="fake")(x, w)
    before = [n.format_node() for n in gm.graph.nodes]
    assert fuse_norm_quant(gm.graph) == 0
    assert [n.format_node() for n in gm.graph.nodes] == before


def test_install_adds_the_pass_to_vllms_pass_manager_and_its_uuid(ops, monkeypatch):
    from vllm.compilation.passes.pass_manager import PostGradPassManager
    from vllm.config import DeviceConfig, VllmConfig

    from hlvllm import aux_fusion

    monkeypatch.setattr(PostGradPassManager, "configure", PostGradPassManager.configure)
    monkeypatch.setattr(aux_fusion, "_installed", False)
    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    plain = PostGradPassManager()
    plain.configure(cfg)
    aux_fusion.install()
    aux_fusion.install()  # idempotent
    with_pass = PostGradPassManager()
    with_pass.configure(cfg)
    names = [type(p).__name__ for p in with_pass.passes]
    assert names == [type(p).__name__ for p in plain.passes] + ["HlvllmNormQuantFusionPass"]
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.config.utils import Range

    with pass_context(Range(start=1, end=64)):
        assert with_pass.uuid() != plain.uuid()  # vLLM's compile cache tells the graphs apart

    def model(x, w):
        return ops.per_token_fp8_quant(ops.rms_norm(x, w, 1e-6), None)

    x, _, w, *_ = _inputs()
    gm = make_fx(model, tracing_mode="fake")(x, w)
    with_pass.passes[-1](gm.graph)
    assert ops.rms_norm_fp8_quant.default in _targets(gm)


def test_register_installs_the_pass_only_with_hl_aux_fusion(hl_env, monkeypatch):
    from vllm.compilation.passes.pass_manager import PostGradPassManager

    from hlvllm import aux_fusion, plugin
    from hlvllm.compile_cache import compile_key
    from hlvllm.settings import AUX_KERNEL_NAMES, get_settings

    monkeypatch.setattr(PostGradPassManager, "configure", PostGradPassManager.configure)
    monkeypatch.setattr(aux_fusion, "_installed", False)
    plugin.register()
    assert not aux_fusion._installed and "aux=none " in compile_key() and "aux_fusion=0" in compile_key()
    hl_env.setenv("HL_AUX_FUSION", "1")
    get_settings.cache_clear()
    monkeypatch.setattr(plugin, "_registered", False)
    plugin.register()
    assert aux_fusion._installed and "aux_fusion=1" in compile_key()
    # HL_AUX_KERNELS unset: the pass brings the aux kernels it fuses (all of them)
    assert get_settings().aux_kernels == frozenset(AUX_KERNEL_NAMES)
    assert f"aux={','.join(sorted(AUX_KERNEL_NAMES))} " in compile_key()


def test_a_failing_pass_warns_and_leaves_a_valid_graph(ops, monkeypatch, caplog):
    import logging

    from hlvllm import aux_fusion

    def model(x, w):
        return ops.per_token_fp8_quant(ops.rms_norm(x, w, 1e-6), None)

    x, _, w, *_ = _inputs()
    gm = make_fx(model, tracing_mode="fake")(x, w)
    before = [n.format_node() for n in gm.graph.nodes]

    def boom(target, args):
        raise RuntimeError("no fake mode")

    monkeypatch.setattr(aux_fusion, "_fake_result", boom)  # fails before the graph is changed
    with caplog.at_level(logging.WARNING, logger="vllm.hlvllm"):
        aux_fusion._pass_class()()(gm.graph)
    assert [n.format_node() for n in gm.graph.nodes] == before  # untouched, still compilable
    gm.graph.lint()
    (msg,) = [r.getMessage() for r in caplog.records if "HL_AUX_FUSION pass failed" in r.getMessage()]
    assert "RuntimeError: no fake mode" in msg


def test_pass_fuses_int8_pairs(ops):
    """W8A8_INT8 layers quantize with ``hlvllm.per_token_int8_quant``: the same three pairs fuse
    into the ``*_int8_quant`` ops, with the unfused graph's results."""
    from hlvllm.aux_fusion import fuse_norm_quant

    def model(x, residual, w, w2, gate_up, ub):
        out, res = ops.fused_add_rms_norm(x, residual, w, 1e-6)
        q1, s1 = ops.per_token_int8_quant(out)
        q2, s2 = ops.per_token_int8_quant(ops.rms_norm(res, w2, 1e-6))
        q3, s3 = ops.per_token_int8_quant(ops.silu_and_mul(gate_up))
        return q1, s1, q2, s2, q3, s3, res

    inputs = _inputs()
    gm = make_fx(model, tracing_mode="fake")(*inputs)
    assert fuse_norm_quant(gm.graph) == 3
    gm.graph.lint()
    gm.recompile()
    targets = _targets(gm)
    assert {ops.fused_add_rms_norm_int8_quant.default, ops.rms_norm_int8_quant.default} <= set(targets)
    assert ops.silu_and_mul_int8_quant.default in targets and ops.per_token_int8_quant.default not in targets
    got, want = gm(*inputs), model(*inputs)
    for i in (0, 2, 4):
        assert got[i].dtype == torch.int8 and (got[i] != want[i]).float().mean().item() <= 0.02, i
        assert (got[i].int() - want[i].int()).abs().max().item() <= 1, i
    for i in (1, 3, 5):
        torch.testing.assert_close(got[i], want[i], rtol=2.0**-6, atol=0)
    torch.testing.assert_close(got[6], want[6], rtol=2.0**-7, atol=0)


def test_pass_inside_inductor_fuses_and_keeps_the_result(ops):
    """The pass as Inductor's post-grad custom pass (where vLLM's pass manager runs it) on a real
    ``torch.compile`` of norm -> view -> quant: the compiled graph calls the fused op, and its results
    equal the eager unfused run's."""
    import torch._inductor.config as inductor_config

    from hlvllm import aux_ops
    from hlvllm.aux_fusion import _pass_class

    def f(x, r, w):
        out, res = ops.fused_add_rms_norm(x, r, w, 1e-6)
        q, s = ops.per_token_fp8_quant(out.view(-1, out.shape[-1]), None)
        return q.float() * s, res * 2

    x, r, w, *_ = _inputs()
    want = f(x, r, w)
    aux_ops.reset()
    with inductor_config.patch(post_grad_custom_post_pass=_pass_class()()):
        got = torch.compile(f, fullgraph=True, dynamic=False)(x, r, w)
    ran = {op for (op, _, _, _) in aux_ops.AUX_COUNTS}
    assert ran == {"fused_add_rms_norm_fp8_quant"}, ran
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
