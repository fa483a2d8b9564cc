"""hlvllm's out-of-tree RMSNorm / SiluAndMul / QuantFP8 against the real vLLM 0.26 package on the CPU.

Which implementation a layer uses is proven two ways: its class and ``implementation`` ("hlvllm" or
"vllm"), and what a call actually runs (``aux_ops.AUX_COUNTS`` counts every ``torch.ops.hlvllm.*``
call by op and path; a layer left to vLLM adds nothing there).
"""

import contextlib
import os

import pytest
import torch

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"


@pytest.fixture
def stub_c_silu(hl_env):
    """vLLM's SiluAndMul constructor binds ``torch.ops._C.silu_and_mul`` on CUDA-like platforms; there
    is no ``vllm._C`` on this CPU box, so give it a stand-in that fails loudly if called."""

    def not_on_cpu(*_args):
        raise AssertionError("vLLM's CUDA silu_and_mul called on the CPU")

    hl_env.setattr(torch.ops._C, "silu_and_mul", not_on_cpu, raising=False)


@pytest.fixture
def aux(cuda_like, graphs_on_config, stub_c_silu):
    """Backend on with ``HL_AUX_KERNELS=all``, a faked SM90 CUDA platform, CUDA graphs on (capture
    sizes <= 64), plugin registered."""
    from hlvllm import aux_ops
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    cuda_like.setenv("HL_AUX_KERNELS", "all")
    get_settings.cache_clear()
    register()
    return aux_ops


def _vllm_classes():
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

    return RMSNorm, SiluAndMul, QuantFP8, GroupShape


def _aux_on(hl_env):
    """``HL_AUX_KERNELS=all`` (unset, the default, replaces none of vLLM's classes)."""
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_AUX_KERNELS", "all")
    get_settings.cache_clear()


# ------------------------------------------------------------------------------------------------
# Registration
# ------------------------------------------------------------------------------------------------
def test_register_replaces_the_three_classes_idempotently(hl_env):
    from vllm.model_executor.custom_op import op_registry, op_registry_oot

    import hlvllm.plugin as plugin
    from hlvllm.aux_layers import HelionQuantFP8, HelionRMSNorm, HelionSiluAndMul

    _aux_on(hl_env)
    plugin.register()
    plugin.register()
    plugin._registered = False  # a second real registration must not fail on vLLM's duplicate assert
    plugin.register()
    assert op_registry_oot["RMSNorm"] is HelionRMSNorm
    assert op_registry_oot["SiluAndMul"] is HelionSiluAndMul
    assert op_registry_oot["QuantFP8"] is HelionQuantFP8
    # vLLM's registered names are restored (register_oot renamed them "RMSNorm", ...)
    assert (HelionRMSNorm.name, HelionSiluAndMul.name, HelionQuantFP8.name) == (
        "rms_norm",
        "silu_and_mul",
        "quant_fp8",
    )
    assert op_registry["rms_norm"].__name__ == "RMSNorm"  # vLLM's own table is untouched
    for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "per_token_fp8_quant"):
        assert hasattr(torch.ops.hlvllm, op)
    assert hasattr(torch.ops.hlvllm, "per_token_int8_quant") and hasattr(
        torch.ops.hlvllm, "per_token_group_fp8_quant"
    )
    assert not torch.cuda.is_initialized()


def test_backend_off_replaces_nothing(hl_env, graphs_on_config):
    from vllm.model_executor.custom_op import op_registry_oot

    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
    hl_env.delenv("HL_LINEAR_BACKEND")
    get_settings.cache_clear()
    register()
    assert not {"RMSNorm", "SiluAndMul", "QuantFP8"} & set(op_registry_oot)
    assert type(RMSNorm(64)) is RMSNorm and type(QuantFP8(False, GroupShape.PER_TOKEN)) is QuantFP8
    assert hasattr(torch.ops.hlvllm, "rms_norm")  # the ops exist either way (cheap, no CUDA)


