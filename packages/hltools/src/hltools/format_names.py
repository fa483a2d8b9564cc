"""The quantized formats hltools handles, and the check of a format name, in one place.

The names are hlcore's (:data:`hlcore.scaled_mm_config.SCALED_MM_FORMATS`). This module holds no
facts about the formats (dtypes, block size, vLLM's quantization config, bytes moved, reference
quantizer): those stay where they are used until hlcore's format registry holds them, and then this
helper forwards to it.
"""

from __future__ import annotations

from collections.abc import Iterable

from hlcore.scaled_mm_config import SCALED_MM_FORMATS

FORMATS: tuple[str, ...] = tuple(SCALED_MM_FORMATS)


def _canonical(name: str) -> str:
    spelled = name.strip().lower().replace("-", "_")
    return spelled if spelled in FORMATS else name


def check_formats(names: Iterable[str]) -> list[str]:
    """``names`` in order, each once, spelled as :data:`FORMATS` (any case, ``-`` for ``_``: the
    prose's ``FP8_Dynamic`` and ``fp8-dynamic`` are ``fp8_dynamic``). Raises ``ValueError`` naming the
    unknown ones and the known ones."""
    names = list(dict.fromkeys(_canonical(n) for n in names))
    unknown = [f for f in names if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format(s) {unknown}; choose from {list(FORMATS)}")
    return names
