"""hlcore.w8a16_linear: weight-only fp8 GEMMs with the activation in bf16, plain and with vLLM's
SiLU-and-mul in the K loop, against fp32 references; nearer the unquantized layer than the W8A8
chain (per-token fp8 quantization of the activation, then the fp8 GEMM). Triton's interpreter and
the GPU only: Helion 1.5.0's eager hl.dot of bf16/fp32 operands has no CPU kernel."""

import os

import pytest
import torch

from hlcore.activation_quant import silu_and_mul_fp8_quant_ref
from hlcore.formats import get_format
from hlcore.quant import per_token_fp8_quant_ref
from hlcore.scaled_mm import scaled_mm_ref
from hlcore.testing import rel_error
from hlcore.w8a16_linear import (
    silu_and_mul_w8a16_linear,
    silu_and_mul_w8a16_linear_ref,
    w8a16_linear,
    w8a16_linear_ref,
)

GPU = os.environ.get("HL_TEST_GPU") == "1" and torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
pytestmark = pytest.mark.skipif(
    os.environ.get("HELION_INTERPRET") == "1", reason="Helion's eager hl.dot of bf16 has no CPU kernel"
)
#: bf16 operand and output roundings only (Triton's interpreter truncates bf16 casts)
TOLERANCE = 0.01
PLAIN = {"block_sizes": [16, 32, 64], "split_k": 1, "swap_ab": False, "num_warps": 4, "num_stages": 1}
SWAP = {**PLAIN, "swap_ab": True}


def _weight(n, k, gen):
    w_q, scale_b = get_format("fp8_dynamic").quantize_weight(
        (torch.randn((n, k), generator=gen) * 0.05).bfloat16()
    )
    return w_q.to(DEVICE).t(), scale_b.to(DEVICE)


def _x(m, k, gen):
    return (
        (torch.randn((m, k), generator=gen) * torch.exp(torch.randn((m, 1), generator=gen)))
        .bfloat16()
        .to(DEVICE)
    )


@pytest.mark.parametrize(
    "m,n,d,config,with_bias",
    [(1, 96, 128, PLAIN, False), (3, 64, 192, SWAP, True), (33, 64, 128, SWAP, False)],
    ids=["M1", "M3-swap-bias", "M33-swap"],
)
def test_silu_and_mul_linear_within_tolerance_and_nearer_than_w8a8(m, n, d, config, with_bias):
    gen = torch.Generator().manual_seed(m + d)
    x, (b, scale_b) = _x(m, 2 * d, gen), _weight(n, d, gen)
    bias = (torch.randn((n,), generator=gen) * 0.5).bfloat16().to(DEVICE) if with_bias else None
    out = silu_and_mul_w8a16_linear(x, b, scale_b, bias=bias, config=config)
    ref = silu_and_mul_w8a16_linear_ref(x, b, scale_b, torch.float32, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_error(out, ref) <= TOLERANCE
    q, scale_a = silu_and_mul_fp8_quant_ref(x)
    w8a8 = scaled_mm_ref(q, b, scale_a, scale_b.reshape(-1), torch.float32, bias)
    assert rel_error(out, ref) < rel_error(w8a8, ref)


@pytest.mark.parametrize(
    "m,n,k,config,with_bias",
    [(1, 96, 256, PLAIN, False), (17, 64, 128, SWAP, True)],
    ids=["M1", "M17-swap-bias"],
)
def test_plain_linear_within_tolerance_and_nearer_than_w8a8(m, n, k, config, with_bias):
    gen = torch.Generator().manual_seed(m + k)
    x, (b, scale_b) = _x(m, k, gen), _weight(n, k, gen)
    bias = (torch.randn((n,), generator=gen) * 0.5).bfloat16().to(DEVICE) if with_bias else None
    out = w8a16_linear(x, b, scale_b, bias=bias, config=config)
    ref = w8a16_linear_ref(x, b, scale_b, torch.float32, bias)
    assert rel_error(out, ref) <= TOLERANCE
    q, scale_a = per_token_fp8_quant_ref(x)
    w8a8 = scaled_mm_ref(q, b, scale_a, scale_b.reshape(-1), torch.float32, bias)
    assert rel_error(out, ref) < rel_error(w8a8, ref)


def test_split_k_equals_one_chunk():
    gen = torch.Generator().manual_seed(5)
    x, (b, scale_b) = _x(5, 512, gen), _weight(64, 256, gen)
    bias = torch.randn((64,), generator=gen).to(DEVICE)
    one = silu_and_mul_w8a16_linear(x, b, scale_b, torch.float32, bias, config=PLAIN)
    four = silu_and_mul_w8a16_linear(x, b, scale_b, torch.float32, bias, config={**PLAIN, "split_k": 4})
    assert rel_error(four, one) <= 1e-5  # the same products, summed in another order
    assert rel_error(four, silu_and_mul_w8a16_linear_ref(x, b, scale_b, torch.float32, bias)) <= TOLERANCE


def test_empty_m_and_strided_x():
    gen = torch.Generator().manual_seed(7)
    x, (b, scale_b) = _x(2, 128, gen), _weight(64, 128, gen)
    assert w8a16_linear(x[:0], b, scale_b, config=PLAIN).shape == (0, 64)
    wide = torch.zeros((2, 200), dtype=x.dtype, device=x.device)
    wide[:, :128] = x
    torch.testing.assert_close(
        w8a16_linear(wide[:, :128], b, scale_b, config=PLAIN), w8a16_linear(x, b, scale_b, config=PLAIN)
    )


def test_bad_input_names_the_tensor():
    gen = torch.Generator().manual_seed(9)
    x, (b, scale_b) = _x(2, 128, gen), _weight(64, 128, gen)
    with pytest.raises(ValueError, match=r"x must be a 2-D \[M, 2 d\]"):
        silu_and_mul_w8a16_linear(x[:, :127], b, scale_b)
    with pytest.raises(ValueError, match=r"b must be a 2-D \[K, N\] = \[64, N\]"):
        silu_and_mul_w8a16_linear(x, b, scale_b)  # d = 64, b has K = 128
    with pytest.raises(ValueError, match="scale_b must be a per-channel"):
        w8a16_linear(x, b, scale_b[:10])
    with pytest.raises(ValueError, match="x must be a 2-D"):
        w8a16_linear(x.float(), b, scale_b)
