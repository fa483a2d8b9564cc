"""Sessions: ``lint`` and ``tests`` (CPU, default), ``gpu_tests`` and ``bench`` (on a CUDA GPU).

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
    session.run("python", ".ci/check_layering.py")


@nox.session
def tests(session: nox.Session) -> None:
    """CPU tests: every package with kernels in Triton's interpreter, then the kernel tests again in
    Helion's eager reference mode (the two modes cannot share a process)."""
    env = _env()
    # pytest-xdist: one worker per CPU (HL_TEST_WORKERS overrides; 0 = in-process)
    workers = ["-n", os.environ.get("HL_TEST_WORKERS", "auto")]
    session.run(
        "python",
        "-m",
        "pytest",
        "-m",
        "not gpu",
        *workers,
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
        *workers,
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


BENCH_KERNELS = [
    "--model",
    "qwen3-8b,qwen3-1.7b",
    "--formats",
    "fp8_dynamic,w8a8_int8,block_fp8",
]
BENCH_E2E = ["--model", "qwen3-8b", "--format", "fp8_dynamic", "--layers", "8", "--timeout", "900"]


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks on a CUDA GPU (method: docs/benchmarks.md): ``hltools bench kernels`` for Qwen3-8B
    and Qwen3-1.7B in the three formats, then ``hltools bench e2e`` for Qwen3-8B FP8_Dynamic with 8
    layers (the engine with and without the plugin, and the numerics control), into
    ``$HL_BENCH_OUT`` (default ``bench-results``): ``kernels/`` and ``e2e/``. Posargs: ``kernels`` or ``e2e`` first runs only
    that part, and the rest is added to its command (e.g. ``nox -s bench -- e2e --format block_fp8``).
    Installs nothing; fails without a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        session.error(
            "bench needs a CUDA GPU; none is visible here (`hltools bench kernels --list` works anywhere)"
        )
    parts = {"kernels": BENCH_KERNELS, "e2e": BENCH_E2E}
    args = list(session.posargs)
    chosen = [args.pop(0)] if args and args[0] in parts else list(parts)
    out = Path(os.environ.get("HL_BENCH_OUT", "bench-results"))
    for part in chosen:
        session.run(
            "python",
            "-m",
            "hltools",
            "bench",
            part,
            *parts[part],
            "--output",
            str(out / part),
            *args,
            env=_env(),
        )
