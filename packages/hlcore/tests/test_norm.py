"""rms_norm / fused_add_rms_norm (Helion) against vLLM's IR native math, in the CPU interpret modes.

Tolerances (kept here, not in hlcore.testing): the fp32 sum of squares runs in another order than
torch's ``mean`` (also under HELION_INTERPRET, which reduces per tile), so a few outputs land one
rounding apart; Triton's interpreter also casts fp32 -> bf16 by truncation (not round-to-nearest).
Each output may therefore be up to 2 units in the last place off: relative 2^-6 for bf16 (two
roundings: normalized row, then the weight product), 2^-9 for fp16, plus a tiny atol near zero.
"""

import os

import pytest
import torch

from hlcore.norm import (
    fused_add_rms_norm,
    fused_add_rms_norm_ref,
    generate_norm_inputs,
    rms_norm,
    rms_norm_ref,
)

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"
RTOL = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9, torch.float32: 1e-5}

# One case per hidden size; num_tokens, dtype, row stride and weight/None rotate. num_tokens 32/33
# only with small hidden sizes (the interpreter runs one program per row).
CASES = [
    (1024, 33, torch.bfloat16, False, True),
    (2048, 2, torch.float16, True, True),
    (2560, 3, torch.bfloat16, False, False),
    (4096, 1, torch.float16, True, True),
    (5120, 2, torch.bfloat16, True, True),
    (7168, 1, torch.float16, False, False),
    (8192, 3, torch.bfloat16, True, True),
    (1000, 32, torch.float16, True, True),
]
IDS = [
    f"H{h}-M{m}-{str(dt)[6:]}-{'strided' if s else 'contig'}-{'w' if w else 'now'}"
    for h, m, dt, s, w in CASES
]


def assert_matches(out, ref, what):
    assert out.shape == ref.shape and out.dtype == ref.dtype, what
    assert torch.isfinite(out).all() == torch.isfinite(ref).all(), f"{what}: non-finite values"
    torch.testing.assert_close(out.float(), ref.float(), rtol=RTOL[out.dtype], atol=1e-5, msg=what)
    if HELION_MODE or CUDA or out.dtype != torch.bfloat16:  # (bf16 truncation there moves most values)
        diff = (out != ref).float().mean().item()
        assert diff <= 0.02, f"{what}: {diff:.1%} of the outputs differ from the reference"


def _inputs(h, m, dtype, strided, seed):
    d = generate_norm_inputs(
        m, h, dtype=dtype, row_stride=h + 32 if strided else None, device=DEVICE, seed=seed
    )
    if m > 1:
        assert (d["x"].stride(0) != h) == strided
    return d


@pytest.mark.parametrize("h,m,dtype,strided,with_weight", CASES, ids=IDS)
def test_rms_norm(h, m, dtype, strided, with_weight):
    d = _inputs(h, m, dtype, strided, seed=h + m)
    w = d["weight"] if with_weight else None
    out = rms_norm(d["x"], w, 1e-6)
    assert_matches(out, rms_norm_ref(d["x"], w, 1e-6), f"rms_norm H={h} M={m} {dtype}")


@pytest.mark.parametrize("h,m,dtype,strided,with_weight", CASES, ids=IDS)
def test_fused_add_rms_norm(h, m, dtype, strided, with_weight):
    d = _inputs(h, m, dtype, strided, seed=2 * h + m)
    w = d["weight"] if with_weight else None
    x0, r0 = d["x"].clone(), d["residual"].clone()
    out, res = fused_add_rms_norm(d["x"], d["residual"], w, 1e-5)
    assert torch.equal(d["x"], x0) and torch.equal(d["residual"], r0), "inplace=False must not mutate"
    out_ref, res_ref = fused_add_rms_norm_ref(x0, r0, w, 1e-5)
    assert_matches(res, res_ref, f"residual H={h} M={m} {dtype}")
    assert_matches(out, out_ref, f"out H={h} M={m} {dtype}")


