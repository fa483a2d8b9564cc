"""Helion 1.5.0 on torch 2.11 inside a process with torch.distributed initialized (every vLLM worker).

torch 2.11 has no ``symm_mem.is_symm_mem_tensor``, so Helion 1.5.0 falls back to treating *every*
kernel called while a process group exists as a symmetric-memory kernel
(``helion._dist_utils.kernel_uses_symm_mem``): it warns ``ProcessGroupNameNotFound``, restricts the
config to persistent programs, clamps ``num_sm_multiplier`` to the signal pad, and on the CPU
interpreter fails outright (``AssertionError: TODO: implement for other devices``). Helion's own
comment calls this the conservative path of its issue #3024.

:func:`local_kernel` marks one of our kernels as process-local: none of hl's kernels ever takes a
symmetric-memory tensor. It overrides that kernel's ``_compute_is_distributed`` (instance attribute,
no other Helion kernel changes) and makes ``is_symm_mem_tensor`` answer False instead of asserting
when no process group name is known (the case Helion then reaches for such a kernel; it only
replaces an ``AssertionError``). Both hooks are checked for presence, so another Helion version
without them is left alone.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence


def _never_distributed(args: Sequence[object], *, dist_initialized: bool | None = None) -> bool:
    return False


@functools.cache
def _patch_is_symm_mem_tensor() -> None:
    try:
        import helion._dist_utils as du
    except ImportError:
        return
    original = getattr(du, "is_symm_mem_tensor", None)
    if original is None or getattr(original, "_hl_local", False):
        return

    def is_symm_mem_tensor(t, process_group_name=None):
        if process_group_name is None:
            import torch.distributed._symmetric_memory as symm_mem

            if not hasattr(symm_mem, "is_symm_mem_tensor"):
                return False  # Helion 1.5.0 would assert here; no group -> not a symm-mem tensor
        return original(t, process_group_name)

    is_symm_mem_tensor._hl_local = True
    du.is_symm_mem_tensor = is_symm_mem_tensor


def local_kernel(kernel):
    """Return ``kernel`` (a ``helion.Kernel``) marked as never distributed (see module docstring)."""
    if hasattr(kernel, "_compute_is_distributed"):
        kernel._compute_is_distributed = _never_distributed
        _patch_is_symm_mem_tensor()
    return kernel
