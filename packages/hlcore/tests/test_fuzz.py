"""Property tests (hypothesis): every public kernel against its reference on the CPU.

One ``@given`` test per public kernel: ``scaled_mm`` (fp8_dynamic, w8a8_int8, block_fp8; bias or
none; bf16/fp16 out), ``per_token_fp8_quant``, ``per_token_int8_quant``,
``per_token_group_fp8_quant`` (row- and column-major scales), ``silu_and_mul``, ``rms_norm`` and
``fused_add_rms_norm``. Hypothesis draws the parameters (shape, layout, dtype, per-row value kind,
a seed); the test builds the tensors from them, so a failing example prints as a short, replayable
tuple. Every example is compared with the reference, using the comparison helpers of the per-kernel
test files (loaded from their files, not copied): quant scales and int8 bytes bit-exact, fp8 bytes
bit-exact under HELION_INTERPRET and within Triton's known interpreter roundings otherwise, norms and
silu within their ulp tolerances, ``scaled_mm`` within :func:`hlcore.testing.tolerance`.

What is drawn:

* shapes: M (tokens) 0..40, or ``[B, T, H]`` leading dims for the ``[..., H]`` kernels; the hidden
  size / K / N from small **buckets** that include non-multiples of 16 and of 128 (K <= 384). Each
  distinct hidden size (and scaled_mm config) is a new Helion compile, about 1 s under Triton's
  interpreter, and the interpreter pays per program (M x groups), so sizes come from buckets and
  stay small;
* layouts: contiguous, a column slice of a wider buffer (row stride > hidden, unaligned start; the
  padding is NaN for float inputs and 0x7f bytes for fp8/int8, so a read outside the view shows),
  a hidden-strided (transposed) view, 3-D inputs where the API takes ``[..., H]``; column-major
  weights with a row stride, row-/column-major block scales;
* values: normal rows with a per-row magnitude ``e^{2 N(0, 1)}``; all-zero rows (and 128-groups);
  huge values (the dtype's max, beyond fp8's 448; 1e25 for the norms, whose squares overflow fp32)
  and +-inf in quant inputs (must saturate, never NaN); rows of exact int8 ties (``amax = 127 *
  2^e``, so ``x / scale`` are exact halves); zero weight channels and spiked rows for scaled_mm.

Comparison notes: zero-token outputs are checked for shape and dtype only, and the ulp helpers'
"at most 2% of the outputs differ" check applies from 256 outputs on (below that a fraction is no
statistic: one rounding apart of 2 outputs is 50%); the per-element tolerance always applies. Norms
run bf16/fp16 only, as in test_norm (fp32 outputs are one rounding apart on ~40% of the elements).

Found by this fuzzing (compiled kernels, i.e. Triton mode and the GPU; Helion's eager mode was
right) and fixed, each kept as an explicit test at the end: hidden size 1 failed to compile the row
kernels (a ``reduction_loops`` entry for a dim Helion makes no loop for), and ``scaled_mm`` with
K = 1 returned block_k times the reference (a size-1 dim compiled as a broadcast). The size buckets
leave 1 out; those tests cover it.

``HL_FUZZ_EXAMPLES`` (default 8) sets the examples per test; ``derandomize=True`` makes CI runs
repeatable; ``database=None`` and a temporary ``HYPOTHESIS_STORAGE_DIRECTORY`` keep hypothesis from
writing ``.hypothesis/`` into the checkout.
Measured on the 2-core CPU box (whole file, one process, default 8): 84 s in Triton mode, 24 s in
Helion mode (wall time, interpreter start and imports included).
"""

import importlib.util
import math
import os
import sys
import tempfile
from pathlib import Path

# hypothesis caches constants it reads from our sources in <cwd>/.hypothesis/ (not the example
# database, which settings(database=None) turns off): keep that out of the checkout too. Read at
# hypothesis' first storage access, which comes after this import.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "hlcore-hypothesis"))

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hlcore.activation import silu_and_mul, silu_and_mul_ref
from hlcore.norm import fused_add_rms_norm, fused_add_rms_norm_ref, rms_norm, rms_norm_ref
from hlcore.quant import (
    per_block_fp8_quant_ref,
    per_channel_fp8_quant_ref,
)
from hlcore.quant_kernels import (
    per_token_fp8_quant,
    per_token_fp8_quant_ref,
    per_token_group_fp8_quant,
    per_token_group_fp8_quant_ref,
    per_token_int8_quant,
    per_token_int8_quant_ref,
)
from hlcore.scaled_mm import BLOCK_SIZE, scaled_mm, scaled_mm_ref
from hlcore.testing import max_abs_error, rel_error, tolerance

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"
FP8 = torch.float8_e4m3fn
EXAMPLES = int(os.environ.get("HL_FUZZ_EXAMPLES", "8"))

