"""Dispatch at capture time (``HL_DISPATCH_AT=capture``, the default): vLLM's compiled graph stays
vLLM's, and Helion is swapped in only while vLLM captures its CUDA graphs.

With it, hlvllm's kernels run exactly the ``apply_weights`` of the vLLM kernel they stand for
(CUTLASS for FP8_Dynamic and W8A8_INT8, the block kernel vLLM chose for Block_FP8; no op of ours in the traced graph, so no compile range of ours, no lowering
pass and no second graph to compile or load: prefill, large batches and eager calls reach vLLM's
C++ op with no frame of ours). While vLLM's model runner captures CUDA graphs
(``GPUModelRunner.capture_model`` of vLLM 0.26's V1 and V2 runners: the warm-up run before each
capture size and the captures themselves), :class:`CaptureRouting` replaces the CUDA kernels of
vLLM's GEMM ops (:data:`ROUTES`: ``torch.ops._C.cutlass_scaled_mm``, the out-variant op Inductor's
generated code calls, ``cutlass_scaled_mm(out, a, b, a_scales, b_scales, bias)``, semantics of
vLLM's ``csrc/quantization/w8a8/cutlass``; DeepGEMM's ``torch.ops.vllm.fp8_gemm_nt_op``) with ones
that send the calls of hlvllm's layers through
:func:`hlvllm.ops.scaled_mm_into`: :func:`hlvllm.routing.decide` picks Helion or vLLM's kernel for
the (format, M, N, K), and :func:`hlvllm.dispatch.run` adds what the op path does (the speed guard
and the precompile pool before the first Helion call, the first eager call of each size compiled
and checked against vLLM's kernel, failures falling back with one warning). Helion writes the
buffer Inductor allocated for vLLM's op, so the captured graph holds one GEMM launch per layer, as
vLLM's. Every other call runs vLLM's kernel; when the capture ends vLLM's kernel is the op's
kernel again. Block_FP8's Helion GEMM reads the activations vLLM's block kernel quantized (1x128
groups, in that kernel's scale layout); vLLM's Triton block kernel is not routed.
"""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from collections.abc import Callable

import torch

from hlcore.formats import get_format
from hlvllm.gemm import scaled_mm_format, scaled_mm_into
from hlvllm.support import warn_once

logger = logging.getLogger("vllm.hlvllm")

#: vLLM's model runner modules whose ``GPUModelRunner.capture_model`` runs inside
#: :class:`CaptureRouting` (V1, V2).
RUNNER_MODULES = ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner")


def _op(namespace: str, name: str):
    """``torch.ops.<namespace>.<name>.default``, or None where it is not registered (vLLM's C++ ops
    not loaded, vLLM's DeepGEMM module not imported)."""
    try:
        return getattr(getattr(torch.ops, namespace), name).default
    except (AttributeError, RuntimeError):
        return None


class CaptureRouting:
    """While active (a context manager, not re-entrant), vLLM's ``cutlass_scaled_mm`` kernel for
    ``dispatch_key`` is replaced by one that routes the calls of hlvllm's layers
    (:func:`scaled_mm_handler`) and hands every other call to the kernel it replaced; on exit the
    original kernel is restored. Only that op changes (a ``TorchDispatchMode`` would run Python for
    every op of every captured forward, and make Dynamo skip frames). Calls made while a routed
    call runs (the speed guard's and the first-call check's vLLM calls) go to the original kernel."""

    def __init__(self, dispatch_key: str = "CUDA") -> None:
        self.dispatch_key = dispatch_key
        self._libs: list[torch.library.Library] = []
        self._inside = False

    def __enter__(self) -> CaptureRouting:
        for (namespace, name), handler in ROUTES.items():
            op = _op(namespace, name)
            if op is None:
                continue
            try:
                self._route(namespace, name, torch.library.get_kernel(op, self.dispatch_key), handler)
            except Exception as exc:  # noqa: BLE001 - never fail vLLM's capture for a speed-up
                logger.warning(
                    "hlvllm: cannot route %s::%s at CUDA-graph capture (%s: %s); vLLM's kernel runs there",
                    namespace,
                    name,
                    type(exc).__name__,
                    exc,
                )
        return self

    def _route(self, namespace: str, name: str, original, handler) -> None:
        def kernel(keyset, *args):
            def vllm_op(*op_args):
                return original.call_boxed(keyset, *op_args)

            if self._inside:
                return vllm_op(*args)
            self._inside = True
            try:
                return handler(vllm_op, args)
            finally:
                self._inside = False

        lib = torch.library.Library(namespace, "IMPL")
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": on purpose
            warnings.simplefilter("ignore")
            lib.impl(name, kernel, self.dispatch_key, with_keyset=True, allow_override=True)
        self._libs.append(lib)

    def __exit__(self, *exc) -> None:
        while self._libs:
            self._libs.pop()._destroy()  # the original kernel is the op's kernel again