#: vLLM class each HL_AUX_KERNELS name replaces (int8_quant is the int8 kernel's own quantization)
LAYER_OF = {"rms_norm": "RMSNorm", "silu_and_mul": "SiluAndMul", "quant_fp8": "QuantFP8"}


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, ()),
        ({"HL_AUX_KERNELS": ""}, ()),
        ({"HL_AUX_FUSION": "0"}, ()),
        ({"HL_AUX_FUSION": "1"}, "all"),
        ({"HL_AUX_KERNELS": "none", "HL_AUX_FUSION": "1"}, ()),
        ({"HL_AUX_KERNELS": "rms_norm", "HL_AUX_FUSION": "1"}, ("rms_norm",)),
        ({"HL_AUX_KERNELS": "all", "HL_AUX_FUSION": "0"}, "all"),
    ],
    ids=["unset", "empty", "fusion-0", "fusion-1", "none+fusion", "list+fusion", "all"],
)
def test_hl_aux_kernels_default_is_none_unless_fusion(hl_env, env, expected):
    """``HL_AUX_KERNELS`` unset: no aux kernel (end to end they cost 7-9 % tokens/s on the H200), so
    ``register()`` replaces none of vLLM's RMSNorm / SiluAndMul / QuantFP8; unset with
    ``HL_AUX_FUSION=1``: all of them (the fusion pass rewrites those layers' ops); a value the user
    set wins over ``HL_AUX_FUSION``."""
    from vllm.compilation.passes.pass_manager import PostGradPassManager
    from vllm.model_executor.custom_op import op_registry_oot

    from hlvllm import aux_fusion
    from hlvllm.plugin import register
    from hlvllm.settings import AUX_KERNEL_NAMES, get_settings

    # register() installs the fusion pass with HL_AUX_FUSION=1: put vLLM's pass manager back after
    hl_env.setattr(PostGradPassManager, "configure", PostGradPassManager.configure)
    hl_env.setattr(aux_fusion, "_installed", False)
    for name, value in env.items():
        hl_env.setenv(name, value)
    get_settings.cache_clear()
    names = frozenset(AUX_KERNEL_NAMES if expected == "all" else expected)
    assert get_settings().aux_kernels == names
    register()
    assert set(LAYER_OF.values()) & set(op_registry_oot) == {LAYER_OF[n] for n in names if n in LAYER_OF}


def test_default_builds_vllms_layers_and_helion_gemms(
    cuda_like, graphs_on_config, stub_c_silu, fp8_layer_config
):
    """The default (Helion GEMMs only) on a pretend SM90 with CUDA graphs on: vLLM's chooser picks our
    FP8 kernel, and everything else is vLLM's own: the RMSNorm / SiluAndMul / QuantFP8 that model
    code builds, the FP8 kernel's activation quantization; no aux op runs."""
    from vllm.model_executor.kernels import linear as vllm_linear

    from hlvllm import aux_ops
    from hlvllm.plugin import register
    from hlvllm.vllm_compat import choose_scaled_mm_kernel

    register()
    RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
    norm, act, quant = RMSNorm(64), SiluAndMul(), QuantFP8(False, GroupShape.PER_TOKEN)
    assert (type(norm), type(act), type(quant)) == (RMSNorm, SiluAndMul, QuantFP8)
    cfg = fp8_layer_config(256, 128)
    kernel_cls = choose_scaled_mm_kernel(cfg, vllm_linear._POSSIBLE_FP8_KERNELS)
    assert kernel_cls.__name__ == "HelionFP8ScaledMMLinearKernel"
    names = ["weight", "weight_scale", "input_scale", "input_scale_ub"]
    assert type(kernel_cls(cfg, names).quant_fp8) is QuantFP8
    x = torch.randn(3, 64).to(torch.bfloat16)
    torch.testing.assert_close(norm(x), RMSNorm.forward_native(norm, x), rtol=0, atol=0)
    assert not aux_ops.AUX_COUNTS