# No health check is suppressed: drawing parameters is cheap (tensors are built in the test body).
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None)


def _sibling(name: str):
    """The per-kernel test module ``name`` (for its comparison helpers), loaded from its file."""
    key = f"_hl_fuzz_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


assert_fp8_matches = _sibling("test_quant_kernels").assert_fp8_matches
_NORM_TESTS = _sibling("test_norm")
_SILU_TESTS = _sibling("test_activation")
MIN_FRACTION_SAMPLE = 256


def _ulp_checker(module):
    """``module.assert_matches(out, ref, what)`` (the ulp tolerance ``module.RTOL`` per element plus
    at most 2% of the outputs differing). Below ``MIN_FRACTION_SAMPLE`` outputs a fraction is no
    statistic (one rounding apart of 2 outputs is 50%), so small outputs get the per-element
    tolerance alone; zero tokens only the shape and dtype."""

    def check(out, ref, what):
        if out.numel() >= MIN_FRACTION_SAMPLE:
            module.assert_matches(out, ref, what)
            return
        assert out.shape == ref.shape and out.dtype == ref.dtype, what
        assert torch.isfinite(out).all() == torch.isfinite(ref).all(), f"{what}: non-finite values"
        rtol = module.RTOL[out.dtype]
        torch.testing.assert_close(out.float(), ref.float(), rtol=rtol, atol=1e-5, msg=what)

    return check


assert_norm_matches = _ulp_checker(_NORM_TESTS)
assert_silu_matches = _ulp_checker(_SILU_TESTS)


# --------------------------------------------------------------------------------------------
# Strategies (parameters only) and tensor builders
# --------------------------------------------------------------------------------------------
SEEDS = st.integers(0, 2**31 - 1)
TOKENS = st.integers(0, 40)
LAYOUTS_2D = ("contig", "slice", "transposed")


@st.composite
def layouts(draw, kinds=LAYOUTS_2D):
    """``(layout, pad, offset)``: pad/offset only matter for ``"slice"``."""
    layout = draw(st.sampled_from(kinds))
    pad = draw(st.sampled_from([1, 8, 64])) if layout == "slice" else 0
    offset = draw(st.integers(0, pad))
    return layout, pad, offset


