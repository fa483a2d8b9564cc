"""Helion quant kernels (per-token fp8, per-token int8, 1x128-group fp8) against the hlcore.quant
references, in the CPU interpret modes.

Exactness: scales are float32 math and must match the reference bit for bit in both modes; int8
bytes too (the kernel rounds half to even in fp32 arithmetic). fp8 bytes are bit-exact only under
HELION_INTERPRET: Triton's interpreter casts fp32 -> e4m3 rounding ties away from zero and, just
below a power of two, drops the carry into the exponent (126.2 -> 64 instead of 128); subnormals
(|v| < 2^-6) it truncates toward zero. There each fp8
element must equal the reference or be one of those two known interpreter roundings, and at most
10% of elements may differ (3-6% do on bf16 N(0, 1) rows: many exact ties).
"""

import itertools
import os

import pytest
import torch

from hlcore.quant_kernels import (
    generate_quant_inputs,
    per_token_fp8_quant,
    per_token_fp8_quant_ref,
    per_token_group_fp8_quant,
    per_token_group_fp8_quant_ref,
    per_token_int8_quant,
    per_token_int8_quant_ref,
)
from hlcore.testing import AUX_CASES, aux_case_ids

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"
FP8 = torch.float8_e4m3fn
FP8_EXACT = HELION_MODE or CUDA

CASES = AUX_CASES  # one per hidden size (see hlcore.testing)
DTYPES = [torch.bfloat16, torch.float16]
IDS = aux_case_ids("H")


def _fp8_ulp(t: torch.Tensor) -> torch.Tensor:
    """Spacing of e4m3 values around |t| (3 mantissa bits, subnormal spacing 2^-9)."""
    e = torch.floor(torch.log2(t.abs().clamp(min=2.0**-6)))
    return torch.exp2(e - 3)


def assert_fp8_matches(q, scale, x, q_ref, scale_ref, what):
    assert q.dtype == FP8 and q.shape == x.shape, what
    assert torch.equal(scale, scale_ref), f"{what}: scales differ, max {(scale - scale_ref).abs().max():.3e}"
    qf, rf = q.float(), q_ref.float()
    assert torch.isfinite(qf).all(), f"{what}: NaN fp8 bytes"
    if FP8_EXACT:
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), (
            f"{what}: {(qf != rf).sum().item()} fp8 bytes differ"
        )
        return
    full = scale_ref if scale_ref.shape[1] == 1 else scale_ref.repeat_interleave(128, dim=1)[:, : x.shape[1]]
    target = (x.float() / full).clamp(-448, 448)
    near = (qf - target).abs() <= _fp8_ulp(target) / 2 * (1 + 1e-6)  # ties rounded away from zero
    carry = (rf.abs() == torch.exp2(torch.log2(rf.abs().clamp(min=2.0**-9)).round())) & (qf == rf / 2)
    subnormal = (target.abs() < 2.0**-6) & ((qf - target).abs() < 2.0**-9)  # truncated toward zero
    # x / scale below float32's normal range (a row scaled by an inf/huge amax): the interpreter's
    # cast gives up to the smallest e4m3 normal instead of 0
    f32_denormal = (target.abs() < 2.0**-126) & (qf.abs() <= 2.0**-6)
    ok = (qf == rf) | near | carry | subnormal | f32_denormal
    assert ok.all(), f"{what}: {(~ok).sum().item()} fp8 values off beyond the interpreter's rounding"
    frac = (qf != rf).float().mean().item()
    assert frac <= 0.10, f"{what}: {frac:.1%} of fp8 values differ from the reference"


def _x(m, h, dtype, strided, seed):
    return generate_quant_inputs(
        m, h, dtype=dtype, row_stride=h + 64 if strided else None, device=DEVICE, seed=seed
    )


@pytest.mark.parametrize("h,m,dtype,strided", CASES, ids=IDS)
def test_per_token_fp8_quant(h, m, dtype, strided):
    x = _x(m, h, dtype, strided, seed=h + m)
    assert (x.stride(0) != h) == strided
    q, s = per_token_fp8_quant(x)
    assert s.shape == (m, 1) and s.dtype == torch.float32
    assert_fp8_matches(q, s, x, *per_token_fp8_quant_ref(x), f"H={h} M={m} {dtype}")


