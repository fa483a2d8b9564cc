"""vLLM general-plugin entry point (``vllm.general_plugins``: ``hlvllm = hlvllm.plugin:register``).

vLLM calls :func:`register` in every process (engine core, each worker, the model-inspection
subprocess) before any model is built. It must be idempotent, cheap and must not initialise CUDA.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm.hlvllm")

_registered = False


def register() -> None:
    """Register hlvllm's torch ops and, when ``HL_LINEAR_BACKEND=helion``, put the Helion linear
    kernels first in vLLM's CUDA FP8, INT8 and block-FP8 kernel lists and replace vLLM's ``RMSNorm``,
    ``SiluAndMul`` and ``QuantFP8`` (those named in ``HL_AUX_KERNELS``; default none, all with ``HL_AUX_FUSION=1``) by hlvllm's
    subclasses (:mod:`hlvllm.aux_layers`), and add those settings to vLLM's torch.compile cache key
    (:mod:`hlvllm.compile_cache`). Safe to call any number of times."""
    global _registered
    if _registered:
        return
    _registered = True
    from hlvllm.settings import get_settings

    settings = get_settings()
    from hlvllm.aux_ops import register_aux_ops
    from hlvllm.compile_cache import register_compile_factor
    from hlvllm.ops import register_ops

    register_ops()
    register_aux_ops()
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
    from hlvllm.aux_layers import register_aux_layers

    replaced = register_aux_layers(settings.aux_kernels)
    if settings.aux_fusion:
        from hlvllm.aux_fusion import install

        install()
    import importlib.util

    helion_missing = importlib.util.find_spec("helion") is None
    logger.info(
        "hlvllm: Helion linear backend registered (max_helion_size=%d; aux kernels: %s%s)%s",
        settings.max_helion_size,
        ", ".join(sorted(settings.aux_kernels)) or "none",
        "; norm/silu + fp8 quant fused (HL_AUX_FUSION=1)" if settings.aux_fusion else "",
        "; helion is not importable, so vLLM's kernels run (pip install helion==1.5.0)"
        if helion_missing
        else "",
    )
    if replaced:
        logger.debug("hlvllm: vLLM classes replaced out of tree: %s", ", ".join(replaced))
