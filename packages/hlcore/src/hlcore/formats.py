"""The scaled-GEMM formats: one frozen record per format, the one place that lists them.

Every format computes

    out[M, N] = sum_k scale_a[m, k // g_a] * scale_b[n // g_n, k // g_k] * A[m, k] * B[k, n]  (+ bias[n])

with 8-bit operands ``A [M, K]`` (row-major) and ``B [K, N]`` (the column-major ``weight.t()`` view
of a row-major ``[N, K]`` weight), fp32 scales, and a bf16 / fp16 / fp32 output. A format fixes the
operand dtype, the scale granularity (per token x per channel, or 1 x 128 activation groups x
128 x 128 weight blocks), how a checkpoint declares it (the Hugging Face ``quantization_config`` of
its ``config.json``), the reference quantizers of :mod:`hlcore.quant` that make its operands, and
the relative Frobenius tolerance its outputs are checked with:

| name | title | A, B | scale_a (fp32) | scale_b (fp32) | checkpoint | semantics of |
| --- | --- | --- | --- | --- | --- | --- |
| ``fp8_dynamic`` | FP8_Dynamic | fp8 e4m3 | ``[M, 1]`` per token (dynamic) | ``[N, 1]`` per channel | compressed-tensors ``float-quantized`` | vLLM ``cutlass_scaled_mm`` |
| ``w8a8_int8`` | W8A8_INT8 | int8 (symmetric) | ``[M, 1]`` per token (dynamic) | ``[N, 1]`` per channel | compressed-tensors ``int-quantized`` | vLLM ``cutlass_scaled_mm`` (int8) |
| ``block_fp8`` | Block_FP8 | fp8 e4m3 | ``[M, ceil(K/128)]`` 1x128 groups | ``[ceil(N/128), ceil(K/128)]`` blocks | vLLM ``fp8``, ``weight_block_size: [128, 128]`` | vLLM ``w8a8_triton_block_scaled_mm`` / DeepGEMM ``fp8_gemm_nt`` |

Use :func:`get_format` (``ValueError`` listing the supported names for an unknown one) or
:data:`FORMATS`; :data:`FORMAT_NAMES` is the literal list of names. This module imports neither
torch nor vLLM (dtypes are torch attribute names; the quantizers are imported when called), so CLIs
and config tools can read it cheaply.

Adding a format: one :class:`ScaledMMFormat` entry here, then the kernel body of
:mod:`hlcore.scaled_mm` if its math is new (docs/architecture.md, "Adding a fourth format").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: The formats, in the order tools list them. The only literal list of format names in hlcore.
FORMAT_NAMES: tuple[str, ...] = ("fp8_dynamic", "w8a8_int8", "block_fp8")

#: Output dtypes (torch attribute names) every format supports.
OUT_DTYPE_NAMES: tuple[str, ...] = ("bfloat16", "float16", "float32")

#: Bytes of one fp32 scale.
SCALE_BYTES = 4


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` or ``"bfloat16"`` -> ``"bfloat16"`` (the torch attribute name)."""
    return str(dtype).removeprefix("torch.")


def _frozen(obj: Any) -> Any:
    """Read-only copy of parsed JSON: dicts become mappingproxies, lists tuples."""
    if isinstance(obj, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in obj.items()})
    if isinstance(obj, list | tuple):
        return tuple(_frozen(v) for v in obj)
    return obj


def _thawed(obj: Any) -> Any:
    """Plain JSON (dicts, lists) from :func:`_frozen`'s output."""
    if isinstance(obj, Mapping):
        return {k: _thawed(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [_thawed(v) for v in obj]
    return obj


def _compressed_tensors(kind: str, fmt: str) -> dict[str, Any]:
    """A compressed-tensors W8A8 ``quantization_config``: static per-channel weights, dynamic
    per-token activations, symmetric, 8 bits of ``kind`` (``"float"`` or ``"int"``)."""
    args = {"num_bits": 8, "type": kind, "symmetric": True}
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {**args, "strategy": "channel", "dynamic": False},
                "input_activations": {**args, "strategy": "token", "dynamic": True},
            }
        },
    }


