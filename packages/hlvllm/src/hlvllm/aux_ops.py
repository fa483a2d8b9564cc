"""Torch custom ops (``torch.ops.hlvllm.*``) for the auxiliary kernels, with the size dispatch inside.

Each op is functional (``mutates_args=()``: new outputs, inputs untouched) and has a fake impl, so
torch.compile keeps it opaque (Helion kernels cannot be traced by Dynamo on torch 2.11). Shapes:
``T`` tokens (the leading dim), ``H`` the hidden size; bf16, fp16 or fp32 activations.

``rms_norm(x [T, ..., H], weight [H], eps) -> out``
    ``out = x * rsqrt(mean(x^2) + eps) * weight`` (fp32 math, x's dtype); vLLM IR ``rms_norm`` /
    ``torch.ops._C.rms_norm``.
``fused_add_rms_norm(x, residual, weight, eps) -> (out, residual')``
    ``residual' = x + residual``, ``out = rms_norm(residual')``; vLLM's ``fused_add_rms_norm`` but
    functional (vLLM's CUDA op overwrites x and residual; callers use the returned pair either way).
``silu_and_mul(x [T, ..., 2 d]) -> out [T, ..., d]``
    ``silu(x[..., :d]) * x[..., d:]``; ``torch.ops._C.silu_and_mul``.
``per_token_fp8_quant(x [T, H], scale_ub [1] fp32 | None) -> (q [T, H] e4m3, scale [T, 1] fp32)``
    ``scale = max(min(amax, scale_ub) / 448, 1 / (448 * 512))``; ``torch.ops._C.dynamic_per_token_scaled_fp8_quant``.
``per_token_int8_quant(x [T, H]) -> (q [T, H] int8, scale [T, 1] fp32)``
    symmetric, ``scale = amax / 127``, round half to even; ``torch.ops._C.dynamic_scaled_int8_quant``.
``per_token_group_fp8_quant(x [T, H], group_size=128, column_major_scales) -> (q, scale [T, H/128])``
    ``scale = max(amax_group, 1e-10) / 448``; scales row-major or the column-major view
    (``stride(0) == 1``); ``torch.ops._C.per_token_group_fp8_quant`` (``fp8_utils.per_token_group_quant_fp8``).
``rms_norm_fp8_quant(x [T, H], weight, eps, scale_ub) -> (q, scale)``,
``fused_add_rms_norm_fp8_quant(x, residual, weight, eps, scale_ub) -> (q, scale, residual')``,
``silu_and_mul_fp8_quant(x [T, 2 d], scale_ub) -> (q [T, d], scale)``
    the norm (silu_and_mul) then ``per_token_fp8_quant`` of its output, in one Helion launch
    (:mod:`hlcore.norm_quant`, :mod:`hlcore.activation_quant`); the fallback runs vLLM's two ops.
    ``rms_norm_int8_quant``, ``fused_add_rms_norm_int8_quant``, ``silu_and_mul_int8_quant``: the same
    with ``per_token_int8_quant`` (no ``scale_ub``).
    Only :mod:`hlvllm.aux_fusion` puts them in a graph (``HL_AUX_FUSION=1``).

Dispatch (:func:`route`, the GEMM's rule from :mod:`hlvllm.dispatch`): ``0 < T <= max_helion_size``
(capped by the largest CUDA-graph capture size), a size where the generic config beat vLLM on the
H200 (:func:`helion_faster`) and a CUDA graph is being captured -> the hlcore
Helion kernel; the first eager call at each (op, T, H) also runs Helion (it compiles before vLLM's
capture at that size); every other call -> vLLM's own CUDA op (:func:`_vllm_rms_norm` etc.; off
CUDA, in tests only, vLLM's native / hlcore's pure-torch math). A Helion failure logs one warning
and that (op, H) uses vLLM's op from then on. ``T = 0`` returns empty outputs without a launch.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from hlvllm import dispatch
from hlvllm.settings import get_settings

logger = logging.getLogger("vllm.hlvllm")

#: (op, path, num_tokens, hidden) -> calls that ran the op body (eager, warm-up or capture).
AUX_COUNTS: Counter[tuple[str, str, int, int]] = Counter()
#: (op, path, num_tokens, hidden) -> calls made while a CUDA graph was being captured.
AUX_CAPTURE_COUNTS: Counter[tuple[str, str, int, int]] = Counter()
_warmed: set[tuple[str, int, int, object]] = set()
_broken: dict[tuple[str, int], str] = {}
_defs: dict[str, Any] = {}  # op name -> torch.library.CustomOpDef (kept alive: it owns the registration)

FP8 = torch.float8_e4m3fn
GROUP_SIZE = 128


def _tokens(x: torch.Tensor) -> int:
    return x.shape[0] if x.dim() > 1 else 1


def helion_faster(op: str, num_tokens: int, hidden: int) -> bool:
    """Whether the generic Helion config beat vLLM's CUDA op at this size on the H200
    (``lab/scripts/bench_aux.py``, CUDA-graph replay, lab/gpu-runs.md 2026-11-30); elsewhere vLLM's op
    runs even under capture.

    * ``per_token_int8_quant``: only hidden <= 2048 (1.03-1.06x); 0.77-0.92x at 2560..8192.
    * ``per_token_group_fp8_quant``: only num_tokens * hidden <= 32 * 4096 (1.03-1.35x); 0.82-0.96x
      at 32 tokens x hidden 5120..8192 (one warp per 128-column group and row: too many programs).
    * the other four won at every measured size (1.14-1.91x): no limit.
    """
    if op == "per_token_int8_quant":
        return hidden <= 2048
    if op == "per_token_group_fp8_quant":
        return num_tokens * hidden <= 32 * 4096
    return True


def route(op: str, num_tokens: int, hidden: int, variant: object = None) -> str:
    """``"helion"`` or ``"fallback"`` (vLLM's op) for one call of ``op`` on ``[num_tokens, hidden]``;
    ``variant`` tells apart calls that compile separate Helion kernels (scale layout, scale_ub)."""
    if (
        num_tokens == 0
        or num_tokens > dispatch.max_helion_m()
        or (op, hidden) in _broken
        or not helion_faster(op, num_tokens, hidden)
    ):
        return "fallback"
    if get_settings().helion_eager or dispatch._capturing():
        return "helion"
    key = (op, num_tokens, hidden, variant)
    if key not in _warmed:  # first eager call at this size: compile now, before vLLM captures it
        _warmed.add(key)
        return "helion"
    return "fallback"


def run(
    op: str,
    num_tokens: int,
    hidden: int,
    helion_fn: Callable[[], Any],
    fallback_fn: Callable[[], Any],
    variant: object = None,
):
    """Run ``helion_fn`` or ``fallback_fn`` as :func:`route` says; count it, log it if asked."""
    path = route(op, num_tokens, hidden, variant)
    if path == "helion":
        try:
            out = helion_fn()
        except Exception as exc:  # noqa: BLE001 - any Helion failure falls back, never crashes vLLM
            _broken[(op, hidden)] = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "hlvllm: Helion %s kernel failed for num_tokens=%d hidden=%d (%s); this hidden size uses "
                "vLLM's op from now on.",
                op,
                num_tokens,
                hidden,
                _broken[(op, hidden)][:300],
            )
            path = "fallback"
            out = fallback_fn()
    else:
        out = fallback_fn()
    key = (op, path, num_tokens, hidden)
    capturing = dispatch._capturing()
    if get_settings().dispatch_log and (
        key not in AUX_COUNTS or (capturing and key not in AUX_CAPTURE_COUNTS)
    ):
        logger.info(
            "hlvllm dispatch: %s %s num_tokens=%d hidden=%d capturing=%s",
            op,
            path,
            num_tokens,
            hidden,
            capturing,
        )
    AUX_COUNTS[key] += 1
    if capturing:
        AUX_CAPTURE_COUNTS[key] += 1
    return out


def reset() -> None:
    """Forget warm-up state, failures and counts (tests)."""
    AUX_COUNTS.clear()
    AUX_CAPTURE_COUNTS.clear()
    _warmed.clear()
    _broken.clear()


# --------------------------------------------------------------------------------------------
# vLLM's implementations (the fallback path). On CUDA: vLLM's own CUDA ops. Off CUDA (CPU tests
# only): vLLM's native math where it is a free function, else hlcore's reference of the same op.
# --------------------------------------------------------------------------------------------
def _on_cuda(t: torch.Tensor) -> bool:
    return t.is_cuda


def _vllm_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.shape[-1]
    if not _on_cuda(x):
        from vllm import ir

        return ir.ops.rms_norm.impls["native"].impl_fn(x, weight, eps, None).contiguous()
    x2 = x.reshape(-1, h)  # a view where possible; vLLM's kernel takes any row stride
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    torch.ops._C.rms_norm(out, x2, weight, eps)
    return out.view(x.shape)


def _vllm_fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if not _on_cuda(x):
        from vllm import ir

        out, res = ir.ops.fused_add_rms_norm.impls["native"].impl_fn(x, residual, weight, eps, None)
        return out.contiguous(), res.contiguous()
    # vLLM's in-place CUDA op would overwrite our inputs: the same math (its fused kernel
    # normalizes the rounded sum) as a rounded add + vLLM's rms_norm, one memory pass more.
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.add(x, residual, out=new_residual)
    return _vllm_rms_norm(new_residual, weight, eps), new_residual


def _vllm_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    if not _on_cuda(x):
        from vllm.model_executor.layers.activation import SiluAndMul

        return SiluAndMul.forward_native(x).contiguous()
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    torch.ops._C.silu_and_mul(out, x.contiguous())
    return out


def _vllm_per_token_fp8_quant(
    x: torch.Tensor, scale_ub: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if not _on_cuda(x):
        from hlcore.quant import per_token_fp8_quant_ref

        return per_token_fp8_quant_ref(x, scale_ub)
    from vllm import _custom_ops as vllm_ops

    return vllm_ops.scaled_fp8_quant(x.contiguous(), None, scale_ub=scale_ub, use_per_token_if_dynamic=True)


def _vllm_per_token_int8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not _on_cuda(x):
        from hlcore.quant import per_token_int8_quant_ref

        return per_token_int8_quant_ref(x)
    from vllm import _custom_ops as vllm_ops

    q, scale, _ = vllm_ops.scaled_int8_quant(x.contiguous(), None, None, symmetric=True)
    return q, scale


def _vllm_per_token_group_fp8_quant(
    x: torch.Tensor, group_size: int, column_major_scales: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    if not _on_cuda(x):
        from hlcore.quant import per_token_group_fp8_quant_ref

        q, scale = per_token_group_fp8_quant_ref(x, group_size)
        return q, (scale.t().contiguous().t() if column_major_scales else scale)
    from vllm.model_executor.layers.quantization.utils import fp8_utils

    return fp8_utils.per_token_group_quant_fp8(
        x, group_size, dtype=FP8, column_major_scales=column_major_scales, use_ue8m0=False
    )


# --------------------------------------------------------------------------------------------
# Op bodies and fake impls
# --------------------------------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.numel() == 0:
        return rms_norm_fake(x, weight, eps)
    from hlcore import norm

    return run(
        "rms_norm",
        _tokens(x),
        x.shape[-1],
        lambda: norm.rms_norm(x, weight, eps),
        lambda: _vllm_rms_norm(x, weight, eps),
        variant=x.dtype,
    )


def rms_norm_fake(x, weight, eps):
    return x.new_empty(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return fused_add_rms_norm_fake(x, residual, weight, eps)
    from hlcore import norm

    return run(
        "fused_add_rms_norm",
        _tokens(x),
        x.shape[-1],
        lambda: norm.fused_add_rms_norm(x, residual, weight, eps),
        lambda: _vllm_fused_add_rms_norm(x, residual, weight, eps),
        variant=x.dtype,
    )


def fused_add_rms_norm_fake(x, residual, weight, eps):
    return x.new_empty(x.shape), x.new_empty(x.shape)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:
        return silu_and_mul_fake(x)
    from hlcore import activation

    return run(
        "silu_and_mul",
        _tokens(x),
        x.shape[-1] // 2,
        lambda: activation.silu_and_mul(x),
        lambda: _vllm_silu_and_mul(x),
        variant=x.dtype,
    )


def silu_and_mul_fake(x):
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def per_token_fp8_quant(x: torch.Tensor, scale_ub: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return per_token_fp8_quant_fake(x, scale_ub)
    from hlcore import quant_kernels

    return run(
        "per_token_fp8_quant",
        x.shape[0],
        x.shape[1],
        lambda: quant_kernels.per_token_fp8_quant(x, scale_ub),
        lambda: _vllm_per_token_fp8_quant(x, scale_ub),
        variant=(x.dtype, scale_ub is None),
    )


def per_token_fp8_quant_fake(x, scale_ub):
    return x.new_empty(x.shape, dtype=FP8), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def per_token_int8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return per_token_int8_quant_fake(x)
    from hlcore import quant_kernels

    return run(
        "per_token_int8_quant",
        x.shape[0],
        x.shape[1],
        lambda: quant_kernels.per_token_int8_quant(x),
        lambda: _vllm_per_token_int8_quant(x),
        variant=x.dtype,
    )


def per_token_int8_quant_fake(x):
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def per_token_group_fp8_quant(
    x: torch.Tensor, group_size: int, column_major_scales: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    if group_size != GROUP_SIZE:
        raise ValueError(
            f"hlvllm::per_token_group_fp8_quant: group_size must be {GROUP_SIZE}; got {group_size}"
        )
    if x.numel() == 0:
        return per_token_group_fp8_quant_fake(x, group_size, column_major_scales)
    from hlcore import quant_kernels

    return run(
        "per_token_group_fp8_quant",
        x.shape[0],
        x.shape[1],
        lambda: quant_kernels.per_token_group_fp8_quant(
            x, group_size, column_major_scales=column_major_scales
        ),
        lambda: _vllm_per_token_group_fp8_quant(x, group_size, column_major_scales),
        variant=(x.dtype, column_major_scales),
    )


def per_token_group_fp8_quant_fake(x, group_size, column_major_scales):
    m, groups = x.shape[0], -(-x.shape[1] // group_size)
    if column_major_scales:
        scale = x.new_empty((groups, m), dtype=torch.float32).t()
    else:
        scale = x.new_empty((m, groups), dtype=torch.float32)
    return x.new_empty(x.shape, dtype=FP8), scale


# Fused pairs (``hlvllm.aux_fusion`` puts them in place of a norm / silu_and_mul and the per-token
# fp8 quantization of its output, with ``HL_AUX_FUSION=1``): one Helion launch instead of two.
def _rows2d(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def rms_norm_fp8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float, scale_ub: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return rms_norm_fp8_quant_fake(x, weight, eps, scale_ub)
    from hlcore import norm_quant

    x2 = _rows2d(x)
    return run(
        "rms_norm_fp8_quant",
        x2.shape[0],
        x2.shape[1],
        lambda: norm_quant.rms_norm_fp8_quant(x2, weight, eps, scale_ub),
        lambda: _vllm_per_token_fp8_quant(_vllm_rms_norm(x2, weight, eps), scale_ub),
        variant=(x.dtype, scale_ub is None),
    )


def rms_norm_fp8_quant_fake(x, weight, eps, scale_ub):
    x2 = _rows2d(x)
    return x2.new_empty(x2.shape, dtype=FP8), x2.new_empty((x2.shape[0], 1), dtype=torch.float32)


def fused_add_rms_norm_fp8_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, scale_ub: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return fused_add_rms_norm_fp8_quant_fake(x, residual, weight, eps, scale_ub)
    from hlcore import norm_quant

    x2, r2 = _rows2d(x), _rows2d(residual)

    def fallback():
        out, new_residual = _vllm_fused_add_rms_norm(x2, r2, weight, eps)
        q, scale = _vllm_per_token_fp8_quant(out, scale_ub)
        return q, scale, new_residual

    q, scale, new_residual = run(
        "fused_add_rms_norm_fp8_quant",
        x2.shape[0],
        x2.shape[1],
        lambda: norm_quant.fused_add_rms_norm_fp8_quant(x2, r2, weight, eps, scale_ub),
        fallback,
        variant=(x.dtype, scale_ub is None),
    )
    return q, scale, new_residual.view(x.shape)


def fused_add_rms_norm_fp8_quant_fake(x, residual, weight, eps, scale_ub):
    q, scale = rms_norm_fp8_quant_fake(x, weight, eps, scale_ub)
    return q, scale, x.new_empty(x.shape)


def silu_and_mul_fp8_quant(
    x: torch.Tensor, scale_ub: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return silu_and_mul_fp8_quant_fake(x, scale_ub)
    from hlcore import activation_quant

    x2 = _rows2d(x)
    return run(
        "silu_and_mul_fp8_quant",
        x2.shape[0],
        x2.shape[1] // 2,
        lambda: activation_quant.silu_and_mul_fp8_quant(x2, scale_ub),
        lambda: _vllm_per_token_fp8_quant(_vllm_silu_and_mul(x2), scale_ub),
        variant=(x.dtype, scale_ub is None),
    )


def silu_and_mul_fp8_quant_fake(x, scale_ub):
    x2 = _rows2d(x)
    d = x2.shape[1] // 2
    return x2.new_empty((x2.shape[0], d), dtype=FP8), x2.new_empty((x2.shape[0], 1), dtype=torch.float32)


def rms_norm_int8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return rms_norm_int8_quant_fake(x, weight, eps)
    from hlcore import norm_quant

    x2 = _rows2d(x)
    return run(
        "rms_norm_int8_quant",
        x2.shape[0],
        x2.shape[1],
        lambda: norm_quant.rms_norm_int8_quant(x2, weight, eps),
        lambda: _vllm_per_token_int8_quant(_vllm_rms_norm(x2, weight, eps)),
        variant=x.dtype,
    )


def rms_norm_int8_quant_fake(x, weight, eps):
    x2 = _rows2d(x)
    return x2.new_empty(x2.shape, dtype=torch.int8), x2.new_empty((x2.shape[0], 1), dtype=torch.float32)


def fused_add_rms_norm_int8_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return fused_add_rms_norm_int8_quant_fake(x, residual, weight, eps)
    from hlcore import norm_quant

    x2, r2 = _rows2d(x), _rows2d(residual)

    def fallback():
        out, new_residual = _vllm_fused_add_rms_norm(x2, r2, weight, eps)
        q, scale = _vllm_per_token_int8_quant(out)
        return q, scale, new_residual

    q, scale, new_residual = run(
        "fused_add_rms_norm_int8_quant",
        x2.shape[0],
        x2.shape[1],
        lambda: norm_quant.fused_add_rms_norm_int8_quant(x2, r2, weight, eps),
        fallback,
        variant=x.dtype,
    )
    return q, scale, new_residual.view(x.shape)


def fused_add_rms_norm_int8_quant_fake(x, residual, weight, eps):
    q, scale = rms_norm_int8_quant_fake(x, weight, eps)
    return q, scale, x.new_empty(x.shape)


def silu_and_mul_int8_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if x.numel() == 0:
        return silu_and_mul_int8_quant_fake(x)
    from hlcore import activation_quant

    x2 = _rows2d(x)
    return run(
        "silu_and_mul_int8_quant",
        x2.shape[0],
        x2.shape[1] // 2,
        lambda: activation_quant.silu_and_mul_int8_quant(x2),
        lambda: _vllm_per_token_int8_quant(_vllm_silu_and_mul(x2)),
        variant=x.dtype,
    )


def silu_and_mul_int8_quant_fake(x):
    x2 = _rows2d(x)
    d = x2.shape[1] // 2
    return x2.new_empty((x2.shape[0], d), dtype=torch.int8), x2.new_empty(
        (x2.shape[0], 1), dtype=torch.float32
    )


#: op name -> (implementation, fake implementation)
AUX_OPS: dict[str, tuple[Callable, Callable]] = {
    "rms_norm": (rms_norm, rms_norm_fake),
    "fused_add_rms_norm": (fused_add_rms_norm, fused_add_rms_norm_fake),
    "silu_and_mul": (silu_and_mul, silu_and_mul_fake),
    "per_token_fp8_quant": (per_token_fp8_quant, per_token_fp8_quant_fake),
    "per_token_int8_quant": (per_token_int8_quant, per_token_int8_quant_fake),
    "per_token_group_fp8_quant": (per_token_group_fp8_quant, per_token_group_fp8_quant_fake),
    "rms_norm_fp8_quant": (rms_norm_fp8_quant, rms_norm_fp8_quant_fake),
    "fused_add_rms_norm_fp8_quant": (fused_add_rms_norm_fp8_quant, fused_add_rms_norm_fp8_quant_fake),
    "silu_and_mul_fp8_quant": (silu_and_mul_fp8_quant, silu_and_mul_fp8_quant_fake),
    "rms_norm_int8_quant": (rms_norm_int8_quant, rms_norm_int8_quant_fake),
    "fused_add_rms_norm_int8_quant": (fused_add_rms_norm_int8_quant, fused_add_rms_norm_int8_quant_fake),
    "silu_and_mul_int8_quant": (silu_and_mul_int8_quant, silu_and_mul_int8_quant_fake),
}


def register_aux_ops() -> None:
    """Define ``torch.ops.hlvllm.<op>`` for every op in :data:`AUX_OPS`, once per process (no CUDA)."""
    for name, (impl, fake) in AUX_OPS.items():
        if name in _defs:
            continue
        op = torch.library.custom_op(f"hlvllm::{name}", impl, mutates_args=())
        op.register_fake(fake)
        _defs[name] = op
