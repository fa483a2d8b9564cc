"""hlvllm settings, read from environment variables (one table: docs/configuration.md).

| variable | default | effect |
| --- | --- | --- |
| ``HL_LINEAR_BACKEND`` | unset (off) | ``helion`` enables the plugin's linear kernels; unset, ``vllm`` or ``0`` leave vLLM untouched |
| ``HL_MAX_HELION_SIZE`` | ``32`` | largest num_tokens routed to Helion (``max_helion_size``); larger batches use vLLM's kernel |
| ``HL_HELION_EAGER`` | ``0`` | ``1``: also use Helion outside CUDA-graph capture (tests, benchmarks; slow on the host); only with ``HL_DISPATCH_AT=op`` |
| ``HL_DISPATCH_LOG`` | ``0`` | ``1``: log the first dispatch of every (path, M, N, K) |
| ``HL_AUX_KERNELS`` | ``none`` (``all`` with ``HL_AUX_FUSION=1``) | which auxiliary ops use Helion with the backend on: ``all``, ``none`` or a list (below); off by default: end to end they cost 7-9 % tokens/s on the H200 (docs/aux-kernels.md) |
| ``HL_DETERMINISTIC`` | ``0`` | ``1``: Helion GEMMs run with ``split_k = 1`` (no atomics): bitwise repeatable results |
| ``HL_AUX_FUSION`` | ``0`` | ``1``: a graph pass fuses each aux norm / silu_and_mul with the per-token fp8 quant after it (one launch) |
| ``HL_KERNEL_CACHE_DIR`` | ``<VLLM_CACHE_ROOT>/hlcore_kernels`` | hlcore's cache of Helion's generated code across restarts; set by ``hlvllm.plugin.register`` when unset; empty: off |
| ``HL_UNTUNED_SHAPES`` | ``nearest`` | GEMM shapes without a tuned key: ``nearest`` runs the nearest tuned config of this GPU's file (one warning), and vLLM's kernel on a GPU without a file; ``vllm`` runs vLLM's kernel for all of them; ``heuristic`` is ``nearest`` that also runs Helion's untuned default config on a GPU without a file |
| ``HL_SPEED_GUARD`` | ``1`` (on) | shapes without an exact tuned key (and Block_FP8 keys measured on the other scale_a layout whose mark does not settle it) keep Helion only where it times at least 2 % faster than vLLM's kernel at warm-up (:mod:`hlvllm.guard`; results cached next to the kernel cache); ``0``: off |
| ``HL_PRECOMPILE_THREADS`` | ``0`` (off) | ``N`` > 1: at a GEMM shape's first Helion call, compile its other CUDA-graph sizes in ``N`` threads (``hlvllm.precompile``); on the H200 it took 4 of 26 s off an 8-layer engine's capture |
| ``HL_PRECOMPILE_PROCESSES`` | ``auto`` | ``N`` > 0: once the model's weights are processed, compile every Helion GEMM kernel the CUDA-graph sizes will run in ``N`` worker processes, into the kernel cache (``hlvllm.precompile``, ``hlcore.kernel_pool``); needs ``HL_KERNEL_CACHE_DIR``; ``0``: off; ``auto``: ``max(1, min(8, usable CPU cores // 2))`` for an engine on one GPU (the setting every capture-mode measurement ran with), off with several ranks or engines (:func:`hlvllm.precompile.auto_pool_processes`) |
| ``HL_DISPATCH_AT`` | ``capture`` | where linear layers choose Helion or vLLM's kernel: ``capture``, vLLM's graph unchanged (one range) and vLLM's GEMM op calls routed while vLLM captures CUDA graphs (:mod:`hlvllm.capture_dispatch`; prefill and eager calls never reach hlvllm); ``op``, inside hlvllm's op in vLLM's compiled graph, split into two compile ranges at ``max_helion_size`` (:mod:`hlvllm.lowering`; Helion also runs eagerly with ``HL_HELION_EAGER=1``) |
| ``HL_FUSED_QUANT`` | ``0`` (off) | only with ``HL_DISPATCH_AT=op``; ``1``: Block_FP8 layers quantize their activations inside the Helion GEMM at decode sizes (``hlcore.fused_linear``: one kernel instead of QuantFP8 + GEMM); off by default: slower than the two kernels it replaces (docs/benchmarks.md) |

A value a variable does not take makes :func:`get_settings` raise ``ValueError``; the plugin then stays off
with one warning (:func:`hlvllm.plugin.register`): a typo never stops a vLLM server.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", "none"}

#: What ``HL_AUX_KERNELS`` may name: vLLM's ``RMSNorm`` (rms_norm + fused_add_rms_norm), ``SiluAndMul``,
#: ``QuantFP8`` (dynamic per-token and 1x128-group fp8) and the int8 kernel's per-token quantization.
AUX_KERNEL_NAMES = ("rms_norm", "silu_and_mul", "quant_fp8", "int8_quant")
#: What ``HL_UNTUNED_SHAPES`` may say: run the nearest tuned config (vLLM's kernel on a GPU without
#: a file), vLLM's kernel, or the nearest tuned config and Helion's heuristic default without a file.
UNTUNED_MODES = ("nearest", "vllm", "heuristic")
#: ``HL_PRECOMPILE_PROCESSES=auto`` (the default) as a setting: resolved where it is used
#: (:func:`hlvllm.precompile.auto_pool_processes`).
AUTO = -1
#: What ``HL_DISPATCH_AT`` may say: route inside hlvllm's graph op, or at CUDA-graph capture (default).
DISPATCH_AT = ("op", "capture")


@dataclass(frozen=True)
class Settings:
    enabled: bool
    max_helion_size: int
    helion_eager: bool
    dispatch_log: bool
    aux_kernels: frozenset[str] = frozenset()
    deterministic: bool = False
    untuned_shapes: str = "nearest"
    aux_fusion: bool = False
    precompile_threads: int = 0
    speed_guard: bool = True
    precompile_processes: int = AUTO  # HL_PRECOMPILE_PROCESSES: N, 0 (off) or AUTO
    fused_quant: bool = False
    dispatch_at: str = "capture"


#: ``HL_LINEAR_BACKEND`` values that leave the plugin off without a word (``helion`` turns it on).
_BACKEND_OFF = {"", "vllm"} | _FALSE


def _backend_env() -> bool:
    raw = os.environ.get("HL_LINEAR_BACKEND", "").strip().lower()
    if raw == "helion":
        return True
    if raw in _BACKEND_OFF:
        return False
    raise ValueError(f"HL_LINEAR_BACKEND must be 'helion' (on) or unset, 'vllm' or '0' (off); got {raw!r}")


def _bool_env(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{name} must be one of 1, true, yes, on / 0, false, no, off; got {raw!r}")


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative integer; got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {raw!r}")
    return value


def _processes_env() -> int:
    """``HL_PRECOMPILE_PROCESSES``: unset or ``auto``: :data:`AUTO`; else a non-negative integer."""
    if os.environ.get("HL_PRECOMPILE_PROCESSES", "").strip().lower() in ("", "auto"):
        return AUTO
    try:
        return _int_env("HL_PRECOMPILE_PROCESSES", 0)
    except ValueError:
        raw = os.environ["HL_PRECOMPILE_PROCESSES"]
        raise ValueError(
            f"HL_PRECOMPILE_PROCESSES must be auto or a non-negative integer; got {raw!r}"
        ) from None


def _aux_env(aux_fusion: bool) -> frozenset[str]:
    """``HL_AUX_KERNELS``; unset: none, or all with ``HL_AUX_FUSION=1`` (the pass fuses those layers).

    Off by default since the H200 run of 2026-12-01 (Qwen3-8B FP8_Dynamic, 36 layers, -O2): with the
    aux kernels on, 236 / 1684 / 5821 tokens/s at concurrency 1 / 8 / 32 against 258 / 1825 / 6406
    with Helion GEMMs only, and twice the time to first token (opaque ops where Inductor fuses
    vLLM's native norm, activation and quantization code)."""
    raw = os.environ.get("HL_AUX_KERNELS", "").strip().lower()
    if not raw:
        return frozenset(AUX_KERNEL_NAMES) if aux_fusion else frozenset()
    if raw in {"all"} | _TRUE:
        return frozenset(AUX_KERNEL_NAMES)
    if raw in _FALSE:
        return frozenset()
    names = {name.strip() for name in raw.split(",") if name.strip()}
    unknown = sorted(names - set(AUX_KERNEL_NAMES))
    if unknown:
        raise ValueError(
            f"HL_AUX_KERNELS: unknown name(s) {unknown}; use all, none or a comma list of {', '.join(AUX_KERNEL_NAMES)}"
        )
    return frozenset(names)


def _untuned_env() -> str:
    raw = os.environ.get("HL_UNTUNED_SHAPES", "").strip().lower() or "nearest"
    if raw not in UNTUNED_MODES:
        raise ValueError(f"HL_UNTUNED_SHAPES must be one of {', '.join(UNTUNED_MODES)}; got {raw!r}")
    return raw


def dispatch_at_env() -> str:
    """``HL_DISPATCH_AT`` alone (``ValueError`` for a value it does not take), for tools that need
    the dispatch mode without every other ``HL_*`` variable being valid."""
    raw = os.environ.get("HL_DISPATCH_AT", "").strip().lower() or "capture"
    if raw not in DISPATCH_AT:
        raise ValueError(f"HL_DISPATCH_AT must be one of {', '.join(DISPATCH_AT)}; got {raw!r}")
    return raw


@functools.cache
def get_settings() -> Settings:
    """The settings of this process (cached; tests call ``get_settings.cache_clear()``).

    Raises:
        ValueError: a variable of the table above holds a value it does not take (the message names
            the variable, the value and what it takes); :func:`hlvllm.plugin.register` turns this
            into one warning and leaves vLLM's kernels in place."""
    aux_fusion = _bool_env("HL_AUX_FUSION")
    return Settings(
        enabled=_backend_env(),
        max_helion_size=_int_env("HL_MAX_HELION_SIZE", 32),
        helion_eager=_bool_env("HL_HELION_EAGER"),
        dispatch_log=_bool_env("HL_DISPATCH_LOG"),
        aux_kernels=_aux_env(aux_fusion),
        deterministic=_bool_env("HL_DETERMINISTIC"),
        untuned_shapes=_untuned_env(),
        aux_fusion=aux_fusion,
        precompile_threads=_int_env("HL_PRECOMPILE_THREADS", 0),
        speed_guard=_bool_env("HL_SPEED_GUARD", default=True),
        precompile_processes=_processes_env(),
        fused_quant=_bool_env("HL_FUSED_QUANT"),
        dispatch_at=dispatch_at_env(),
    )
