"""Where vLLM 0.26 and 0.33 differ for hlvllm: one small adapter per difference, named for it.

hlvllm supports vLLM 0.26 (the locked development stack, tested on the CPU and on the GPU machine)
and vLLM 0.33 (tested on the CPU only: ``nox -s tests_vllm033``). Everything else the plugin uses of
vLLM is the same in both and is called directly: the kernel selection tables
(``vllm.model_executor.kernels.linear._POSSIBLE_{FP8,INT8,FP8_BLOCK}_KERNELS[PlatformEnum.CUDA]``),
``CustomOp.register_oot`` and ``op_registry_oot``, ``PostGradPassManager.configure`` /
``InductorPass`` / ``compile_ranges_endpoints``, and ``vllm.envs.environment_variables`` (the
compile-cache key). A new difference gets its adapter here, not a version test at the call site.
"""

from __future__ import annotations

import functools
import inspect

#: vLLM's scheme name for each kernel table, as vLLM's own ``init_*_linear_kernel`` pass it to the
#: chooser (0.33: it picks a ``--linear-backend`` override per scheme; 0.26 has no such argument).
TABLE_QUANTIZATION = {
    "_POSSIBLE_FP8_KERNELS": "fp8_w8a8",
    "_POSSIBLE_INT8_KERNELS": "int8_w8a8",
    "_POSSIBLE_FP8_BLOCK_KERNELS": "fp8_block_w8a8",
}


@functools.cache
def _chooser_takes_quantization() -> bool:
    from vllm.model_executor.kernels import linear as vllm_linear

    return "quantization" in inspect.signature(vllm_linear.choose_scaled_mm_linear_kernel).parameters


def choose_scaled_mm_kernel(
    config,
    possible_kernels: dict,
    compute_capability: int | None = None,
    *,
    quantization: str | None = None,
):
    """vLLM's ``choose_scaled_mm_linear_kernel(config, possible_kernels, compute_capability)``, called
    as vLLM's layer code calls it. vLLM 0.33 adds a required keyword ``quantization`` (the scheme
    name, ``"fp8_w8a8"`` / ``"int8_w8a8"`` / ``"fp8_block_w8a8"``, which selects a
    ``--linear-backend`` override); when not given it is the one vLLM passes for
    ``possible_kernels`` (:data:`TABLE_QUANTIZATION`). vLLM 0.26's chooser has no such argument and
    gets none."""
    from vllm.model_executor.kernels import linear as vllm_linear

    kwargs = {}
    if _chooser_takes_quantization():
        if quantization is None:
            quantization = next(
                (
                    q
                    for name, q in TABLE_QUANTIZATION.items()
                    if getattr(vllm_linear, name, None) is possible_kernels
                ),
                None,
            )
            if quantization is None:
                raise ValueError("choose_scaled_mm_kernel: pass quantization= for a table that is not vLLM's")
        kwargs["quantization"] = quantization
    return vllm_linear.choose_scaled_mm_linear_kernel(config, possible_kernels, compute_capability, **kwargs)
