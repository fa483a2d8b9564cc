"""When hlvllm's linear kernels may run: the checks every format shares.

A kernel is used only with the backend enabled (``HL_LINEAR_BACKEND=helion``), on CUDA, on SM90
(H100/H200, where the shipped configs are tuned), with helion importable and with CUDA graphs on
(Helion's host call costs tens of µs, so it only pays under graph replay). Each check returns
``(ok, reason)`` as vLLM's ``is_supported`` / ``can_implement`` do; the reason names the fix.
vLLM's chooser keeps a declined kernel's reason to itself whenever a later kernel takes the layer,
so the kernels' checks are wrapped in :func:`warn_if_declined`: one warning per reason.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

from hlvllm.graphs import add_compile_range_endpoint, capture_sizes_of, cudagraph_capture_limit
from hlvllm.settings import get_settings

__all__ = [
    "announce",
    "capture_sizes_of",
    "cudagraph_capture_limit",
    "HelionLinearKernelChecks",
    "out_dtype_reason",
    "helion_importable",
    "helion_supported",
    "model_dtype",
    "warn_if_declined",
    "warn_once",
]

logger = logging.getLogger("vllm.hlvllm")
_announced: set[str] = set()
_declined: set[tuple[str, str]] = set()  # (kernel class, reason) already warned about
_warned_reasons: set[str] = set()  # reasons already in a warning: later layers log them at info


def warn_once(reason: str, msg: str, *args) -> None:
    """Log ``msg % args`` as a warning the first time ``reason`` comes up in this process, at info
    after that: one missing helion (or CUDA graphs off) is one warning, however many layer kinds
    (linear formats, RMSNorm, SiluAndMul, ...) it turns back to vLLM."""
    level = logging.INFO if reason in _warned_reasons else logging.WARNING
    _warned_reasons.add(reason)
    logger.log(level, msg, *args)


def warn_if_declined(check):
    """Wrap a kernel's ``is_supported`` / ``can_implement`` (under ``@classmethod``): when it declines
    with the backend on, log ONE warning per (kernel, reason) and process naming the reason, then
    return the result unchanged (vLLM then tries its next kernel)."""

    @functools.wraps(check)
    def wrapper(cls, *args, **kwargs):
        ok, reason = check(cls, *args, **kwargs)
        if not ok and get_settings().enabled and (cls.__name__, str(reason)) not in _declined:
            _declined.add((cls.__name__, str(reason)))
            warn_once(
                str(reason),
                "hlvllm: %s %s; vLLM's own kernel runs for these layers "
                "(VLLM_DISABLED_KERNELS=%s silences this)",
                cls.__name__,
                str(reason).rstrip("."),
                cls.__name__,
            )
        return ok, reason

    return wrapper


@functools.cache
def helion_importable() -> tuple[bool, str | None]:
    """Whether helion (and so hlcore's kernels) can be imported here, without importing it."""
    if importlib.util.find_spec("helion") is None:
        return False, "helion is not installed (pip install helion==1.5.0)"
    return True, None


def helion_supported(compute_capability: int | None) -> tuple[bool, str | None]:
    """vLLM's ``is_supported(compute_capability)`` for every hlvllm linear kernel."""
    from vllm.platforms import current_platform

    if not get_settings().enabled:
        return False, "is off (set HL_LINEAR_BACKEND=helion to enable)"
    if not current_platform.is_cuda():
        return False, "requires CUDA"
    import vllm.envs as envs

    if envs.VLLM_BATCH_INVARIANT:
        return False, "is not batch-invariant (VLLM_BATCH_INVARIANT=1 keeps vLLM's kernels)"
    if compute_capability is None:  # vLLM's kernel __init__ re-checks without a capability
        cap = current_platform.get_device_capability()
        compute_capability = None if cap is None else cap.to_int()
    if compute_capability != 90:
        return False, f"is tuned for SM90 (H100/H200) only; this GPU is SM{compute_capability}"
    return helion_importable()


#: The output dtypes hlvllm's GEMMs write (vLLM's layers run bf16 or fp16 activations).
SUPPORTED_OUT_DTYPES = ("bfloat16", "float16")


def out_dtype_reason(out_dtype) -> str | None:
    """Why a layer's output dtype is not supported, or None (None: the activations' dtype)."""
    if out_dtype is None or str(out_dtype).removeprefix("torch.") in SUPPORTED_OUT_DTYPES:
        return None
    return f"supports bf16/fp16 output only; got {out_dtype}"


class HelionLinearKernelChecks:
    """vLLM's ``is_supported`` / ``can_implement`` for every hlvllm linear kernel (put first in the
    bases, before the vLLM kernel subclassed): :func:`helion_supported`, then the kernel's own
    :meth:`scheme_reason` for the layer's scheme, then CUDA graphs on (:func:`cudagraph_capture_limit`);
    declines are warned once per reason (:func:`warn_if_declined`)."""

    @classmethod
    @warn_if_declined
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        return helion_supported(compute_capability)

    @classmethod
    @warn_if_declined
    def can_implement(cls, config) -> tuple[bool, str | None]:
        reason = cls.scheme_reason(config)
        if reason:
            return False, reason
        size, reason = cudagraph_capture_limit()
        if not size:
            return False, reason
        return True, None

    @classmethod
    def scheme_reason(cls, config) -> str | None:
        """Why this kernel cannot take a layer of ``config`` (its quantization scheme), or None."""
        raise NotImplementedError


def model_dtype():
    """The model's dtype from the current vLLM config (bf16 when there is none)."""
    import torch
    from vllm.config import get_current_vllm_config

    model_config = get_current_vllm_config().model_config
    dtype = getattr(model_config, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else torch.bfloat16


def at_capture() -> bool:
    """Whether FP8_Dynamic / W8A8_INT8 layers route at CUDA-graph capture (``HL_DISPATCH_AT=capture``,
    :mod:`hlvllm.capture_dispatch`) instead of inside hlvllm's graph op."""
    return get_settings().dispatch_at == "capture"


def announce(fmt: str, fallback: str, capture: bool = False) -> None:
    """At kernel construction: record the CUDA-graph capture limit for dispatch; unless ``capture``
    (``HL_DISPATCH_AT=capture``: the kernel hooks vLLM's capture itself,
    :func:`hlvllm.capture_dispatch.install_for`), split vLLM's compile ranges at max_helion_size
    (:func:`hlvllm.graphs.add_compile_range_endpoint`) and install the pass that lowers our ops
    above it to vLLM's kernels (:mod:`hlvllm.lowering`); and log, once per format and process,
    which kernel runs which batch sizes."""
    from vllm.config import get_current_vllm_config

    from hlvllm import lowering, precompile, routing

    size, _ = cudagraph_capture_limit()
    routing.set_capture_limit(size)
    vllm_config = get_current_vllm_config()
    precompile.set_compilation_config(vllm_config.compilation_config)
    if not capture:
        add_compile_range_endpoint(vllm_config, routing.max_helion_m())
        lowering.install()
    if fmt not in _announced:
        _announced.add(fmt)
        logger.info(
            "hlvllm: %s linear layers use Helion for num_tokens <= %d under CUDA graphs and %s otherwise",
            fmt,
            routing.max_helion_m(),
            fallback,
        )
