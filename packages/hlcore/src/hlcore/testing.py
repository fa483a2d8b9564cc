"""Shared test helpers: error measures, the per-format tolerance table, aux-kernel cases and
quantization checks, for the tests of every package.

The error measures and tolerances live in :mod:`hlcore.numerics` (production code imports them
from there); they are re-exported here so tests keep one import. Errors are the relative Frobenius
error ``||out - ref||_F / ||ref||_F`` against the fp32 dequantized reference of the *same quantized
inputs*, so fp8/int8 quantization error itself does not count.
"""

from __future__ import annotations

import torch

from hlcore.numerics import TOLERANCES, max_abs_error, rel_error, tolerance

__all__ = [
    "AUX_CASES",
    "TOLERANCES",
    "assert_per_token_fp8_close",
    "assert_per_token_int8_close",
    "aux_case_ids",
    "fp8_bytes_differ",
    "fp8_interpreter_roundings",
    "max_abs_error",
    "rel_error",
    "tolerance",
]


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
