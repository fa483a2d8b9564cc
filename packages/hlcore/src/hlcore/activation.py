"""silu_and_mul (Helion): the SwiGLU gate of the MLP.

    out[..., j] = silu(x[..., j]) * x[..., d + j],   silu(a) = a / (1 + exp(-a)),   x: [..., 2 d]

Semantics of vLLM 0.26 ``SiluAndMul`` (``torch.ops._C.silu_and_mul`` on CUDA), computed as its
``forward_native`` does: ``F.silu(x[..., :d]) * x[..., d:]`` in the input dtype, i.e. silu in fp32
rounded to the input dtype, then the product rounded again. (vLLM's CUDA kernel keeps the silu in
fp32, so it differs from ``forward_native`` by at most one output rounding.) The reference
:func:`silu_and_mul_ref` *is* ``forward_native``'s expression.

Token count is dynamic, ``d`` specialized; the output is allocated inside the kernel. Any row
stride works (a hidden-strided input is copied first); leading dims are flattened.
"""

from __future__ import annotations

import functools
from typing import Any

import helion.language as hl
import torch

from hlcore.arg_checks import describe as _describe
from hlcore.aux_configs import aux_kernel, config_json, pick_silu_and_mul_config

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


# --------------------------------------------------------------------------------------------
# Helion kernel
# --------------------------------------------------------------------------------------------
def _silu_and_mul_body(
    x: torch.Tensor,  # [M, 2, d] view of the [M, 2 d] input, d contiguous
) -> torch.Tensor:
    m = x.size(0)
    d = hl.specialize(x.size(2))
    out = torch.empty([m, d], dtype=x.dtype, device=x.device)
    for tile_m, tile_d in hl.tile([m, d]):
        a = x[tile_m, 0, tile_d].to(torch.float32)
        b = x[tile_m, 1, tile_d].to(torch.float32)
        silu = (a * torch.sigmoid(a)).to(x.dtype)  # F.silu rounds to the input dtype
        out[tile_m, tile_d] = (silu.to(torch.float32) * b).to(x.dtype)
    return out


@functools.cache
def _kernel_for(config_json_text: str):
    return aux_kernel(_silu_and_mul_body, config_json_text)


# --------------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------------
def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """vLLM's ``SiluAndMul.forward_native``: ``F.silu(x[..., :d]) * x[..., d:]`` in x's dtype."""
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


# --------------------------------------------------------------------------------------------
# Host wrapper
# --------------------------------------------------------------------------------------------


def silu_and_mul(x: torch.Tensor, *, config: Any = None) -> torch.Tensor:
    """``out = silu(x[..., :d]) * x[..., d:]`` (vLLM ``silu_and_mul``).

    Args:
        x: ``[..., 2 d]`` bfloat16, float16 or float32 (d > 0); any row stride.
        config: a ``helion.Config`` / dict / JSON (``block_sizes = [rows, block_d]``); default
            :func:`hlcore.aux_configs.pick_silu_and_mul_config`.

    Returns:
        ``[..., d]`` of x's dtype, contiguous; zero tokens give an empty output without a launch.

    Raises:
        ValueError: x has no dims, an odd or zero last dim, or an unsupported dtype.

    Deterministic (elementwise).
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.dtype not in DTYPES:
        raise ValueError(
            f"silu_and_mul: x must be a [..., 2 d] tensor of dtype bfloat16, float16 or float32; got {_describe(x)}"
        )
    h = x.shape[-1]
    if h == 0 or h % 2:
        raise ValueError(f"silu_and_mul: x's last dim must be 2 d with d > 0 (even); got {_describe(x)}")
    d = h // 2
    lead = x.shape[:-1]
    x2 = x.reshape(-1, h)
    m = x2.shape[0]
    if m == 0:
        return torch.empty((*lead, d), dtype=x.dtype, device=x.device)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    if config is None:
        config = pick_silu_and_mul_config(m, d)
    out = _kernel_for(config_json(config, "silu_and_mul"))(x2.unflatten(1, (2, d)))
    return out.reshape(*lead, d)


# --------------------------------------------------------------------------------------------
# Inputs for tests, tuning and benchmarks
# --------------------------------------------------------------------------------------------
def generate_silu_and_mul_inputs(
    m: int,
    d: int,
    *,
    dtype: torch.dtype = torch.bfloat16,
    row_stride: int | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> torch.Tensor:
    """``x ~ 2 N(0, 1)`` of shape ``[M, 2 d]`` and ``dtype`` (the output of a gate_up projection);
    ``row_stride > 2 d`` gives a view with that row stride."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    stride = 2 * d if row_stride is None else row_stride
    if stride < 2 * d:
        raise ValueError(
            f"generate_silu_and_mul_inputs: row_stride must be >= 2 d = {2 * d}; got {row_stride}"
        )
    return (torch.randn((m, stride), generator=gen) * 2).to(dtype).to(device)[:, : 2 * d]
