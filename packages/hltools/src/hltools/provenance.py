"""Provenance of a tool run: installed versions and the git commit, for result files; which files
git tracks (`bench report` writes over none of them)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterable
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
    """HEAD of the checkout this package runs from; for an installed wheel (no checkout) the
    ``HL_COMMIT`` environment variable (``lab/scripts/setup.sh`` sets it from ``dist/COMMIT``, written
    when the wheels are built); None when neither says."""
    import os

    env = os.environ.get("HL_COMMIT", "").strip() or None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return env
    return (out.stdout.strip() or env) if out.returncode == 0 else env


def tracked_by_git(paths: Iterable[Path]) -> list[Path]:
    """The ``paths`` that exist and that git tracks (committed or staged) in the checkout holding
    them; [] outside a checkout or without git."""
    by_folder: dict[Path, list[str]] = {}
    for p in paths:
        if Path(p).is_file():
            by_folder.setdefault(Path(p).parent, []).append(Path(p).name)
    tracked = []
    for folder, names in by_folder.items():
        try:
            out = subprocess.run(
                ["git", "ls-files", "-z", "--", *names],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            tracked += [folder / name for name in out.stdout.split("\0") if name]
    return tracked