def _row_values(kinds, k: int, dtype: torch.dtype, seed: int, huge: float | None = None) -> torch.Tensor:
    """fp32 ``[len(kinds), k]`` rows of the given kinds, exactly representable in ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    m = len(kinds)
    x = torch.randn((m, k), generator=gen) * torch.exp(2 * torch.randn((m, 1), generator=gen))
    big = torch.finfo(dtype).max if huge is None else min(huge, torch.finfo(dtype).max)
    for i, kind in enumerate(kinds):
        if kind == "zero":
            x[i] = 0.0
        elif kind == "zero_group":  # one 128-group (maybe the partial last one) all zero
            g = int(torch.randint(0, -(-k // 128), (1,), generator=gen))
            x[i, 128 * g : 128 * g + 128] = 0.0
        elif kind in ("huge", "inf"):
            count = 1 + int(torch.randint(0, min(k, 4), (1,), generator=gen))
            idx = torch.randperm(k, generator=gen)[:count]
            sign = torch.randint(0, 2, (count,), generator=gen).float() * 2 - 1
            x[i, idx] = sign * (big if kind == "huge" else math.inf)
        elif kind == "tie":  # halves, amax exactly 127 * 2^e: x / scale are exact ties
            v = torch.randint(-126, 127, (k,), generator=gen).float()
            v += 0.5 * torch.randint(0, 2, (k,), generator=gen).float()
            j = int(torch.randint(0, k, (1,), generator=gen))
            v[j] = 127.0 if int(torch.randint(0, 2, (1,), generator=gen)) else -127.0
            x[i] = v * 2.0 ** int(torch.randint(-8, 9, (1,), generator=gen))
    return x.to(dtype).float()


def _place(x: torch.Tensor, layout, fill: float = math.nan) -> torch.Tensor:
    """``x`` (``[..., K]``, on the CPU) as a view with ``layout`` on DEVICE; padding is ``fill``."""
    kind, pad, offset = layout
    k = x.shape[-1]
    if kind == "slice":
        buf = torch.full((*x.shape[:-1], k + pad), fill, dtype=x.dtype)
        buf[..., offset : offset + k] = x
        return buf.to(DEVICE)[..., offset : offset + k]
    if kind == "transposed":  # hidden-strided: stride(-1) = M
        return x.t().contiguous().to(DEVICE).t()
    return x.contiguous().to(DEVICE)


def _what(**kw) -> str:
    return " ".join(f"{k}={v}" for k, v in kw.items())


# --------------------------------------------------------------------------------------------
# Quant kernels
# --------------------------------------------------------------------------------------------
QUANT_DTYPES = st.sampled_from([torch.bfloat16, torch.float16, torch.float32])
# per token: K need not be a multiple of anything; K = 1 fails (test_hidden_size_one_row_kernels)
QUANT_K = st.sampled_from([2, 8, 40, 130, 300])
GROUP_K = st.sampled_from([40, 128, 130, 300, 384])  # 1x128 groups: partial and whole last groups


@st.composite
def quant_cases(draw, k_strategy, kinds):
    m = draw(TOKENS)
    return {
        "m": m,
        "k": draw(k_strategy),
        "dtype": draw(QUANT_DTYPES),
        "kinds": draw(st.lists(st.sampled_from(kinds), min_size=m, max_size=m)),
        "layout": draw(layouts()),
        "seed": draw(SEEDS),
    }


ROW_KINDS = ("normal", "normal", "zero", "huge", "inf", "tie")
GROUP_KINDS = (*ROW_KINDS, "zero_group")


def _quant_input(case) -> torch.Tensor:
    x = _row_values(case["kinds"], case["k"], case["dtype"], case["seed"]).to(case["dtype"])
    return _place(x, case["layout"])


def _check_fp8(q, s, x, q_ref, s_ref, what, scale_cols):
    m, k = x.shape
    assert q.dtype == FP8 and q.shape == (m, k), what
    assert s.dtype == torch.float32 and s.shape == (m, scale_cols), what
    assert not torch.isnan(q.float()).any(), f"{what}: NaN fp8 bytes"
    assert torch.isfinite(s).all() and (s > 0).all(), f"{what}: scales not finite and positive"
    if m:  # (the helper's fraction check needs elements)
        assert_fp8_matches(q, s, x, q_ref, s_ref, what)


@FUZZ
@given(case=quant_cases(QUANT_K, ROW_KINDS), scale_ub=st.sampled_from([None, 0.5, 300.0]))
def test_fuzz_per_token_fp8_quant(case, scale_ub):
    x = _quant_input(case)
    ub = None if scale_ub is None else torch.tensor([scale_ub], device=DEVICE)
    q, s = per_token_fp8_quant(x, ub)
    _check_fp8(q, s, x, *per_token_fp8_quant_ref(x, ub), _what(scale_ub=scale_ub, **case), 1)


@FUZZ
@given(case=quant_cases(QUANT_K, ROW_KINDS))
def test_fuzz_per_token_int8_quant(case):
    x = _quant_input(case)
    q, s = per_token_int8_quant(x)
    q_ref, s_ref = per_token_int8_quant_ref(x)
    what = _what(**case)
    assert q.dtype == torch.int8 and q.shape == x.shape and s.shape == (x.shape[0], 1), what
    assert torch.isfinite(s).all(), f"{what}: non-finite scales"
    assert torch.equal(s, s_ref), f"{what}: scales differ"
    assert torch.equal(q, q_ref), f"{what}: {(q != q_ref).sum().item()} int8 values differ"


@FUZZ
@given(case=quant_cases(GROUP_K, GROUP_KINDS), column_major=st.booleans())
def test_fuzz_per_token_group_fp8_quant(case, column_major):
    x = _quant_input(case)
    q, s = per_token_group_fp8_quant(x, column_major_scales=column_major)
    q_ref, s_ref = per_token_group_fp8_quant_ref(x)
    what = _what(column_major=column_major, **case)
    if column_major and x.shape[0] > 1:
        assert s.stride(0) == 1, f"{what}: column-major scales expected, strides {s.stride()}"
    _check_fp8(q, s, x, q_ref, s_ref, what, -(-case["k"] // 128))


# --------------------------------------------------------------------------------------------
# silu_and_mul, rms_norm, fused_add_rms_norm: [..., H] inputs
# --------------------------------------------------------------------------------------------
@st.composite
def leads(draw):
    """Leading dims: ``(M,)`` or a 3-D input's ``(B, T)``."""
    if draw(st.booleans()):
        return (draw(TOKENS),)
    return (draw(st.integers(1, 3)), draw(st.integers(0, 13)))


