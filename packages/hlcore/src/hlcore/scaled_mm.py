"""Unified scaled GEMM for decode-size quantized linear layers.

    out[M, N] = scale_a[M] * scale_b[N] * (A[M, K] @ B[K, N]) (+ bias[N])

FP8_Dynamic semantics follow vLLM's ``cutlass_scaled_mm`` as used by
``CutlassFP8ScaledMMLinearKernel`` (compressed-tensors FP8_DYNAMIC): A is fp8 e4m3 with a dynamic
per-token scale, B is the fp8 e4m3 weight with a per-output-channel scale, accumulation is fp32,
the scales and the bias are applied once in the epilogue, the output is bf16 or fp16.

One Helion kernel body holds every algorithm variant as tunables:

* ``split_k`` (power of two, 1..256): K is cut into ``split_k`` chunks that run as separate
  programs; their partial results are added into the output with ``hl.atomic_add``. The output is
  first filled with the bias (or zeros) by the kernel's own host code, so no second pass runs.
  Atomic adds in the output dtype round once per chunk: results are not bitwise repeatable and
  carry up to ``split_k`` output roundings (use ``split_k=1`` where that matters).
* ``swap_ab`` (bool): computes the transposed tile ``B^T @ A^T`` so the tiny M sits on the MMA's
  narrow side and N fills the 64-row wgmma side (the usual decode trick, see the Helion/vLLM
  "swap-AB" kernels).

fp8 accumulation note (sm90): Triton hard-codes imprecise fp8 wgmma accumulation when ``acc=`` is
passed to ``tl.dot``; writing ``acc = acc + hl.dot(...)`` promotes each K tile to fp32 instead
(see docs/reference: relative error 3e-3 -> 1e-4 at K=4096).

Weight layout: B is the ``[K, N]`` column-major view vLLM holds after
``process_weights_after_loading`` (``layer.weight = weight.t()`` of a row-major ``[N, K]`` tensor);
the kernel reads it through ``B.t()`` (a view), so no copy happens per call.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import helion
import helion.language as hl
import torch
from helion.autotuner import BooleanFragment, PowerOfTwoFragment

FP8_DTYPE = torch.float8_e4m3fn
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INPUT_DTYPES = (FP8_DTYPE,)


# --------------------------------------------------------------------------------------------
# Helion kernel
# --------------------------------------------------------------------------------------------
def _scaled_mm_body(
    a: torch.Tensor,  # [M, K] fp8, K contiguous
    b_t: torch.Tensor,  # [N, K] fp8, K contiguous (= B.t() of the [K, N] column-major weight)
    scale_a: torch.Tensor,  # [M] fp32
    scale_b: torch.Tensor,  # [N] fp32
    bias: torch.Tensor | None,  # [N] out dtype
    out_dtype: torch.dtype,  # bf16/fp16/fp32
) -> torch.Tensor:
    m = a.size(0)
    k = hl.specialize(a.size(1))
    n = hl.specialize(b_t.size(0))
    # Allocated here (not passed in) so its rows share A's symbolic M: Helion 1.5.0 mis-broadcasts
    # a separately passed [1, N] output when M is dynamic and equals 1.
    out = torch.empty([m, n], dtype=out_dtype, device=a.device)
    split_k = hl.register_tunable("split_k", PowerOfTwoFragment(1, 256, 1))
    swap_ab = hl.register_tunable("swap_ab", BooleanFragment())
    k_chunk = helion.next_power_of_2(helion.cdiv(k, split_k))
    if split_k > 1:
        # The split-K programs add into `out`; it starts as the bias (or zero).
        if bias is not None:
            out.copy_(bias.expand(m, n))
        else:
            out.zero_()
    for tile_m, tile_n, outer_k in hl.tile([m, n, k], block_size=[None, None, k_chunk]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        acc_t = hl.zeros([tile_n, tile_m], dtype=torch.float32)
        for tile_k in hl.tile(outer_k.begin, outer_k.end):
            if swap_ab:
                acc_t = acc_t + hl.dot(b_t[tile_n, tile_k], a[tile_m, tile_k].t(), out_dtype=torch.float32)
            else:
                acc = acc + hl.dot(a[tile_m, tile_k], b_t[tile_n, tile_k].t(), out_dtype=torch.float32)
        if swap_ab:
            acc = acc_t.t()
        acc = acc * scale_a[tile_m][:, None] * scale_b[tile_n][None, :]
        if split_k == 1:
            if bias is not None:
                acc = acc + bias[tile_n][None, :].to(torch.float32)
            out[tile_m, tile_n] = acc.to(out.dtype)
        else:
            hl.atomic_add(out, [tile_m, tile_n], acc.to(out.dtype))
    return out


@functools.cache
def _kernel_for(config_json: str):
    """One ``helion.Kernel`` per config: works the same in compiled and both interpret modes."""
    config = helion.Config.from_json(config_json)
    return helion.kernel(
        _scaled_mm_body,
        config=config,
        static_shapes=False,
        ignore_warnings=[helion.exc.TensorOperationInWrapper],
    )


def scaled_mm_kernel():
    """The bare Helion kernel (no config), for autotuning: ``kernel.autotune(args)``."""
    return helion.kernel(
        _scaled_mm_body, static_shapes=False, ignore_warnings=[helion.exc.TensorOperationInWrapper]
    )


# --------------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------------
def scaled_mm_ref(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """fp32 dequantized reference: ``(scale_a * A) @ (B * scale_b) + bias`` computed in fp32 on the
    tensors' device, rounded once to ``out_dtype``. Shapes as in :func:`scaled_mm`."""
    m, n = a.shape[0], b.shape[1]
    a32 = a.to(torch.float32) * scale_a.reshape(m, 1).to(torch.float32) if m else a.to(torch.float32)
    b32 = b.to(torch.float32) * scale_b.reshape(1, n).to(torch.float32)
    out = a32 @ b32
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out.to(out_dtype)


