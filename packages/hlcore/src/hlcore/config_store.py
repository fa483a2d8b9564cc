"""Tuned-config files: ``<config dir>/<kernel>/<gpu>.json`` (the project spec, docs/tuning.md), read, validated, merged, written.

File format (the shape of vLLM's own Helion config files, plus one metadata entry)::

    [
      {"_metadata": {"gpu": "nvidia_h200", "gpu_name": "NVIDIA H200", "helion": "1.5.0",
                     "triton": "3.6.0", "torch": "2.11.0", "command": "hltools autotune ...",
                     "seed": 0, "date": "2026-11-30T12:00:00+00:00", ...}},
      {"key": {}, "config": {...}},
      {"key": {"format": "fp8_dynamic", "k": 4096, "m": 1, "n": 6144},
       "config": {"block_sizes": [16, 64, 128], "num_warps": 4, "split_k": 4, "swap_ab": true, ...},
       "fallback": false}
    ]

* ``_metadata`` is optional (a hand-written file may omit it) and at most once; when present its
  ``gpu`` must be the file's GPU (the file name) or a variant of that family (``nvidia_h100_sxm``
  inside ``nvidia_h100.json``), and its ``helion`` version must be the installed one.
* ``"key": {}`` is the default entry (used for any shape that has no tuned neighbour).
* Key values are ints or strings; the scaled GEMM's keys are ``{"format", "n", "k", "m"}``
  (:func:`scaled_mm_key`). At most one entry per key.
* ``config`` is a ``helion.Config`` as a dict (``json.loads(config.to_json())``).
* ``fallback: true`` marks a key whose tuned config lost to vLLM's kernel: dispatch keeps vLLM's
  kernel there. ``block_scale_a`` (optional, block formats): the layout of ``scale_a`` the config
  and its mark were measured on, one of :data:`BLOCK_SCALE_A_LAYOUTS`; absent means ``"row"``
  (row-major ``[M, K // 128]``); ``"tma"`` is vLLM's column-major, TMA-padded layout (what
  hlvllm's capture mode hands the GEMM). An entry may hold ``stats`` (what the tuner measured, informative only); shipped
  files keep them in a *stats sidecar* instead (below).

Stats sidecar (:func:`save_stats_file`, :func:`read_stats_file`): the per-key measurements behind
a config file's entries, kept beside the benchmark results rather than in the file the wheel ships,
keyed the same way: ``[{"_metadata": {...}}, {"key": {...}, "stats": {...}}, ...]``, written like a
config file (sorted, atomic, merged). Nothing reads it at run time.

Loading at run time (:func:`load_config_file`) never raises: a file that is not JSON, has the wrong
shape, or whose metadata names another GPU or helion version is rejected with ONE ``logging``
warning naming the file and the reason, and the caller goes on as if it did not exist.
:func:`read_config_file` is the strict reader (raises :class:`ConfigFileError`).

Writing (:func:`save_config_file`): merged with the file already there (new entries replace the
same keys, new metadata fields replace old ones), entries sorted by key after the metadata, JSON
with sorted keys, indent 2 and a trailing newline, written to a temporary file in the same
directory and moved into place with ``os.replace`` (readers never see a partial file).

GPU names are canonical (:func:`canonical_gpu_name`): ``"NVIDIA H200"`` -> ``nvidia_h200``,
``"NVIDIA H100 80GB HBM3"`` -> ``nvidia_h100_sxm``, ``"NVIDIA H100 PCIe"`` -> ``nvidia_h100_pcie``;
lookups try the exact variant first, then the family (:func:`gpu_name_candidates`). The names a tool
accepts (:func:`known_gpu_names`): those of the SM90 GPUs (:data:`SM90_DEVICE_NAMES`) and of the config
files that exist.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

METADATA = "_metadata"
SCALED_MM_KERNEL = "scaled_mm"
KeyValue = int | str
KeyId = tuple[tuple[str, KeyValue], ...]


class ConfigFileError(ValueError):
    """A config file that cannot be used; the message names the file and the reason."""


# --------------------------------------------------------------------------------------------
# GPU names
# --------------------------------------------------------------------------------------------
_VARIANTS = ("sxm", "pcie", "nvl")


def canonical_gpu_name(raw: str) -> str:
    """Lower-case, ``_``-separated GPU name without memory sizes, e.g. ``"NVIDIA H200"`` ->
    ``"nvidia_h200"``, ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia_h100_sxm"`` (the HBM3 H100 is the
    SXM part), ``"NVIDIA H100 PCIe"`` -> ``"nvidia_h100_pcie"``, ``"NVIDIA A100-SXM4-80GB"`` ->
    ``"nvidia_a100_sxm"``. Raises ``ValueError`` for an empty name."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", str(raw).strip().lower()) if t]
    if not tokens:
        raise ValueError(f"canonical_gpu_name: empty GPU name {raw!r}")
    out: list[str] = []
    hbm = False
    for t in tokens:
        if re.fullmatch(r"\d+gb", t):
            continue
        if re.fullmatch(r"hbm\d*e?", t):
            hbm = True
            continue
        if re.fullmatch(r"sxm\d*", t):
            t = "sxm"
        if t not in out:
            out.append(t)
    if hbm and len(out) == 2 and out[0] == "nvidia" and out[1] == "h100":
        out.append("sxm")  # "NVIDIA H100 80GB HBM3": the SXM board (the PCIe one says PCIe)
    return "_".join(out)