@pytest.mark.parametrize("h,m,dtype,strided", CASES, ids=IDS)
def test_per_token_int8_quant(h, m, dtype, strided):
    x = _x(m, h, dtype, strided, seed=2 * h + m)
    q, s = per_token_int8_quant(x)
    q_ref, s_ref = per_token_int8_quant_ref(x)
    assert q.dtype == torch.int8 and q.shape == (m, h) and s.shape == (m, 1)
    assert torch.equal(s, s_ref), f"H={h} M={m}: scales differ"
    assert torch.equal(q, q_ref), f"H={h} M={m}: {(q != q_ref).sum().item()} int8 values differ"


@pytest.mark.parametrize("h,m,dtype,strided", CASES, ids=IDS)
def test_per_token_group_fp8_quant(h, m, dtype, strided):
    if not (HELION_MODE or CUDA) and h >= 4096:
        # Triton's interpreter time grows with the group count; the hidden size only sets how many
        # 128-groups a row has, so the large ones run at a quarter (still 8-16 groups, 1024-2048)
        h //= 4
    x = _x(m, h, dtype, strided, seed=3 * h + m)
    q_ref, s_ref = per_token_group_fp8_quant_ref(x)
    column_major = m in (1, 32, 3) and h != 2560  # both layouts over the cases
    # 16 rows per program: Triton's interpreter pays per program (M x G of them with the picked
    # 1-row config); every generic config is checked in test_every_generic_config_is_correct
    config = None if HELION_MODE or CUDA else {"block_sizes": [16], "num_warps": 4}
    q, s = per_token_group_fp8_quant(x, column_major_scales=column_major, config=config)
    assert s.shape == (m, -(-h // 128))
    if column_major:
        assert s.stride(0) == 1, f"column-major scales expected, strides {s.stride()}"
    else:
        assert s.is_contiguous()
    assert_fp8_matches(q, s, x, q_ref, s_ref, f"H={h} M={m} {dtype} column_major={column_major}")


def test_int8_many_tokens():
    """The one num_tokens = 1000 case, kept cheap for Triton's interpreter (hidden 16: a 1000-row
    hidden-1000 input takes ~40 s there); int8 is exact, with the picked 4-row config."""
    x = _x(1000, 16, torch.bfloat16, True, seed=7)
    q, s = per_token_int8_quant(x)
    q_ref, s_ref = per_token_int8_quant_ref(x)
    assert torch.equal(s, s_ref) and torch.equal(q, q_ref)


def test_int8_ties_round_half_to_even():
    # amax 127 -> scale exactly 1, so x / scale are the exact halves below
    row = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5, -126.5, 125.5, 0.0]
    x = torch.tensor([row, [v / 2 for v in row]], dtype=torch.float32, device=DEVICE)
    q, s = per_token_int8_quant(x)
    assert s.flatten().tolist() == [1.0, 0.5]
    expect = [127, 0, 2, 2, 0, -2, -2, 4, 4, -126, 126, 0]
    assert q.tolist() == [expect, expect]
    assert torch.equal(q, per_token_int8_quant_ref(x)[0])


@pytest.mark.parametrize("kernel", ["fp8", "int8", "group", "group_colmajor"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_huge_and_inf_rows(kernel, dtype):
    """All-zero rows/groups give zeros and finite scales; huge values and +-inf saturate, no NaN."""
    h = 300  # three groups, the last partial
    x = generate_quant_inputs(5, h, dtype=dtype, device=DEVICE, seed=11)
    big = torch.finfo(dtype).max
    x[0] = 0.0
    x[1, 7], x[1, 290] = float("inf"), -float("inf")
    x[2, :128] = 0.0  # a zero group in an otherwise normal row
    x[3, 5], x[3, 200] = big, -big
    x[4, 130:] = -float("inf")
    if kernel == "int8":
        q, s = per_token_int8_quant(x)
        q_ref, s_ref = per_token_int8_quant_ref(x)
        assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
        assert s[0].item() == 0 and (q[0] == 0).all()
        assert q[1, 7].item() == 127 and q[1, 290].item() == -127 and (q[4, 130:] == -127).all()
        return
    if kernel == "fp8":
        q, s = per_token_fp8_quant(x)
        q_ref, s_ref = per_token_fp8_quant_ref(x)
        assert s[0].item() == torch.tensor(1.0 / (448 * 512), dtype=torch.float32).item()
    else:
        q, s = per_token_group_fp8_quant(x, column_major_scales=kernel == "group_colmajor")
        q_ref, s_ref = per_token_group_fp8_quant_ref(x)
        assert s[0, 0].item() == pytest.approx(1e-10 / 448) and s[2, 0].item() == s[0, 0].item()
        assert (q[2, :128].float() == 0).all()
    assert torch.isfinite(s).all() and (s > 0).all()
    assert (q[0].float() == 0).all()
    assert q[1, 7].float().item() == 448 and q[1, 290].float().item() == -448
    assert (q[4, 130:].float() == -448).all()
    assert_fp8_matches(q, s, x, q_ref, s_ref, f"{kernel} {dtype}")


def test_scale_ub_caps_amax():
    x = generate_quant_inputs(3, 1024, device=DEVICE, seed=5) * 10
    ub = torch.tensor([2.0], device=DEVICE)
    q, s = per_token_fp8_quant(x, ub)
    q_ref, s_ref = per_token_fp8_quant_ref(x, ub)
    assert (s <= 2.0 / 448).all()
    assert_fp8_matches(q, s, x, q_ref, s_ref, "scale_ub")
    assert (q.float().abs().amax(dim=1) == 448).all()  # rows above the bound saturate


@pytest.mark.parametrize("fn", [per_token_fp8_quant, per_token_int8_quant, per_token_group_fp8_quant])
def test_zero_tokens_and_hidden_strided(fn):
    x = torch.empty((0, 1000), dtype=torch.bfloat16, device=DEVICE)
    q, s = fn(x)
    assert q.shape == (0, 1000) and s.shape[0] == 0
    # a K-strided input (a transposed view) is copied first
    xt = generate_quant_inputs(256, 2, device=DEVICE, seed=3).t()
    q, s = fn(xt)
    ref = {
        per_token_fp8_quant: per_token_fp8_quant_ref,
        per_token_int8_quant: per_token_int8_quant_ref,
        per_token_group_fp8_quant: per_token_group_fp8_quant_ref,
    }[fn](xt)
    assert torch.equal(s, ref[1])


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: per_token_fp8_quant(torch.zeros(4, dtype=torch.bfloat16)), "x must be a 2-D"),
        (lambda: per_token_fp8_quant(torch.zeros(2, 4, dtype=torch.int8)), r"x must be .*dtype torch.int8"),
        (lambda: per_token_fp8_quant(torch.zeros(2, 4), torch.ones(2)), "scale_ub must be a one-element"),
        (lambda: per_token_int8_quant(torch.zeros(2, 0)), r"K > 0.*shape \(2, 0\)"),
        (lambda: per_token_group_fp8_quant(torch.zeros(2, 256), 64), "group_size must be 128; got 64"),
        (lambda: per_token_group_fp8_quant(torch.zeros(2, 256), tma_aligned_scales=True), "tma_aligned"),
    ],
)
def test_errors_name_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_every_generic_config_is_correct():
    """Each config of the families these kernels use gives the reference result (small rows)."""
    from hlcore.aux_configs import GROUP_QUANT_CONFIGS, ROW_CONFIGS

    x = generate_quant_inputs(5, 300, device=DEVICE, seed=13)
    q_ref, s_ref = per_token_int8_quant_ref(x)
    for name, cfg in ROW_CONFIGS.items():
        if HELION_MODE and cfg["reduction_loops"] != [None]:
            continue  # block sizes are ignored there: the same eager code
        q, s = per_token_int8_quant(x, config=cfg)
        assert torch.equal(q, q_ref) and torch.equal(s, s_ref), name
    q_ref, s_ref = per_token_group_fp8_quant_ref(x)
    for name, cfg in itertools.islice(GROUP_QUANT_CONFIGS.items(), None):
        q, s = per_token_group_fp8_quant(x, config=cfg)
        assert_fp8_matches(q, s, x, q_ref, s_ref, name)


def test_looped_reduction_config():
    """A reduction loop narrower than the row (how hidden > 16384 runs): two passes over the row."""
    cfg = {"block_sizes": [1], "reduction_loops": [64], "num_warps": 4}
    x = generate_quant_inputs(3, 300, device=DEVICE, seed=21)
    q, s = per_token_int8_quant(x, config=cfg)
    q_ref, s_ref = per_token_int8_quant_ref(x)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    q, s = per_token_fp8_quant(x, config=cfg)
    assert_fp8_matches(q, s, x, *per_token_fp8_quant_ref(x), "looped fp8")