@st.composite
def row_cases(draw, h_strategy, dtypes, kinds):
    lead = draw(leads())
    m = math.prod(lead)
    layout_kinds = LAYOUTS_2D if len(lead) == 1 else ("contig", "slice")
    return {
        "lead": lead,
        "h": draw(h_strategy),
        "dtype": draw(st.sampled_from(dtypes)),
        "kinds": draw(st.lists(st.sampled_from(kinds), min_size=m, max_size=m)),
        "layout": draw(layouts(layout_kinds)),
        "seed": draw(SEEDS),
    }


def _row_input(case, width: int, huge: float, seed_offset: int = 0, layout=None) -> torch.Tensor:
    x = _row_values(case["kinds"], width, case["dtype"], case["seed"] + seed_offset, huge=huge)
    x = x.to(case["dtype"]).reshape(*case["lead"], width)
    return _place(x, case["layout"] if layout is None else layout)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")  # sigmoid(-huge)
@FUZZ
@given(
    case=row_cases(
        st.sampled_from([1, 8, 40, 130, 192]),
        [torch.bfloat16, torch.float16],
        ("normal", "normal", "zero", "huge"),
    )
)
def test_fuzz_silu_and_mul(case):
    x = _row_input(case, 2 * case["h"], huge=1e4)
    out = silu_and_mul(x)
    assert_silu_matches(out, silu_and_mul_ref(x), _what(**case))


NORM_H = st.sampled_from([2, 40, 130, 300, 384])  # H = 1: test_hidden_size_one_row_kernels
# fp32 rows: the kernel divides by sqrt, the reference multiplies by rsqrt, one fp32 rounding apart
# on ~40% of the outputs (within RTOL, but test_norm's 2% fraction is for bf16/fp16 outputs): as in
# test_norm, bf16 and fp16 only
NORM_DTYPES = [torch.bfloat16, torch.float16]
NORM_KINDS = ("normal", "normal", "zero", "huge")


@FUZZ
@given(
    case=row_cases(NORM_H, NORM_DTYPES, NORM_KINDS),
    with_weight=st.booleans(),
    eps=st.sampled_from([1e-6, 1e-5]),
)
def test_fuzz_rms_norm(case, with_weight, eps):
    x = _row_input(case, case["h"], huge=1e25)
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    w = (1 + 0.1 * torch.randn((case["h"],), generator=gen)).to(case["dtype"]).to(DEVICE)
    w = w if with_weight else None
    out = rms_norm(x, w, eps)
    assert_norm_matches(out, rms_norm_ref(x, w, eps), _what(with_weight=with_weight, eps=eps, **case))


@FUZZ
@given(
    case=row_cases(NORM_H, NORM_DTYPES, NORM_KINDS),
    residual_layout=layouts(("contig", "slice")),
    with_weight=st.booleans(),
)
def test_fuzz_fused_add_rms_norm(case, residual_layout, with_weight):
    x = _row_input(case, case["h"], huge=1e25)
    residual = _row_input(case, case["h"], huge=1e25, seed_offset=7, layout=residual_layout)
    gen = torch.Generator().manual_seed(case["seed"] + 1)
    w = (1 + 0.1 * torch.randn((case["h"],), generator=gen)).to(case["dtype"]).to(DEVICE)
    w = w if with_weight else None
    x0, r0 = x.clone(), residual.clone()
    out, res = fused_add_rms_norm(x, residual, w, 1e-6)
    what = _what(residual_layout=residual_layout, with_weight=with_weight, **case)
    assert torch.equal(x, x0) and torch.equal(residual, r0), f"{what}: inputs mutated"
    out_ref, res_ref = fused_add_rms_norm_ref(x0, r0, w, 1e-6)
    assert_norm_matches(res, res_ref, f"residual {what}")
    assert_norm_matches(out, out_ref, f"out {what}")