# Relative Frobenius tolerance vs the fp32 dequantized reference of the same quantized inputs, per
# output dtype (quantization error itself does not count). bf16: the output rounding (~1.1e-3 rms),
# ~sqrt(split_k) of it with split-K atomics in the output dtype, and CUTLASS's imprecise sm90 fp8
# accumulation (~3e-3 at K = 4096) for comparisons with vLLM's kernels; fp16 has 3 more mantissa bits
# (8x tighter); fp32 differs only by the accumulation order. int8 accumulates exactly and block_fp8
# adds one fp32 rounding per 128-wide K tile (~1e-7): the same numbers hold for every format.
_TOLERANCES = {"bfloat16": 1.5e-2, "float16": 2e-3, "float32": 1e-4}


@dataclass(frozen=True, eq=False)
class ScaledMMFormat:
    """The facts of one scaled-GEMM format (table: module docstring).

    Attributes:
        name: the key everything uses (config-file keys, CLI ``--formats``, dispatch):
            ``"fp8_dynamic"``.
        title: the human name (vLLM's scheme names): ``"FP8_Dynamic"``.
        operand_dtype: torch dtype name of A and B: ``"float8_e4m3fn"`` or ``"int8"``.
        accumulator_dtype: torch dtype name of the kernel's accumulator (``"int32"``: exact int8 sums).
        operand_bytes: bytes per element of A and B.
        group_size: activation scale group along K (``scale_a [M, ceil(K/g)]``); None: per token
            (``scale_a [M, 1]``).
        block_size: ``(block_n, block_k)`` weight scale block (vLLM's ``weight_block_size``,
            ``scale_b [ceil(N/bn), ceil(K/bk)]``); None: per output channel (``scale_b [N, 1]``).
        scale_a_layout, scale_b_layout: the scale shapes as documentation text.
        activation_quant, weight_quant: names of the :mod:`hlcore.quant` reference quantizers
            (fp32 math, vLLM semantics) that make A from ``x [M, K]`` and B from ``w [N, K]``.
        semantics: the vLLM kernels whose results this format reproduces.
        tolerances: output dtype name -> max relative Frobenius error vs the fp32 reference.
        hf_quantization_config: read-only ``quantization_config`` of a checkpoint in this format
            (:meth:`quantization_config` returns a mutable copy).
    """

    name: str
    title: str
    operand_dtype: str
    accumulator_dtype: str
    operand_bytes: int
    group_size: int | None
    block_size: tuple[int, int] | None
    scale_a_layout: str
    scale_b_layout: str
    activation_quant: str
    weight_quant: str
    semantics: str
    tolerances: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(dict(_TOLERANCES)))
    hf_quantization_config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "tolerances", MappingProxyType(dict(self.tolerances)))
        object.__setattr__(self, "hf_quantization_config", _frozen(self.hf_quantization_config))

    # ---- shapes and bytes -------------------------------------------------------------------
    def scale_a_shape(self, m: int, k: int) -> tuple[int, int]:
        """Shape of ``scale_a`` for ``A [M, K]``: ``(M, 1)`` or ``(M, ceil(K / group_size))``."""
        return (m, 1) if self.group_size is None else (m, math.ceil(k / self.group_size))

    def scale_b_shape(self, n: int, k: int) -> tuple[int, int]:
        """Shape of ``scale_b`` for an ``[N, K]`` weight: ``(N, 1)`` or ``(ceil(N/bn), ceil(K/bk))``."""
        if self.block_size is None:
            return (n, 1)
        bn, bk = self.block_size
        return (math.ceil(n / bn), math.ceil(k / bk))

    def bytes_moved(self, m: int, n: int, k: int, out_bytes: int = 2) -> int:
        """Fewest bytes one ``[M, K] x [K, N]`` call moves: A and B (``operand_bytes`` each), both
        fp32 scale tensors (:meth:`scale_a_shape`, :meth:`scale_b_shape`) and the ``[M, N]`` output
        of ``out_bytes`` per element (bias not counted)."""
        sa, sb = math.prod(self.scale_a_shape(m, k)), math.prod(self.scale_b_shape(n, k))
        return self.operand_bytes * (m + n) * k + SCALE_BYTES * (sa + sb) + out_bytes * m * n

    # ---- numerics ---------------------------------------------------------------------------
    def tolerance(self, out_dtype: Any) -> float:
        """Max relative Frobenius error at ``out_dtype`` (a torch dtype or its name); ``ValueError``
        for a dtype without one."""
        try:
            return self.tolerances[dtype_name(out_dtype)]
        except KeyError:
            raise ValueError(f"no tolerance for format {self.name!r} with out_dtype {out_dtype}") from None

    def quantize_activation(self, x: Any) -> tuple[Any, Any]:
        """``(A [M, K] operand_dtype, scale_a fp32 of scale_a_shape)`` from ``x [M, K]`` (any float
        dtype) with :attr:`activation_quant`."""
        from hlcore import quant

        fn = getattr(quant, self.activation_quant)
        return fn(x) if self.group_size is None else fn(x, self.group_size)

    def quantize_weight(self, w: Any) -> tuple[Any, Any]:
        """``(W_q [N, K] operand_dtype row-major, scale_b fp32 of scale_b_shape)`` from ``w [N, K]``
        with :attr:`weight_quant` (``B`` is ``W_q.t()``)."""
        from hlcore import quant

        fn = getattr(quant, self.weight_quant)
        return fn(w) if self.block_size is None else fn(w, self.block_size)

    def quantization_config(self) -> dict[str, Any]:
        """A new, mutable copy of :attr:`hf_quantization_config` (for a ``config.json``)."""
        return json.loads(json.dumps(_thawed(self.hf_quantization_config)))


