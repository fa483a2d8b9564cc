"""Argument checks shared by hlcore's kernel wrappers: every bad input raises ``ValueError`` naming
the function, the tensor, what it is (:func:`describe`) and what was expected."""

from __future__ import annotations

from collections.abc import Sequence

import torch

FP8_DTYPE = torch.float8_e4m3fn


def describe(t: object) -> str:
    """``shape, dtype, strides, device`` of a tensor, or the type name of anything else."""
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, strides {tuple(t.stride())}, device {t.device}"


def check_fp8_weight(name: str, b: object, k: int) -> int:
    """``b`` must be the ``[K, N]`` float8_e4m3fn weight in column-major layout (the ``weight.t()``
    view vLLM holds); returns N."""
    if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.dtype != FP8_DTYPE or b.shape[0] != k:
        raise ValueError(f"{name}: b must be a 2-D [K, N] = [{k}, N] {FP8_DTYPE} tensor; got {describe(b)}")
    n = b.shape[1]
    if b.stride(0) != 1 and n > 1:
        raise ValueError(
            f"{name}: b must be column-major [K, N] (the weight.t() view vLLM holds); got {describe(b)}"
        )
    return n


def check_per_channel_scale(name: str, scale_b: object, n: int) -> None:
    """``scale_b`` must be float32 with N elements (``[N, 1]``, ``[1, N]`` or ``[N]``)."""
    if not isinstance(scale_b, torch.Tensor) or scale_b.dtype != torch.float32 or scale_b.numel() != n:
        raise ValueError(
            f"{name}: scale_b must be a per-channel float32 tensor of N = {n} elements ([N, 1], [1, N] or [N]); "
            f"got {describe(scale_b)}"
        )


def check_out_dtype_and_bias(
    name: str, out_dtype: torch.dtype, bias: object, n: int, out_dtypes: Sequence[torch.dtype]
) -> None:
    """``out_dtype`` one of ``out_dtypes``; ``bias`` None or a 1-D ``[N]`` tensor of ``out_dtype``."""
    if out_dtype not in out_dtypes:
        raise ValueError(f"{name}: out_dtype must be one of {tuple(out_dtypes)}; got {out_dtype}")
    if bias is not None and (
        not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.numel() != n or bias.dtype != out_dtype
    ):
        raise ValueError(
            f"{name}: bias must be a 1-D [N] = [{n}] tensor of {out_dtype}; got {describe(bias)}"
        )


def check_one_device(name: str, **tensors: torch.Tensor | None) -> None:
    """Every given tensor (None skipped) on one device."""
    devices = {key: t.device for key, t in tensors.items() if t is not None}
    if len(set(devices.values())) != 1:
        raise ValueError(f"{name}: all tensors must be on one device; got {devices}")