def scaled_mm_format_of(out, a, b, scale_a, scale_b, bias) -> str | None:
    """The format of a ``cutlass_scaled_mm`` call that hlvllm's GEMM computes as vLLM's op does, or
    None: 2-D fp8 or int8 ``a [M, K]`` and column-major ``b [K, N]`` of one dtype, fp32 scales per
    token (M values) and per channel (N values), or for fp8 1x128 groups ``[M, ceil(K/128)]`` and
    128x128 blocks ``[ceil(N/128), ceil(K/128)]`` (``block_fp8``, vLLM's CUTLASS block kernel), bias
    ``[N]`` of the output dtype or None, ``out [M, N]`` bf16/fp16 with contiguous rows, a (format,
    N, K) that one of hlvllm's kernels registered at weight processing, all on one device."""
    from hlvllm import guard

    tensors = (out, a, b, scale_a, scale_b)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or a.dim() != 2 or b.dim() != 2:
        return None
    if a.dtype != b.dtype or a.dtype not in (torch.float8_e4m3fn, torch.int8):
        return None
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k or b.stride(0) != 1 or out.dtype not in (torch.bfloat16, torch.float16):
        return None
    if tuple(out.shape) != (m, n) or (n > 1 and out.stride(1) != 1) or a.stride(1) != 1:
        return None
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        return None
    if bias is not None and (bias.numel() != n or bias.dtype != out.dtype):
        return None
    if len({t.device for t in tensors}) != 1:
        return None
    block = get_format("block_fp8")
    if scale_a.numel() == m and scale_b.numel() == n:  # per-tensor scales stay on vLLM's op
        fmt = scaled_mm_format(a.dtype)
    elif (
        a.dtype == torch.float8_e4m3fn
        and tuple(scale_a.shape) == block.scale_a_shape(m, k)
        and tuple(scale_b.shape) == block.scale_b_shape(n, k)
    ):
        fmt = "block_fp8"
    else:
        return None
    return fmt if guard.registered(fmt, n, k) else None


def scaled_mm_handler(vllm_op: Callable[..., None], args: tuple) -> None:
    """``cutlass_scaled_mm(out, a, b, a_scales, b_scales, bias)`` while routing: a layer of ours goes
    through :func:`hlvllm.ops.scaled_mm_into` (Helion or ``vllm_op``, into ``out``), anything else
    to ``vllm_op(*args)`` unchanged."""
    out, a, b, scale_a, scale_b, bias = (*args, None)[:6]
    fmt = scaled_mm_format_of(out, a, b, scale_a, scale_b, bias)
    if fmt is None:
        return vllm_op(*args)

    def vllm_into(buffer: torch.Tensor) -> None:
        vllm_op(buffer, a, b, scale_a, scale_b, bias)

    scaled_mm_into(fmt, out, a, b, scale_a, scale_b, bias, vllm_into)
    return None