@pytest.mark.parametrize(
    "value,expected",
    [
        ("rms_norm", {"RMSNorm"}),
        ("silu_and_mul, quant_fp8", {"SiluAndMul", "QuantFP8"}),
        ("int8_quant", set()),
        ("none", set()),
        ("0", set()),
        ("all", {"RMSNorm", "SiluAndMul", "QuantFP8"}),
    ],
)
def test_hl_aux_kernels_selects_layers(hl_env, value, expected):
    from vllm.model_executor.custom_op import op_registry_oot

    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_AUX_KERNELS", value)
    get_settings.cache_clear()
    register()
    assert {"RMSNorm", "SiluAndMul", "QuantFP8"} & set(op_registry_oot) == expected


def test_hl_aux_kernels_rejects_unknown_names(hl_env):
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_AUX_KERNELS", "rms_norm,gelu_and_mul")
    get_settings.cache_clear()
    with pytest.raises(ValueError, match="gelu_and_mul"):
        get_settings()


def test_another_plugins_replacement_is_left_alone(hl_env, caplog):
    from vllm.model_executor.custom_op import op_registry_oot

    from hlvllm.plugin import register

    RMSNorm, *_ = _vllm_classes()
    _aux_on(hl_env)

    class OtherRMSNorm(RMSNorm):
        pass

    op_registry_oot["RMSNorm"] = OtherRMSNorm
    with caplog.at_level("WARNING", logger="vllm.hlvllm"):
        register()
    assert op_registry_oot["RMSNorm"] is OtherRMSNorm
    assert any("already replaced" in r.message for r in caplog.records)


# ------------------------------------------------------------------------------------------------
# What vLLM builds resolves to hlvllm (and a call runs our op)
# ------------------------------------------------------------------------------------------------
def test_layers_built_like_vllm_model_code_use_hlvllm(aux):
    from hlvllm.aux_layers import HelionQuantFP8, HelionRMSNorm, HelionSiluAndMul

    RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
    norm = RMSNorm(256, eps=1e-6, dtype=torch.bfloat16)  # Qwen3/Llama: RMSNorm(hidden, eps=rms_norm_eps)
    act = SiluAndMul()  # LlamaMLP / Qwen2MLP
    per_token = QuantFP8(static=False, group_shape=GroupShape.PER_TOKEN)  # FP8ScaledMMLinearKernel
    group = QuantFP8(static=False, group_shape=GroupShape(1, 128), use_ue8m0=False)  # block-FP8 kernels
    group_cm = QuantFP8(False, GroupShape(1, 128), use_ue8m0=False, column_major_scales=True)  # CUTLASS block
    assert (type(norm), type(act), type(per_token)) == (HelionRMSNorm, HelionSiluAndMul, HelionQuantFP8)
    for layer in (norm, act, per_token, group, group_cm):
        assert layer.implementation == "hlvllm", layer.hl_reason
        assert layer._forward_method == layer.forward_helion
        # Inductor config (custom_ops "none"): vLLM would have run forward_native
        assert layer._vllm_forward.__name__ == "forward_native"

    x = torch.randn(3, 256).to(torch.bfloat16)
    norm(x)
    norm(x, torch.randn(3, 256).to(torch.bfloat16))
    act(x)
    per_token(x)
    group(x)
    _, scale_cm = group_cm(x)
    assert scale_cm.shape == (3, 2) and scale_cm.stride(0) == 1
    assert aux.AUX_COUNTS == {
        ("rms_norm", "helion", 3, 256): 1,  # first eager call at this size: Helion (compiles)
        ("fused_add_rms_norm", "helion", 3, 256): 1,
        ("silu_and_mul", "helion", 3, 128): 1,
        ("per_token_fp8_quant", "helion", 3, 256): 1,
        ("per_token_group_fp8_quant", "helion", 3, 256): 2,
    }


