"""The plugin settings of ``hltools bench e2e`` (``off``, ``on``, the extra settings ``gemm``,
``aux``, ``fused``, and ``control``), the environment each engine run gets (:func:`worker_env`: compile caches, the
plugin switch, tensor-parallel defaults), and the ``config.json`` the engine loads
(:func:`engine_model_config`: the model's architecture with each format's ``quantization_config``).
See :mod:`hltools.e2e` for what each setting measures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlcore.formats import FORMAT_NAMES, get_format
from hltools.format_names import check_formats


@dataclass(frozen=True)
class ExtraSetting:
    """A plugin setting beyond ``off`` and ``on``: ``on`` (``HL_LINEAR_BACKEND=helion``) with ``env``
    set on top. Its summary keys and CSV columns end in ``_<name>`` (``speedup_<name>``: tokens/s over
    ``off``; start-up ``delta_<name>_cold_s``), and ``label`` heads its markdown / table columns.
    ``exclusive``: the other settings remove ``env``'s variables (else they keep a user's value)."""

    name: str
    env: Mapping[str, str]
    label: str
    about: str  # what it runs, for the markdown legend
    exclusive: bool = False

    @property
    def suffix(self) -> str:
        return f"_{self.name}"

    @property
    def env_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.env.items())


#: The extra settings, in column order: ``gemm`` Helion GEMMs only (``HL_AUX_KERNELS=none``, explicit),
#: ``aux`` Helion GEMMs and aux kernels (``HL_AUX_KERNELS=all``), ``fused`` the aux kernels with
#: hlvllm's aux fusion pass (``HL_AUX_FUSION=1``, which implies them unless ``HL_AUX_KERNELS`` is set).
EXTRA_SETTINGS: dict[str, ExtraSetting] = {
    s.name: s
    for s in (
        ExtraSetting(
            "gemm",
            {"HL_AUX_KERNELS": "none"},
            "GEMM only",
            "Helion GEMMs, `HL_AUX_KERNELS=none` (vLLM's norm/activation/quant layers, fused by Inductor)",
        ),
        ExtraSetting(
            "aux",
            {"HL_AUX_KERNELS": "all"},
            "GEMM+aux",
            "Helion GEMMs and aux kernels, `HL_AUX_KERNELS=all` (Helion's RMSNorm, SiluAndMul, QuantFP8)",
        ),
        ExtraSetting(
            "fused",
            {"HL_AUX_FUSION": "1"},
            "fused aux",
            "Helion GEMMs and aux kernels with `HL_AUX_FUSION=1` (each aux norm / silu_and_mul fused "
            "with the fp8 quant after it, one launch per pair)",
            exclusive=True,
        ),
    )
}
#: The kernels the ``control`` setting disables: vLLM's first choice per format on an H100/H200 (vLLM
#: 0.26, no FlashInfer), so vLLM's next one runs: fp8_dynamic ``CutlassFP8ScaledMMLinearKernel`` ->
#: ``ChannelWiseTorchFP8ScaledMMLinearKernel`` (``torch._scaled_mm``, fp32 out, scales after);
#: w8a8_int8 ``CutlassInt8ScaledMMLinearKernel`` -> ``TritonInt8ScaledMMLinearKernel``; block_fp8
#: ``DeepGemmFp8BlockScaledMMKernel`` -> ``CutlassFp8BlockScaledMMKernel``. One list for every format
#: (each name matches one format's kernel only).
CONTROL_DISABLED_KERNELS = (
    "CutlassFP8ScaledMMLinearKernel",
    "CutlassInt8ScaledMMLinearKernel",
    "DeepGemmFp8BlockScaledMMKernel",
)
#: What ``control`` sets on top of ``off``'s switch (replacing a ``VLLM_DISABLED_KERNELS`` of the caller).
CONTROL_ENV = {"VLLM_DISABLED_KERNELS": ",".join(CONTROL_DISABLED_KERNELS)}
#: Plugin settings (see the module docstring): ``off`` no plugin, ``on`` the plugin's defaults (Helion
#: GEMMs only), then :data:`EXTRA_SETTINGS`: ``gemm`` Helion GEMMs only (``HL_AUX_KERNELS=none``),
#: ``aux`` Helion GEMMs and aux kernels (``HL_AUX_KERNELS=all``), ``fused`` ``HL_AUX_FUSION=1``; last
#: ``control``: no plugin, vLLM's second-choice kernel (:data:`CONTROL_ENV`), numerics only (untimed,
#: round 0 only): the yardstick of the logprob check (:mod:`hltools.e2e.numerics`).
PLUGINS = ("off", "on", *EXTRA_SETTINGS, "control")
#: The settings whose engines are timed (all but ``control``).
TIMED_PLUGINS = ("off", "on", *EXTRA_SETTINGS)
#: What runs when no settings are named (``--plugins off,on,control``): the control costs one engine
#: start (round 0, no timing) and gives the numerics check its yardstick.
DEFAULT_PLUGINS = ("off", "on", "control")
#: The settings that load the plugin with ``HL_LINEAR_BACKEND=helion`` (Helion GEMMs active).
HELION_PLUGINS = ("on", *EXTRA_SETTINGS)
#: Variables only the setting that names them carries (``HL_AUX_FUSION``): the others remove them.
EXCLUSIVE_ENV = tuple(k for s in EXTRA_SETTINGS.values() if s.exclusive for k in s.env)

#: Each format's checkpoint ``quantization_config`` (:meth:`hlcore.formats.ScaledMMFormat.quantization_config`).
QUANT_CONFIGS: dict[str, dict[str, Any]] = {
    name: get_format(name).quantization_config() for name in FORMAT_NAMES
}


def quant_config(fmt: str) -> dict[str, Any]:
    """A copy of the ``quantization_config`` for ``fmt``; ``ValueError`` for an unknown format."""
    (fmt,) = check_formats([fmt])
    return get_format(fmt).quantization_config()


def engine_model_config(config: Mapping[str, Any], fmt: str, layers: int | None = None) -> dict[str, Any]:
    """The ``config.json`` the engine loads: ``config`` with ``num_hidden_layers = layers`` (all when
    None), the format's ``quantization_config``, bf16, ``rope_parameters`` from ``rope_theta`` when
    missing (vLLM 0.26 reads either), and token ids the engine needs. Raises ``ValueError`` for an
    unknown format or a layer count outside ``1..num_hidden_layers``."""
    out = json.loads(json.dumps(dict(config)))
    total = out.get("num_hidden_layers")
    if layers is not None:
        if layers < 1 or (isinstance(total, int) and layers > total):
            raise ValueError(f"--layers must be in 1..{total}; got {layers}")
        out["num_hidden_layers"] = layers
    out["quantization_config"] = quant_config(fmt)
    out["torch_dtype"] = out["dtype"] = "bfloat16"
    if "rope_parameters" not in out and "rope_theta" in out:
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": out["rope_theta"]}
    out.setdefault("bos_token_id", 1)
    out.setdefault("eos_token_id", 2)
    return out


CACHE_VARS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "HELION_CACHE_DIR": "helion",
}
KERNEL_CACHE_VAR = "HL_KERNEL_CACHE_DIR"  # hlcore's on-disk cache of Helion's generated code
BASE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # apply_model sends fill_weights to the engine process
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # the GPU bundle has no FlashInfer
    "PYTHONUNBUFFERED": "1",
}
#: Defaults for tensor-parallel runs (size > 1): NVLink multicast off (NCCL NVLS, torch symmetric
#: memory, NVSHMEM); the lent multi-GPU machines must not use it.
TP_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def default_env(env: MutableMapping[str, str], tensor_parallel_size: int = 1) -> None:
    """:data:`BASE_ENV`, and :data:`TP_ENV` when ``tensor_parallel_size > 1``, into ``env`` where
    not set already (a value the user set wins)."""
    for k, v in {**BASE_ENV, **(TP_ENV if tensor_parallel_size > 1 else {})}.items():
        env.setdefault(k, v)


def worker_env(
    plugin: str,
    cache: Path,
    base: Mapping[str, str] | None = None,
    tensor_parallel_size: int = 1,
    kernel_cache: bool = True,
) -> dict[str, str]:
    """The worker's environment: ``base`` (default ``os.environ``) plus :data:`BASE_ENV` defaults
    (and :data:`TP_ENV` ones for ``tensor_parallel_size > 1``), the compile-cache directories under
    ``cache`` (with ``kernel_cache``, hlcore's ``HL_KERNEL_CACHE_DIR`` too; without, that variable is
    set empty: off), and the plugin switch (:func:`set_plugin`): ``on`` sets ``HL_LINEAR_BACKEND=helion``,
    ``gemm`` that and ``HL_AUX_KERNELS=none``, ``aux`` that and ``HL_AUX_KERNELS=all``, ``fused`` that
    and ``HL_AUX_FUSION=1``, ``off`` sets ``VLLM_PLUGINS=`` (vLLM loads no general plugin) and drops
    ``HL_LINEAR_BACKEND``, ``control`` does that and disables vLLM's first-choice kernels
    (:data:`CONTROL_ENV`)."""
    env = dict(os.environ if base is None else base)
    default_env(env, tensor_parallel_size)
    for var, sub in CACHE_VARS.items():
        env[var] = str(Path(cache) / sub)
    if kernel_cache:
        env[KERNEL_CACHE_VAR] = str(Path(cache) / "hl-kernels")
    else:
        env[KERNEL_CACHE_VAR] = ""  # empty: off (unset, hlvllm would use its default directory)
    set_plugin(env, plugin)
    return env


def set_plugin(env: MutableMapping[str, str], plugin: str) -> None:
    """The plugin switch in ``env``: ``on`` -> ``HL_LINEAR_BACKEND=helion`` (and no empty
    ``VLLM_PLUGINS``; ``HL_AUX_KERNELS`` is not set, so the plugin's default, no aux kernel, applies;
    a value already set is kept); an extra setting (:data:`EXTRA_SETTINGS`) -> the same and its
    variables: ``gemm`` ``HL_AUX_KERNELS=none`` (Helion GEMMs only), ``aux`` ``HL_AUX_KERNELS=all``
    (Helion GEMMs and aux kernels), ``fused`` ``HL_AUX_FUSION=1`` (the aux kernels with it, unless a
    user's ``HL_AUX_KERNELS`` says otherwise: kept); ``off`` -> ``VLLM_PLUGINS=`` and no
    ``HL_LINEAR_BACKEND``; ``control`` -> ``off``'s switch and :data:`CONTROL_ENV` (vLLM's second-choice
    kernel). Every setting but ``fused`` removes an inherited ``HL_AUX_FUSION`` (:data:`EXCLUSIVE_ENV`)."""
    if plugin not in PLUGINS:
        raise ValueError(f"plugin must be one of {list(PLUGINS)}; got {plugin!r}")
    for var in EXCLUSIVE_ENV:
        env.pop(var, None)
    if plugin in HELION_PLUGINS:
        env["HL_LINEAR_BACKEND"] = "helion"
        if env.get("VLLM_PLUGINS") == "":
            del env["VLLM_PLUGINS"]
        if plugin in EXTRA_SETTINGS:
            env.update(EXTRA_SETTINGS[plugin].env)
    else:  # off, control
        env["VLLM_PLUGINS"] = ""
        env.pop("HL_LINEAR_BACKEND", None)
        if plugin == "control":
            env.update(CONTROL_ENV)
