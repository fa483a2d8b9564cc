"""Linear-layer GEMM shapes of a decoder model, from its Hugging Face ``config.json``.

For a Llama/Qwen3-style block with ``q`` attention heads, ``kv`` key/value heads of size ``d``
(``head_dim``, else ``hidden_size / num_attention_heads``), the quantized linears compute
``out[M, N] = x[M, K] @ W[K, N]`` with (N, K):

    qkv      ((q + 2 kv) d,       hidden)         column-parallel (QKVParallelLinear)
    o        (hidden,             q d)            row-parallel    (RowParallelLinear)
    gate_up  (2 intermediate,     hidden)         column-parallel (MergedColumnParallelLinear)
    down     (hidden,             intermediate)   row-parallel    (RowParallelLinear)

Tensor parallelism of size ``tp`` shards N of the column-parallel layers and K of the row-parallel
ones. For qkv this follows vLLM's ``QKVParallelLinear``: each rank holds ``q / tp`` query heads and
``max(1, kv / tp)`` key/value heads (kv heads are replicated when ``tp > kv``), which is
``(q + 2 kv) d / tp`` whenever ``tp <= kv``.

The embedded configs (``hltools/models/*.json``, architecture fields only) cover the models of
the project spec (Qwen3 1.7B-32B, Llama-3.1-8B); any other model works from a path to its ``config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hltools.results import ResultTable

_MODELS_DIR = "models"


@dataclass(frozen=True)
class LinearShape:
    """One linear layer's GEMM: ``out[M, N] = x[M, K] @ W[K, N]`` (M = num_tokens, chosen later)."""

    name: str
    n: int
    k: int


def _embedded() -> dict[str, Any]:
    """Embedded model name (lower case, file stem) -> resource of its config.json."""
    root = resources.files("hltools") / _MODELS_DIR
    return {p.name.removesuffix(".json"): p for p in root.iterdir() if p.name.endswith(".json")}


def list_models() -> list[str]:
    """Names of the embedded model configs, sorted (e.g. ``"qwen3-8b"``, ``"llama-3.1-70b"``)."""
    return sorted(_embedded())


#: ``--list-models``' columns: (heading, config.json key).
MODEL_FIELDS = (
    ("hidden", "hidden_size"),
    ("intermediate", "intermediate_size"),
    ("q heads", "num_attention_heads"),
    ("kv heads", "num_key_value_heads"),
    ("head_dim", "head_dim"),
    ("layers", "num_hidden_layers"),
)


def models_table() -> ResultTable:
    """The embedded models: architecture and the config fields that set their linear shapes."""
    rows = []
    for name in list_models():
        c = load_model_config(name)
        rows.append(
            [name, ",".join(c.get("architectures", [])), *(str(c.get(key)) for _, key in MODEL_FIELDS)]
        )
    columns = ["model", "architecture", *(heading for heading, _ in MODEL_FIELDS)]
    return ResultTable(
        "embedded models (hltools/models/*.json)", columns, rows, left=("model", "architecture")
    )


def load_model_config(name_or_path: str | Path) -> dict[str, Any]:
    """Load a model's ``config.json`` as a dict.

    ``name_or_path`` is, in this order: a path to a ``config.json`` file, a path to a directory
    holding one, or the name of an embedded config (case-insensitive; a Hugging Face id such as
    ``Qwen/Qwen3-8B`` matches by its last component; a name that can only be a path, such as
    ``/models/Qwen3-8B``, never does).

    Raises:
        FileNotFoundError: a directory without ``config.json``.
        ValueError: the file is not a JSON object or lacks a field the linear shapes need
            (:func:`check_model_config`: the message names the file and the field), or the name is
            neither an existing path nor an embedded model (the message says that a path-like name
            does not exist, and lists the embedded names).
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no config.json in directory {path}")
        path = path / "config.json"
    if path.is_file():
        return check_model_config(_parse(path.read_text(), str(path)), str(path))
    candidate = embedded_name(str(name_or_path))
    if candidate is None:
        raise ValueError(not_found_message(str(name_or_path)))
    source = f"embedded model {candidate}"
    return check_model_config(_parse(_embedded()[candidate].read_text(), source), source)


def embedded_name(name: str) -> str | None:
    """The embedded model ``name`` names (case-insensitive; an id ``Org/Name`` by its last part; never
    a path-like name), or None."""
    key = name.strip().lower()
    embedded = _embedded()
    for candidate in () if is_path_like(key) else (key, key.rsplit("/", 1)[-1]):
        if candidate in embedded:
            return candidate
    return None


def is_path_like(name: str) -> bool:
    """A name that can only be a path (``/``, ``.`` or ``~`` first, or ``.json`` last): one that does
    not exist is an error, never an embedded model of the same last part."""
    return name.startswith(("/", ".", "~")) or name.endswith(".json")


def path_model_name(path: str) -> str:
    """The short name of a model given as a path: its ``config.json``'s folder, another ``.json``
    file's stem, else the folder's own name (``/runs/qwen2.5-7b/config.json`` -> ``qwen2.5-7b``);
    empty when the path has none (``config.json`` alone)."""
    p = Path(path)
    return p.parent.name if p.name == "config.json" else (p.stem if p.suffix == ".json" else p.name)


def not_found_message(name: str) -> str:
    """Why ``name`` is no model: a path-like one (:func:`is_path_like`, or in a folder that exists) does
    not exist; another (a name, ``Org/Name``) is no embedded model either."""
    parent = Path(name).expanduser().parent
    if is_path_like(name) or (parent.name and parent.is_dir()):
        return f"path {name!r} does not exist"
    names = ", ".join(list_models())
    return f"unknown model {name!r}: no such path, and not an embedded model; embedded models: {names}"


def check_model_config(config: dict[str, Any], source: str) -> dict[str, Any]:
    """``config`` when one decoder layer's linear shapes follow from it (:func:`linear_shapes` at TP 1);
    else ``ValueError("<source>: <what is missing or wrong>")``, e.g. ``"/m/config.json: missing
    field 'intermediate_size' (a positive integer)"``."""
    try:
        linear_shapes(config)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    return config


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{source}: config.json must hold a JSON object, got {type(config).__name__}")
    return config