# --------------------------------------------------------------------------------------------
# scaled_mm
# --------------------------------------------------------------------------------------------
# (N, K) buckets (each with each config is one compile): N not a multiple of 16 and N = 1, K not a
# multiple of 16 or 128 (K = 8 < every K tile) and K = 384 (three whole 128-blocks), N < K and N > K
MM_SHAPES = st.sampled_from([(1, 40), (40, 300), (136, 8), (24, 384)])  # K = 1: test_scaled_mm_k_one
# None: the default (picked) config; else (split_k, swap_ab) with 16x16x32 tiles (one compile each)
MM_ALGOS = st.sampled_from([None, (2, True)])
MM_KINDS = ("normal", "normal", "zero", "spike")


@st.composite
def mm_cases(draw):
    m = draw(TOKENS)
    n, k = draw(MM_SHAPES)
    return {
        "m": m,
        "n": n,
        "k": k,
        "out_dtype": draw(st.sampled_from([torch.bfloat16, torch.float16])),
        "bias": draw(st.booleans()),
        "algo": draw(MM_ALGOS),
        "kinds": draw(st.lists(st.sampled_from(MM_KINDS), min_size=m, max_size=m)),
        "zero_channels": draw(st.lists(st.integers(0, n - 1), max_size=3)),
        "a_layout": draw(layouts(("contig", "slice"))),
        "b_pad": draw(st.sampled_from([0, 16])),
        "colmajor_scales": draw(st.booleans()),
        "seed": draw(SEEDS),
    }


def _mm_inputs(fmt: str, case) -> dict:
    m, n, k = case["m"], case["n"], case["k"]
    gen = torch.Generator().manual_seed(case["seed"])
    # activations: per-row magnitudes, zero rows, rows with one spike (the rest quantizes to ~0)
    x = torch.randn((m, k), generator=gen) * torch.exp(torch.randn((m, 1), generator=gen))
    for i, kind in enumerate(case["kinds"]):
        if kind == "zero":
            x[i] = 0.0
        elif kind == "spike":
            x[i, int(torch.randint(0, k, (1,), generator=gen))] = 1e4
    w = torch.randn((n, k), generator=gen) * 0.05 * torch.exp(torch.randn((n, 1), generator=gen))
    w[case["zero_channels"]] = 0.0
    x, w = x.to(torch.bfloat16), w.to(torch.bfloat16)
    block_size = None
    if fmt == "fp8_dynamic":
        a, scale_a = per_token_fp8_quant_ref(x)
        w_q, scale_b = per_channel_fp8_quant_ref(w)
    elif fmt == "w8a8_int8":
        a, scale_a = per_token_int8_quant_ref(x)
        w_q, scale_b = per_token_int8_quant_ref(w)
    else:
        block_size = BLOCK_SIZE
        a, scale_a = per_token_group_fp8_quant_ref(x, BLOCK_SIZE[1])
        w_q, scale_b = per_block_fp8_quant_ref(w, BLOCK_SIZE)
        if case["colmajor_scales"]:
            scale_a = scale_a.t().contiguous().t()
    # A: a column slice of a wider buffer padded with 0x7f bytes (fp8 448 / int8 127)
    kind, pad, offset = case["a_layout"]
    a_dev = a.to(DEVICE)
    if kind == "slice":
        buf = torch.full((m, k + pad), 0x7F, dtype=torch.uint8, device=DEVICE).view(a.dtype)
        buf[:, offset : offset + k] = a_dev
        a_dev = buf[:, offset : offset + k]
    # B: the column-major [K, N] view of a row-major [N, K + b_pad] weight
    wbuf = torch.full((n, k + case["b_pad"]), 0x7F, dtype=torch.uint8, device=DEVICE).view(w_q.dtype)
    wbuf[:, :k] = w_q.to(DEVICE)
    bias = None
    if case["bias"]:
        bias = (torch.randn((n,), generator=gen) * 0.5).to(case["out_dtype"]).to(DEVICE)
    return {
        "a": a_dev,
        "b": wbuf[:, :k].t(),
        "scale_a": scale_a.to(DEVICE),
        "scale_b": scale_b.to(DEVICE),
        "out_dtype": case["out_dtype"],
        "bias": bias,
        "block_size": block_size,
    }