def test_fp8_linear_kernel_chosen_by_vllm_quantizes_with_hlvllm(aux, fp8_layer_config):
    """vLLM's chooser picks our FP8 kernel; the QuantFP8 that FP8ScaledMMLinearKernel builds is ours.
    vLLM's own CUTLASS kernel (the linear fallback) gets ours too: register_oot is global."""
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.model_executor.kernels.linear.scaled_mm.cutlass import CutlassFP8ScaledMMLinearKernel

    from hlvllm.aux_layers import HelionQuantFP8
    from hlvllm.vllm_compat import choose_scaled_mm_kernel

    cfg = fp8_layer_config(256, 128)
    kernel_cls = choose_scaled_mm_kernel(cfg, vllm_linear._POSSIBLE_FP8_KERNELS)
    names = ["weight", "weight_scale", "input_scale", "input_scale_ub"]
    for cls in (kernel_cls, CutlassFP8ScaledMMLinearKernel):
        quant = cls(cfg, names).quant_fp8
        assert type(quant) is HelionQuantFP8 and quant.implementation == "hlvllm", cls
    assert kernel_cls.__name__ == "HelionFP8ScaledMMLinearKernel"


def test_block_fp8_kernels_quant_resolution(aux):
    """The base block kernel (and so our Helion block kernel) quantizes row-major 1x128 with ours;
    DeepGEMM asks for TMA-aligned scales (VLLM_USE_DEEP_GEMM_TMA_ALIGNED_SCALES=1): left to vLLM."""
    RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
    deepgemm_like = QuantFP8(
        False, GroupShape(1, 128), use_ue8m0=False, tma_aligned_scales=True, column_major_scales=True
    )
    assert deepgemm_like.implementation == "vllm" and "TMA" in deepgemm_like.hl_reason


@pytest.mark.parametrize(
    "build,reason",
    [
        (lambda R, S, Q, G: R(64, has_weight=False), "has_weight=False"),
        (lambda R, S, Q, G: R(64, var_hidden_size=32), "var_hidden_size"),
        (lambda R, S, Q, G: Q(True, G.PER_TENSOR), "static"),
        (lambda R, S, Q, G: Q(True, G.PER_TOKEN), "static"),
        (lambda R, S, Q, G: Q(False, G.PER_TENSOR), "group shape"),
        (lambda R, S, Q, G: Q(False, G(1, 64)), "group shape"),
        (lambda R, S, Q, G: Q(False, G.PER_TOKEN, num_token_padding=17), "num_token_padding"),
        (lambda R, S, Q, G: Q(False, G(1, 128), use_ue8m0=True), "UE8M0"),
    ],
    ids=[
        "no-weight",
        "var-size",
        "static-tensor",
        "static-token",
        "dyn-tensor",
        "group64",
        "padding",
        "ue8m0",
    ],
)
def test_unsupported_variants_resolve_to_vllm(aux, build, reason):
    layer = build(*_vllm_classes())
    assert layer.implementation == "vllm" and reason in layer.hl_reason
    assert layer._forward_method == layer._vllm_forward  # exactly what vLLM chose (forward_native here)
    assert layer._forward_method.__name__ == "forward_native"
    assert not aux.AUX_COUNTS


def test_unsupported_call_arguments_go_to_vllm(aux):
    RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
    norm = RMSNorm(128, dtype=torch.float32)  # fp32 weight with bf16 activations: vLLM's IR path
    x = torch.randn(2, 128).to(torch.bfloat16)
    torch.testing.assert_close(norm(x), RMSNorm.forward_native(norm, x), rtol=0, atol=0)
    # (compile_native=False: vLLM would torch.compile its native forward, slow on this CPU box)
    group = QuantFP8(False, GroupShape(1, 128), use_ue8m0=False, compile_native=False)
    q, s = group(torch.randn(2, 200).to(torch.bfloat16))  # hidden not a multiple of 128: vLLM's
    assert s.shape == (2, 2)
    assert not aux.AUX_COUNTS


