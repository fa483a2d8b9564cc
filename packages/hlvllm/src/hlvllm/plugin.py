"""vLLM general-plugin entry point (``vllm.general_plugins``: ``hlvllm = hlvllm.plugin:register``).

vLLM calls :func:`register` in every process (engine core, each worker, the model-inspection
subprocess) before any model is built. It must be idempotent, cheap and must not initialise CUDA.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("vllm.hlvllm")

_registered = False

#: hlcore's kernel cache variable (``hlcore.kernel_cache.ENV_VAR``; not imported here: no torch/helion import)
KERNEL_CACHE_VAR = "HL_KERNEL_CACHE_DIR"
#: Its default directory under vLLM's cache root (``VLLM_CACHE_ROOT``, default ``~/.cache/vllm``)
KERNEL_CACHE_SUBDIR = "hlcore_kernels"


def default_kernel_cache(environ: dict[str, str] | None = None) -> str | None:
    """Turn hlcore's kernel cache (Helion's generated code kept across restarts; docs/configuration.md)
    on by default: with ``HL_KERNEL_CACHE_DIR`` unset, set it in ``environ`` (default ``os.environ``,
    so vLLM's workers inherit it) to ``<VLLM_CACHE_ROOT>/hlcore_kernels``. The user's choice wins:
    ``HL_KERNEL_CACHE_DIR=DIR`` uses DIR, ``HL_KERNEL_CACHE_DIR=`` (empty) turns the cache off, and
    ``VLLM_DISABLE_COMPILE_CACHE=1`` (vLLM's switch for its own compile cache) leaves it off too.
    Returns the directory in use, or None when off."""
    env = os.environ if environ is None else environ
    if KERNEL_CACHE_VAR in env:
        return env[KERNEL_CACHE_VAR].strip() or None
    if env.get("VLLM_DISABLE_COMPILE_CACHE", "").strip() not in ("", "0"):
        return None
    from vllm import envs

    root = env.get("VLLM_CACHE_ROOT", "").strip() or envs.VLLM_CACHE_ROOT
    directory = os.path.join(os.path.expanduser(root), KERNEL_CACHE_SUBDIR)
    env[KERNEL_CACHE_VAR] = directory
    return directory


def register() -> None:
    """Register hlvllm's torch ops and, when ``HL_LINEAR_BACKEND=helion``, put the Helion linear
    kernels first in vLLM's CUDA FP8, INT8 and block-FP8 kernel lists and replace vLLM's ``RMSNorm``,
    ``SiluAndMul`` and ``QuantFP8`` (those named in ``HL_AUX_KERNELS``; default none, all with ``HL_AUX_FUSION=1``) by hlvllm's
    subclasses (:mod:`hlvllm.aux_layers`), and add those settings to vLLM's torch.compile cache key
    (:mod:`hlvllm.compile_cache`), and turn hlcore's kernel cache on under vLLM's cache root unless
    ``HL_KERNEL_CACHE_DIR`` says otherwise (:func:`default_kernel_cache`), with Triton pointed at
    the ptxas Inductor will use (:func:`hlcore.kernel_cache.use_inductors_ptxas`). Safe to call any
    number of times."""
    global _registered
    if _registered:
        return
    _registered = True
    from hlvllm.aux_ops import register_aux_ops
    from hlvllm.compile_cache import register_compile_factor
    from hlvllm.ops import register_ops
    from hlvllm.settings import get_settings

    register_ops()
    register_aux_ops()
    try:
        settings = get_settings()
    except ValueError as exc:  # a bad HL_* value must not stop the server: vLLM's kernels run
        register_compile_factor(False)
        logger.warning(
            "hlvllm: %s. The Helion backend stays off and vLLM's kernels run; fix or unset the "
            "variable (docs/configuration.md)",
            exc,
        )
        return
    register_compile_factor(settings.enabled)
    if not settings.enabled:
        logger.debug("hlvllm: off (set HL_LINEAR_BACKEND=helion to enable)")
        return
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    from hlvllm.block_fp8_kernel import HelionFp8BlockScaledMMKernel
    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.int8_kernel import HelionInt8ScaledMMLinearKernel

    for table, kernel in (
        (vllm_linear._POSSIBLE_FP8_KERNELS, HelionFP8ScaledMMLinearKernel),
        (vllm_linear._POSSIBLE_INT8_KERNELS, HelionInt8ScaledMMLinearKernel),
        (vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS, HelionFp8BlockScaledMMKernel),
    ):
        kernels = table.setdefault(PlatformEnum.CUDA, [])
        if kernel not in kernels:
            kernels.insert(0, kernel)
    kernel_cache = default_kernel_cache()
    if kernel_cache:
        from hlcore.kernel_cache import use_inductors_ptxas

        # before anything compiles: the precompile workers inherit it, and their Triton keys then
        # match this process's after torch.compile switched to Inductor's ptxas
        use_inductors_ptxas()
    from hlvllm.aux_layers import register_aux_layers

    replaced = register_aux_layers(settings.aux_kernels)
    if settings.aux_fusion:
        from hlvllm.aux_fusion import install

        install()
    import importlib.util

    helion_missing = importlib.util.find_spec("helion") is None
    logger.info(
        "hlvllm: Helion linear backend registered (max_helion_size=%d; aux kernels: %s%s; kernel cache: %s)%s",
        settings.max_helion_size,
        ", ".join(sorted(settings.aux_kernels)) or "none",
        "; norm/silu + fp8 quant fused (HL_AUX_FUSION=1)" if settings.aux_fusion else "",
        kernel_cache or "off",
        "; helion is not importable, so vLLM's kernels run (pip install helion==1.5.0)"
        if helion_missing
        else "",
    )
    if replaced:
        logger.debug("hlvllm: vLLM classes replaced out of tree: %s", ", ".join(replaced))
