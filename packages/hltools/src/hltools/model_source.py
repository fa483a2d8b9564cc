"""Which model ``--model`` names, offline: its ``config.json``, where it came from, and its format.

A user names the model they serve, often a quantized checkpoint's Hugging Face id such as
``RedHatAI/Qwen3-8B-FP8-dynamic``. :func:`resolve_model` turns any of these into a
:class:`ModelSource`, in this order, without any network access:

1. a path to a ``config.json`` file, or to a directory holding one;
2. an embedded config (``hltools/models/*.json``) by name, case-insensitive (``qwen3-8b``);
3. a Hugging Face id (``org/name``) whose ``config.json`` is in the local Hugging Face cache
   (``huggingface_hub.try_to_load_from_cache``: ``HF_HOME`` / ``HF_HUB_CACHE`` apply; nothing is
   downloaded), so a fine-tune that shares an embedded model's name is read as it is;
4. an id not in the cache whose ``name`` is an embedded model's (``Qwen/Qwen3-8B``), with a note;
5. the id's base model: the last part of the id with the quantization and release words removed
   (``-FP8-dynamic``, ``-W8A8``, ``-quantized.w8a8``, ``-Instruct``, a ``Meta-`` prefix, ...)
   matched to an embedded config. Only the architecture comes from it; the note says so.

The format (:data:`hltools.format_names.FORMATS`) comes from the config's ``quantization_config``
when present (:func:`format_of_config`: vLLM's ``fp8`` method and compressed-tensors schemes), else
from the id's quantization words (:func:`format_of_name`), else it is unknown (``None``) and the
command's default applies.

MoE models (``num_experts``, ``num_local_experts`` or ``n_routed_experts`` > 0): only their dense
linear layers run hl's GEMMs (the experts run vLLM's fused-MoE kernels); :func:`hltools.shapes.linear_shapes`
leaves the expert MLP out and the note says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hltools import shapes

#: Words of a checkpoint id that name its quantization or release, not its architecture (lower case,
#: matched as whole ``-``/``_``/``.``-separated parts at the end or, for ``meta``, at the start).
_SUFFIX_WORDS = (
    "fp8",
    "dynamic",
    "static",
    "block",
    "w8a8",
    "w8a16",
    "w4a16",
    "int8",
    "int4",
    "quantized",
    "instruct",
    "chat",
    "base",
    "hf",
    "it",
)
_PREFIX_WORDS = ("meta",)


@dataclass(frozen=True)
class ModelSource:
    """A resolved ``--model``: ``config`` (the config.json dict), ``source`` (where it came from, for
    messages and result metadata), ``fmt`` (the checkpoint's format, or ``None``: unknown),
    ``fmt_from`` (what named it: ``"quantization_config"`` or ``"id"``, the words of ``name``; ``None``
    with no format) and ``notes`` (what a user should be told: a base-model match, a MoE model's
    dense layers only)."""

    name: str
    config: dict[str, Any]
    source: str
    fmt: str | None = None
    notes: list[str] = field(default_factory=list)
    fmt_from: Literal["quantization_config", "id"] | None = None


def resolve_model(name_or_path: str | Path) -> ModelSource:
    """Resolve ``name_or_path`` as the module docstring lists, offline.

    Raises:
        FileNotFoundError: a directory without ``config.json``.
        ValueError: as :func:`hltools.shapes.load_model_config` (a config the linear shapes cannot be
            read from names the file and the field; a name that resolves nowhere lists the embedded
            models and says that the Hugging Face cache had no such id).
    """
    name = str(name_or_path)
    if Path(name).expanduser().exists():
        return _source(name, shapes.load_model_config(name_or_path), name)
    embedded = shapes.embedded_name(name)
    if embedded is not None and not _hf_id(name):
        return _source(name, shapes.load_model_config(embedded), f"embedded model {embedded}")
    if not _hf_id(name):
        raise ValueError(shapes.not_found_message(name))
    cached = _hf_cached_config(name)
    if cached is not None:
        return _source(name, shapes.load_model_config(cached), f"Hugging Face cache ({cached})")
    if embedded is not None:
        note = f"{name}: not in the Hugging Face cache; using the embedded {embedded} config"
        return _source(name, shapes.load_model_config(embedded), f"embedded model {embedded}", note)
    base = base_model_name(name)
    if base is not None:
        note = f"{name}: not in the Hugging Face cache; using the embedded {base} config (its base model)"
        return _source(name, shapes.load_model_config(base), f"embedded model {base}", note)
    raise ValueError(
        f"unknown model {name!r}: not in the local Hugging Face cache, and no embedded model matches "
        f"its base name; fetch its config.json (hf download {name} config.json: a few kB, no weights) "
        f"or give a path to one. Embedded models: {', '.join(shapes.list_models())}"
    )


def _hf_id(name: str) -> bool:
    """``org/name`` (one slash, neither part empty, not path-like)."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~")) and not name.endswith(".json")