@pytest.mark.parametrize("case", ["not-cuda", "sm80", "graphs-off", "batch-invariant"])
def test_environment_that_does_not_qualify_keeps_vllm(cuda_like, graphs_on_config, stub_c_silu, case):
    from vllm.config import CUDAGraphMode
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    from hlvllm.plugin import register

    _aux_on(cuda_like)
    register()
    if case == "not-cuda":
        cuda_like.setattr(current_platform, "is_cuda", lambda: False)
    elif case == "sm80":
        cuda_like.setattr(
            current_platform, "get_device_capability", lambda device_id=0: DeviceCapability(8, 0)
        )
    elif case == "graphs-off":
        graphs_on_config.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    else:
        import vllm.envs as envs

        cuda_like.setattr(envs, "VLLM_BATCH_INVARIANT", True, raising=False)
        cuda_like.setenv("VLLM_BATCH_INVARIANT", "1")
    RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
    for layer in (RMSNorm(64), SiluAndMul(), QuantFP8(False, GroupShape.PER_TOKEN)):
        assert layer.implementation == "vllm", case
        assert layer._forward_method == layer._vllm_forward


def test_custom_ops_flags_use_vllm_names(aux, graphs_on_config):
    """``+rms_norm`` / ``-quant_fp8`` address our classes (register_oot's rename is undone): vLLM's
    dispatch picks forward_cuda for enabled ops, and that choice is what delegated variants run."""
    from vllm.config import get_cached_compilation_config

    cc = graphs_on_config.compilation_config
    cc.custom_ops = ["none", "+rms_norm", "+quant_fp8"]
    get_cached_compilation_config.cache_clear()
    try:
        RMSNorm, SiluAndMul, QuantFP8, GroupShape = _vllm_classes()
        assert RMSNorm(64).__class__.enabled() and not SiluAndMul().__class__.enabled()
        static = QuantFP8(True, GroupShape.PER_TENSOR)
        assert static.implementation == "vllm" and static._forward_method.__name__ == "forward_cuda"
        assert "rms_norm" in cc.enabled_custom_ops and "silu_and_mul" in cc.disabled_custom_ops
        cc.custom_ops = ["all", "-quant_fp8"]
        get_cached_compilation_config.cache_clear()
        assert QuantFP8(True, GroupShape.PER_TENSOR)._forward_method.__name__ == "forward_native"
    finally:
        get_cached_compilation_config.cache_clear()