FORMATS: Mapping[str, ScaledMMFormat] = MappingProxyType(
    {
        f.name: f
        for f in (
            ScaledMMFormat(
                name=FORMAT_NAMES[0],
                title="FP8_Dynamic",
                operand_dtype="float8_e4m3fn",
                accumulator_dtype="float32",
                operand_bytes=1,
                group_size=None,
                block_size=None,
                scale_a_layout="[M, 1]",
                scale_b_layout="[N, 1]",
                activation_quant="per_token_fp8_quant_ref",
                weight_quant="per_channel_fp8_quant_ref",
                semantics="vLLM cutlass_scaled_mm (compressed-tensors FP8_DYNAMIC)",
                hf_quantization_config=_compressed_tensors("float", "float-quantized"),
            ),
            ScaledMMFormat(
                name=FORMAT_NAMES[1],
                title="W8A8_INT8",
                operand_dtype="int8",
                accumulator_dtype="int32",
                operand_bytes=1,
                group_size=None,
                block_size=None,
                scale_a_layout="[M, 1]",
                scale_b_layout="[N, 1]",
                activation_quant="per_token_int8_quant_ref",
                weight_quant="per_token_int8_quant_ref",
                semantics="vLLM cutlass_scaled_mm with int8 inputs (compressed-tensors W8A8 int8, symmetric)",
                hf_quantization_config=_compressed_tensors("int", "int-quantized"),
            ),
            ScaledMMFormat(
                name=FORMAT_NAMES[2],
                title="Block_FP8",
                operand_dtype="float8_e4m3fn",
                accumulator_dtype="float32",
                operand_bytes=1,
                group_size=128,
                block_size=(128, 128),
                scale_a_layout="[M, ceil(K/128)]",
                scale_b_layout="[ceil(N/128), ceil(K/128)]",
                activation_quant="per_token_group_fp8_quant_ref",
                weight_quant="per_block_fp8_quant_ref",
                semantics="vLLM w8a8_triton_block_scaled_mm / DeepGEMM fp8_gemm_nt (DeepSeek-V3 block scaling)",
                hf_quantization_config={
                    "quant_method": "fp8",
                    "activation_scheme": "dynamic",
                    "weight_block_size": [128, 128],
                },
            ),
        )
    }
)


def get_format(name: str, who: str = "") -> ScaledMMFormat:
    """The record of format ``name``. Raises ``ValueError`` naming ``who`` (the caller, for the
    message), the name and the supported ones."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        prefix = f"{who}: " if who else ""
        raise ValueError(
            f"{prefix}unknown format {name!r}; fmt must be one of: {', '.join(FORMAT_NAMES)}"
        ) from None


def scaled_mm_bytes(fmt: str, m: int, n: int, k: int, out_bytes: int = 2) -> int:
    """:meth:`ScaledMMFormat.bytes_moved` of format ``fmt`` (the one bytes formula)."""
    return get_format(fmt, "scaled_mm_bytes").bytes_moved(m, n, k, out_bytes)
