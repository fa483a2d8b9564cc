"""Root pytest setup shared by the three packages.

CPU runs execute Helion kernels in an interpret mode, chosen before triton/helion are imported:
``HL_TEST_INTERPRET=triton`` (default: Helion compiles, Triton's interpreter runs the generated code)
or ``helion`` (Helion's eager reference mode). The two cannot be combined in one process, so
``nox -s tests`` runs pytest once per mode. ``HL_TEST_GPU=1`` (``nox -s gpu_tests``) runs the real
compiled kernels and the ``gpu``-marked tests.
"""

import os

if os.environ.get("HL_TEST_GPU") != "1":
    if os.environ.get("HL_TEST_INTERPRET", "triton") == "helion":
        os.environ["HELION_INTERPRET"] = "1"
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ.pop("HELION_INTERPRET", None)

import pytest  # noqa: E402


def _drop_discarded_overflow_checks() -> None:
    """Triton's interpreter (3.6) builds an overflow check for every int32 ``+``, ``-`` and ``*`` of
    a kernel (the op again in int64, two compares, an ``and``) and hands it to ``device_assert``,
    which drops it: its options never set ``debug``. About half of a scaled_mm kernel's interpreted
    time went into those discarded checks; with ``debug`` off nothing is checked either way, so
    they are turned off (only then) for the Triton-interpreter test runs. Test processes only:
    subprocesses that tests start run Triton's defaults."""
    import dataclasses

    from triton.runtime import interpreter

    options = interpreter.interpreter_builder.options
    if options.sanitize_overflow and not options.debug:
        interpreter.interpreter_builder.options = dataclasses.replace(options, sanitize_overflow=False)


if os.environ.get("TRITON_INTERPRET") == "1":
    _drop_discarded_overflow_checks()


def interpret_mode() -> str:
    """``"triton"``, ``"helion"`` or ``"gpu"``."""
    if os.environ.get("HL_TEST_GPU") == "1":
        return "gpu"
    return "helion" if os.environ.get("HELION_INTERPRET") == "1" else "triton"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: it may select on the ``hlcore`` mark
def pytest_collection_modifyitems(config, items):
    """Marks every test under ``packages/hlcore`` ``hlcore`` (``nox -s tests`` runs those in both CPU
    modes, the others once); skips ``gpu`` tests without a CUDA GPU, and ``triton_interpret`` tests in
    Helion's eager mode."""
    import torch

    hlcore_tests = os.path.join(os.path.dirname(__file__), "packages", "hlcore", "tests")
    for item in items:
        if str(item.path).startswith(hlcore_tests + os.sep):
            item.add_marker(pytest.mark.hlcore)
    skips = []
    if not torch.cuda.is_available():
        skips.append(("gpu", "needs a CUDA GPU (nox -s gpu_tests)"))
    if interpret_mode() == "helion":
        skips.append(("triton_interpret", "needs Triton's interpreter (HL_TEST_INTERPRET=triton)"))
    for mark, reason in skips:
        for item in items:
            if mark in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_runtest_logreport(report):
    """GPU runs: print a failure's report the moment it happens. A device call that hits its time
    limit cuts pytest off before its end-of-run failure section (2026-11-30 night: five failures
    with no traceback); this keeps each one in the log."""
    if os.environ.get("HL_TEST_GPU") == "1" and report.failed:
        print(f"\n[hl] FAILED {report.nodeid} ({report.when})\n{report.longreprtext[-4000:]}\n", flush=True)
