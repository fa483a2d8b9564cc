"""Production install: ``pip install hlvllm`` alone, from the built wheels, in a fresh venv (issue 9).

Builds the three wheels with ``uv build``, makes a new virtual environment with this Python, installs
only ``hlvllm`` from them (its dependencies come from the package index, in practice uv's cache,
pinned to ``uv.lock`` as constraints so the environment is the tested one), then checks in a new
process of that venv what a production user gets: vLLM discovers and loads the plugin, the configs
shipped in the hlcore wheel are found in site-packages, hltools is absent, CUDA stays untouched.

Needs the package index (or a warm uv cache): ``HL_TEST_OFFLINE=1`` skips it. CPU only; about 30 s,
most of it importing vLLM in the new venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UV = shutil.which("uv")

pytestmark = [
    pytest.mark.skipif(os.environ.get("HL_TEST_OFFLINE") == "1", reason="HL_TEST_OFFLINE=1: needs the index"),
    pytest.mark.timeout(600),
]

# Runs inside the fresh venv, in a new process; prints one JSON line.
CHECK = r"""
import importlib.metadata as md
import importlib.util
import json
import os
import sys
import sysconfig
from pathlib import Path

import torch

import hlvllm  # importing registers nothing
import hlvllm.plugin

assert not hlvllm.plugin._registered, "importing hlvllm must not register"
eps = [ep for ep in md.entry_points(group="vllm.general_plugins") if ep.name == "hlvllm"]
assert [ep.value for ep in eps] == ["hlvllm.plugin:register"], eps

# vLLM's own loader (it logs and swallows load errors, hence the explicit checks).
from vllm.plugins import load_general_plugins, load_plugins_by_group

found = load_plugins_by_group("vllm.general_plugins")
assert "hlvllm" in found, found
assert found["hlvllm"] is hlvllm.plugin.register
load_general_plugins()
assert hlvllm.plugin._registered, "load_general_plugins did not run hlvllm's register()"
hlvllm.plugin.register()  # idempotent

from vllm.model_executor.kernels import linear as vllm_linear
from vllm.platforms import PlatformEnum

from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel

# Every vLLM kernel table that hlvllm touched has its Helion kernel(s) once each, ahead of vLLM's own.
ours = {}
for name in dir(vllm_linear):
    table = getattr(vllm_linear, name)
    if name.startswith("_POSSIBLE_") and isinstance(table, dict) and PlatformEnum.CUDA in table:
        kernels = table[PlatformEnum.CUDA]
        mine = [i for i, k in enumerate(kernels) if k.__module__.startswith("hlvllm.")]
        if mine:
            assert mine == list(range(len(mine))), (name, kernels)
            assert len({kernels[i] for i in mine}) == len(mine), (name, kernels)
            ours[name] = [kernels[i].__name__ for i in mine]
assert vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA][0] is HelionFP8ScaledMMLinearKernel
assert "_POSSIBLE_INT8_KERNELS" in ours, ours
assert hasattr(torch.ops.hlvllm, "scaled_mm")

import hlcore
from hlcore.configs import config_dir, list_config_files

purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
d = config_dir().resolve()
assert purelib in Path(hlcore.__file__).resolve().parents, hlcore.__file__
assert purelib in d.parents, (d, purelib)
assert (d / "README.md").is_file(), sorted(p.name for p in d.iterdir())
parsed = {str(p.relative_to(d)): type(json.loads(p.read_text())).__name__ for p in list_config_files()}

# HL_CONFIG_DIR (argv[1]: a directory the test wrote) takes precedence over the packaged configs.
os.environ["HL_CONFIG_DIR"] = sys.argv[1]
assert config_dir() == Path(sys.argv[1]), config_dir()
override = {str(p.relative_to(sys.argv[1])): json.loads(p.read_text()) for p in list_config_files()}
del os.environ["HL_CONFIG_DIR"]

assert importlib.util.find_spec("hltools") is None, "hltools must not be installed"
dists = sorted(dist.metadata["Name"].lower() for dist in md.distributions())
assert "hltools" not in dists
assert not torch.cuda.is_initialized(), "importing hlvllm / register() initialised CUDA"

print(json.dumps({
    "python": sys.executable,
    "config_dir": str(d),
    "kernels": ours,
    "configs": parsed,
    "override": override,
    "versions": {n: md.version(n) for n in ("hlcore", "hlvllm", "vllm", "torch", "helion")},
    "cuda_initialized": torch.cuda.is_initialized(),
}))
"""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def _clean_env() -> dict[str, str]:
    """This process's environment without the test-run and dev-venv settings."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "TRITON_INTERPRET", "HELION_INTERPRET", "VLLM_PLUGINS"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("HL_")}


