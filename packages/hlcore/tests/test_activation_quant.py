"""silu_and_mul fused with per-token fp8 quant (Helion) against float64 math and the unfused
references (``per_token_fp8_quant_ref(silu_and_mul_ref(x))``); the checks and the Triton
interpreter's known e4m3 roundings are those of test_norm_quant.py."""

import os

import pytest
import torch

from hlcore.activation import generate_silu_and_mul_inputs
from hlcore.activation_quant import silu_and_mul_fp8_quant, silu_and_mul_fp8_quant_ref
from hlcore.testing import assert_per_token_fp8_close, fp8_bytes_differ

CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"
FP8_EXACT = os.environ.get("HELION_INTERPRET") == "1" or CUDA
# silu rounded to x's dtype, then the product rounded again: 2 units in the last place (Triton's
# interpreter truncates instead of rounding: 2 more)
RTOL = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9, torch.float32: 1e-5}

# (d, M, dtype, strided): the model zoo's intermediate sizes are large; the interpreter runs one
# program per row, so a few rows each.
CASES = [
    (3072, 2, torch.bfloat16, False),
    (1536, 3, torch.float16, True),
    (6144, 1, torch.bfloat16, True),
    (1000, 33, torch.float16, False),
    (512, 2, torch.float32, True),
]
IDS = [f"d{d}-M{m}-{str(dt)[6:]}-{'strided' if s else 'contig'}" for d, m, dt, s in CASES]


def _silu64(x):
    d = x.shape[-1] // 2
    a, b = x[:, :d].double(), x[:, d:].double()
    return a * torch.sigmoid(a) * b


@pytest.mark.parametrize(("d", "m", "dtype", "strided"), CASES, ids=IDS)
def test_matches_fp64_math_and_the_unfused_references(d, m, dtype, strided):
    x = generate_silu_and_mul_inputs(
        m, d, dtype=dtype, row_stride=2 * d + 64 if strided else None, device=DEVICE, seed=d + m
    )
    q, scale = silu_and_mul_fp8_quant(x)
    q_ref, scale_ref = silu_and_mul_fp8_quant_ref(x)
    what = f"d={d} M={m} {dtype}"
    assert q.shape == (m, d)
    assert_per_token_fp8_close(q, scale, _silu64(x), 2 * RTOL[dtype] + 1e-6, FP8_EXACT, what)
    if FP8_EXACT or dtype != torch.bfloat16:  # (the interpreter truncates fp32 -> bf16)
        assert fp8_bytes_differ(q, q_ref) <= (0.02 if FP8_EXACT else 0.10), what


def test_zero_rows_scale_ub_and_bad_input():
    x = generate_silu_and_mul_inputs(3, 256, device=DEVICE, seed=3)
    x[0] = 0
    q, scale = silu_and_mul_fp8_quant(x)
    assert (q[0].float() == 0).all() and scale[0].item() == pytest.approx(1 / (448 * 512))
    ub = torch.tensor([0.25], dtype=torch.float32, device=DEVICE)
    q_ub, s_ub = silu_and_mul_fp8_quant(x, ub)
    assert torch.equal(s_ub, silu_and_mul_fp8_quant_ref(x, ub)[1])
    assert q_ub[1:].float().abs().max().item() == 448.0
    empty = silu_and_mul_fp8_quant(x[:0])
    assert empty[0].shape == (0, 256) and empty[1].shape == (0, 1)
    with pytest.raises(ValueError, match=r"x's last dim must be 2 d with d > 0"):
        silu_and_mul_fp8_quant(x[:, :511])
    with pytest.raises(ValueError, match=r"x must be a \[M, 2 d\] tensor"):
        silu_and_mul_fp8_quant(x.unsqueeze(0))
    with pytest.raises(ValueError, match="scale_ub must be None or a one-element float32"):
        silu_and_mul_fp8_quant(x, torch.ones(1, dtype=torch.float64, device=DEVICE))


@pytest.mark.parametrize(("d", "m", "dtype", "strided"), CASES, ids=IDS)
def test_int8_variant_matches_fp64_math_and_the_unfused_references(d, m, dtype, strided):
    from hlcore.activation_quant import silu_and_mul_int8_quant, silu_and_mul_int8_quant_ref
    from hlcore.testing import assert_per_token_int8_close

    x = generate_silu_and_mul_inputs(
        m, d, dtype=dtype, row_stride=2 * d + 64 if strided else None, device=DEVICE, seed=d + m + 1
    )
    q, scale = silu_and_mul_int8_quant(x)
    q_ref, _ = silu_and_mul_int8_quant_ref(x)
    what = f"int8 d={d} M={m} {dtype}"
    assert q.shape == (m, d)
    assert_per_token_int8_close(q, scale, _silu64(x), 2 * RTOL[dtype] + 1e-6, what)
    if FP8_EXACT or dtype != torch.bfloat16:
        assert (q != q_ref).float().mean().item() <= 0.02, what
        assert (q.int() - q_ref.int()).abs().max().item() <= 1, what
    with pytest.raises(ValueError, match="silu_and_mul_int8_quant: x's last dim must be 2 d"):
        silu_and_mul_int8_quant(x[:, :-1])