def gpu_name_candidates(gpu: str) -> list[str]:
    """Names to look up for ``gpu`` (raw or canonical), exact variant first, then the family:
    ``nvidia_h100_sxm`` -> ``["nvidia_h100_sxm", "nvidia_h100"]``; ``nvidia_h200`` ->
    ``["nvidia_h200"]``."""
    name = canonical_gpu_name(gpu)
    parts = name.split("_")
    out = [name]
    if len(parts) > 1 and parts[-1] in _VARIANTS:
        out.append("_".join(parts[:-1]))
    return out


#: CUDA device names (as ``torch.cuda.get_device_name`` reports them) of the SM90 GPUs, the only ones
#: hlvllm's kernels run on (``hlvllm.support``); :func:`known_gpu_names` gives their canonical names.
SM90_DEVICE_NAMES = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA H200",
    "NVIDIA H200 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA H800",
    "NVIDIA H20",
)


def known_gpu_names(roots: Iterable[str | os.PathLike] = (), kernel: str | None = None) -> list[str]:
    """The GPU names a config file may be named after, sorted: the canonical names (and families,
    :func:`gpu_name_candidates`) of :data:`SM90_DEVICE_NAMES`, and the names of the config files
    ``<root>/<kernel>/<gpu>.json`` under each of ``roots`` (every kernel's when ``kernel`` is None;
    stats sidecars, ``<gpu>.stats.json``, left out)."""
    names = {n for raw in SM90_DEVICE_NAMES for n in gpu_name_candidates(raw)}
    for root in roots:
        pattern = f"{kernel}/*.json" if kernel else "*/*.json"
        names |= {p.stem for p in Path(root).glob(pattern) if p.is_file() and "." not in p.stem}
    return sorted(names)


@functools.cache
def _device_gpu_name(index: int) -> str:
    import torch

    return canonical_gpu_name(torch.cuda.get_device_name(index))


def current_gpu_name(device: Any = None) -> str | None:
    """Canonical name of ``device`` (a CUDA ``torch.device``, or the current CUDA device when None),
    or None when that is not a CUDA device or no CUDA GPU is available. Cached per device index."""
    import torch

    if device is not None:
        device = torch.device(device)
        if device.type != "cuda":
            return None
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device() if device is None or device.index is None else device.index
    return _device_gpu_name(index)


# --------------------------------------------------------------------------------------------
# Entries and files
# --------------------------------------------------------------------------------------------
def key_id(key: Mapping[str, KeyValue]) -> KeyId:
    """Hashable, ordered form of a key dict (sorted by name)."""
    return tuple(sorted(key.items()))


#: Layouts of a block format's ``scale_a`` an entry's measurements may name (``block_scale_a``).
BLOCK_SCALE_A_LAYOUTS = ("row", "tma")


def scaled_mm_key(fmt: str, n: int, k: int, m: int) -> dict[str, KeyValue]:
    """The key of one tuned scaled GEMM shape: ``{"format": fmt, "n": N, "k": K, "m": M}``."""
    return {"format": fmt, "n": int(n), "k": int(k), "m": int(m)}


@dataclass(frozen=True)
class ConfigEntry:
    """One ``{"key": ..., "config": ..., "fallback": ..., "block_scale_a": ..., "stats": ...}`` item
    of a config file (fields: module docstring)."""

    key: dict[str, KeyValue]
    config: dict[str, Any]
    fallback: bool = False
    stats: dict[str, Any] = field(default_factory=dict)
    block_scale_a: str = "row"

    @property
    def id(self) -> KeyId:
        return key_id(self.key)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": dict(self.key), "config": dict(self.config)}
        if self.fallback:
            out["fallback"] = True
        if self.block_scale_a != "row":
            out["block_scale_a"] = self.block_scale_a
        if self.stats:
            out["stats"] = dict(self.stats)
        return out


