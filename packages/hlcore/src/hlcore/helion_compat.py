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

A second Helion 1.5.0 bug blocks TMA (``indexing="tensor_descriptor"``) for our GEMM: when a kernel
with tensor descriptors and a symbolic block size (our K chunk, ``next_power_of_2(cdiv(K, split_k))``)
is bound, ``_specialize_extra`` -> ``descriptor_extent_cap`` resolves block sizes outside the host
function context, and ``CompileEnvironment.get_block_id`` raises ``NoCurrentFunction`` (every TMA
config failed this way on the H200). :func:`local_kernel` also makes ``get_block_id`` answer None
("not a registered block size") in that situation: the extent cap then ignores the symbolic K chunk,
which no descriptor uses as its block shape.

Last, with ``HL_KERNEL_CACHE_DIR`` set, :func:`local_kernel` returns the kernel wrapped in
:class:`hlcore.kernel_cache.CachedKernel` (Helion's generated code cached on disk, so a new process
skips binding and code generation); unset, the kernel itself, unchanged.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence


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


@functools.cache
def _patch_get_block_id() -> None:
    try:
        from helion._compiler.compile_environment import CompileEnvironment
        from helion._compiler.host_function import NoCurrentFunction
    except ImportError:
        return
    original = getattr(CompileEnvironment, "get_block_id", None)
    if original is None or getattr(original, "_hl_local", False):
        return

    def get_block_id(self, size):
        try:
            return original(self, size)
        except NoCurrentFunction:  # outside the host function (descriptor_extent_cap): not a block size
            return None

    get_block_id._hl_local = True
    CompileEnvironment.get_block_id = get_block_id


def mark_local(kernel):
    """``kernel`` (a ``helion.Kernel``) marked as never distributed, with the TMA block-size fix
    installed (see module docstring); another Helion without the hook: only the fix."""
    _patch_get_block_id()
    if hasattr(kernel, "_compute_is_distributed"):
        kernel._compute_is_distributed = _never_distributed
        _patch_is_symm_mem_tensor()
    return kernel


def local_kernel(kernel):
    """Return ``kernel`` (a ``helion.Kernel``) :func:`mark_local`-ed and wrapped by the on-disk code
    cache when ``HL_KERNEL_CACHE_DIR`` is set (see module docstring; another Helion without the
    local-marking hook is not cached: the cache keys on that marking)."""
    from hlcore.kernel_cache import cached_kernel

    return cached_kernel(mark_local(kernel))


def gemm_kernel(body: Callable, config=None):
    """``helion.kernel(body)`` with the settings of hlcore's GEMM kernels (shapes dynamic; tensor
    operations in the host code allowed), with ``config`` fixed when given; not marked local."""
    import helion

    return helion.kernel(
        body, config=config, static_shapes=False, ignore_warnings=[helion.exc.TensorOperationInWrapper]
    )


#: The ``helion.kernel`` arguments of :func:`gemm_kernel`, as text: part of a lazy kernel's cache key.
GEMM_SETTINGS = "static_shapes=False, ignore_warnings=[TensorOperationInWrapper]"


def config_kernel(body: Callable, config_json: str, make_config: Callable[[], object]):
    """``body``'s kernel with one fixed config (``make_config()``, a ``helion.Config``; its JSON is
    ``config_json``): one ``helion.Kernel`` per config, whose own dispatch reuses a binding across M
    (one binding shared by all configs, through ``kernel.bind(args).compile_config(config)``, was
    bound again at nearly every M on the H200: docs/architecture.md). With the kernel cache on
    (``HL_KERNEL_CACHE_DIR``, not in Helion's eager mode) the kernel is made lazily
    (:meth:`hlcore.kernel_cache.CachedKernel.lazy`): calls that load from the cache never import
    helion; otherwise :func:`local_kernel` of it now."""
    from hlcore.kernel_cache import CachedKernel, cache_dir_from_env

    directory = cache_dir_from_env()
    if directory is None or os.environ.get("HELION_INTERPRET") == "1":
        return local_kernel(gemm_kernel(body, make_config()))
    return CachedKernel.lazy(
        lambda: mark_local(gemm_kernel(body, make_config())),
        directory,
        fn=body,
        config_json=config_json,
        settings=GEMM_SETTINGS,
    )