def _version(package: str) -> str:
    return tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def uv() -> str:
    if UV is None:
        pytest.fail("uv is not on PATH (the development set-up installs it: pip install uv)")
    return UV


@pytest.fixture(scope="module")
def wheels(uv, tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _run([uv, "build", "--all-packages", "--wheel", "-o", str(dist)], cwd=ROOT, env=_clean_env())
    return dist


def test_wheels_metadata_and_configs(wheels):
    names = sorted(p.name for p in wheels.glob("*.whl"))
    assert names == [f"{p}-{_version(p)}-py3-none-any.whl" for p in ("hlcore", "hltools", "hlvllm")]
    with zipfile.ZipFile(wheels / f"hlcore-{_version('hlcore')}-py3-none-any.whl") as whl:
        files = set(whl.namelist())
        assert "hlcore/configs.py" in files
        shipped = sorted(
            p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*") if p.is_file()
        )
        assert "README.md" in shipped
        for rel in shipped:
            assert f"hlcore/configs/{rel}" in files, f"configs/{rel} is not in the hlcore wheel"
        # configs only: the per-key measurement sidecars stay beside the benchmark results
        assert not [f for f in files if f.endswith(".stats.json") or f.startswith("lab/")]
    with zipfile.ZipFile(wheels / f"hlvllm-{_version('hlvllm')}-py3-none-any.whl") as whl:
        meta = whl.read(f"hlvllm-{_version('hlvllm')}.dist-info/METADATA").decode()
        eps = whl.read(f"hlvllm-{_version('hlvllm')}.dist-info/entry_points.txt").decode()
        assert not any(n.startswith("hltools") for n in whl.namelist())
    requires = [
        line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")
    ]
    assert "hlcore<0.2,>=0.1" in requires
    assert not any(r.startswith("hltools") for r in requires)
    for field in ("License-Expression: Apache-2.0", "Requires-Python: <3.14,>=3.11", "Project-URL: Homepage"):
        assert field in meta
    assert "Classifier: Operating System :: POSIX :: Linux" in meta
    assert "[vllm.general_plugins]\nhlvllm = hlvllm.plugin:register" in eps


def test_sdist_carries_configs(uv, tmp_path):
    """The default ``uv build`` makes the wheel from the sdist: the configs must survive that trip."""
    _run([uv, "build", "--package", "hlcore", "-o", str(tmp_path)], cwd=ROOT, env=_clean_env())
    version = _version("hlcore")
    with tarfile.open(tmp_path / f"hlcore-{version}.tar.gz") as sdist:
        assert f"hlcore-{version}/src/hlcore/configs/README.md" in sdist.getnames()
    with zipfile.ZipFile(tmp_path / f"hlcore-{version}-py3-none-any.whl") as whl:
        assert "hlcore/configs/README.md" in whl.namelist()


def test_pip_install_hlvllm_alone(uv, wheels, tmp_path):
    env = _clean_env()
    constraints = tmp_path / "constraints.txt"
    _run(
        [uv, "export", "--frozen", "--no-hashes", "--no-header", "--no-dev", "--no-emit-workspace"]
        + ["--package", "hlvllm", "-o", str(constraints)],
        cwd=ROOT,
        env=env,
    )
    venv = tmp_path / "venv"
    _run([uv, "venv", str(venv), "--python", sys.executable], env=env)
    python = venv / "bin" / "python"
    _run(
        [uv, "pip", "install", "--python", str(python), "--find-links", str(wheels)]
        + ["-c", str(constraints), "hlvllm"],
        cwd=tmp_path,
        env=env,
    )
    # The new process runs outside the repo so nothing from the checkout can be imported.
    override = tmp_path / "my-configs"
    (override / "scaled_mm").mkdir(parents=True)
    entry = [{"key": {}, "config": {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": True}}]
    (override / "scaled_mm" / "nvidia_h200.json").write_text(json.dumps(entry, indent=2) + "\n")
    proc = _run(
        [str(python), "-c", CHECK, str(override)], cwd=tmp_path, env={**env, "HL_LINEAR_BACKEND": "helion"}
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["versions"]["hlcore"] == _version("hlcore")
    assert report["versions"]["hlvllm"] == _version("hlvllm")
    assert report["cuda_initialized"] is False
    assert Path(report["config_dir"]).is_relative_to(venv.resolve())
    assert report["configs"] == {
        p.relative_to(ROOT / "configs").as_posix(): type(json.loads(p.read_text())).__name__
        for p in sorted((ROOT / "configs").glob("*/*.json"))
    }
    assert report["override"] == {"scaled_mm/nvidia_h200.json": entry}
