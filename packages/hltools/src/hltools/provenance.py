"""Provenance of a tool run: installed versions and the git commit, for result files."""

from __future__ import annotations

import contextlib
import subprocess
from importlib import metadata
from pathlib import Path

DISTS = ("torch", "triton", "helion", "vllm", "hlcore", "hlvllm", "hltools")


def versions() -> dict[str, str]:
    """Installed versions of torch, triton, helion, vLLM and the hl packages (missing ones left out)."""
    out = {}
    for dist in DISTS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def git_commit() -> str | None:
    """HEAD of the checkout this package runs from (None for an installed wheel or without git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