def _mm_config(algo):
    if algo is None:
        return None
    split_k, swap_ab = algo
    return {
        "block_sizes": [16, 16, 32],
        "split_k": split_k,
        "swap_ab": swap_ab,
        "num_warps": 4,
        "num_stages": 1,
    }


MM_FORMATS = [
    "fp8_dynamic",
    pytest.param(
        "w8a8_int8",
        marks=pytest.mark.skipif(
            HELION_MODE, reason="Helion's eager reference mode has no int8 matmul on the CPU (aten::mm)"
        ),
    ),
    "block_fp8",
]


@pytest.mark.parametrize("fmt", MM_FORMATS)
@FUZZ
@given(case=mm_cases())
def test_fuzz_scaled_mm(fmt, case):
    case = dict(case)
    if case["algo"] is not None and case["algo"][0] > 1 and not (HELION_MODE or CUDA):
        case["out_dtype"] = torch.float16  # Triton's CPU interpreter has no bf16 atomics (split-K)
    d = _mm_inputs(fmt, case)
    out = scaled_mm(**d, config=_mm_config(case["algo"]))
    ref = scaled_mm_ref(**d)
    what = _what(fmt=fmt, **case)
    assert out.shape == (case["m"], case["n"]) and out.dtype == case["out_dtype"], what
    assert torch.isfinite(out).all(), f"{what}: non-finite outputs"
    err = rel_error(out, ref)
    tol = tolerance(fmt, case["out_dtype"])
    assert err <= tol, f"{what}: rel err {err:.2e} > {tol:.0e}, max abs {max_abs_error(out, ref):.3e}"


# --------------------------------------------------------------------------------------------
# Found by the fuzzing: kept as explicit cases
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kernel", ["per_token_fp8_quant", "per_token_int8_quant", "rms_norm", "fused_add_rms_norm"]
)
def test_hidden_size_one_row_kernels(kernel):
    x = torch.tensor([[3.0], [-0.5], [0.0]], dtype=torch.bfloat16, device=DEVICE)
    if kernel == "per_token_fp8_quant":
        _check_fp8(*per_token_fp8_quant(x), x, *per_token_fp8_quant_ref(x), kernel, 1)
    elif kernel == "per_token_int8_quant":
        q, s = per_token_int8_quant(x)
        q_ref, s_ref = per_token_int8_quant_ref(x)
        assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    elif kernel == "rms_norm":
        assert_norm_matches(rms_norm(x, None), rms_norm_ref(x, None), kernel)
    else:
        out, res = fused_add_rms_norm(x, x.clone(), None)
        out_ref, res_ref = fused_add_rms_norm_ref(x, x.clone(), None)
        assert_norm_matches(res, res_ref, kernel)
        assert_norm_matches(out, out_ref, kernel)


@pytest.mark.parametrize(("n", "k", "bias"), [(2, 1, False), (1, 5, True), (1, 1, True)])
@pytest.mark.parametrize("fmt", MM_FORMATS)
def test_scaled_mm_unit_dims(fmt, n, k, bias):
    """K = 1 once returned block_k x the reference (Helion compiled the size-1 K dim as a broadcast
    and dropped its mask); scaled_mm now pads a size-1 K or N to 2."""
    case = {
        "m": 2,
        "n": n,
        "k": k,
        "out_dtype": torch.bfloat16,
        "bias": bias,
        "algo": (1, False),
        "kinds": ["normal", "normal"],
        "zero_channels": [],
        "a_layout": ("contig", 0, 0),
        "b_pad": 0,
        "colmajor_scales": False,
        "seed": 1,
    }
    d = _mm_inputs(fmt, case)
    out = scaled_mm(**d, config=_mm_config(case["algo"]))
    ref = scaled_mm_ref(**d)
    err = rel_error(out, ref)
    assert out.shape == ref.shape == (2, n)
    assert err <= tolerance(fmt, torch.bfloat16), f"{fmt} N={n} K={k}: out {out.tolist()} ref {ref.tolist()}"
