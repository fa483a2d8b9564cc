"""Helion's scaled GEMM for one call as :func:`hlvllm.routing.decide` routes it: the config, what it
compiles, and the out-variant call :mod:`hlvllm.capture_dispatch` makes (used by :mod:`hlvllm.ops`
too)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hlvllm import dispatch, routing
from hlvllm.precompile import ones_like_rows, triton_class


def scaled_mm_format(dtype: torch.dtype) -> str:
    """The scaled-GEMM format of a quantized operand dtype (int8: W8A8_INT8, else FP8_Dynamic)."""
    return "w8a8_int8" if dtype == torch.int8 else "fp8_dynamic"


def helion_config(fmt: str, m: int, n: int, k: int, device: torch.device | None = None) -> dict | None:
    """The config to pass to ``hlcore.scaled_mm`` for this key: None (its picker chooses), or with
    ``HL_DETERMINISTIC=1`` the picked config with ``split_k = 1`` (each output written once by one
    program, no atomics: bitwise repeatable; slower where the pick splits K). See
    :func:`hlvllm.routing.decide`."""
    return routing.decide(fmt, m, n, k).config


def compile_key(fmt: str, m: int, n: int, k: int, device: torch.device | None = None) -> tuple[str, int]:
    """What the Helion GEMM compiles for this call: the config it runs (the route's, else the
    picker's) and Triton's specialization class of M (:func:`hlvllm.precompile.triton_class`)."""
    import json

    route = routing.decide(fmt, m, n, k)
    if route.config is not None:
        text = json.dumps(route.config, sort_keys=True)
    else:
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        text = (
            route.pick.config_json
            if route.pick is not None
            else pick_scaled_mm_config(fmt, m, n, k).config_json
        )
    return text, triton_class(m)


def helion_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, out=None, fmt=None):
    """Helion's GEMM with the route's config for this call (:func:`helion_config`), into ``out``
    when given; ``fmt`` ``"block_fp8"`` for 1x128 / 128x128 block scales (default: the format of
    A's dtype with per-token / per-channel scales)."""
    from hlcore.formats import get_format
    from hlcore.scaled_mm import scaled_mm

    fmt = fmt or scaled_mm_format(a.dtype)
    config = helion_config(fmt, a.shape[0], b.shape[1], a.shape[1])
    block_size = get_format(fmt).block_size
    return scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, block_size=block_size, config=config, out=out)


def scaled_mm_into(
    fmt: str,
    out: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
    vllm_into: Callable[[torch.Tensor], None],
) -> None:
    """``out[M, N] = dequant(a) @ dequant(b) (+ bias)`` written into ``out`` by Helion or by
    ``vllm_into(buffer)`` (vLLM's op writing a buffer), as :func:`hlvllm.routing.decide` and
    :func:`hlvllm.dispatch.run` say; the out-variant path of :mod:`hlvllm.capture_dispatch`.
    ``a`` [M, K] and the column-major ``b`` [K, N] as :func:`hlcore.scaled_mm.scaled_mm` takes them,
    scales per token / per channel (``fp8_dynamic``, ``w8a8_int8``) or 1x128 / 128x128 blocks
    (``block_fp8``), ``out`` a row-major ``[M, N]`` tensor of the output dtype. A route to vLLM calls
    ``vllm_into(out)`` and nothing else; on the Helion route vLLM's result for the first-call check
    (or a fallback) goes to a buffer of its own, copied into ``out`` only when it is the result."""
    m, k = a.shape
    n = b.shape[1]
    if not routing.decide(fmt, m, n, k).helion:
        vllm_into(out)
        return

    def vllm_fresh() -> torch.Tensor:
        fresh = torch.empty_like(out)
        vllm_into(fresh)
        return fresh

    def helion_at(size: int) -> torch.Tensor:  # the same GEMM at M = size (hlvllm.precompile)
        a2, sa2 = ones_like_rows(a, m, size), ones_like_rows(scale_a, m, size)
        return helion_scaled_mm(a2, b, sa2, scale_b, out.dtype, bias, fmt=fmt)

    result = dispatch.run(
        fmt,
        m,
        n,
        k,
        lambda: helion_scaled_mm(a, b, scale_a, scale_b, out.dtype, bias, out=out, fmt=fmt),
        vllm_fresh,
        helion_at,
        lambda size: compile_key(fmt, size, n, k, a.device),
    )
    if result is not out:
        out.copy_(result)
