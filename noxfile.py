"""Sessions: ``lint`` and ``tests`` (CPU, default), ``gpu_tests`` (on a CUDA GPU).

All sessions run in the current environment (``venv_backend="none"``): ``uv sync --frozen`` makes
it for development, and the GPU machine runs them in its existing Python with no installs (the
packages' ``src`` folders are put on ``PYTHONPATH`` when they are not installed).
"""

import importlib.util
import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = ("hlcore", "hlvllm", "hltools")
nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "none"


def _env() -> dict[str, str]:
    env = {}
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        paths = [str(ROOT / "packages" / p / "src") for p in PACKAGES]
        env["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    return env


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check, and the layering rule (hlcore never imports vllm or
    hltools; hlvllm never imports hltools)."""
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")
    session.run("python", "ci/check_layering.py")


@nox.session
def tests(session: nox.Session) -> None:
    """CPU tests: every package with kernels in Triton's interpreter, then the kernel tests again in
    Helion's eager reference mode (the two modes cannot share a process)."""
    env = _env()
    session.run(
        "python",
        "-m",
        "pytest",
        "-m",
        "not gpu",
        *session.posargs,
        env={**env, "HL_TEST_INTERPRET": "triton"},
    )
    session.run(
        "python",
        "-m",
        "pytest",
        "packages/hlcore/tests",
        "-m",
        "not gpu",
        *session.posargs,
        env={**env, "HL_TEST_INTERPRET": "helion"},
    )


@nox.session
def gpu_tests(session: nox.Session) -> None:
    """GPU tests (marker ``gpu``): compiled kernels vs the fp32 reference, torch._scaled_mm and, where
    vLLM imports, its cutlass_scaled_mm; CUDA-graph replay equals eager. Fails without a CUDA GPU
    (rather than passing with every test skipped)."""
    import torch

    if not torch.cuda.is_available():
        session.error("gpu_tests needs a CUDA GPU; none is visible here (use `nox -s tests` on a CPU)")
    session.run(
        "python",
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-p",
        "no:cacheprovider",
        *session.posargs,
        env={**_env(), "HL_TEST_GPU": "1"},
    )
