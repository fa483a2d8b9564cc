"""hltools tests run the Helion kernels on the CPU: in Triton's interpreter unless the environment
(or the root conftest) already chose Helion's own interpret mode (HELION_INTERPRET=1) or the GPU
(HL_TEST_GPU=1). TRITON_INTERPRET must be set before triton (imported by helion /
hlcore.scaled_mm) is first imported, so it is set here, at conftest import time. Also the fake
vLLM kernel that the tests of the loops around :mod:`hltools.providers` share."""

import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType

import pytest

if os.environ.get("HL_TEST_GPU") != "1" and os.environ.get("HELION_INTERPRET") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def ref_provider():
    """A fresh :class:`hltools.providers.ScaledMMProvider` subclass whose kernel is the fp32
    reference of the operands it is given, counting its set-up work in ``counts`` (``weights``:
    prepare_weight calls, ``scales``: prepare_scale_a calls, ``calls``)."""
    from hltools import providers

    class RefProvider(providers.ScaledMMProvider):
        name = "fake reference kernel"
        mirrors = "-"
        formats = providers.FORMATS
        counts = {"weights": 0, "scales": 0, "calls": 0}

        def prepare_weight(self, b, scale_b):
            self.counts["weights"] += 1
            return super().prepare_weight(b, scale_b)

        def prepare_scale_a(self, scale_a):
            self.counts["scales"] += 1
            return scale_a

        def call(self, a, scale_a, w):
            self.counts["calls"] += 1
            return self.reference(a, scale_a, w)

    return RefProvider


LAB_SCRIPTS = Path(__file__).resolve().parents[3] / "lab" / "scripts"


def _load_lab_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, LAB_SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def lab_script():
    """``lab_script(name)`` imports ``lab/scripts/<name>.py`` (a script, not a package module) for
    its CPU-testable parts."""
    return _load_lab_script


def _args_missing(namespace, *sources: str, ignore=()) -> list[str]:
    """The ``args.<name>`` that the script source text(s) read and ``namespace`` (a parsed argparse
    namespace) lacks: a missing option fails on the GPU before the engine starts."""
    read = set()
    for text in sources:  # not ``args.x`` quoted in docs (`args.correlation`) or ``obj.args.x``
        read |= set(re.findall(r"(?<![`\w.])args\.([a-z_0-9]+)", text))
    return sorted(a for a in read - set(ignore) if not hasattr(namespace, a))


@pytest.fixture(scope="session")
def args_missing():
    """``args_missing(namespace, *source_texts, ignore=...)``: see :func:`_args_missing`."""
    return _args_missing


@pytest.fixture
def dispatch_at(monkeypatch):
    """``dispatch_at(mode)``: ``HL_DISPATCH_AT=mode`` (None: unset, hlvllm's default) with hlvllm's
    settings read again, and again after the test."""
    from hlvllm.settings import get_settings

    def set_mode(mode):
        if mode is None:
            monkeypatch.delenv("HL_DISPATCH_AT", raising=False)
        else:
            monkeypatch.setenv("HL_DISPATCH_AT", mode)
        get_settings.cache_clear()

    yield set_mode
    get_settings.cache_clear()
