"""Default (untuned) configs for :mod:`hlcore.scaled_mm`.

Tuned per-shape configs come from ``hltools autotune`` and are chosen by :func:`pick_scaled_mm_config`
(rules in its docstring and docs/tuning.md); until a shape has one, this heuristic gives a config
that is valid for every (M, N, K) and reasonable at decode sizes on an H100/H200:

* M <= 64 (decode): ``swap_ab`` so N fills the MMA's 64-row side and M (padded to 16) the narrow
  side; ``block_n = 64``, ``block_m = 16`` (or 32/64 for larger M);
* ``split_k``: the smallest power of two that gives at least ~2 programs per SM (132 SMs on H200),
  while each K chunk keeps at least 2 K tiles;
* ``block_k = 128`` (fp8: 128 bytes per row per stage), ``num_stages = 4``, ``num_warps = 4``.

Rule of thumb from the Helion reference notes: an untuned config is several times slower than a
tuned one; this heuristic only avoids the pathological default (one program per 16x16 tile).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hlcore.config_store import (
    SCALED_MM_KERNEL,
    ConfigEntry,
    ConfigFile,
    canonical_gpu_name,
    config_file_path,
    current_gpu_name,
    find_configs,
    gpu_name_candidates,
)
from hlcore.formats import FORMAT_NAMES, get_format

logger = logging.getLogger(__name__)

NUM_SMS_H200 = 132


def _next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def default_scaled_mm_config(m: int, n: int, k: int, *, num_sms: int = NUM_SMS_H200) -> dict:
    """A valid ``helion.Config`` dict for the scaled GEMM at ``[M, K] x [K, N]``."""
    if m <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"default_scaled_mm_config: M, N, K must be positive; got {(m, n, k)}")
    block_m = min(64, max(16, _next_pow2(m)))
    block_n = 64 if n >= 64 else max(16, _next_pow2(n))
    block_k = min(128, max(32, _next_pow2(k)))
    tiles = math.ceil(m / block_m) * math.ceil(n / block_n)
    split_k = 1
    while tiles * split_k < 2 * num_sms and k // (split_k * 2) >= 2 * block_k and split_k < 256:
        split_k *= 2
    return {
        "block_sizes": [block_m, block_n, block_k],
        "num_warps": 4,
        "num_stages": 4 if k // split_k >= 4 * block_k else 2,
        "split_k": split_k,
        "swap_ab": m <= 64,
    }


# --------------------------------------------------------------------------------------------
# Validity predicate (used by the picker, the tuner and tests)
# --------------------------------------------------------------------------------------------
def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_pow2(v: object) -> bool:
    return _is_int(v) and v > 0 and (v & (v - 1)) == 0


#: Knobs the kernel no longer has (removed with their kernel branches; git keeps them): a config
#: that sets one is invalid, so a file holding it is skipped with the picker's one warning.
#: ``_triton_config_launch_pdl`` (Helion's key for Triton's ``launch_pdl``, what ``pdl`` became in
#: autotuned configs) would launch the kernel early with no ``griddepcontrol.wait`` to order it.
REMOVED_KNOBS = ("pdl", "split_k_workspace", "_triton_config_launch_pdl")


def check_scaled_mm_config(config: Mapping[str, Any]) -> str | None:
    """Why ``config`` cannot be a scaled GEMM config, or None when it can.

    Checks what we pick (not Helion's own fields): ``block_sizes`` = ``[block_m, block_n,
    block_k]`` powers of two, ``split_k`` a power of two in 1..256, ``swap_ab`` and
    ``prefetch_scales`` bools,
    ``num_warps`` a power of two, ``num_stages`` a positive int (each optional except
    ``block_sizes``), and none of the removed knobs :data:`REMOVED_KNOBS`."""
    if not isinstance(config, Mapping):
        return f"config must be an object, got {type(config).__name__}"
    removed = [k for k in REMOVED_KNOBS if k in config]
    if removed:
        return f"{', '.join(removed)}: no longer a scaled_mm knob (the kernel has no such branch); remove it"
    bs = config.get("block_sizes")
    if not isinstance(bs, list) or len(bs) != 3 or not all(_is_pow2(b) for b in bs):
        return f"block_sizes must be 3 powers of two [block_m, block_n, block_k]; got {bs!r}"
    split_k = config.get("split_k", 1)
    if not _is_pow2(split_k) or split_k > 256:
        return f"split_k must be a power of two in 1..256; got {split_k!r}"
    for knob in ("swap_ab", "prefetch_scales"):
        if not isinstance(config.get(knob, False), bool):
            return f"{knob} must be true or false; got {config.get(knob)!r}"
    if not _is_pow2(config.get("num_warps", 4)):
        return f"num_warps must be a power of two; got {config.get('num_warps')!r}"
    stages = config.get("num_stages", 1)
    if not _is_int(stages) or stages < 1:
        return f"num_stages must be a positive integer; got {stages!r}"
    return None


# --------------------------------------------------------------------------------------------
# Picker: tuned configs (configs/scaled_mm/<gpu>.json) -> heuristic
# --------------------------------------------------------------------------------------------
SCALED_MM_FORMATS = FORMAT_NAMES  # the registry's names (hlcore.formats)
_KEY_FIELDS = frozenset(("format", "n", "k", "m"))
TUNE_COMMAND = f"hltools autotune --model <model> --formats {','.join(FORMAT_NAMES)}"


@dataclass(frozen=True)
class ScaledMMConfigPick:
    """The config :func:`pick_scaled_mm_config` chose and where it came from.

    ``source``: ``"exact"`` (the tuned key itself), ``"same_shape"`` (this N, K at another tuned
    M), ``"nearest"`` (the nearest tuned K, then N), ``"default"`` (the file's ``"key": {}``
    entry) or ``"heuristic"`` (:func:`default_scaled_mm_config`: no GPU, no file, nothing usable).
    ``fallback``: the chosen entry is marked as slower than vLLM's kernel (dispatch should use
    vLLM's kernel for this shape). ``key``: the chosen entry's key, ``path``: its file (for a
    ``"heuristic"`` pick: the GPU's file that had no usable entry, None when it has no file).
    ``gpu``: the canonical GPU name the pick was made for (None: no GPU, e.g. the CPU interpreters).
    ``block_scale_a``: the ``scale_a`` layout the chosen entry was measured on (``"row"`` unless the
    entry says otherwise, :mod:`hlcore.config_store`)."""

    config_json: str
    source: str
    key: tuple[tuple[str, int | str], ...] | None = None
    fallback: bool = False
    path: str | None = None
    gpu: str | None = None
    block_scale_a: str = "row"

    @property
    def config(self) -> dict[str, Any]:
        """The config as a new dict (callers may change it; the memoised pick stays intact)."""
        return json.loads(self.config_json)


def select_scaled_mm_entry(entries: Iterable[ConfigEntry], fmt: str, m: int, n: int, k: int):
    """The tuned entry for ``(fmt, M, N, K)`` by the picker's rules, as ``(entry, source)``; ``(None,
    None)`` when no entry of ``fmt`` exists (the default entry is the caller's next step).

    Rules: the exact key; else the nearest tuned K (smallest ``|K' - K|``, ties to the smaller),
    then among those the nearest N (same rule); at that (N', K') the smallest tuned M' >= M, else
    the largest M'. Entries whose key is not ``{"format", "n", "k", "m"}`` with int n/k/m are
    ignored here."""
    tuned = [
        e
        for e in entries
        if set(e.key) == _KEY_FIELDS
        and e.key["format"] == fmt
        and all(_is_int(e.key[f]) for f in ("n", "k", "m"))
    ]
    if not tuned:
        return None, None
    best_k = min({e.key["k"] for e in tuned}, key=lambda v: (abs(v - k), v))
    tuned = [e for e in tuned if e.key["k"] == best_k]
    best_n = min({e.key["n"] for e in tuned}, key=lambda v: (abs(v - n), v))
    tuned = [e for e in tuned if e.key["n"] == best_n]
    ms = sorted(e.key["m"] for e in tuned)
    best_m = next((v for v in ms if v >= m), ms[-1])
    entry = next(e for e in tuned if e.key["m"] == best_m)
    if (best_n, best_k) != (n, k):
        return entry, "nearest"
    return entry, "exact" if best_m == m else "same_shape"


@functools.lru_cache(maxsize=64)
def _scaled_mm_configs(gpu: str, root: str) -> ConfigFile | None:
    """The usable tuned file for ``gpu`` under ``root`` with invalid entries dropped (one warning
    per problem, once per process thanks to the cache)."""
    cf = find_configs(SCALED_MM_KERNEL, gpu, root)
    if cf is None:
        files = [config_file_path(SCALED_MM_KERNEL, g, root) for g in gpu_name_candidates(gpu)]
        if not any(f.exists() for f in files):
            logger.warning(
                "hl: no tuned scaled_mm configs for GPU %s (looked for %s): hlvllm runs vLLM's kernel for "
                "every GEMM shape (HL_UNTUNED_SHAPES=heuristic: Helion's untuned default config), "
                "hlcore.scaled_mm the heuristic default config; tune them with `%s` (HL_CONFIG_DIR=<its --output>)",
                gpu,
                ", ".join(str(f) for f in files),
                TUNE_COMMAND,
            )
        return None
    bad = {i: r for i, e in cf.entries.items() if (r := check_scaled_mm_config(e.config))}
    if bad:
        first = next(iter(bad))
        logger.warning(
            "hl: %s: ignoring %d scaled_mm entries with an invalid config (e.g. key %s: %s)",
            cf.path,
            len(bad),
            dict(first),
            bad[first],
        )
        cf = ConfigFile(cf.path, cf.metadata, {i: e for i, e in cf.entries.items() if i not in bad})
    return cf


@functools.lru_cache(maxsize=8192)
def _pick(fmt: str, m: int, n: int, k: int, gpu: str | None, root: str) -> ScaledMMConfigPick:
    cf = _scaled_mm_configs(gpu, root) if gpu is not None else None
    if cf is not None:
        entry, source = select_scaled_mm_entry(cf.entries.values(), fmt, m, n, k)
        if entry is None and cf.default is not None:
            entry, source = cf.default, "default"
        if entry is not None:
            config_json = json.dumps(entry.config, sort_keys=True)
            return ScaledMMConfigPick(
                config_json, source, entry.id, entry.fallback, str(cf.path), gpu, entry.block_scale_a
            )
    config_json = json.dumps(default_scaled_mm_config(m, n, k), sort_keys=True)
    return ScaledMMConfigPick(
        config_json, "heuristic", path=str(cf.path) if cf is not None else None, gpu=gpu
    )


def pick_scaled_mm_config(
    fmt: str, m: int, n: int, k: int, *, gpu: str | None = None, device: Any = None
) -> ScaledMMConfigPick:
    """The config for the scaled GEMM ``fmt`` at ``[M, K] x [K, N]`` on this GPU.

    Order: the tuned key (``configs/scaled_mm/<gpu>.json`` under :func:`hlcore.configs.config_dir`,
    exact GPU variant first, then its family) -> the nearest tuned K, then N, at the smallest tuned
    M >= ``m`` (else the largest) -> the file's default entry -> :func:`default_scaled_mm_config`.

    ``gpu``: a GPU name (canonicalised); when None, the canonical name of ``device`` (a CPU device
    gives None) or of the current CUDA device; no GPU -> the heuristic. Never raises for a bad or
    missing file (one warning instead); raises ``ValueError`` for an unknown ``fmt`` or M, N, K < 1.
    Memoised on (fmt, M, N, K, GPU, config dir): plain ints and strings, never tensors;
    :func:`clear_scaled_mm_config_cache` forgets (tests, a changed ``HL_CONFIG_DIR``)."""
    get_format(fmt, "pick_scaled_mm_config")
    gpu = current_gpu_name(device) if gpu is None else canonical_gpu_name(gpu)
    from hlcore.configs import config_dir

    return _pick(fmt, int(m), int(n), int(k), gpu, str(config_dir()))


def clear_scaled_mm_config_cache() -> None:
    """Forget memoised picks and loaded files."""
    _pick.cache_clear()
    _scaled_mm_configs.cache_clear()
