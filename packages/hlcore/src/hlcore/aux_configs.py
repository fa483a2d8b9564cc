"""Generic (untuned) Helion configs for the auxiliary kernels and the rule that picks one.

No per-shape tuning: each kernel has about six configs and ``pick_<kernel>_config(num_tokens, hidden)``
chooses one from the token count and the hidden size. These are *starting points* chosen by the usual
Triton rules for memory-bound row kernels, not measured: the GPU sweep that re-derives them (issue 5,
``hltools``) has not run yet (see docs/aux-kernels.md).

Row kernels (per-token fp8 / int8 quant, rms_norm, fused_add_rms_norm) keep one token row per
program in registers (``reduction_loops=[None]``: the whole hidden dim as one power-of-two block, which
covers the hidden size) and read it once for the reduction and once more from registers for the
output. Rules:

* warps by hidden size: 1 warp up to 512, 2 up to 1024, 4 up to 4096, 8 above (each thread holds
  about 8-16 elements of the row);
* rows per program: 1 for few tokens (``num_tokens < 256``: every SM gets rows to itself); for many
  tokens and a small row (hidden <= 2048) 4 rows per program, amortising the per-program work;
* hidden > 16384: a looped reduction (4096-wide chunks) instead of the whole row in registers.

``silu_and_mul`` is elementwise over ``[num_tokens, d]``: a 2-D tile of ``rows x block_d`` where
``block_d`` is the power of two covering ``d`` up to 1024 (more columns become more programs);
rows 1 for few tokens, 4 for many; warps by tile size.

``per_token_group_fp8_quant`` works on 1x128 groups: each program quantizes ``rows`` rows of one group
(128 columns); rows 1 for few tokens, up to 8 for many; 1 warp per 128-column row group, 2-4 with
several rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

ROW_CONFIGS: dict[str, dict[str, Any]] = {
    "row1_w1": {"block_sizes": [1], "reduction_loops": [None], "num_warps": 1},
    "row1_w2": {"block_sizes": [1], "reduction_loops": [None], "num_warps": 2},
    "row1_w4": {"block_sizes": [1], "reduction_loops": [None], "num_warps": 4},
    "row1_w8": {"block_sizes": [1], "reduction_loops": [None], "num_warps": 8},
    "row4_w4": {"block_sizes": [4], "reduction_loops": [None], "num_warps": 4},
    "row1_loop4096_w8": {"block_sizes": [1], "reduction_loops": [4096], "num_warps": 8},
}

SILU_AND_MUL_CONFIGS: dict[str, dict[str, Any]] = {
    "r1_d256_w1": {"block_sizes": [1, 256], "num_warps": 1},
    "r1_d512_w2": {"block_sizes": [1, 512], "num_warps": 2},
    "r1_d1024_w4": {"block_sizes": [1, 1024], "num_warps": 4},
    "r4_d256_w2": {"block_sizes": [4, 256], "num_warps": 2},
    "r4_d512_w4": {"block_sizes": [4, 512], "num_warps": 4},
    "r4_d1024_w8": {"block_sizes": [4, 1024], "num_warps": 8},
}

GROUP_QUANT_CONFIGS: dict[str, dict[str, Any]] = {
    "r1_w1": {"block_sizes": [1], "num_warps": 1},
    "r2_w1": {"block_sizes": [2], "num_warps": 1},
    "r4_w2": {"block_sizes": [4], "num_warps": 2},
    "r8_w4": {"block_sizes": [8], "num_warps": 4},
    "r16_w4": {"block_sizes": [16], "num_warps": 4},
    "r32_w8": {"block_sizes": [32], "num_warps": 8},
}

MANY_TOKENS = 256  # at and above: several rows per program


def _check(name: str, num_tokens: int, hidden: int) -> None:
    if num_tokens < 0 or hidden <= 0:
        raise ValueError(f"{name}: num_tokens must be >= 0 and hidden > 0; got {(num_tokens, hidden)}")


def pick_row_config_name(num_tokens: int, hidden: int) -> str:
    """The :data:`ROW_CONFIGS` key for a one-row reduction kernel (see the module docstring)."""
    _check("pick_row_config_name", num_tokens, hidden)
    if hidden > 16384:
        return "row1_loop4096_w8"
    if num_tokens >= MANY_TOKENS and hidden <= 2048:
        return "row4_w4"
    if hidden <= 512:
        return "row1_w1"
    if hidden <= 1024:
        return "row1_w2"
    if hidden <= 4096:
        return "row1_w4"
    return "row1_w8"


def pick_per_token_fp8_quant_config(num_tokens: int, hidden: int) -> dict[str, Any]:
    """Config for :func:`hlcore.quant_kernels.per_token_fp8_quant` (row rule)."""
    return dict(ROW_CONFIGS[pick_row_config_name(num_tokens, hidden)])


def pick_per_token_int8_quant_config(num_tokens: int, hidden: int) -> dict[str, Any]:
    """Config for :func:`hlcore.quant_kernels.per_token_int8_quant` (row rule)."""
    return dict(ROW_CONFIGS[pick_row_config_name(num_tokens, hidden)])


def pick_rms_norm_config(num_tokens: int, hidden: int) -> dict[str, Any]:
    """Config for :func:`hlcore.norm.rms_norm` (row rule)."""
    return dict(ROW_CONFIGS[pick_row_config_name(num_tokens, hidden)])


def pick_fused_add_rms_norm_config(num_tokens: int, hidden: int) -> dict[str, Any]:
    """Config for :func:`hlcore.norm.fused_add_rms_norm` (row rule)."""
    return dict(ROW_CONFIGS[pick_row_config_name(num_tokens, hidden)])


def pick_silu_and_mul_config(num_tokens: int, hidden: int) -> dict[str, Any]:
    """Config for :func:`hlcore.activation.silu_and_mul`; ``hidden`` is the output width ``d``
    (the input is ``[num_tokens, 2 d]``)."""
    _check("pick_silu_and_mul_config", num_tokens, hidden)
    many = num_tokens >= MANY_TOKENS
    if hidden <= 256:
        name = "r4_d256_w2" if many else "r1_d256_w1"
    elif hidden <= 512:
        name = "r4_d512_w4" if many else "r1_d512_w2"
    else:
        name = "r4_d1024_w8" if many else "r1_d1024_w4"
    return dict(SILU_AND_MUL_CONFIGS[name])


def pick_per_token_group_fp8_quant_config(num_tokens: int, hidden: int) -> dict[str, Any]:
    """Config for :func:`hlcore.quant_kernels.per_token_group_fp8_quant` (group 128): more rows per
    program as tokens grow, so each program moves at least a few KiB."""
    _check("pick_per_token_group_fp8_quant_config", num_tokens, hidden)
    if num_tokens < 64:
        name = "r1_w1"
    elif num_tokens < 256:
        name = "r2_w1"
    elif num_tokens < 1024:
        name = "r4_w2"
    elif num_tokens < 4096:
        name = "r8_w4"
    else:
        name = "r16_w4" if hidden >= 4096 else "r32_w8"
    return dict(GROUP_QUANT_CONFIGS[name])


ALL_CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "per_token_fp8_quant": ROW_CONFIGS,
    "per_token_int8_quant": ROW_CONFIGS,
    "rms_norm": ROW_CONFIGS,
    "fused_add_rms_norm": ROW_CONFIGS,
    "silu_and_mul": SILU_AND_MUL_CONFIGS,
    "per_token_group_fp8_quant": GROUP_QUANT_CONFIGS,
}


def config_json(config: Any, who: str, hidden: int | None = None) -> str:
    """``config`` (a ``helion.Config``, a dict or its JSON) as JSON text with sorted keys.

    ``hidden == 1``: ``reduction_loops`` is dropped (Helion 1.5.0 makes no reduction loop for a
    size-1 dim and rejects a config that sets one)."""
    if isinstance(config, str):
        text = config
    elif isinstance(config, Mapping):
        text = json.dumps(dict(config), sort_keys=True)
    else:
        to_json = getattr(config, "to_json", None)
        if to_json is None:
            raise ValueError(f"{who}: config must be a helion.Config, a dict or JSON; got {type(config)}")
        text = to_json()
    if hidden == 1 and "reduction_loops" in text:
        parsed = json.loads(text)
        parsed.pop("reduction_loops", None)
        text = json.dumps(parsed, sort_keys=True)
    return text


def aux_kernel(body: Callable, config_json_text: str):
    """The process-local ``helion.Kernel`` of an aux kernel ``body`` with one fixed config
    (dynamic shapes, so one compile serves every num_tokens); the same compiled and in both
    interpret modes. Callers cache it per (body, config, variant)."""
    import helion

    from hlcore.helion_compat import local_kernel

    return local_kernel(
        helion.kernel(
            body,
            config=helion.Config.from_json(config_json_text),
            static_shapes=False,
            ignore_warnings=[helion.exc.TensorOperationInWrapper],
        )
    )
