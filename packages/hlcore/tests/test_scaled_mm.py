"""scaled_mm (Helion) against the fp32 dequantized reference, in the CPU interpret modes."""

import itertools
import os

import pytest
import torch

from hlcore.formats import FORMAT_NAMES
from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm, scaled_mm_ref
from hlcore.scaled_mm_config import default_scaled_mm_config
from hlcore.testing import max_abs_error, rel_error, tolerance

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
CUDA = torch.cuda.is_available() and os.environ.get("HL_TEST_GPU") == "1"
DEVICE = "cuda" if CUDA else "cpu"

# N not a multiple of any tile, N < K and N > K
SHAPES = [(40, 96), (200, 64)]
MS = [0, 1, 3, 16, 32]


def _out_dtype(split_k: int) -> torch.dtype:
    # Triton's CPU interpreter has no bf16 atomics; fp16 exercises the same atomic path.
    if split_k > 1 and not HELION_MODE and not CUDA:
        return torch.float16
    return torch.bfloat16


def _config(split_k: int, swap_ab: bool) -> dict:
    return {
        "block_sizes": [16, 16, 32],
        "split_k": split_k,
        "swap_ab": swap_ab,
        "num_warps": 4,
        "num_stages": 1,
    }


CASES = list(itertools.product([1, 2, 4], [False, True], MS, SHAPES, [False, True]))


@pytest.mark.parametrize(
    "split_k,swap_ab,m,nk,with_bias",
    CASES,
    ids=[f"sk{s}-swap{int(w)}-M{m}-N{nk[0]}K{nk[1]}-bias{int(b)}" for s, w, m, nk, b in CASES],
)
def test_scaled_mm_matches_reference(split_k, swap_ab, m, nk, with_bias):
    n, k = nk
    out_dtype = _out_dtype(split_k)
    seed = hash((split_k, swap_ab, m, n, k, with_bias)) % 1000
    d = generate_scaled_mm_inputs(m, n, k, device=DEVICE, out_dtype=out_dtype, with_bias=with_bias, seed=seed)
    out = scaled_mm(**d, config=_config(split_k, swap_ab))
    ref = scaled_mm_ref(**d)
    assert out.shape == (m, n) and out.dtype == out_dtype
    err = rel_error(out, ref)
    tol = tolerance("fp8_dynamic", out_dtype)
    assert err <= tol, (
        f"M={m} N={n} K={k} split_k={split_k} swap_ab={swap_ab} bias={with_bias}: rel err {err:.2e} > {tol:.0e}, "
        f"max abs {max_abs_error(out, ref):.3e}"
    )
    if m:
        assert ref.abs().max() > 0  # never compare on zeros


# The format matrix: every M of the issue, N and K not multiples of 16 or 128 (partial last scale
# blocks), N < K and N > K, a tensor-parallel shard of Qwen3-8B's o_proj scaled down (N, K/2);
# (split_k, swap_ab) rotate with M so every algorithm meets every format.
FORMAT_MS = [0, 1, 2, 3, 5, 16, 17, 31, 32, 33]
FORMAT_SHAPES = [(200, 300), (40, 136), (128, 64)]
ALGOS = [(1, False), (2, True), (4, False), (1, True), (8, True)]
FORMAT_CASES = [
    (fmt, m, nk, ALGOS[i % len(ALGOS)])
    for fmt in FORMAT_NAMES
    for i, (m, nk) in enumerate(itertools.product(FORMAT_MS, FORMAT_SHAPES))
]


@pytest.mark.parametrize(
    "fmt,m,nk,algo",
    FORMAT_CASES,
    ids=[f"{f}-M{m}-N{nk[0]}K{nk[1]}-sk{a[0]}-swap{int(a[1])}" for f, m, nk, a in FORMAT_CASES],
)
def test_formats_match_reference(fmt, m, nk, algo):
    if fmt == "w8a8_int8" and HELION_MODE:
        pytest.skip("Helion's eager reference mode has no int8 matmul on the CPU (aten::mm)")
    n, k = nk
    split_k, swap_ab = algo
    out_dtype = _out_dtype(split_k)
    d = generate_scaled_mm_inputs(
        m, n, k, fmt=fmt, device=DEVICE, out_dtype=out_dtype, with_bias=bool(m % 2), seed=m + n
    )
    out = scaled_mm(**d, config=_config(split_k, swap_ab))
    ref = scaled_mm_ref(**d)
    assert out.shape == (m, n) and out.dtype == out_dtype
    err = rel_error(out, ref)
    assert err <= tolerance(fmt, out_dtype), (
        f"{fmt} M={m} N={n} K={k} split_k={split_k} swap_ab={swap_ab}: {err:.2e}"
    )


