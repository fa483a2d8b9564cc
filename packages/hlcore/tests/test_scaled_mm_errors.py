"""Bad input to scaled_mm raises a ValueError naming the tensor and what is supported."""

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm


@pytest.fixture
def d():
    return generate_scaled_mm_inputs(3, 32, 64, seed=1)


def _call(d, **over):
    args = {**d, **over}
    return scaled_mm(args["a"], args["b"], args["scale_a"], args["scale_b"], args["out_dtype"], args["bias"])


def test_wrong_a_dtype(d):
    with pytest.raises(
        ValueError, match=r"A must be .*float8_e4m3fn.*got shape \(3, 64\), dtype torch.bfloat16"
    ):
        _call(d, a=d["a"].to(torch.bfloat16))


def test_b_dtype_mismatch(d):
    with pytest.raises(ValueError, match="B must be .* of A's dtype"):
        _call(d, b=d["b"].to(torch.float8_e5m2))


def test_mismatched_k(d):
    with pytest.raises(ValueError, match=r"B must be \[K, N\] with K = 64"):
        _call(d, b=d["b"][:32])


def test_row_major_b_rejected(d):
    with pytest.raises(ValueError, match="column-major"):
        _call(d, b=d["b"].contiguous())


def test_wrong_scale_a_shape(d):
    with pytest.raises(ValueError, match=r"scale_a must be a per-token tensor of M = 3"):
        _call(d, scale_a=torch.ones(1, 1))


def test_wrong_scale_b_shape_and_dtype(d):
    with pytest.raises(ValueError, match=r"scale_b must be a per-channel tensor of N = 32"):
        _call(d, scale_b=torch.ones(16, 1))
    with pytest.raises(ValueError, match="scale_b must be a float32 tensor"):
        _call(d, scale_b=d["scale_b"].to(torch.float16))


def test_wrong_bias(d):
    with pytest.raises(ValueError, match=r"bias must be a 1-D \[N\] = \[32\]"):
        _call(d, bias=torch.zeros(31, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bias"):
        _call(d, bias=torch.zeros(32, dtype=torch.float32))


def test_unsupported_out_dtype(d):
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        _call(d, out_dtype=torch.int32)


def test_device_mix(d):
    with pytest.raises(ValueError, match="one device"):
        _call(d, scale_b=d["scale_b"].to("meta"))


def test_rank(d):
    with pytest.raises(ValueError, match="2-D"):
        _call(d, a=d["a"].reshape(3, 8, 8))


def test_block_fp8_errors():
    b = generate_scaled_mm_inputs(3, 200, 300, fmt="block_fp8", seed=2)
    args = (b["a"], b["b"], b["scale_a"], b["scale_b"])
    with pytest.raises(ValueError, match=r"block_size must be \(128, 128\)"):
        scaled_mm(*args, block_size=(64, 128))
    with pytest.raises(ValueError, match=r"scale_a must be \[M, ceil\(K/128\)\] = \[3, 3\]"):
        scaled_mm(b["a"], b["b"], b["scale_a"][:, :2], b["scale_b"], block_size=(128, 128))
    with pytest.raises(ValueError, match=r"scale_b must be \[ceil\(N/128\), ceil\(K/128\)\] = \[2, 3\]"):
        scaled_mm(b["a"], b["b"], b["scale_a"], b["scale_b"].t(), block_size=(128, 128))
    i8 = generate_scaled_mm_inputs(3, 200, 300, fmt="w8a8_int8", seed=2)
    with pytest.raises(ValueError, match="block scales need fp8"):
        scaled_mm(i8["a"], i8["b"], b["scale_a"], b["scale_b"], block_size=(128, 128))
    with pytest.raises(ValueError, match="B must be .* of A's dtype torch.int8"):
        scaled_mm(i8["a"], b["b"], i8["scale_a"], i8["scale_b"])
