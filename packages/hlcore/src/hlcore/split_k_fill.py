"""The output fill of :mod:`hlcore.scaled_mm`'s atomic split-K, as a kernel that lets the GEMM start early.

    out[m, n] = bias[n]   (or 0 without bias)        out: [M, N] contiguous, bias: [N], out's dtype

Split-K programs add their partial tiles into ``out`` (``hl.atomic_add``), so ``out`` must hold the
bias (or zeros) first. A ``zero_()``/``copy_()`` there is one more graph node that the GEMM waits
for entirely: on the H200, an empty kernel costs 0.89 µs per CUDA-graph node and a zero fill followed
by it 1.95 µs (``ci/gpu/stream_floor.py``, 2026-12-01), so the fill adds ~1.1 µs to every split-K
GEMM. With the ``pdl`` tunable this fill is a Triton kernel whose programs first execute
``griddepcontrol.launch_dependents``: the GEMM, launched with programmatic dependent launch, starts
streaming its weight while the fill runs and executes ``griddepcontrol.wait`` (all of the fill's
writes visible) only before its first atomic add. Without GDC (CPU interpreters) it is a plain fill.

The fill kernel itself is launched normally, so it starts after the previous kernel of the stream
(e.g. the activation quantization that writes A) has completed; the GEMM, started by the fill, may
read A and the scales before its wait.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

#: griddepcontrol runs only in real GPU code (neither interpreter has it)
_GDC = os.environ.get("TRITON_INTERPRET") != "1" and os.environ.get("HELION_INTERPRET") != "1"
_BLOCK = 1024


@triton.jit
def _split_k_fill_kernel(
    out_ptr, bias_ptr, numel, n, HAS_BIAS: tl.constexpr, GDC: tl.constexpr, BLOCK: tl.constexpr
):
    if GDC:
        tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    if HAS_BIAS:
        val = tl.load(bias_ptr + offs % n, mask=mask, other=0)
    else:
        val = tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs, val, mask=mask)


@torch.library.custom_op("hlcore::split_k_fill", mutates_args=("out",))
def split_k_fill(out: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Fill ``out`` ([M, N], contiguous, bf16/fp16/fp32) with ``bias`` ([N], out's dtype) broadcast
    over rows, or with zeros when ``bias`` is None; the kernel lets a PDL-launched successor start
    (module docstring); a CPU tensor outside Triton's interpreter is filled by torch. Raises ``ValueError`` for a non-contiguous ``out`` or a bias of another
    shape or dtype."""
    if out.dim() != 2 or not out.is_contiguous():
        raise ValueError(
            f"split_k_fill: out must be a contiguous [M, N] tensor; got shape {tuple(out.shape)}, "
            f"strides {tuple(out.stride())}"
        )
    m, n = out.shape
    if bias is not None and (
        tuple(bias.shape) != (n,) or bias.dtype != out.dtype or not bias.is_contiguous()
    ):
        raise ValueError(
            f"split_k_fill: bias must be a contiguous [{n}] tensor of {out.dtype}; got shape {tuple(bias.shape)}, "
            f"dtype {bias.dtype}"
        )
    numel = m * n
    if numel == 0:
        return
    if not out.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":  # Helion's eager mode on the CPU
        out.copy_(split_k_fill_ref(out, bias))
        return
    _split_k_fill_kernel[(triton.cdiv(numel, _BLOCK),)](
        out, out if bias is None else bias, numel, n, HAS_BIAS=bias is not None, GDC=_GDC, BLOCK=_BLOCK
    )


@split_k_fill.register_fake
def _split_k_fill_fake(out: torch.Tensor, bias: torch.Tensor | None) -> None:
    return None


def split_k_fill_ref(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Reference: ``bias`` broadcast to ``out``'s shape (zeros without bias), a new tensor."""
    if bias is None:
        return torch.zeros_like(out)
    return bias.expand_as(out).clone()