@pytest.mark.parametrize("m", [1, 3])
def test_fused_add_rms_norm_inplace(m):
    """inplace=True: x becomes out and residual becomes x + residual, as vLLM's CUDA op does."""
    d = generate_norm_inputs(m, 256, row_stride=300, device=DEVICE, seed=m)
    out_ref, res_ref = fused_add_rms_norm_ref(d["x"], d["residual"], d["weight"])
    x, residual = d["x"], d["residual"]
    out, res = fused_add_rms_norm(x, residual, d["weight"], inplace=True)
    assert out is x and res is residual
    assert_matches(x, out_ref, "inplace out")
    assert_matches(residual, res_ref, "inplace residual")


def test_one_row_then_many_rows_same_hidden():
    """Helion 1.5.0 compiles a second [M, H] input seen first with M == 1 as a broadcast row; the
    wrapper keeps M == 1 on its own kernel, so later calls at other M stay right."""
    for m in (1, 3, 1, 2):
        d = generate_norm_inputs(m, 128, device=DEVICE, seed=10 + m)
        out, res = fused_add_rms_norm(d["x"], d["residual"], d["weight"])
        out_ref, res_ref = fused_add_rms_norm_ref(d["x"], d["residual"], d["weight"])
        assert_matches(res, res_ref, f"residual M={m}")
        assert_matches(out, out_ref, f"out M={m}")


def test_zero_rows_zero_tokens_and_leading_dims():
    d = generate_norm_inputs(4, 256, device=DEVICE, seed=3)
    x = d["x"].clone()
    x[1] = 0.0  # an all-zero row: rsqrt(0 + eps) * 0 = 0, never NaN
    out = rms_norm(x, d["weight"])
    assert (out[1] == 0).all() and torch.isfinite(out).all()
    assert_matches(out, rms_norm_ref(x, d["weight"]), "zero row")
    out3 = rms_norm(x.view(2, 2, 256), d["weight"])  # [..., H] inputs keep their shape
    assert out3.shape == (2, 2, 256) and torch.equal(out3.view(4, 256), out)
    empty = torch.empty((0, 256), dtype=torch.bfloat16, device=DEVICE)
    assert rms_norm(empty, d["weight"]).shape == (0, 256)
    o, r = fused_add_rms_norm(empty, empty.clone(), d["weight"])
    assert o.shape == r.shape == (0, 256)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: rms_norm(torch.zeros(2, 8, dtype=torch.int8), None), "x must be a .* tensor"),
        (lambda: rms_norm(torch.zeros(2, 8), torch.ones(4)), r"weight must be None or a 1-D \[H\] = \[8\]"),
        (lambda: rms_norm(torch.zeros(2, 8), None, -1.0), "eps must be a non-negative"),
        (lambda: fused_add_rms_norm(torch.zeros(2, 8), torch.zeros(2, 4), None), "residual must match x"),
        (
            lambda: fused_add_rms_norm(torch.zeros(2, 8), torch.zeros(2, 8, dtype=torch.float16), None),
            "residual must match x",
        ),
    ],
)
def test_errors_name_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_every_generic_row_config_is_correct():
    from hlcore.aux_configs import ROW_CONFIGS

    d = generate_norm_inputs(5, 300, device=DEVICE, seed=9)
    ref = rms_norm_ref(d["x"], d["weight"])
    for name, cfg in ROW_CONFIGS.items():
        assert_matches(rms_norm(d["x"], d["weight"], config=cfg), ref, name)


def test_looped_reduction_config():
    """A reduction loop narrower than the row (how hidden > 16384 runs)."""
    cfg = {"block_sizes": [1], "reduction_loops": [64], "num_warps": 4}
    d = generate_norm_inputs(3, 300, row_stride=320, device=DEVICE, seed=22)
    assert_matches(rms_norm(d["x"], d["weight"], config=cfg), rms_norm_ref(d["x"], d["weight"]), "looped")
    out, res = fused_add_rms_norm(d["x"], d["residual"], None, config=cfg)
    out_ref, res_ref = fused_add_rms_norm_ref(d["x"], d["residual"], None)
    assert_matches(res, res_ref, "looped residual")
    assert_matches(out, out_ref, "looped out")
