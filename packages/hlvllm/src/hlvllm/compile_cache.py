"""hlvllm's part of vLLM's torch.compile cache key (docs/configuration.md, "Compile cache").

vLLM 0.26 reuses compiled graphs from ``VLLM_CACHE_ROOT/torch_compile_cache/<key>``. The key hashes
``vllm.envs.compile_factors()`` (every entry of ``vllm.envs.environment_variables`` except an
ignore list), ``VllmConfig.compute_hash()`` and, depending on the path, the traced source files (the
default AOT path, torch >= 2.10, keys only on the first two plus the model's ``forward`` and checks
the sources saved in the artifact). None of this sees ``HL_*``: with the same vLLM arguments a cache
written with the backend off would be replayed with it on, and the other way round.

:func:`register_compile_factor` adds one entry, :data:`COMPILE_FACTOR`, to
``vllm.envs.environment_variables``; its getter returns :func:`compile_key`, so ``compile_factors()``
and every key built from it change with what decides the graph vLLM traces: the backend on or off,
the aux kernel set (which ``CustomOp`` classes are built, and the int8 kernel's quantization op),
``HL_AUX_FUSION`` (hlvllm's graph pass; it also changes vLLM's pass-manager uuid), ``HL_DISPATCH_AT``
(hlvllm's op and compile ranges in the graph, or vLLM's graph), ``max_helion_size`` (read inside the op today, included in case that changes), hlvllm's version and
source digest (kernel selection in ``can_implement`` is not traced), and the hlcore and helion versions.
Not in it: ``HL_HELION_EAGER``, ``HL_DISPATCH_LOG``, ``HL_DETERMINISTIC``, ``HL_PRECOMPILE_THREADS``, ``HL_PRECOMPILE_PROCESSES``, ``HL_FUSED_QUANT`` and the tuned config files (``HL_CONFIG_DIR``),
which are read inside the opaque ``torch.ops.hlvllm.*`` ops at run time and never reach the graph.
With the backend off the entry is absent, so the key equals plain vLLM's (the graph is the same).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
from pathlib import Path

from hlvllm.settings import Settings, get_settings

logger = logging.getLogger("vllm.hlvllm")

#: The name of hlvllm's entry in ``vllm.envs.environment_variables``. Not an environment variable
#: anyone sets: a derived value that vLLM hashes with its own variables.
COMPILE_FACTOR = "HLVLLM_COMPILE_KEY"


@functools.cache
def _versions() -> str:
    parts = []
    for dist in ("hlvllm", "hlcore", "helion"):
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    parts.append(f"hlvllm_src={digest.hexdigest()[:16]}")
    return " ".join(parts)


def compile_key(settings: Settings | None = None) -> str:
    """The value vLLM hashes for hlvllm (default: this process's settings)."""
    s = settings or get_settings()
    aux = ",".join(sorted(s.aux_kernels)) or "none"
    backend = "helion" if s.enabled else "off"
    fusion = int(s.enabled and s.aux_fusion)
    return (
        f"backend={backend} aux={aux} max_helion_size={s.max_helion_size} aux_fusion={fusion} "
        f"dispatch_at={s.dispatch_at} {_versions()}"
    )


def register_compile_factor(enabled: bool) -> None:
    """Add (backend on) or remove (off) hlvllm's entry in vLLM's hashed env factors. Idempotent."""
    try:
        from vllm import envs

        table = envs.environment_variables
    except (ImportError, AttributeError):  # a vLLM without the table (not 0.26)
        table = None
    if not isinstance(table, dict):
        if enabled:
            logger.warning(
                "hlvllm: cannot add HL_* settings to vLLM's compile-cache key; "
                "set VLLM_DISABLE_COMPILE_CACHE=1 when changing HL_* settings"
            )
        return
    if enabled:
        table[COMPILE_FACTOR] = compile_key
    else:
        table.pop(COMPILE_FACTOR, None)
