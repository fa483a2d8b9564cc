"""lab/scripts/bench_aux_fusion.py's pure-torch "inductor" math (what Inductor compiles under vLLM's -O2)
against vLLM 0.26's own native implementations and hlcore's references, eager on the CPU; and its
agreement check. The GPU benchmark itself is run by hand (docs/aux-kernels.md)."""

import pytest
import torch


@pytest.fixture(scope="module")
def bench(lab_script):
    return lab_script("bench_aux_fusion")


def _x(m, h, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, h, generator=g) * torch.exp(0.5 * torch.randn(m, 1, generator=g))
    return x.to(dtype)


def _bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norms_match_vllm_native_and_hlcore(bench, dtype):
    from vllm import ir

    from hlcore import norm

    x, r = _x(5, 320, 1, dtype), _x(5, 320, 2, dtype)
    w = (1 + 0.1 * torch.randn(320, generator=torch.Generator().manual_seed(3))).to(dtype)
    out = bench.native_rms_norm(x, w, 1e-6)
    assert _bits_equal(out, ir.ops.rms_norm.impls["native"].impl_fn(x, w, 1e-6, None))
    assert _bits_equal(out, norm.rms_norm_ref(x, w, 1e-6))
    out, res = bench.native_fused_add_rms_norm(x, r, w, 1e-6)
    v_out, v_res = ir.ops.fused_add_rms_norm.impls["native"].impl_fn(x.clone(), r.clone(), w, 1e-6, None)
    h_out, h_res = norm.fused_add_rms_norm_ref(x, r, w, 1e-6)
    assert _bits_equal(out, v_out) and _bits_equal(res, v_res)
    assert _bits_equal(out, h_out) and _bits_equal(res, h_res)


def test_silu_and_mul_matches_vllm_native_and_hlcore(bench):
    from vllm.model_executor.layers.activation import SiluAndMul

    from hlcore import activation

    x = _x(3, 2 * 96, 4)
    out = bench.native_silu_and_mul(x)
    assert _bits_equal(out, SiluAndMul.forward_native(x))
    assert _bits_equal(out, activation.silu_and_mul_ref(x))


def test_per_token_fp8_quant_matches_quantfp8_forward_native(bench):
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

    from hlcore.quant import per_token_fp8_quant_ref

    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        quant = QuantFP8(static=False, group_shape=GroupShape.PER_TOKEN)
    x = _x(6, 512, 5)
    x[2] = 0  # an all-zero row: the minimum scale
    q, scale = bench.native_per_token_fp8_quant(x)
    vq, vscale = quant.forward_native(x)
    assert _bits_equal(q, vq) and torch.equal(scale, vscale)
    # hlcore's reference divides where vLLM multiplies by the reciprocal: same scales, bytes within a step
    hq, hscale = per_token_fp8_quant_ref(x)
    assert torch.equal(scale, hscale)
    assert bench.agreement((hq, hscale), (q, scale))["steps"] <= 1.0


def test_pairs_and_agreement(bench):
    x, r = _x(4, 256, 6), _x(4, 256, 7)
    w = torch.ones(256, dtype=torch.bfloat16)
    ref = bench.native_pair("fused_add_rms_norm+quant")(x, r, w)
    assert len(ref) == 3 and ref[0].dtype == torch.float8_e4m3fn and ref[1].shape == (4, 1)
    same = bench.agreement(ref, tuple(t.clone() for t in ref))
    assert same["ok"] and same["equal_bytes"] == 1.0 and same["steps"] == 0.0 and same["residual_rel"] == 0.0
    # a scale 2x off (bytes halved): caught
    wrong = bench.agreement(ref, (ref[0], ref[1] * 2, ref[2]))
    assert not wrong["ok"]
    silu = bench.native_pair("silu_and_mul+quant")(_x(2, 128, 8), None, None)
    assert silu[0].shape == (2, 64) and silu[1].shape == (2, 1)
    assert bench.pair_bytes("silu_and_mul+quant", 2, 64) == 2 * 2 * 2 * 64 + 2 * 64 + 8