@dataclass
class ConfigFile:
    """A parsed config file: its metadata (``{}`` if none) and entries by key."""

    path: Path | None
    metadata: dict[str, Any]
    entries: dict[KeyId, ConfigEntry]

    def get(self, key: Mapping[str, KeyValue]) -> ConfigEntry | None:
        return self.entries.get(key_id(key))

    @property
    def default(self) -> ConfigEntry | None:
        """The ``"key": {}`` entry, if the file has one."""
        return self.entries.get(())

    def to_json(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = [{METADATA: dict(self.metadata)}] if self.metadata else []
        items += [self.entries[i].to_json() for i in sorted(self.entries, key=_sort_key)]
        return items


def _sort_key(kid: KeyId) -> tuple:
    # ints before strings within a field, so that n/k/m sort numerically (1, 2, 4, ..., 32)
    return tuple((name, (0, v, "") if isinstance(v, int) else (1, 0, str(v))) for name, v in kid)


def _is_key_value(v: object) -> bool:
    return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))


def parse_config_json(data: object, source: str = "<config>") -> ConfigFile:
    """Validate the parsed JSON of a config file (format: module docstring).

    Raises:
        ConfigFileError: not a list; an item that is neither ``{"_metadata": {...}}`` nor
            ``{"key": {...}, "config": {...}}`` (optional ``fallback`` bool, ``block_scale_a`` one of
            :data:`BLOCK_SCALE_A_LAYOUTS`, ``stats`` object); a key value that is not an int or a string; two metadata items; a duplicate key.
    """

    def bad(reason: str) -> ConfigFileError:
        return ConfigFileError(f"{source}: {reason}")

    if not isinstance(data, list):
        raise bad(f"expected a JSON list of entries, got {type(data).__name__}")
    metadata: dict[str, Any] | None = None
    entries: dict[KeyId, ConfigEntry] = {}
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise bad(f"entry {i} is {type(item).__name__}, not an object")
        if METADATA in item:
            if set(item) != {METADATA} or not isinstance(item[METADATA], dict):
                raise bad(f'entry {i}: "_metadata" must be the only field and an object')
            if metadata is not None:
                raise bad(f'entry {i}: a second "_metadata" entry')
            metadata = dict(item[METADATA])
            continue
        extra = set(item) - {"key", "config", "fallback", "block_scale_a", "stats"}
        if extra or "key" not in item or "config" not in item:
            raise bad(
                f'entry {i} must be {{"key": {{...}}, "config": {{...}}}} (optional "fallback", '
                f'"block_scale_a", "stats"); '
                f"got fields {sorted(item)}"
            )
        key, config = item["key"], item["config"]
        if not isinstance(key, dict) or not all(
            isinstance(n, str) and _is_key_value(v) for n, v in key.items()
        ):
            raise bad(f"entry {i}: key must be an object of int or string values; got {key!r}")
        if not isinstance(config, dict):
            raise bad(f"entry {i}: config must be an object; got {type(config).__name__}")
        fallback = item.get("fallback", False)
        if not isinstance(fallback, bool):
            raise bad(f"entry {i}: fallback must be true or false; got {fallback!r}")
        stats = item.get("stats", {})
        if not isinstance(stats, dict):
            raise bad(f"entry {i}: stats must be an object; got {type(stats).__name__}")
        layout = item.get("block_scale_a", "row")
        if layout not in BLOCK_SCALE_A_LAYOUTS:
            raise bad(f"entry {i}: block_scale_a must be one of {BLOCK_SCALE_A_LAYOUTS}; got {layout!r}")
        entry = ConfigEntry(dict(key), dict(config), fallback, dict(stats), layout)
        if entry.id in entries:
            raise bad(f"entry {i}: duplicate key {key!r}")
        entries[entry.id] = entry
    return ConfigFile(None, metadata or {}, entries)