# ------------------------------------------------------------------------------------------------
# Numerics on the CPU (Helion in the interpreter) against vLLM's native forward
# ------------------------------------------------------------------------------------------------
RTOL = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_layer_matches_vllm_native(aux, dtype):
    RMSNorm, *_ = _vllm_classes()
    h = 384
    norm = RMSNorm(h, eps=1e-5, dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    norm.weight.data.copy_(1 + 0.1 * torch.randn(h, generator=gen))
    for m in (1, 5):
        x = torch.randn(m, h, generator=gen).to(dtype)
        res = torch.randn(m, h, generator=gen).to(dtype)
        x_keep, res_keep = x.clone(), res.clone()
        out = norm(x)
        out2, new_res = norm(x, res)
        assert torch.equal(x, x_keep) and torch.equal(res, res_keep)  # functional: inputs untouched
        ref = RMSNorm.forward_native(norm, x)
        ref2, ref_res = RMSNorm.forward_native(norm, x.clone(), res.clone())
        torch.testing.assert_close(out, ref, rtol=RTOL[dtype], atol=1e-5)
        torch.testing.assert_close(out2, ref2, rtol=RTOL[dtype], atol=1e-5)
        # x + residual rounded once: exact, but Triton's interpreter truncates fp32 -> bf16
        exact = HELION_MODE or dtype != torch.bfloat16
        torch.testing.assert_close(new_res, ref_res, rtol=0 if exact else 2.0**-7, atol=0)
        # second eager call at the same size: vLLM's implementation (here its native math), exactly
        torch.testing.assert_close(norm(x), ref, rtol=0, atol=0)
    assert aux.AUX_COUNTS[("rms_norm", "helion", 5, h)] == 1
    assert aux.AUX_COUNTS[("rms_norm", "fallback", 5, h)] == 1


def test_rms_norm_layer_on_per_head_view(aux):
    """Qwen3's q_norm / k_norm: RMSNorm(head_dim) on a [T, heads, head_dim] view of the qkv output."""
    RMSNorm, *_ = _vllm_classes()
    norm = RMSNorm(64, dtype=torch.bfloat16)
    qkv = torch.randn(3, 4 * 64 + 2 * 64).to(torch.bfloat16)
    q = qkv[:, : 4 * 64].view(3, 4, 64)  # row stride 384: not viewable as [12, 64]
    out = norm(q)
    assert out.shape == (3, 4, 64)
    torch.testing.assert_close(out, RMSNorm.forward_native(norm, q), rtol=RTOL[torch.bfloat16], atol=1e-5)
    assert aux.AUX_COUNTS[("rms_norm", "helion", 3, 64)] == 1


def test_silu_and_mul_layer_matches_vllm_native(aux):
    _, SiluAndMul, *_ = _vllm_classes()
    act = SiluAndMul()
    x = (2 * torch.randn(4, 2 * 200)).to(torch.bfloat16)
    ref = SiluAndMul.forward_native(x)
    torch.testing.assert_close(act(x), ref, rtol=RTOL[torch.bfloat16], atol=1e-5)
    torch.testing.assert_close(act(x), ref, rtol=0, atol=0)  # eager again: vLLM's
    assert aux.AUX_COUNTS[("silu_and_mul", "helion", 4, 200)] == 1


def _fp8_agrees(q, scale, q_ref, scale_ref, what):
    """Scales are fp32 math: equal. fp8 bytes: equal to vLLM's native except for the division vs
    reciprocal-multiply ulp and, under Triton's interpreter, its known e4m3 rounding slips (see
    hlcore's test_quant_kernels): at most 10% of the values."""
    assert q.dtype == torch.float8_e4m3fn and q.shape == q_ref.shape, what
    torch.testing.assert_close(scale, scale_ref, rtol=0, atol=0, msg=what)
    same = (q.float() == q_ref.float()).float().mean().item()
    assert same >= (0.99 if HELION_MODE else 0.90), f"{what}: only {same:.1%} of fp8 values agree"


def test_quant_fp8_per_token_layer_matches_vllm_native(aux):
    _, _, QuantFP8, GroupShape = _vllm_classes()
    quant = QuantFP8(False, GroupShape.PER_TOKEN)
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(3, 256, generator=gen) * torch.exp(torch.randn(3, 1, generator=gen))).to(torch.bfloat16)
    q, s = quant(x)
    q_ref, s_ref = QuantFP8.forward_native(quant, x)
    _fp8_agrees(q, s, q_ref, s_ref, "per-token")
    ub = torch.tensor([0.5])
    q, s = quant(x, scale_ub=ub)
    q_ref, s_ref = QuantFP8.forward_native(quant, x, scale_ub=ub)
    _fp8_agrees(q, s, q_ref, s_ref, "per-token scale_ub")


@pytest.mark.parametrize("column_major", [False, True])
def test_quant_fp8_group_layer_matches_vllm(aux, column_major):
    """vLLM's native group math differs from its CUDA kernel in the minimum scale (1/(448*512) vs
    eps 1e-10 on the amax); ours follows the CUDA kernel, which agrees on any non-tiny group."""
    _, _, QuantFP8, GroupShape = _vllm_classes()
    quant = QuantFP8(False, GroupShape(1, 128), use_ue8m0=False, column_major_scales=column_major)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 384, generator=gen).to(torch.bfloat16)
    q, s = quant(x)
    q_ref, s_ref = QuantFP8.forward_native(quant, x)
    assert s.stride() == s_ref.stride() == ((1, 3) if column_major else (3, 1))
    _fp8_agrees(q, s, q_ref, s_ref, f"group column_major={column_major}")


