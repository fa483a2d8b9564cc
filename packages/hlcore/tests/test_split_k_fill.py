"""hlcore.split_k_fill (the atomic split-K output fill) against its reference, in the CPU modes."""

import os

import pytest
import torch

from hlcore.split_k_fill import split_k_fill, split_k_fill_ref

CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 40), (5, 1000), (33, 2048)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_split_k_fill_matches_reference(shape, dtype, with_bias):
    g = torch.Generator().manual_seed(shape[0] * 7 + shape[1])
    out = torch.full(shape, float("nan"), dtype=dtype).to(DEVICE)  # every element must be written
    bias = (torch.randn(shape[1], generator=g) + 3).to(dtype).to(DEVICE) if with_bias else None
    expected = split_k_fill_ref(out, bias)
    assert not torch.isnan(expected).any() and bool(expected.abs().sum() > 0) is with_bias
    split_k_fill(out, bias)
    assert torch.equal(out, expected)


def test_split_k_fill_rejects_bad_input():
    out = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out must be a contiguous \[M, N\].*strides \(1, 4\)"):
        split_k_fill(torch.zeros(8, 4, dtype=torch.bfloat16).t(), None)
    with pytest.raises(
        ValueError, match=r"bias must be a contiguous \[8\] tensor of torch.bfloat16; got shape \(4,\)"
    ):
        split_k_fill(out, torch.zeros(4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"dtype torch.float32"):
        split_k_fill(out, torch.zeros(8, dtype=torch.float32))
