"""Sessions: ``lint`` and ``tests`` (CPU, default), ``tests_vllm033`` (CPU, vLLM 0.33), ``gpu_tests``
and ``bench`` (on a CUDA GPU).

All sessions but ``tests_vllm033`` run in the current environment (``venv_backend="none"``): ``uv
sync --frozen`` makes it for development, and the GPU machine runs them in its existing Python with
no installs (the packages' ``src`` folders are put on ``PYTHONPATH`` when they are not installed).
``tests_vllm033`` makes its own virtual environment (``.nox/tests_vllm033``, with uv) holding vLLM
0.33 and the torch and helion it runs with, outside the lock.
"""

import importlib.util
import os
import tomllib
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
    """CPU tests, two runs (the two modes cannot share a process): the kernels' tests (``hlcore``)
    and the tests that need generated code (``triton_interpret``) in Triton's interpreter; then every
    other test, the kernels' tests again among them, in Helion's eager reference mode, which runs a
    kernel as torch code (the plugin's and the tools' tests need the kernels' results, not their
    generated code, and run there about three times faster)."""
    env = _env()
    _cpu_pytest(session, "triton", session.posargs, env, "hlcore or triton_interpret")
    _cpu_pytest(session, "helion", session.posargs, env, "not triton_interpret")


def _cpu_pytest(
    session: nox.Session, interpret: str, args: list[str], env: dict[str, str], select: str = ""
) -> None:
    """``pytest -m "not gpu [and (SELECT)]" ARGS`` with the kernels in ``interpret`` mode
    (``HL_TEST_INTERPRET``), one xdist worker per CPU (``HL_TEST_WORKERS`` overrides; 0 = in-process),
    work stealing between them."""
    workers = ["-n", os.environ.get("HL_TEST_WORKERS", "auto"), "--dist", "worksteal"]
    marks = f"not gpu and ({select})" if select else "not gpu"
    session.run(
        "python",
        "-m",
        "pytest",
        "-m",
        marks,
        *workers,
        *args,
        env={**env, "HL_TEST_INTERPRET": interpret},
        success_codes=[0, 5] if select else [0],  # 5: a selection that holds no test of ARGS
    )


#: The second supported vLLM (CPU-tested only) and what it runs with: vllm 0.33.0 pins torch 2.14.0;
#: helion 1.5.1 is the helion release for that torch (vLLM's own ``helion`` extra asks for 1.4.0).
VLLM033 = ["vllm==0.33.0", "helion==1.5.1"]
#: vLLM 0.33's CUDA-only kernel libraries, never imported by the CPU tests (vLLM imports them lazily,
#: behind availability checks): left out of the environment to save GBs of downloads. torch's own
#: CUDA libraries stay (torch's default Linux wheel loads them at import).
VLLM033_EXCLUDES = [
    "flashinfer-python",
    "nvidia-cutlass-dsl",
    "quack-kernels",
    "tilelang",
    "humming-kernels",
    "pynvvideocodec",
    "tokenspeed-mla",
    "nvidia-cudnn-frontend",
    "fastsafetensors",
    "instanttensor",
    "torchcodec",
    "torchaudio",
    "torchvision",
]
#: The tests run against vLLM 0.33: all of hlvllm's CPU tests except test_install.py, which installs
#: the hlvllm wheel with the lock's versions as constraints (vLLM 0.26) and so tests the lock, not
#: vLLM 0.33 (it runs in ``tests``).
VLLM033_TESTS = ["packages/hlvllm/tests", "--ignore=packages/hlvllm/tests/test_install.py"]


def _locked(*names: str) -> list[str]:
    """``name==version`` of each package as ``uv.lock`` pins it (the test tools, same as ``tests``)."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {p["name"]: p["version"] for p in lock["package"] if "version" in p}
    return [f"{n}=={versions[n]}" for n in names]


@nox.session(venv_backend="uv")
def tests_vllm033(session: nox.Session) -> None:
    """hlvllm's CPU tests against vLLM 0.33.0 (torch 2.14, helion 1.5.1) in a fresh uv environment:
    vLLM's wheel and its dependencies (less :data:`VLLM033_EXCLUDES`), hlcore and hlvllm editable
    with their declared dependencies (so their metadata must admit this stack), the test tools at the
    lock's versions; then pytest runs hlvllm's tests in Triton's interpreter. Posargs go to pytest
    (e.g. ``-- packages/hlvllm/tests/test_plugin.py`` runs one file instead of :data:`VLLM033_TESTS`).
    vLLM 0.26 (the lock) is tested by ``tests`` and on the GPU machine; 0.33 only here."""
    excludes = Path(session.create_tmp()) / "vllm033-excludes.txt"
    excludes.write_text("\n".join(VLLM033_EXCLUDES) + "\n")
    session.install(
        "--compile-bytecode",  # see .ci/run: no process of the session compiles the sources again
        "--excludes",
        str(excludes),
        *VLLM033,
        "-e",
        str(ROOT / "packages" / "hlcore"),
        "-e",
        str(ROOT / "packages" / "hlvllm"),
        *_locked("pytest", "pytest-xdist", "pytest-timeout", "hypothesis"),
    )
    session.run("python", "-c", VERSIONS_033)
    # Triton's interpreter for all: helion 1.5.1's eager mode fails on the fp8 GEMM's scale indexing
    # (IndexError: tensors used as indices must be long...; 1.5.0's runs it)
    _cpu_pytest(session, "triton", list(session.posargs) or VLLM033_TESTS, {})


# Fails the session early when the environment is not the one it says it tests.
VERSIONS_033 = """
import importlib.metadata as md
v = {n: md.version(n) for n in ("vllm", "torch", "helion", "triton", "hlcore", "hlvllm")}
print("tests_vllm033:", ", ".join(f"{n} {x}" for n, x in v.items()))
assert v["vllm"] == "0.33.0" and v["helion"] == "1.5.1" and v["torch"].startswith("2.14."), v
"""


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
