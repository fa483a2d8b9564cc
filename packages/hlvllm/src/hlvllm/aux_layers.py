"""Out-of-tree replacements of vLLM's ``RMSNorm``, ``SiluAndMul`` and ``QuantFP8`` that call
``torch.ops.hlvllm.*`` (:mod:`hlvllm.aux_ops`).

Mechanism (vLLM 0.26): ``CustomOp.register_oot`` makes ``CustomOp.__new__`` build our subclass
wherever vLLM code builds the in-tree class (model code, linear kernels' ``self.quant_fp8``, fusion
pattern matchers), with the same constructor arguments. Three details decide whether our kernel
actually runs in a default ``vllm serve`` (``-O2``: Inductor, ``custom_ops=["none"]``):

* vLLM picks ``forward_native`` (custom op disabled, the default under Inductor) or, on CUDA,
  ``forward_cuda`` (enabled) once per instance in ``CustomOp.__init__``; ``forward_oot`` is never
  used on CUDA. So after vLLM's constructor we keep its choice as ``self._vllm_forward`` and, when
  supported, set ``self._forward_method = self.forward_helion`` -- enabled or not.
* ``register_oot`` renames the class to ``"RMSNorm"`` etc.; we restore vLLM's registered name
  (``rms_norm``, ``silu_and_mul``, ``quant_fp8``), so ``+rms_norm`` / ``-quant_fp8`` and vLLM's
  automatic ``+quant_fp8`` (block-FP8 checkpoints) still steer the variants we hand back to vLLM.
* ``RMSNorm.forward_native`` calls vLLM IR (``ir.ops.rms_norm``), whose default priority under
  Inductor is ``["native"]`` (Inductor codegen). ``forward_helion`` calls our op instead of the IR
  op: no ``ir_op_priority`` change is needed, and vLLM's IR lowering and norm+quant fusion passes
  (which match ``vllm_ir.rms_norm``) leave it alone.

A layer runs Helion only when: the backend is on (``HL_LINEAR_BACKEND=helion``) and the layer named
in ``HL_AUX_KERNELS``, CUDA, SM90, helion importable, not ``VLLM_BATCH_INVARIANT``, CUDA graphs on,
and the variant is supported; otherwise it is exactly vLLM's layer (``hl_reason`` says why). Per
call, unsupported arguments (dtype, a static scale, ...) go to ``self._vllm_forward`` too.
"""

from __future__ import annotations

import logging

import torch
from vllm.model_executor.custom_op import CustomOp, op_registry_oot
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

from hlvllm import dispatch
from hlvllm.support import cudagraph_capture_limit, helion_supported, warn_once

logger = logging.getLogger("vllm.hlvllm")

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
GROUP_SIZE = 128
_announced: set[str] = set()


def aux_supported() -> str | None:
    """None when Helion aux kernels may run in this process and vLLM config, else the reason."""
    ok, reason = helion_supported(None)
    if not ok:
        return reason
    size, reason = cudagraph_capture_limit()
    if not size:
        return reason
    dispatch.set_capture_limit(size)
    return None


class _HelionAuxMixin:
    """Shared set-up: keep vLLM's dispatch choice, switch to ``forward_helion`` when supported."""

    hl_reason: str | None

    def _hl_setup(self, variant_reason: str | None) -> None:
        self._vllm_forward = self._forward_method
        self.hl_reason = variant_reason or aux_supported()
        if self.hl_reason is None:
            self._forward_method = self.forward_helion
        kind = type(self).__name__
        if kind not in _announced:
            _announced.add(kind)
            if self.hl_reason is None:
                logger.info(
                    "hlvllm: %s layers use Helion for num_tokens <= %d under CUDA graphs and vLLM's op otherwise",
                    kind,
                    dispatch.max_helion_m(),
                )
            elif variant_reason is None:  # the environment rules Helion out (e.g. helion missing)
                warn_once(
                    self.hl_reason, "hlvllm: %s layers use vLLM's implementation: %s", kind, self.hl_reason
                )
            else:  # a layer variant Helion does not cover: expected, not a problem
                logger.info("hlvllm: %s layers use vLLM's implementation: %s", kind, self.hl_reason)

    @property
    def implementation(self) -> str:
        """``"hlvllm"`` when calls go through ``torch.ops.hlvllm.*``, else ``"vllm"``."""
        return "hlvllm" if self.hl_reason is None else "vllm"