def read_config_file(path: str | os.PathLike) -> ConfigFile:
    """Strictly read one config file (no metadata checks). Raises :class:`ConfigFileError`
    (unreadable, not JSON, wrong shape) naming the file; ``FileNotFoundError`` if it is missing."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"{path}: not valid JSON ({exc})") from None
    cf = parse_config_json(data, str(path))
    cf.path = path
    return cf


def installed_helion_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("helion")
    except metadata.PackageNotFoundError:
        return None


def metadata_mismatch(metadata: Mapping[str, Any], gpu: str | None, helion_version: str | None) -> str | None:
    """Why a file with ``metadata`` does not fit ``gpu`` (the file's canonical GPU name) and the
    installed ``helion_version``, or None when it fits (missing fields are not checked)."""
    file_gpu = metadata.get("gpu")
    if gpu is not None and file_gpu is not None:
        fits = isinstance(file_gpu, str) and (file_gpu == gpu or file_gpu.startswith(gpu + "_"))
        if not fits:
            return f"tuned on GPU {file_gpu!r}, not {gpu!r}"
    file_helion = metadata.get("helion")
    if helion_version is not None and file_helion is not None and file_helion != helion_version:
        return f"tuned with helion {file_helion}, installed helion is {helion_version}"
    return None


_FIX = (
    "; treated as no file: hlvllm runs vLLM's kernel, hlcore.scaled_mm the heuristic configs (regenerate "
    "the file with `hltools configs from-bench` or "
    "`hltools autotune`, or set HL_CONFIG_DIR to a directory of good files)"
)


def load_config_file(
    path: str | os.PathLike, *, gpu: str | None = None, helion_version: str | None = None
) -> ConfigFile | None:
    """Read ``path`` for use at run time, or None (after ONE warning naming the file and why) when
    it is unreadable, malformed, or its metadata names another GPU or helion version.

    ``gpu`` defaults to the file name (``nvidia_h200.json`` -> ``nvidia_h200``); ``helion_version``
    to the installed helion's. A missing file returns None without a warning. Never raises."""
    path = Path(path)
    try:
        cf = read_config_file(path)
    except FileNotFoundError:
        return None
    except ConfigFileError as exc:
        logger.warning("hl: ignoring tuned-config file %s" + _FIX, exc)
        return None
    except Exception as exc:  # never fail a model run because of a config file
        logger.warning("hl: ignoring tuned-config file %s: %s: %s" + _FIX, path, type(exc).__name__, exc)
        return None
    reason = metadata_mismatch(
        cf.metadata,
        gpu if gpu is not None else path.stem,
        helion_version if helion_version is not None else installed_helion_version(),
    )
    if reason:
        logger.warning("hl: ignoring tuned-config file %s: %s" + _FIX, path, reason)
        return None
    return cf


def config_file_path(kernel: str, gpu: str, root: str | os.PathLike | None = None) -> Path:
    """``<root>/<kernel>/<canonical gpu>.json``; ``root`` defaults to :func:`hlcore.configs.config_dir`."""
    if root is None:
        from hlcore.configs import config_dir

        root = config_dir()
    return Path(root) / kernel / f"{canonical_gpu_name(gpu)}.json"


def find_configs(kernel: str, gpu: str, root: str | os.PathLike | None = None) -> ConfigFile | None:
    """The first usable file among :func:`gpu_name_candidates` (exact variant, then family) for
    ``kernel`` under ``root``; None if there is none (each rejected file warned about once)."""
    for name in gpu_name_candidates(gpu):
        cf = load_config_file(config_file_path(kernel, name, root), gpu=name)
        if cf is not None:
            return cf
    return None


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------
def write_json_atomic(path: str | os.PathLike, data: object, *, allow_nan: bool = False) -> None:
    """Write ``data`` as JSON (sorted keys, indent 2, trailing newline) with :func:`write_text_atomic`;
    NaN/inf raise ``ValueError`` unless ``allow_nan``."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=allow_nan) + "\n")


@functools.cache
def new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file in this process (``0o666`` less the umask):
    ``tempfile.mkstemp`` creates its files ``0o600``, and a file moved into place from one must be
    readable by whoever could read a plainly written one (a config directory written by one user
    and read by a server running as another). The umask is read from ``/proc/self/status`` where
    there is one (setting it to read it back would briefly change it for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8, no newline translation) to a temporary file beside ``path``, then ``os.replace``
    it into place with the mode a plainly written file would have (:func:`new_file_mode`); on any
    error the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_config_file(
    path: str | os.PathLike,
    entries: Iterable[ConfigEntry],
    metadata: Mapping[str, Any] | None = None,
    *,
    merge: bool = True,
    drop_metadata: Iterable[str] = (),
) -> ConfigFile:
    """Write ``entries`` (and ``metadata``) to ``path``, merged into the file already there unless
    ``merge`` is False: same keys are replaced, other keys kept, metadata fields updated (the
    file's fields named in ``drop_metadata`` are removed first: only ``metadata``'s own stay).

    Raises :class:`ConfigFileError` when merging into an existing file that is not a valid config
    file (it is left untouched rather than overwritten). Returns what was written."""
    path = Path(path)
    current = ConfigFile(path, {}, {})
    if merge and path.exists():
        current = read_config_file(path)
        current.path = path
    for entry in entries:
        current.entries[entry.id] = entry
    for name in drop_metadata:
        current.metadata.pop(name, None)
    if metadata:
        current.metadata.update(metadata)
    data = current.to_json()
    parse_config_json(data, str(path))  # never write a file the reader would reject
    write_json_atomic(path, data)
    return current


# --------------------------------------------------------------------------------------------
# Stats sidecar: the measurements behind a config file's entries, beside the benchmark results
# --------------------------------------------------------------------------------------------
STATS_SUFFIX = ".stats.json"
KeyStats = dict[KeyId, dict[str, Any]]


def stats_file_path(kernel: str, gpu: str, root: str | os.PathLike) -> Path:
    """``<root>/<kernel>/<canonical gpu>.stats.json``: the stats sidecar of the config file
    ``<config dir>/<kernel>/<gpu>.json``."""
    return Path(root) / kernel / f"{canonical_gpu_name(gpu)}{STATS_SUFFIX}"


def parse_stats_json(data: object, source: str = "<stats>") -> tuple[dict[str, Any], KeyStats]:
    """``(metadata, stats by key id)`` of a parsed stats sidecar. Raises :class:`ConfigFileError`
    naming ``source``: not a list, an item that is neither ``{"_metadata": {...}}`` nor ``{"key":
    {...}, "stats": {...}}``, a key value that is not an int or a string, a duplicate key."""
    if not isinstance(data, list):
        raise ConfigFileError(f"{source}: expected a JSON list of entries, got {type(data).__name__}")
    metadata: dict[str, Any] = {}
    stats: KeyStats = {}
    for i, item in enumerate(data):
        if isinstance(item, dict) and set(item) == {METADATA} and isinstance(item[METADATA], dict):
            metadata = dict(item[METADATA])
            continue
        if not (isinstance(item, dict) and set(item) == {"key", "stats"} and isinstance(item["stats"], dict)):
            raise ConfigFileError(
                f'{source}: entry {i} must be {{"key": {{...}}, "stats": {{...}}}}; got {item!r:.200}'
            )
        key = item["key"]
        if not isinstance(key, dict) or not all(
            isinstance(n, str) and _is_key_value(v) for n, v in key.items()
        ):
            raise ConfigFileError(
                f"{source}: entry {i}: key must be an object of int or string values; got {key!r}"
            )
        if key_id(key) in stats:
            raise ConfigFileError(f"{source}: entry {i}: duplicate key {key!r}")
        stats[key_id(key)] = dict(item["stats"])
    return metadata, stats


def read_stats_file(path: str | os.PathLike) -> tuple[dict[str, Any], KeyStats]:
    """Strictly read a stats sidecar (:func:`parse_stats_json`); ``FileNotFoundError`` if missing,
    :class:`ConfigFileError` naming the file when it is not valid JSON or has the wrong shape."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"{path}: not valid JSON ({exc})") from None
    return parse_stats_json(data, str(path))


def save_stats_file(
    path: str | os.PathLike,
    stats: Mapping[KeyId, Mapping[str, Any]],
    metadata: Mapping[str, Any] | None = None,
    *,
    merge: bool = True,
) -> KeyStats:
    """Write ``stats`` (key id -> measurements) and ``metadata`` to the sidecar ``path``, merged into
    the file already there unless ``merge`` is False (same keys replaced, metadata fields updated);
    sorted by key like a config file, atomically. Raises :class:`ConfigFileError` when merging into
    a file that is not a valid sidecar (left untouched). Returns every key's stats written."""
    path = Path(path)
    current_meta: dict[str, Any] = {}
    current: KeyStats = {}
    if merge and path.exists():
        current_meta, current = read_stats_file(path)
    current.update({kid: dict(v) for kid, v in stats.items()})
    current_meta.update(metadata or {})
    items: list[dict[str, Any]] = [{METADATA: current_meta}] if current_meta else []
    items += [{"key": dict(kid), "stats": current[kid]} for kid in sorted(current, key=_sort_key)]
    write_json_atomic(path, items)
    return current