# --------------------------------------------------------------------------------------------
# Host wrapper
# --------------------------------------------------------------------------------------------
def _describe(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, strides {tuple(t.stride())}, device {t.device}"


def check_scaled_mm_args(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None,
) -> None:
    """Raise ``ValueError`` naming the offending tensor, what it is and what is supported."""
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or a.dtype not in INPUT_DTYPES:
        got = _describe(a) if isinstance(a, torch.Tensor) else type(a).__name__
        raise ValueError(f"scaled_mm: A must be a 2-D [M, K] tensor of dtype {FP8_DTYPE}; got {got}")
    if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.dtype != a.dtype:
        got = _describe(b) if isinstance(b, torch.Tensor) else type(b).__name__
        raise ValueError(f"scaled_mm: B must be a 2-D [K, N] tensor of A's dtype {a.dtype}; got {got}")
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"scaled_mm: B must be [K, N] with K = {k} (A's K); got B {_describe(b)}")
    n = b.shape[1]
    if b.stride(0) != 1 and n > 1:
        raise ValueError(
            "scaled_mm: B must be column-major [K, N] (the weight.t() view vLLM holds, stride(0) == 1); "
            f"got B {_describe(b)}"
        )
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"scaled_mm: out_dtype must be one of {OUT_DTYPES}; got {out_dtype}")
    if not isinstance(scale_a, torch.Tensor) or scale_a.dtype != torch.float32 or scale_a.numel() != m:
        got = _describe(scale_a) if isinstance(scale_a, torch.Tensor) else type(scale_a).__name__
        raise ValueError(
            f"scaled_mm: scale_a must be a per-token float32 tensor of M = {m} elements ([M, 1] or [M]); "
            f"got {got}"
        )
    if not isinstance(scale_b, torch.Tensor) or scale_b.dtype != torch.float32 or scale_b.numel() != n:
        got = _describe(scale_b) if isinstance(scale_b, torch.Tensor) else type(scale_b).__name__
        raise ValueError(
            f"scaled_mm: scale_b must be a per-channel float32 tensor of N = {n} elements "
            f"([N, 1], [1, N] or [N]); got {got}"
        )
    if bias is not None and (
        not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.numel() != n or bias.dtype != out_dtype
    ):
        got = _describe(bias) if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(
            f"scaled_mm: bias must be a 1-D [N] = [{n}] tensor of out_dtype {out_dtype}; got {got}"
        )
    tensors = {"A": a, "B": b, "scale_a": scale_a, "scale_b": scale_b}
    if bias is not None:
        tensors["bias"] = bias
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"scaled_mm: all tensors must be on one device; got {devices}")


