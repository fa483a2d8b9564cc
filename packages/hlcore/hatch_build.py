"""Hatch build hook: put the repo-root ``configs/`` inside the hlcore wheel as ``hlcore/configs/``.

Two ways a wheel gets built, one result:

* from the source tree (``uv build --wheel``, ``pip wheel packages/hlcore``): ``../../configs``
  exists and this hook force-includes it as ``hlcore/configs``;
* from the sdist (plain ``uv build``, ``pip install hlcore-*.tar.gz``): the sdist already carries the
  configs at ``src/hlcore/configs`` (``[tool.hatch.build.targets.sdist.force-include]``), so the
  wheel's ``packages = ["src/hlcore"]`` picks them up and ``../../configs`` is absent.

A plain ``force-include`` in the wheel target cannot cover both: hatchling fails on a missing forced
path. Editable installs are skipped: there ``hlcore.configs`` finds the repo-root ``configs/``.
"""

from __future__ import annotations

from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ConfigsBuildHook(BuildHookInterface):
    PLUGIN_NAME = "hl-configs"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        repo_configs = Path(self.root, "..", "..", "configs").resolve()
        if repo_configs.is_dir() and not Path(self.root, "src", "hlcore", "configs").exists():
            build_data["force_include"][str(repo_configs)] = "hlcore/configs"
