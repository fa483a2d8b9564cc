"""Per-token fp8 quantization reference (vLLM semantics)."""

import torch

from hlcore.quant import (
    FP8_MAX,
    FP8_MIN_SCALE,
    per_block_fp8_quant_ref,
    per_token_fp8_quant_ref,
    per_token_group_fp8_quant_ref,
    per_token_int8_quant_ref,
)


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


def test_int8_round_half_to_even_and_saturation():
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]])  # amax 127 -> scale 1
    q, s = per_token_int8_quant_ref(x)
    assert s.item() == 1.0
    assert q.tolist() == [[127, 0, 2, 2, 0, -2, -2, 126]]
    q, s = per_token_int8_quant_ref(torch.tensor([[0.0, 0.0], [1e38, -float("inf")]]))
    assert s[0].item() == 0.0 and q[0].tolist() == [0, 0]
    assert torch.isfinite(s).all() and q[1].tolist() == [37, -127]  # -inf saturates to -fp32 max


def test_group_and_block_quant_layouts():
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(1))
    x[1, 128:256] = 0.0  # an all-zero group: finite zero bytes
    q, s = per_token_group_fp8_quant_ref(x, 128)
    assert q.shape == (3, 300) and s.shape == (3, 3)
    torch.testing.assert_close(s[0, 2], x[0, 256:].abs().max() / FP8_MAX)
    assert torch.equal(q[1, 128:256].float(), torch.zeros(128)) and torch.isfinite(s).all()
    deq = q.float() * s.repeat_interleave(128, 1)[:, :300]
    assert ((deq - x).norm() / x.norm()) < 0.05
    w = torch.randn(200, 300, generator=torch.Generator().manual_seed(2))
    qw, sw = per_block_fp8_quant_ref(w)
    assert qw.shape == (200, 300) and sw.shape == (2, 3)
    torch.testing.assert_close(sw[1, 2], w[128:, 256:].abs().max() / FP8_MAX)