def _as_config_json(config: Any) -> str:
    if isinstance(config, str):
        return config
    if isinstance(config, Mapping):
        return json.dumps(dict(config), sort_keys=True)
    to_json = getattr(config, "to_json", None)
    if to_json is None:
        raise ValueError(f"scaled_mm: config must be a helion.Config, a dict or JSON; got {type(config)}")
    return to_json()


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: torch.Tensor | None = None,
    *,
    config: Any = None,
) -> torch.Tensor:
    """Scaled fp8 GEMM ``out = scale_a[M, 1] * scale_b[1, N] * (A @ B) (+ bias)``, Helion kernel.

    Args:
        a: ``[M, K]`` float8_e4m3fn activations, quantized per token; any row stride, K contiguous
            (a K-strided A is made contiguous first, as ``F.linear`` would read it).
        b: ``[K, N]`` float8_e4m3fn weight, column-major (the ``weight.t()`` view of a row-major
            ``[N, K]`` tensor that vLLM's FP8 linear layers hold; never copied).
        scale_a: float32 per-token scales, ``[M, 1]`` or ``[M]`` (dequantized A = A * scale_a).
        scale_b: float32 per-output-channel scales, ``[N, 1]``, ``[1, N]`` or ``[N]``.
        out_dtype: bfloat16 (default), float16 or float32.
        bias: optional ``[N]`` tensor of ``out_dtype``, added after scaling.
        config: a ``helion.Config`` (or its dict / JSON) with ``block_sizes``, ``split_k``,
            ``swap_ab`` and Triton knobs; default: :func:`hlcore.scaled_mm_config.default_scaled_mm_config`.

    Returns:
        ``[M, N]`` tensor of ``out_dtype``; M = 0 returns an empty ``[0, N]`` without a launch.

    Raises:
        ValueError: a tensor has the wrong dtype, rank, shape, layout or device (the message names it).

    Determinism: bitwise repeatable for ``split_k == 1``; with ``split_k > 1`` the order of the
    atomic adds varies (within the tolerance of ``split_k`` output roundings).
    """
    check_scaled_mm_args(a, b, scale_a, scale_b, out_dtype, bias)
    m, k = a.shape
    n = b.shape[1]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=a.device)
    if a.stride(1) != 1:
        a = a.contiguous()
    if config is None:
        from hlcore.scaled_mm_config import default_scaled_mm_config

        config = default_scaled_mm_config(m, n, k)
    kernel = _kernel_for(_as_config_json(config))
    return kernel(a, b.t(), scale_a.reshape(m), scale_b.reshape(n), bias, out_dtype)


# --------------------------------------------------------------------------------------------
# Inputs for tests, tuning and benchmarks
# --------------------------------------------------------------------------------------------
def generate_scaled_mm_inputs(
    m: int,
    n: int,
    k: int,
    *,
    device: str | torch.device = "cpu",
    out_dtype: torch.dtype = torch.bfloat16,
    with_bias: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Random, non-zero FP8_Dynamic inputs as a vLLM layer sees them.

    Activations ``x ~ N(0, 1)`` (bf16) are quantized per token with :func:`per_token_fp8_quant_ref`;
    the weight ``W ~ N(0, 0.05)`` ``[N, K]`` is quantized per output channel and handed over as the
    column-major ``[K, N]`` view. Returns ``dict(a, b, scale_a, scale_b, out_dtype, bias)``.
    """
    from hlcore.quant import per_channel_fp8_quant_ref, per_token_fp8_quant_ref

    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn((m, k), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    w = (torch.randn((n, k), generator=gen, dtype=torch.float32) * 0.05).to(torch.bfloat16)
    a, scale_a = per_token_fp8_quant_ref(x)
    w_q, scale_b = per_channel_fp8_quant_ref(w)
    bias = (torch.randn((n,), generator=gen) * 0.5).to(out_dtype) if with_bias else None
    dev = torch.device(device)
    return {
        "a": a.to(dev),
        "b": w_q.to(dev).t(),
        "scale_a": scale_a.to(dev),
        "scale_b": scale_b.to(dev),
        "out_dtype": out_dtype,
        "bias": None if bias is None else bias.to(dev),
    }
