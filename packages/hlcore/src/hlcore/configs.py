"""Where the tuned kernel configs live: ``<config dir>/<kernel>/<gpu>.json`` (docs/tuning.md).

:func:`config_dir` answers, in this order:

1. ``HL_CONFIG_DIR`` when set and non-empty: a directory of the same layout (e.g. what
   ``hltools autotune`` wrote for the user's own model and GPU), returned as given (``~`` expanded)
   even if it does not exist yet, so that a tool can create it;
2. ``hlcore/configs/`` beside this module: the repo-root ``configs/`` copied into the wheel at build
   time (``packages/hlcore/hatch_build.py``), i.e. an installed, non-editable hlcore;
3. the repo-root ``configs/`` of a development checkout (editable install: (2) does not exist).

The data folder ``hlcore/configs/`` has no ``__init__.py``: this module, ``hlcore/configs.py``, wins
the import over that namespace-package portion (PEP 420), so the two names do not clash.
Nothing is cached: the environment variable is read on every call.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "HL_CONFIG_DIR"

_HERE = Path(__file__).resolve().parent
PACKAGED_CONFIG_DIR = _HERE / "configs"


def _checkout_config_dir() -> Path | None:
    """``<repo>/configs`` when this file is ``<repo>/packages/hlcore/src/hlcore/configs.py``."""
    parents = Path(__file__).resolve().parents
    if len(parents) < 5 or parents[2].name != "hlcore" or parents[3].name != "packages":
        return None
    candidate = parents[4] / "configs"
    return candidate if candidate.is_dir() else None


def config_dir() -> Path:
    """The directory holding ``<kernel>/<gpu>.json`` tuned configs (lookup order: module docstring).

    Returns the packaged ``hlcore/configs`` path when nothing is found (then it does not exist and
    :func:`list_config_files` returns ``[]``: every shape uses the default config)."""
    raw = os.environ.get(ENV_VAR, "").strip()
    return Path(raw).expanduser() if raw else shipped_config_dir()


def shipped_config_dir() -> Path:
    """The configs that ship with hlcore, whatever ``HL_CONFIG_DIR`` says: steps 2 and 3 of the
    lookup order (the packaged path, absent, when neither exists)."""
    if PACKAGED_CONFIG_DIR.is_dir():
        return PACKAGED_CONFIG_DIR
    return _checkout_config_dir() or PACKAGED_CONFIG_DIR


def list_config_files(kernel: str | None = None) -> list[Path]:
    """The ``<kernel>/<gpu>.json`` files under :func:`config_dir`, sorted; only ``kernel``'s if given.

    Raises ``ValueError`` when ``HL_CONFIG_DIR`` names something that is not a directory (a typo
    there would otherwise silently fall back to untuned defaults)."""
    root = config_dir()
    if not root.is_dir():
        if os.environ.get(ENV_VAR, "").strip():
            raise ValueError(f"{ENV_VAR}={str(root)!r} is not a directory")
        return []
    pattern = f"{kernel}/*.json" if kernel else "*/*.json"
    return sorted(p for p in root.glob(pattern) if p.is_file() and "." not in p.stem)