def _positive_int(config: dict[str, Any], key: str) -> int:
    if key not in config:
        raise ValueError(f"missing field {key!r} (a positive integer)")
    value = config[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"field {key!r} must be a positive integer; got {value!r}")
    return value


def _shard(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise ValueError(f"tensor parallel size {tp} does not divide {what} = {value}")
    return value // tp


def linear_shapes(config: dict[str, Any], tp: int = 1) -> list[LinearShape]:
    """The (N, K) of the qkv, o, gate_up and down linears of one decoder layer on one TP rank.

    Reads ``hidden_size``, ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``
    (default: ``num_attention_heads``) and ``head_dim`` (default: ``hidden_size /
    num_attention_heads``). Sharding and the formulas: see the module docstring. A mixture-of-experts
    model (:func:`is_moe`) without dense MLP layers (:func:`has_dense_mlp`) has qkv and o only.

    Raises:
        ValueError: ``tp`` is not a positive integer; a field is missing or not a positive integer;
            ``tp`` does not divide the query heads or the intermediate size; the kv heads and ``tp``
            divide neither way (vLLM's rule); ``head_dim`` cannot be derived.
    """
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ValueError(f"tensor parallel size must be a positive integer; got {tp!r}")
    hidden = _positive_int(config, "hidden_size")
    intermediate = _positive_int(config, "intermediate_size")
    q = _positive_int(config, "num_attention_heads")
    kv = _positive_int(config, "num_key_value_heads") if "num_key_value_heads" in config else q
    if config.get("head_dim") is not None:
        head_dim = _positive_int(config, "head_dim")
    elif hidden % q == 0:
        head_dim = hidden // q
    else:
        raise ValueError(f"no head_dim, and hidden_size {hidden} is not divisible by {q} heads")
    q_rank = _shard(q, tp, "num_attention_heads")
    if tp <= kv:
        kv_rank = _shard(kv, tp, "num_key_value_heads")
    elif tp % kv == 0:
        kv_rank = 1  # vLLM replicates each kv head over tp / kv ranks
    else:
        raise ValueError(
            f"num_key_value_heads = {kv} and tensor parallel size {tp}: neither divides the other"
        )
    inter_rank = _shard(intermediate, tp, "intermediate_size")
    attention = [
        LinearShape("qkv", (q_rank + 2 * kv_rank) * head_dim, hidden),
        LinearShape("o", hidden, q_rank * head_dim),
    ]
    if is_moe(config) and not has_dense_mlp(config):
        return attention  # every MLP is experts: vLLM's fused-MoE kernels, not a dense linear
    return [
        *attention,
        LinearShape("gate_up", 2 * inter_rank, hidden),
        LinearShape("down", hidden, inter_rank),
    ]


class UnknownLayer(ValueError):
    """A ``--layer`` name the model does not have (:func:`only_layers`)."""


def only_layers(shapes: list[LinearShape], layers: Sequence[str] | None) -> list[LinearShape]:
    """The ``shapes`` (:func:`linear_shapes`) whose ``name`` is in ``layers``, in their order; all of
    them when ``layers`` is None or empty.

    Raises:
        UnknownLayer: a name in ``layers`` that none of ``shapes`` has. The message names it and
            the model's layers; a dense-MLP name (gate_up, down) that a MoE model lacks is said to
            be its experts' layer, which vLLM's fused-MoE kernels run, not a typo.
    """
    if not layers:
        return list(shapes)
    have = [s.name for s in shapes]
    missing = sorted(set(layers) - set(have))
    if missing:
        mlp = [name for name in missing if name in _DENSE_MLP]
        other = [name for name in missing if name not in _DENSE_MLP]
        parts = [f"unknown layer(s) {other}"] if other else []
        if mlp:
            parts.append(
                f"no dense {mlp} in this model (its MLPs are mixture-of-experts, run by vLLM's "
                "fused-MoE kernels, not hl)"
            )
        raise UnknownLayer(f"{'; '.join(parts)}; choose from {have}")
    return [s for s in shapes if s.name in layers]


_DENSE_MLP = ("gate_up", "down")  # linear_shapes' MLP layers, absent from a MoE model without dense MLPs


#: config.json keys that give a mixture-of-experts model's expert count (Qwen-MoE, Mixtral, DeepSeek).
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def is_moe(config: dict[str, Any]) -> bool:
    """Whether the config declares routed experts (any of :data:`MOE_KEYS` > 0)."""
    return any(isinstance(config.get(k), int) and config[k] > 0 for k in MOE_KEYS)


def has_dense_mlp(config: dict[str, Any]) -> bool:
    """Whether a MoE model also has dense MLP layers of ``intermediate_size`` (DeepSeek's
    ``first_k_dense_replace`` > 0, Qwen-MoE's ``mlp_only_layers`` or ``decoder_sparse_step`` > 1);
    a dense model always has."""
    if not is_moe(config):
        return True
    return bool(
        (config.get("first_k_dense_replace") or 0) > 0
        or config.get("mlp_only_layers")
        or (config.get("decoder_sparse_step") or 1) > 1
    )
