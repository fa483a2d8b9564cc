"""Error measures and per-format tolerances used at run time (hlvllm's output guard, hltools'
validation and tuning) and by the tests.

``rel_error(out, ref) = ||out - ref||_F / ||ref||_F`` in float64, against the fp32 dequantized
reference of the *same quantized inputs* (:func:`hlcore.scaled_mm.scaled_mm_ref`), so the fp8/int8
quantization error itself does not count; what remains is accumulation order, the output rounding
and split-K atomics. :func:`tolerance` is the bound for a format and output dtype, from the format
registry (:attr:`hlcore.formats.ScaledMMFormat.tolerances`).

:mod:`hlcore.testing` re-exports these names for the tests.
"""

from __future__ import annotations

import torch

from hlcore.formats import FORMATS, OUT_DTYPE_NAMES

#: (format, out dtype) -> max relative Frobenius error: every format's tolerance table.
TOLERANCES: dict[tuple[str, torch.dtype], float] = {
    (name, getattr(torch, dt)): fmt.tolerance(dt) for name, fmt in FORMATS.items() for dt in OUT_DTYPE_NAMES
}


def tolerance(fmt: str, out_dtype: torch.dtype) -> float:
    """The relative Frobenius tolerance for ``fmt`` (e.g. ``"fp8_dynamic"``) at ``out_dtype``;
    ``ValueError`` for an unknown format or an output dtype without one."""
    try:
        return TOLERANCES[(fmt, out_dtype)]
    except KeyError:
        raise ValueError(f"no tolerance for format {fmt!r} with out_dtype {out_dtype}") from None


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error in float64; 0 for two empty tensors; inf if ``out`` has NaN/inf
    (whatever ``ref`` holds); the absolute Frobenius error when ``ref`` is all zeros. Raises
    ``ValueError`` when the shapes differ."""
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