def fp8_gemm_nt_handler(vllm_op: Callable[..., None], args: tuple) -> None:
    """vLLM's DeepGEMM op ``fp8_gemm_nt_op(q_input, input_scale, weight, weight_scale, output,
    use_deep_gemm_e8m0)`` (``output [M, N] = q_input [M, K] @ weight [N, K].T`` with 1x128 / 128x128
    block scales, ``vllm/model_executor/kernels/linear/scaled_mm/deep_gemm.py``) while routing: a
    Block_FP8 layer of ours with fp32 scales goes through :func:`hlvllm.ops.scaled_mm_into`; packed
    scales and anything else to ``vllm_op(*args)``.

    ``use_deep_gemm_e8m0`` does not decide: vLLM 0.26 turns it on by default (``VLLM_USE_DEEP_GEMM_E8M0``)
    on Hopper too, where the scales stay fp32 tensors whose values are powers of two (vLLM's
    ``DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0``: the weight re-quantized in place at load, the
    activation's group scales rounded up by vLLM's quantizer), so the same block-scaled product
    computes DeepGEMM's result. Blackwell's packed UE8M0 (int32, four exponents per element) is not
    fp32 and stays on DeepGEMM (:func:`scaled_mm_format_of` takes fp32 scales only)."""
    q, scale_a, weight, scale_b, output, e8m0 = args[:6]
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return vllm_op(*args)
    b = weight.t()  # [K, N] column-major, as hlcore takes the weight
    if scaled_mm_format_of(output, q, b, scale_a, scale_b, None) != "block_fp8":
        return vllm_op(*args)

    def vllm_into(buffer: torch.Tensor) -> None:
        vllm_op(q, scale_a, weight, scale_b, buffer, e8m0)

    scaled_mm_into("block_fp8", output, q, b, scale_a, scale_b, None, vllm_into)
    return None


#: (namespace, op) -> handler(vllm_op, args): the ops :class:`CaptureRouting` routes.
ROUTES: dict[tuple[str, str], Callable[[Callable[..., None], tuple], None]] = {
    ("_C", "cutlass_scaled_mm"): scaled_mm_handler,
    ("vllm", "fp8_gemm_nt_op"): fp8_gemm_nt_handler,
}


def _wrap_capture(cls) -> bool:
    """Make ``cls.capture_model`` run inside :class:`CaptureRouting` (once per class)."""
    original = getattr(cls, "capture_model", None)
    if original is None or getattr(original, "_hlvllm_capture_dispatch", False):
        return False

    @functools.wraps(original)
    def capture_model(self, *args, **kwargs):
        with CaptureRouting():
            return original(self, *args, **kwargs)

    capture_model._hlvllm_capture_dispatch = True
    cls.capture_model = capture_model
    return True


def install() -> list[str]:
    """Wrap ``capture_model`` of the vLLM model runners already imported in this process (the
    worker's runner is, before it builds the model; nothing is imported here). Returns the
    modules wrapped now."""
    wrapped = []
    for name in RUNNER_MODULES:
        runner = getattr(sys.modules.get(name), "GPUModelRunner", None)
        if runner is not None and _wrap_capture(runner):
            wrapped.append(name)
    if wrapped:
        logger.info(
            "hlvllm: HL_DISPATCH_AT=capture: vLLM's graph unchanged; cutlass_scaled_mm calls of "
            "hlvllm's layers are routed while vLLM captures CUDA graphs (%s)",
            ", ".join(wrapped),
        )
    return wrapped


def installed() -> bool:
    """Whether a model runner of this process captures inside the mode."""
    for name in RUNNER_MODULES:
        runner = getattr(sys.modules.get(name), "GPUModelRunner", None)
        if getattr(getattr(runner, "capture_model", None), "_hlvllm_capture_dispatch", False):
            return True
    return False


def install_for(fmt: str) -> None:
    """At construction of a kernel of ``fmt`` with ``HL_DISPATCH_AT=capture``: :func:`install`, and
    one warning when no model runner is there to hook (vLLM's kernels then run)."""
    install()
    if not installed():
        warn_once(
            "no model runner",
            "hlvllm: HL_DISPATCH_AT=capture found no vLLM model runner (%s) to hook in this process; "
            "vLLM's kernels run for %s layers",
            ", ".join(RUNNER_MODULES),
            fmt,
        )