def test_block_fp8_column_major_activation_scales():
    """vLLM's CUTLASS/DeepGEMM block kernels quantize with column-major scales: no copy, same result."""
    d = generate_scaled_mm_inputs(5, 200, 300, fmt="block_fp8", device=DEVICE, seed=5)
    col = d["scale_a"].t().contiguous().t()
    assert col.stride() == (1, 5)
    out = scaled_mm(d["a"], d["b"], col, d["scale_b"], block_size=(128, 128), config=_config(1, True))
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("block_fp8", torch.bfloat16)


PREFETCH_CASES = list(itertools.product([1, 2, 4], [False, True], ["row", "col", "tma"], [1, 3, 17]))


@pytest.mark.parametrize(
    "split_k,swap_ab,layout,m",
    PREFETCH_CASES,
    ids=[f"sk{s}-swap{int(w)}-{lay}-M{m}" for s, w, lay, m in PREFETCH_CASES],
)
def test_prefetched_block_scales_are_each_groups_own(split_k, swap_ab, layout, m):
    """prefetch_scales loads group kb + 1's scale_a and scale_b during group kb: every group must
    still meet its own scales, at each split-K chunk's first group too (the loads before the loop).
    Both scales span 1e-3..1 across K's groups, so either one group off fails the tolerance; the
    result equals the kernel without prefetch's (the same math in the same order)."""
    n, k = 40, 520  # five 1 x 128 groups, the last partial
    out_dtype = _out_dtype(split_k)
    d = generate_scaled_mm_inputs(m, n, k, fmt="block_fp8", device=DEVICE, out_dtype=out_dtype, seed=m)
    steps = torch.tensor([1e-3, 1.0, 1e-2, 3e-1, 3e-2], device=DEVICE)
    scale_a = d["scale_a"] * steps  # [M, 5]
    if layout == "col":
        scale_a = scale_a.t().contiguous().t()
    elif layout == "tma":  # vLLM's TMA-aligned column-major: column stride M rounded up to 4
        padded = torch.zeros((5, -(-m // 4) * 4), device=DEVICE)
        padded[:, :m] = scale_a.t()
        scale_a = padded[:, :m].t()
    d["scale_a"] = scale_a
    d["scale_b"] = d["scale_b"] * steps.flip(0)  # [1, 5]
    ref = scaled_mm_ref(**d)
    plain = scaled_mm(**d, config=_config(split_k, swap_ab))
    out = scaled_mm(**d, config={**_config(split_k, swap_ab), "prefetch_scales": True})
    assert rel_error(out, ref) <= tolerance("block_fp8", out_dtype)
    if split_k == 1:  # atomics may add split-K's partial sums in another order
        assert torch.equal(out, plain)
    for sa, sb in ((scale_a.roll(-1, dims=1), d["scale_b"]), (scale_a, d["scale_b"].roll(-1, dims=1))):
        off_by_one = scaled_mm_ref(d["a"], d["b"], sa, sb, out_dtype, block_size=(128, 128))
        assert rel_error(off_by_one, ref) > 0.1  # the tolerance check above can fail


def test_block_scales_are_applied_per_k_block():
    """A kernel that applied one scale per row/column after the loop would miss this: scale_b varies
    along K only."""
    d = generate_scaled_mm_inputs(3, 128, 384, fmt="block_fp8", device=DEVICE, seed=9)
    d["scale_b"] = torch.tensor([[1e-3, 1e-1, 1.0]], device=DEVICE)
    out = scaled_mm(**d, config=_config(1, False))
    ref = scaled_mm_ref(**d)
    assert rel_error(out, ref) <= tolerance("block_fp8", torch.bfloat16)
    flat = scaled_mm_ref(
        d["a"], d["b"], d["scale_a"].mean(1), d["scale_b"].mean().expand(128), torch.bfloat16
    )
    assert rel_error(flat, ref) > 0.1  # the check above can fail


def test_int8_rounding_ties_and_exact_accumulation():
    if HELION_MODE:
        pytest.skip("Helion's eager reference mode has no int8 matmul on the CPU (aten::mm)")
    # int8 products summed over K = 2048 exceed fp32's exact integers only with fp32 accumulation
    a = torch.full((2, 2048), 127, dtype=torch.int8, device=DEVICE)
    a[1, ::2] = -128
    b = torch.full((2048, 16), 127, dtype=torch.int8, device=DEVICE).t().contiguous().t()
    one = torch.ones(2, 1, device=DEVICE)
    out = scaled_mm(a, b, one, torch.ones(16, 1, device=DEVICE), torch.float32, config=_config(1, True))
    exact = (a.double() @ b.double()).float()
    assert torch.equal(out, exact)


def test_default_config_matches_reference():
    for m, n, k in [(1, 48, 256), (5, 80, 1024), (33, 64, 128)]:
        d = generate_scaled_mm_inputs(m, n, k, device=DEVICE, out_dtype=torch.float16, with_bias=True, seed=m)
        out = scaled_mm(**d)  # default_scaled_mm_config
        assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.float16), (m, n, k)


def test_m_zero_launches_nothing(monkeypatch):
    import hlcore.scaled_mm as mod

    def boom(*_a, **_k):
        raise AssertionError("kernel must not be built or launched for M = 0")

    monkeypatch.setattr(mod, "_kernel_for", boom)
    d = generate_scaled_mm_inputs(0, 48, 64, device=DEVICE)
    out = scaled_mm(**d)
    assert out.shape == (0, 48) and out.dtype == torch.bfloat16


def test_non_contiguous_activations_behave_like_linear():
    """A row-strided slice and a K-strided view give the same result as their contiguous copies."""
    m, n, k = 5, 40, 96
    d = generate_scaled_mm_inputs(2 * m, n, k, device=DEVICE, seed=7)
    cfg = _config(1, True)
    a_rows = d["a"][::2]  # row stride 2K
    assert not a_rows.is_contiguous()
    sa = d["scale_a"][::2]
    out = scaled_mm(a_rows, d["b"], sa, d["scale_b"], config=cfg)
    ref = scaled_mm_ref(a_rows.contiguous(), d["b"], sa.contiguous(), d["scale_b"])
    assert rel_error(out, ref) <= tolerance("fp8_dynamic", torch.bfloat16)
    wide = torch.zeros((m, 2 * k), dtype=torch.float8_e4m3fn, device=DEVICE)
    wide[:, ::2] = d["a"][:m]
    a_k = wide[:, ::2]  # K stride 2
    out_k = scaled_mm(a_k, d["b"], d["scale_a"][:m], d["scale_b"], config=cfg)
    ref_k = scaled_mm_ref(d["a"][:m], d["b"], d["scale_a"][:m], d["scale_b"])
    assert rel_error(out_k, ref_k) <= tolerance("fp8_dynamic", torch.bfloat16)


def test_split_k_one_is_bitwise_repeatable():
    d = generate_scaled_mm_inputs(3, 40, 128, device=DEVICE, seed=3)
    cfg = _config(1, True)
    first = scaled_mm(**d, config=cfg)
    for _ in range(2):
        assert torch.equal(scaled_mm(**d, config=cfg), first)


def test_default_config_is_valid_everywhere():
    for m, n, k in itertools.product(
        [1, 2, 3, 8, 24, 32, 33, 64, 512], [16, 40, 4096, 24576], [32, 96, 4096, 25600]
    ):
        cfg = default_scaled_mm_config(m, n, k)
        bm, bn, bk = cfg["block_sizes"]
        sk = cfg["split_k"]
        assert sk & (sk - 1) == 0 and 1 <= sk <= 256
        assert all(b & (b - 1) == 0 and b >= 16 for b in (bm, bn, bk))
        assert isinstance(cfg["swap_ab"], bool)
    with pytest.raises(ValueError, match="positive"):
        default_scaled_mm_config(0, 16, 16)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("knob", ["pdl", "split_k_workspace", "_triton_config_launch_pdl"])
def test_removed_knobs_are_rejected(knob, value):
    """The kernel has no PDL or workspace split-K branch: a config naming one of their knobs (even set to
    false) is an error naming it, before anything is compiled."""
    d = generate_scaled_mm_inputs(3, 40, 96, device=DEVICE, seed=1)
    with pytest.raises(ValueError, match=rf"scaled_mm: invalid config .*{knob}: no longer a scaled_mm knob"):
        scaled_mm(**d, config={**_config(2, True), knob: value})


@pytest.mark.parametrize(
    "fmt,scale_a_shape,scale_b_shape,group_k",
    [
        ("fp8_dynamic", (5, 1), (200, 1), 0),
        ("w8a8_int8", (5, 1), (200, 1), 0),
        ("block_fp8", (5, 3), (2, 3), 128),
    ],
)
def test_kernel_args_match_the_kernel_signature(fmt, scale_a_shape, scale_b_shape, group_k):
    """``kernel_args`` gives the kernel's seven arguments: B as its row-major [N, K] view (no copy),
    per-token / per-channel scales as columns, the format's group size."""
    from hlcore import scaled_mm as sm

    d = generate_scaled_mm_inputs(5, 200, 300, fmt=fmt, device=DEVICE, with_bias=True, seed=4)
    scale_b = d["scale_b"].reshape(-1) if group_k == 0 else d["scale_b"]  # [N] is accepted too
    args = sm.kernel_args(d["a"], d["b"], d["scale_a"], scale_b, d["bias"], torch.float16, d["block_size"])
    a, b_t, sa, sb, bias, out, g = args
    assert a is d["a"] and b_t.shape == (200, 300) and b_t.is_contiguous()
    assert b_t.data_ptr() == d["b"].data_ptr()  # a view, never a copy
    assert (tuple(sa.shape), tuple(sb.shape), g) == (scale_a_shape, scale_b_shape, group_k)
    assert bias is d["bias"] and out.shape == (5, 200) and out.dtype == torch.float16
    given = torch.empty((5, 200), dtype=torch.float16, device=DEVICE)
    assert (
        sm.kernel_args(
            d["a"], d["b"], d["scale_a"], scale_b, None, torch.float16, d["block_size"], out=given
        )[5]
        is given
    )


OUT_CASES = [(fmt, m, algo) for fmt in FORMAT_NAMES for m in (1, 2, 17) for algo in ((1, False), (2, True))]


@pytest.mark.parametrize("fmt,m,algo", OUT_CASES, ids=[f"{f}-M{m}-sk{a[0]}" for f, m, a in OUT_CASES])
def test_out_buffer_is_written_in_place(fmt, m, algo):
    """``out=`` (the buffer of vLLM's out-variant op): every row written in place, also at M = 1
    (Helion 1.5.0 would broadcast a passed-in [1, N] output over a tile of A's rows), rows of a
    stride wider than N included; the same values as the allocating call (bitwise at split_k = 1)."""
    if fmt == "w8a8_int8" and HELION_MODE:
        pytest.skip("Helion's eager reference mode has no int8 matmul on the CPU (aten::mm)")
    split_k, swap_ab = algo
    out_dtype = _out_dtype(split_k)
    d = generate_scaled_mm_inputs(
        m, 40, 136, fmt=fmt, device=DEVICE, out_dtype=out_dtype, with_bias=True, seed=m
    )
    cfg = _config(split_k, swap_ab)
    wide = torch.full((m, 48), 7.0, dtype=out_dtype, device=DEVICE)
    out = wide[:, :40]  # rows of stride 48
    assert scaled_mm(**d, config=cfg, out=out) is out
    assert bool((wide[:, 40:] == 7.0).all())  # nothing written past N
    fresh = scaled_mm(**d, config=cfg)
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance(fmt, out_dtype)
    if split_k == 1:
        assert torch.equal(out, fresh)


def test_out_buffer_is_checked():
    d = generate_scaled_mm_inputs(3, 40, 136, device=DEVICE)
    for bad in (
        torch.empty((3, 41), dtype=torch.bfloat16),
        torch.empty((3, 40), dtype=torch.float16),
        torch.empty((40, 3), dtype=torch.bfloat16).t(),
    ):
        with pytest.raises(ValueError, match=r"out must be a \[3, 40\] torch.bfloat16"):
            scaled_mm(**d, out=bad.to(DEVICE))


@pytest.mark.skipif(HELION_MODE, reason="generated code: Triton's interpreter or a GPU")
@pytest.mark.parametrize("swap_ab", [False, True])
def test_m_one_loads_a_as_a_tile_row_not_a_broadcast(swap_ab):
    """At M = 1 A's row is loaded as row 0 of the M tile (masked), as at every other M: a broadcast
    load (Helion's reading of a size-1 dim the tile is not over) feeds the dot through a layout
    conversion (the M = 1 decode step ran slower with it on the H200: lab record of 2026-12-03)."""
    from hlcore import scaled_mm as sm

    d = generate_scaled_mm_inputs(1, 64, 256, device=DEVICE, seed=3)
    kernel = sm._kernel_for(sm.config_json(_config(1, swap_ab), "scaled_mm"))
    args = sm.kernel_args(d["a"], d["b"], d["scale_a"], d["scale_b"], None, torch.bfloat16, None)
    code = kernel.bind(args).to_triton_code(kernel.configs[0])
    assert "a_stride_0" in code and "tl.broadcast_to(tl.load(a +" not in code
    out = kernel(*args)
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
