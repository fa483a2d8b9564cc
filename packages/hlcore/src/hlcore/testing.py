"""Shared test helpers: the per-format tolerance table and error measures.

Errors are the relative Frobenius error ``||out - ref||_F / ||ref||_F`` against the fp32
dequantized reference of the *same quantized inputs*, so fp8/int8 quantization error itself does not
count; what remains is accumulation order, the output rounding and split-K atomics.
"""

from __future__ import annotations

import torch

# (format, out_dtype) -> max relative Frobenius error.
# Why these numbers:
# * bf16 output rounding alone gives ~1.1e-3 rms relative error (8-bit mantissa); split-K adds into
#   the bf16 output with atomics, one rounding per chunk: ~sqrt(split_k) x that (4e-3 measured on
#   H200 at split_k=8). CUTLASS FP8 uses fast (imprecise) fp8 accumulation on sm90 (~3e-3 at K=4096),
#   so comparisons against vLLM's kernels need the same headroom. 1.5e-2 leaves room for both.
# * fp16 has 3 more mantissa bits: 8x tighter.
# * fp32 output: only the fp32 accumulation order differs.
# * w8a8_int8 accumulates exactly in int32, so only the output rounding and split-K remain (CUTLASS
#   int8 is exact too): the same numbers hold with margin.
# * block_fp8 scales each 128-wide K tile's fp32 partial product (one extra fp32 rounding per tile,
#   ~1e-7); DeepGEMM's two-level promotion and the Triton block kernel differ from it by the same
#   output-rounding-sized amounts: the same numbers.
_PER_OUT_DTYPE = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3, torch.float32: 1e-4}
TOLERANCES: dict[tuple[str, torch.dtype], float] = {
    (fmt, dtype): tol
    for fmt in ("fp8_dynamic", "w8a8_int8", "block_fp8")
    for dtype, tol in _PER_OUT_DTYPE.items()
}


# Auxiliary-kernel test cases (hidden size, num_tokens, dtype, strided rows): one per hidden size of the
# model zoo plus an odd one; num_tokens 32/33 only with small hidden sizes (Triton's interpreter runs
# one program per row: 33 rows of 5120 take ~10 s); dtype and row stride alternate.
AUX_CASES = [
    (1024, 33, torch.bfloat16, False),
    (2048, 2, torch.float16, True),
    (2560, 3, torch.bfloat16, False),
    (4096, 1, torch.float16, True),
    (5120, 2, torch.bfloat16, True),
    (7168, 1, torch.float16, False),
    (8192, 3, torch.bfloat16, True),
    (1000, 32, torch.float16, True),
]


def aux_case_ids(prefix: str) -> list[str]:
    """pytest ids for :data:`AUX_CASES`, e.g. ``H1024-M33-bfloat16-contig`` for ``prefix="H"``."""
    return [f"{prefix}{h}-M{m}-{str(dt)[6:]}-{'strided' if s else 'contig'}" for h, m, dt, s in AUX_CASES]


def tolerance(fmt: str, out_dtype: torch.dtype) -> float:
    """The relative Frobenius tolerance for ``fmt`` (e.g. ``"fp8_dynamic"``) at ``out_dtype``."""
    try:
        return TOLERANCES[(fmt, out_dtype)]
    except KeyError:
        raise ValueError(f"no tolerance for format {fmt!r} with out_dtype {out_dtype}") from None


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error in float64; 0 for two empty tensors; inf if ``out`` has NaN/inf
    where ``ref`` is finite."""
    if out.shape != ref.shape:
        raise ValueError(f"rel_error: shapes differ: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
    if out.numel() == 0:
        return 0.0
    o, r = out.double(), ref.double()
    if not torch.isfinite(o).all():
        return float("inf")
    denom = r.norm().item()
    num = (o - r).norm().item()
    return num / denom if denom > 0 else num


def max_abs_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute difference (0 for empty tensors)."""
    if out.numel() == 0:
        return 0.0
    return (out.double() - ref.double()).abs().max().item()


