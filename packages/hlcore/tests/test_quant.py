"""Per-token fp8 quantization reference (vLLM semantics)."""

import torch

from hlcore.quant import FP8_MAX, FP8_MIN_SCALE, per_token_fp8_quant_ref


def test_scale_is_amax_over_448_and_roundtrip():
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(0))
    q, s = per_token_fp8_quant_ref(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (5, 1)
    torch.testing.assert_close(s, x.abs().amax(-1, keepdim=True) / FP8_MAX)
    deq = q.float() * s
    assert ((deq - x).norm() / x.norm()) < 0.05  # e4m3 has a 3-bit mantissa


def test_zero_row_gives_finite_zeros():
    x = torch.zeros(2, 32)
    x[1] = 1.0
    q, s = per_token_fp8_quant_ref(x)
    assert s[0].item() == torch.tensor(FP8_MIN_SCALE, dtype=torch.float32).item()
    assert torch.equal(q[0].float(), torch.zeros(32))
    assert torch.isfinite(q.float()).all()


def test_huge_and_inf_saturate():
    x = torch.tensor([[1e30, -1e30, 1.0, 0.0], [float("inf"), 1.0, -2.0, 0.0]])
    q, s = per_token_fp8_quant_ref(x)
    qf = q.float()
    assert torch.isfinite(qf).all() and torch.isfinite(s).all()
    assert qf[0, 0] == FP8_MAX and qf[0, 1] == -FP8_MAX
    assert qf[1, 0] == FP8_MAX