# ------------------------------------------------------------------------------------------------
# A vLLM model block built by vLLM's own code, run end to end
# ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def one_rank_tp_group():
    """A one-rank gloo process group (vLLM's parallel linear layers ask for the TP group when built).

    Torn down before the forward pass: with torch.distributed initialized, Helion 1.5 on torch 2.11
    compiles every kernel as a symmetric-memory one (``helion._dist_utils.kernel_uses_symm_mem``
    falls back to True without ``symm_mem.is_symm_mem_tensor``): persistent programs only, which
    need an SM count that a CPU device does not have. On a GPU that works (and is what vLLM's
    workers get, see docs/aux-kernels.md); on this CPU box it would fail."""
    import socket

    from vllm.distributed import parallel_state as ps

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ps.init_distributed_environment(
        world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
    )
    ps.initialize_model_parallel(1, 1)
    try:
        yield
    finally:
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()


@pytest.fixture
def qwen3_mlp_cls():
    """Import vLLM's model module before the platform is faked (on a 'CUDA' platform it would load
    flash-attention's CUDA extension)."""
    from vllm.model_executor.models.qwen3 import Qwen3MLP

    return Qwen3MLP


def test_qwen3_fp8_mlp_built_by_vllm_runs_hlvllm_ops(
    qwen3_mlp_cls, op_dispatch, aux, graphs_on_config, cuda_like
):
    """Qwen3MLP with a compressed-tensors FP8_DYNAMIC config, built by vLLM's model and quantization
    code: gate_up/down pick HelionFP8ScaledMMLinearKernel, their QuantFP8 and the MLP's SiluAndMul
    are ours, and a forward pass runs our quant, silu_and_mul and GEMM ops (Helion, first eager call)
    with the right numbers."""
    import types

    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    import hlvllm.ops as ops
    from hlcore.quant import per_channel_fp8_quant_ref
    from hlcore.scaled_mm import scaled_mm_ref
    from hlcore.testing import rel_error, tolerance
    from hlvllm import dispatch
    from hlvllm.aux_layers import HelionQuantFP8, HelionSiluAndMul
    from hlvllm.settings import get_settings

    _, SiluAndMul, *_ = _vllm_classes()

    cutlass_calls = []

    def fake_cutlass(a, b, scale_a, scale_b, out_dtype, bias):  # M = 3 runs Helion; this only checks it
        cutlass_calls.append(a.shape[0])
        return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias)

    cuda_like.setattr(ops, "_fallback_scaled_mm", fake_cutlass)
    scheme = {
        "targets": ["Linear"],
        "weights": {
            "num_bits": 8,
            "type": "float",
            "strategy": "channel",
            "symmetric": True,
            "dynamic": False,
        },
        "input_activations": {
            "num_bits": 8,
            "type": "float",
            "strategy": "token",
            "symmetric": True,
            "dynamic": True,
        },
    }
    qc = CompressedTensorsConfig.from_config(
        {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": scheme}}
    )
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with one_rank_tp_group():
            # the FP8 scheme reads model_config.dtype; a full ModelConfig needs a checkpoint directory
            cuda_like.setattr(graphs_on_config, "model_config", types.SimpleNamespace(dtype=torch.bfloat16))
            mlp = qwen3_mlp_cls(
                hidden_size=128, intermediate_size=256, hidden_act="silu", quant_config=qc, prefix="mlp"
            )
    finally:
        torch.set_default_dtype(default_dtype)
    assert type(mlp.act_fn) is HelionSiluAndMul and mlp.act_fn.implementation == "hlvllm"
    gen = torch.Generator().manual_seed(4)
    weights = {}
    for name, lin in (("gate_up", mlp.gate_up_proj), ("down", mlp.down_proj)):
        kernel = lin.scheme.fp8_linear
        assert type(kernel).__name__ == "HelionFP8ScaledMMLinearKernel"
        assert type(kernel.quant_fp8) is HelionQuantFP8 and kernel.quant_fp8.implementation == "hlvllm"
        q, s = per_channel_fp8_quant_ref(torch.randn(lin.weight.shape, generator=gen) * 0.05)
        lin.weight.data.copy_(q)
        lin.weight_scale.data.copy_(s.view(lin.weight_scale.shape))
        lin.quant_method.process_weights_after_loading(lin)
        weights[name] = (q, s)
    x = torch.randn(3, 128, generator=gen).to(torch.bfloat16)
    out = mlp(x)  # M = 3, first eager calls: every op takes its Helion path (compiles)
    assert out.shape == (3, 128)
    assert aux.AUX_COUNTS == {
        ("per_token_fp8_quant", "helion", 3, 128): 1,  # gate_up's input
        ("silu_and_mul", "helion", 3, 256): 1,
        ("per_token_fp8_quant", "helion", 3, 256): 1,  # down's input
    }
    assert dispatch.DISPATCH_COUNTS == {("helion", 3, 512, 128): 1, ("helion", 3, 128, 256): 1}
    assert cutlass_calls == [3, 3]  # each first Helion call checked once against vLLM's kernel

    # Stage by stage against fp32 references of the same quantized tensors (Helion throughout)
    cuda_like.setenv("HL_HELION_EAGER", "1")
    get_settings.cache_clear()
    tol = tolerance("fp8_dynamic", torch.bfloat16)

    def linear_ref(lin, a, w):
        a_q, a_s = lin.scheme.fp8_linear.quant_fp8(a)  # our quant op (deterministic: same bytes)
        return scaled_mm_ref(a_q, w[0].t(), a_s, w[1], torch.bfloat16)

    gate_up = mlp.gate_up_proj(x)[0]
    assert rel_error(gate_up, linear_ref(mlp.gate_up_proj, x, weights["gate_up"])) <= tol
    act = mlp.act_fn(gate_up)
    torch.testing.assert_close(act, SiluAndMul.forward_native(gate_up), rtol=RTOL[torch.bfloat16], atol=1e-5)
    down = mlp.down_proj(act)[0]
    assert rel_error(down, linear_ref(mlp.down_proj, act, weights["down"])) <= tol
    assert torch.equal(down, out)


# ------------------------------------------------------------------------------------------------
# The workers' path: a fresh interpreter loading plugins the way vLLM's processes do
# ------------------------------------------------------------------------------------------------
WORKER_SCRIPT = r"""
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()  # what EngineCore and WorkerWrapperBase.init_worker call, before the model
from vllm.config import CUDAGraphMode, DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape
from vllm.platforms import PlatformEnum, current_platform
from vllm.platforms.interface import DeviceCapability
current_platform._enum = PlatformEnum.CUDA
current_platform.is_cuda = lambda: True
current_platform.get_device_capability = lambda device_id=0: DeviceCapability(9, 0)
cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
cfg.compilation_config.max_cudagraph_capture_size = 64
with set_current_vllm_config(cfg):
    for layer in (RMSNorm(64), QuantFP8(False, GroupShape.PER_TOKEN)):
        print("LAYER", type(layer).__name__, getattr(layer, "implementation", "vllm"))
"""


@pytest.mark.parametrize(
    "aux_kernels,expected",
    [
        ("all", ["LAYER HelionRMSNorm hlvllm", "LAYER HelionQuantFP8 hlvllm"]),
        (None, ["LAYER RMSNorm vllm", "LAYER QuantFP8 vllm"]),  # the default: vLLM's own layers
    ],
    ids=["all", "default"],
)
def test_fresh_process_gets_hlvllm_layers_through_the_entry_point(tmp_path, aux_kernels, expected):
    import subprocess
    import sys

    env = dict(os.environ, HL_LINEAR_BACKEND="helion", VLLM_PLUGINS="hlvllm")
    env.pop("HL_AUX_KERNELS", None)
    env.pop("HL_AUX_FUSION", None)
    if aux_kernels is not None:
        env["HL_AUX_KERNELS"] = aux_kernels
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("LAYER")]
    assert lines == expected, proc.stdout[-2000:]