# --------------------------------------------------------------------------------------------
# Fused row op + per-token fp8 quantization (hlcore.norm_quant, hlcore.activation_quant)
# --------------------------------------------------------------------------------------------
def fp8_interpreter_roundings(q: torch.Tensor, target: torch.Tensor, exact: bool) -> torch.Tensor:
    """Bool mask of the elements where Triton's CPU interpreter casts fp32 -> e4m3 its known wrong
    ways (see ``packages/hlcore/tests/test_quant_kernels.py``): just below a power of two ``p`` it
    drops the carry (``q = p / 2`` where the exact value ``target`` rounds to p) and it truncates
    subnormals (``|target| < 2^-6``). All False when ``exact`` (Helion's interpreter, the GPU)."""
    if exact:
        return torch.zeros(q.shape, dtype=torch.bool, device=q.device)
    qa, ta = q.double().abs(), target.double().abs()
    pow2 = qa == torch.exp2(torch.log2(qa.clamp(min=2.0**-9)).round())
    carry = pow2 & ((ta - 2 * qa).abs() <= 2 * qa * 2.0**-3)
    return carry | (ta < 2.0**-6)


def assert_per_token_fp8_close(
    q: torch.Tensor, scale: torch.Tensor, y64: torch.Tensor, rtol: float, exact: bool, what: str
) -> None:
    """Check a per-token fp8 quantization ``(q [M, N] e4m3, scale [M, 1] fp32)`` of a row op whose
    exact (float64) output is ``y64`` ``[M, N]``, the op's own output rounding being ``rtol``
    (relative): each scale within ``rtol`` of ``amax(|y64|) / 448`` (vLLM's minimum scale for zero
    rows), and ``q * scale`` within one e4m3 rounding (2^-4 relative, 2^-9 * scale in the subnormal
    range) plus ``rtol`` of ``y64``, except the interpreter roundings (:func:`fp8_interpreter_roundings`)
    when not ``exact``. Raises AssertionError naming ``what``."""
    from hlcore.quant import FP8_MAX, FP8_MIN_SCALE

    assert (
        q.dtype == torch.float8_e4m3fn and scale.shape == (q.shape[0], 1) and scale.dtype == torch.float32
    ), what
    assert torch.isfinite(q.float()).all(), f"{what}: NaN fp8 bytes"
    scale_ref = (y64.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=FP8_MIN_SCALE)
    torch.testing.assert_close(
        scale.double(), scale_ref, rtol=rtol, atol=0, msg=lambda m: f"{what}: scales: {m}"
    )
    deq = q.double() * scale.double()
    bound = (2.0**-4 + rtol) * y64.abs() + scale.double() * 2.0**-9 + 1e-12
    bad = ((deq - y64).abs() > bound) & ~fp8_interpreter_roundings(q, y64 / scale.double(), exact)
    assert not bad.any(), (
        f"{what}: {bad.sum().item()} values off, worst {((deq - y64).abs() - bound).max():.3e}"
    )


def fp8_bytes_differ(q: torch.Tensor, q_ref: torch.Tensor) -> float:
    """Fraction of fp8 elements whose bytes differ between ``q`` and ``q_ref``."""
    return (q.view(torch.uint8) != q_ref.view(torch.uint8)).float().mean().item()


def assert_per_token_int8_close(
    q: torch.Tensor, scale: torch.Tensor, y64: torch.Tensor, rtol: float, what: str
) -> None:
    """Check a symmetric per-token int8 quantization ``(q [M, N] int8, scale [M, 1] fp32)`` of a row
    op whose exact (float64) output is ``y64``, the op's own output rounding being ``rtol``: each
    scale within ``rtol`` of ``amax(|y64|) / 127`` (0 for a zero row), and ``q * scale`` within half
    a step (rounding) plus ``rtol`` of ``y64``. Raises AssertionError naming ``what``."""
    assert q.dtype == torch.int8 and scale.shape == (q.shape[0], 1) and scale.dtype == torch.float32, what
    scale_ref = y64.abs().amax(dim=-1, keepdim=True) / 127.0
    torch.testing.assert_close(
        scale.double(), scale_ref, rtol=rtol, atol=0, msg=lambda m: f"{what}: scales: {m}"
    )
    deq = q.double() * scale.double()
    bound = 0.5 * scale.double() * (1 + 1e-6) + 2 * rtol * y64.abs() + 1e-12
    bad = (deq - y64).abs() > bound
    assert not bad.any(), (
        f"{what}: {bad.sum().item()} values off, worst {((deq - y64).abs() - bound).max():.3e}"
    )
