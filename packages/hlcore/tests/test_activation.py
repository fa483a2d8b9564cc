"""silu_and_mul (Helion) against vLLM's SiluAndMul.forward_native, in the CPU interpret modes.

Tolerances (kept here, not in hlcore.testing): the kernel computes silu as ``a * sigmoid(a)`` in
fp32 (Triton's interpreter has no libdevice exp), torch's ``F.silu`` as ``a / (1 + exp(-a))``: one
fp32 ulp apart, which after the rounding to the input dtype is at most one unit in the last place
on a few elements (fp16 shows it). Triton's interpreter also truncates fp32 -> bf16 (two roundings
here: silu, then the product). So each output may be 2 units in the last place off: relative 2^-6
for bf16, 2^-9 for fp16.
"""

import os

import pytest
import torch

from hlcore.activation import generate_silu_and_mul_inputs, silu_and_mul, silu_and_mul_ref
from hlcore.testing import AUX_CASES, aux_case_ids

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"
RTOL = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9}

# d = intermediate/tp sizes are large in real models; here d runs over the hidden sizes of the issue
CASES, IDS = AUX_CASES, aux_case_ids("d")


def assert_matches(out, ref, what):
    assert out.shape == ref.shape and out.dtype == ref.dtype, what
    torch.testing.assert_close(out.float(), ref.float(), rtol=RTOL[out.dtype], atol=1e-5, msg=what)
    if HELION_MODE or CUDA or out.dtype != torch.bfloat16:  # (bf16 truncation there moves most values)
        diff = (out != ref).float().mean().item()
        assert diff <= 0.02, f"{what}: {diff:.1%} of the outputs differ from the reference"


@pytest.mark.parametrize("d,m,dtype,strided", CASES, ids=IDS)
def test_silu_and_mul(d, m, dtype, strided):
    x = generate_silu_and_mul_inputs(
        m, d, dtype=dtype, row_stride=2 * d + 64 if strided else None, device=DEVICE, seed=d + m
    )
    assert_matches(silu_and_mul(x), silu_and_mul_ref(x), f"d={d} M={m} {dtype}")


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")  # sigmoid(-1e30), expected
def test_zero_tokens_leading_dims_and_extremes():
    x = generate_silu_and_mul_inputs(4, 96, device=DEVICE, seed=1)
    x[0] = 0.0
    x[1, 0], x[1, 96] = -1e30, 2.0  # silu(-huge) = -0 -> 0 * 2
    x[2, 1], x[2, 97] = 80.0, 3.0
    out = silu_and_mul(x)
    ref = silu_and_mul_ref(x)
    assert (out[0] == 0).all() and torch.isfinite(out).all()
    assert_matches(out, ref, "extremes")
    out3 = silu_and_mul(x.view(2, 2, 192))
    assert out3.shape == (2, 2, 96) and torch.equal(out3.view(4, 96), out)
    empty = torch.empty((0, 192), dtype=torch.bfloat16, device=DEVICE)
    assert silu_and_mul(empty).shape == (0, 96)


@pytest.mark.parametrize(
    "x,match",
    [
        (torch.zeros(2, 7), r"last dim must be 2 d .* shape \(2, 7\)"),
        (torch.zeros(2, 8, dtype=torch.int32), "x must be a .* tensor of dtype"),
    ],
)
def test_errors_name_the_problem(x, match):
    with pytest.raises(ValueError, match=match):
        silu_and_mul(x)


def test_every_generic_config_is_correct():
    from hlcore.aux_configs import SILU_AND_MUL_CONFIGS

    x = generate_silu_and_mul_inputs(5, 300, device=DEVICE, seed=4)
    ref = silu_and_mul_ref(x)
    for name, cfg in SILU_AND_MUL_CONFIGS.items():
        assert_matches(silu_and_mul(x, config=cfg), ref, name)