def _hf_cached_config(repo_id: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415 (optional, through vLLM)
    except ImportError:
        return None
    try:
        path = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id or cache: treat as not cached
        return None
    return path if isinstance(path, str) else None


def base_model_name(name: str) -> str | None:
    """The embedded model whose name is ``name``'s last part without quantization / release words
    (``RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic`` -> ``llama-3.1-8b``), or ``None``."""
    parts = [p for p in re.split(r"[-_]", name.rsplit("/", 1)[-1].lower()) if p]
    parts = [p.removeprefix("quantized.") for p in parts]
    while parts and parts[-1] in _SUFFIX_WORDS:
        parts.pop()
    while parts and parts[0] in _PREFIX_WORDS:
        parts.pop(0)
    candidate = "-".join(parts)
    return candidate if candidate in shapes.list_models() else None


def format_of_config(config: dict[str, Any]) -> str | None:
    """The format of a checkpoint's ``quantization_config``, as vLLM would run it, or ``None``.

    * ``quant_method: fp8``: ``weight_block_size`` [128, 128] -> ``block_fp8``; none with
      ``activation_scheme: dynamic`` -> ``fp8_dynamic`` (vLLM's ``Fp8Config``).
    * ``compressed-tensors``: the first config group's 8-bit weights with dynamic per-token input
      activations: ``type: float`` -> ``fp8_dynamic`` (weights per channel) or ``block_fp8``
      (weights ``strategy: block`` [128, 128], input groups of 128); ``type: int`` -> ``w8a8_int8``.
    """
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        if list(qc.get("weight_block_size") or []) == [128, 128]:
            return "block_fp8"
        if not qc.get("weight_block_size") and qc.get("activation_scheme") == "dynamic":
            return "fp8_dynamic"
        return None
    if method != "compressed-tensors":
        return None
    groups = [g for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict)]
    if not groups:
        return None
    weights, acts = groups[0].get("weights") or {}, groups[0].get("input_activations") or {}
    if weights.get("num_bits") != 8 or acts.get("num_bits") != 8 or not acts.get("dynamic"):
        return None
    if weights.get("type") == "int" and acts.get("type") == "int" and acts.get("strategy") == "token":
        return "w8a8_int8"
    if weights.get("type") != "float" or acts.get("type") != "float":
        return None
    if weights.get("strategy") == "block" and list(weights.get("block_structure") or []) == [128, 128]:
        return "block_fp8" if acts.get("strategy") == "group" and acts.get("group_size") == 128 else None
    if weights.get("strategy") == "channel" and acts.get("strategy") == "token":
        return "fp8_dynamic"
    return None


def format_of_name(name: str) -> str | None:
    """The format a checkpoint id's words name (``FP8-dynamic`` -> ``fp8_dynamic``; ``W8A8`` or
    ``INT8`` -> ``w8a8_int8``; ``FP8-block`` -> ``block_fp8``), or ``None`` when they name none or
    several."""
    words = set(re.split(r"[-_.]", name.rsplit("/", 1)[-1].lower()))
    found = set()
    if "fp8" in words and "dynamic" in words:
        found.add("fp8_dynamic")
    if "fp8" in words and "block" in words:
        found.add("block_fp8")
    if ("w8a8" in words and "fp8" not in words) or "int8" in words:
        found.add("w8a8_int8")
    return found.pop() if len(found) == 1 else None


def _source(name: str, config: dict[str, Any], source: str, note: str | None = None) -> ModelSource:
    notes = [note] if note else []
    fmt, fmt_from = format_of_config(config), "quantization_config"
    if fmt is None:  # said by the command where it uses it (hltools.options.model_formats)
        fmt, fmt_from = format_of_name(name), "id"
    if shapes.is_moe(config):
        kept = ", ".join(s.name for s in shapes.linear_shapes(config))
        notes.append(
            f"{name}: a mixture-of-experts model; only its dense linear layers ({kept}) are covered, "
            "the experts run vLLM's fused-MoE kernels"
        )
    return ModelSource(name, config, source, fmt, notes, fmt_from=fmt_from if fmt is not None else None)
