"""hlcore.fused_linear.block_fp8_linear: the 1 x 128 activation quantization inside the Block_FP8
GEMM, against the two-kernel path (per_token_group_fp8_quant then scaled_mm, same config) and the
fp32 reference of the unfused chain."""

import os

import pytest
import torch

from hlcore.formats import get_format
from hlcore.fused_linear import block_fp8_linear, block_fp8_linear_ref, config_from_scaled_mm
from hlcore.quant_kernels import per_token_group_fp8_quant
from hlcore.scaled_mm import scaled_mm, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

GPU = os.environ.get("HL_TEST_GPU") == "1" and torch.cuda.is_available()
#: Triton's CPU interpreter rounds fp8 casts wrongly (ties away from zero, a carry bug): there the
#: fp32 reference is taken on the interpreter's own quantized bytes; Helion's eager mode and the GPU
#: compare with the reference quantizer.
FP8_EXACT = os.environ.get("HELION_INTERPRET") == "1" or GPU
DEVICE = "cuda" if GPU else "cpu"
#: scaled_mm block_fp8 configs (3 block sizes; the fused kernel takes the first two)
SPLIT1 = {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": False, "num_warps": 4, "num_stages": 1}
SWAP = {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": True, "num_warps": 4, "num_stages": 1}


def _inputs(m, n, k, seed=0, out_dtype=torch.bfloat16, bias=False):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn((m, k), generator=gen) * torch.exp(torch.randn((m, 1), generator=gen))).to(
        torch.bfloat16
    )
    w = (torch.randn((n, k), generator=gen) * 0.05).to(torch.bfloat16)
    w_q, scale_b = get_format("block_fp8").quantize_weight(w)
    b = (torch.randn((n,), generator=gen) * 0.5).to(out_dtype) if bias else None
    dev = torch.device(DEVICE)
    return x.to(dev), w_q.to(dev).t(), scale_b.to(dev), b


def _ref(x, b, scale_b, out_dtype, bias):
    if FP8_EXACT:
        return block_fp8_linear_ref(x, b, scale_b, out_dtype, bias)
    a, scale_a = per_token_group_fp8_quant(x)
    return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias, block_size=(128, 128))


def _two_kernels(x, b, scale_b, out_dtype, bias, config):
    a, scale_a = per_token_group_fp8_quant(x)
    return scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size=(128, 128), config=config)


@pytest.mark.parametrize("config", [SPLIT1, SWAP], ids=["plain", "swap_ab"])
@pytest.mark.parametrize("m,n,k", [(1, 192, 300), (3, 128, 256), (33, 64, 384)])
def test_equals_quantize_then_gemm_and_is_within_tolerance(m, n, k, config):
    x, b, scale_b, bias = _inputs(m, n, k, seed=m + k, bias=m == 3)
    out = block_fp8_linear(x, b, scale_b, torch.bfloat16, bias, config=config)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    # same quantized bytes, same tiles, same order of the fp32 sums: the same result
    torch.testing.assert_close(out, _two_kernels(x, b, scale_b, torch.bfloat16, bias, config), rtol=0, atol=0)
    ref = _ref(x, b, scale_b, torch.bfloat16, bias)
    assert rel_error(out, ref) <= tolerance("block_fp8", torch.bfloat16)


def test_split_k_sums_every_group_once():
    x, b, scale_b, bias = _inputs(5, 128, 512, seed=7, out_dtype=torch.float32, bias=True)
    cfg = {**SPLIT1, "split_k": 2}
    out = block_fp8_linear(x, b, scale_b, torch.float32, bias, config=cfg)
    ref = _ref(x, b, scale_b, torch.float32, bias)
    assert rel_error(out, ref) <= tolerance("block_fp8", torch.float32)


def test_zero_and_huge_groups():
    x, b, scale_b, _ = _inputs(4, 128, 256, seed=3)
    x[0] = 0  # every group of row 0 is zero: scale 1e-10 / 448, q = 0, out = 0 exactly
    x[1, :128] = 3.0e38  # a huge group: q saturates at +-448, its scale is finite, no NaN
    out = block_fp8_linear(x, b, scale_b, torch.float32, config=SPLIT1)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert not torch.isnan(out).any() and torch.isfinite(out[2:]).all()
    torch.testing.assert_close(out, _two_kernels(x, b, scale_b, torch.float32, None, SPLIT1), rtol=0, atol=0)


def test_strided_x_and_empty_m():
    x, b, scale_b, _ = _inputs(2, 64, 256, seed=5)
    wide = torch.zeros((2, 300), dtype=x.dtype, device=x.device)
    wide[:, :256] = x
    out = block_fp8_linear(wide[:, :256], b, scale_b, config=SPLIT1)  # row stride 300
    torch.testing.assert_close(out, block_fp8_linear(x, b, scale_b, config=SPLIT1), rtol=0, atol=0)
    empty = block_fp8_linear(x[:0], b, scale_b, config=SPLIT1)
    assert empty.shape == (0, 64) and empty.dtype == torch.bfloat16


def test_config_from_scaled_mm_drops_the_k_tile():
    assert config_from_scaled_mm(SWAP) == {**SWAP, "block_sizes": [16, 64]}
    assert config_from_scaled_mm('{"block_sizes": [32, 128, 128], "split_k": 4}') == {
        "block_sizes": [32, 128],
        "split_k": 4,
    }


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda x, b, s: (x.to(torch.int8), b, s), "x must be a 2-D"),
        (lambda x, b, s: (x, b.t().contiguous().t().contiguous(), s), "b must be column-major"),
        (
            lambda x, b, s: (x, b, s[:, :1]),
            r"scale_b must be float32 \[ceil\(N/128\), ceil\(K/128\)\] = \[1, 2\]",
        ),
        (lambda x, b, s: (x[:, :128], b, s), r"b must be a 2-D \[K, N\] = \[128, N\]"),
    ],
    ids=["x dtype", "b layout", "scale_b shape", "K mismatch"],
)
def test_bad_input_names_the_tensor(change, match):
    x, b, scale_b, _ = _inputs(2, 64, 256)
    with pytest.raises(ValueError, match=match):
        block_fp8_linear(*change(x, b, scale_b))