class HelionRMSNorm(_HelionAuxMixin, RMSNorm):
    """vLLM ``RMSNorm`` (same constructor): ``forward(x, residual=None)`` is
    ``torch.ops.hlvllm.rms_norm(x, weight, eps)`` or ``torch.ops.hlvllm.fused_add_rms_norm(x,
    residual, weight, eps) -> (out, x + residual)``. x ``[T, ..., H]`` bf16/fp16/fp32 with a weight of
    the same dtype. Delegated to vLLM: ``has_weight=False``, ``var_hidden_size``, other dtypes."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        var_hidden_size: int | None = None,
        has_weight: bool = True,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(hidden_size, eps, var_hidden_size, has_weight, dtype)
        reason = None
        if not has_weight:
            reason = "has_weight=False is left to vLLM"
        elif self.variance_size_override is not None:
            reason = "var_hidden_size is left to vLLM"
        self._hl_setup(reason)

    def forward_helion(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        weight = self.weight.data
        if x.dtype not in DTYPES or weight.dtype != x.dtype:
            return self._vllm_forward(x, residual)
        if residual is None:
            return torch.ops.hlvllm.rms_norm(x, weight, self.variance_epsilon)
        if residual.dtype != x.dtype or residual.shape != x.shape:
            return self._vllm_forward(x, residual)
        return torch.ops.hlvllm.fused_add_rms_norm(x, residual, weight, self.variance_epsilon)


class HelionSiluAndMul(_HelionAuxMixin, SiluAndMul):
    """vLLM ``SiluAndMul``: ``forward(x [T, ..., 2 d]) = torch.ops.hlvllm.silu_and_mul(x)``
    (``silu(x[..., :d]) * x[..., d:]``, x's dtype); other dtypes are delegated to vLLM."""

    def __init__(self, *, compile_native: bool = True) -> None:
        super().__init__(compile_native=compile_native)
        self._hl_setup(None)

    def forward_helion(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in DTYPES or x.dim() == 0 or x.shape[-1] % 2:
            return self._vllm_forward(x)
        return torch.ops.hlvllm.silu_and_mul(x)


class HelionQuantFP8(_HelionAuxMixin, QuantFP8):
    """vLLM ``QuantFP8`` (same constructor). Dynamic per-token: ``forward(x [T, H], scale=None,
    scale_ub=None) = torch.ops.hlvllm.per_token_fp8_quant(x, scale_ub)``; dynamic 1x128 groups:
    ``torch.ops.hlvllm.per_token_group_fp8_quant(x, 128, column_major_scales)`` (H a multiple of 128).
    Returns ``(q e4m3, scale fp32)`` as vLLM's ``forward_cuda``. Delegated to vLLM: static scales,
    per-tensor, other group shapes, ``num_token_padding``, TMA-aligned or UE8M0 scales, x not 2-D."""

    def __init__(
        self,
        static: bool,
        group_shape: GroupShape,
        num_token_padding: int | None = None,
        column_major_scales: bool = False,
        tma_aligned_scales: bool = False,
        use_ue8m0: bool | None = None,
        compile_native: bool = True,
    ) -> None:
        super().__init__(
            static,
            group_shape,
            num_token_padding,
            column_major_scales,
            tma_aligned_scales,
            use_ue8m0,
            compile_native,
        )
        reason = None
        if static:
            reason = "static scales are left to vLLM"
        elif group_shape != GroupShape.PER_TOKEN and group_shape != GroupShape(1, GROUP_SIZE):
            reason = f"group shape {tuple(group_shape)} is left to vLLM (per-token and 1x128 only)"
        elif num_token_padding is not None:
            reason = "num_token_padding is left to vLLM"
        elif self.is_group_quant and (tma_aligned_scales or self.use_ue8m0):
            reason = "TMA-aligned and UE8M0 group scales are left to vLLM"
        self._hl_setup(reason)

    def forward_helion(
        self,
        x: torch.Tensor,
        scale: torch.Tensor | None = None,
        scale_ub: torch.Tensor | None = None,
        use_triton: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if scale is not None or x.dim() != 2 or x.dtype not in DTYPES:
            return self._vllm_forward(x, scale, scale_ub, use_triton)
        if self.is_group_quant:
            if scale_ub is not None or x.shape[1] % GROUP_SIZE:
                return self._vllm_forward(x, scale, scale_ub, use_triton)
            return torch.ops.hlvllm.per_token_group_fp8_quant(x, GROUP_SIZE, self.column_major_scales)
        if scale_ub is not None and (
            scale_ub.numel() != 1 or scale_ub.dtype != torch.float32 or scale_ub.device != x.device
        ):
            return self._vllm_forward(x, scale, scale_ub, use_triton)
        return torch.ops.hlvllm.per_token_fp8_quant(x, scale_ub)


#: HL_AUX_KERNELS name -> (vLLM's class, our subclass, vLLM's registered op name)
AUX_LAYERS: dict[str, tuple[type[CustomOp], type[CustomOp], str]] = {
    "rms_norm": (RMSNorm, HelionRMSNorm, "rms_norm"),
    "silu_and_mul": (SiluAndMul, HelionSiluAndMul, "silu_and_mul"),
    "quant_fp8": (QuantFP8, HelionQuantFP8, "quant_fp8"),
}


def register_aux_layers(names: frozenset[str] | set[str]) -> list[str]:
    """``CustomOp.register_oot`` our subclass for each name in ``names`` (keys of :data:`AUX_LAYERS`)
    and restore vLLM's op name on it. Idempotent; a class another plugin already replaced is left
    alone (one warning). Returns the vLLM class names now replaced by ours."""
    replaced = []
    for name, (vllm_cls, ours, op_name) in AUX_LAYERS.items():
        if name not in names:
            continue
        current = op_registry_oot.get(vllm_cls.__name__)
        if current is None:
            vllm_cls.register_oot(ours)  # key vllm_cls.__name__; sets ours.name = "RMSNorm" ...
        elif current is not ours:
            logger.warning(
                "hlvllm: %s is already replaced by %s (another plugin); leaving it",
                vllm_cls.__name__,
                current,
            )
            continue
        ours.name = op_name  # ... so put vLLM's name back: +rms_norm / -quant_fp8 keep working
        replaced.append(vllm_cls.__name__)
    return replaced
