"""hlvllm.startup: our share of an engine's start-up, per phase, in one log line."""

import pytest

from hlvllm import startup


@pytest.fixture
def fake_clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(startup, "clock", lambda: now[0])
    startup.reset()
    yield now
    startup.reset()


def test_phases_add_up_nested_ones_shown_inside(fake_clock):
    with startup.timed("shape registration"):
        fake_clock[0] += 0.25
        with startup.timed("recording"):
            fake_clock[0] += 0.5
    with startup.timed("shape registration"):  # a second layer shape
        fake_clock[0] += 0.5
    with startup.timed("first Helion calls"):
        fake_clock[0] += 2.0
    assert startup.SECONDS["shape registration"] == pytest.approx(1.25)
    assert startup.summary() == "shape registration 1.2 s (recording 0.5 s), first Helion calls 2.0 s"


def test_a_phase_that_raises_is_still_counted_and_order_is_fixed(fake_clock):
    with pytest.raises(RuntimeError), startup.timed("speed guard"):
        fake_clock[0] += 3.0
        raise RuntimeError("timer failed")
    with startup.timed("waiting for workers"):
        fake_clock[0] += 1.0
    assert startup.summary() == "waiting for workers 1.0 s, speed guard 3.0 s"


def test_nothing_timed_says_none(fake_clock):
    assert startup.summary() == "none"


def test_importing_the_kernels_is_its_own_phase_once(fake_clock, monkeypatch):
    imported = []

    def fake_import(name):
        fake_clock[0] += 1.5
        imported.append(name)
        monkeypatch.setitem(startup.sys.modules, name, object())

    monkeypatch.setattr(startup.importlib, "import_module", fake_import)
    startup.import_kernels("hl_fake_kernels")
    startup.import_kernels("hl_fake_kernels")  # imported: nothing timed again
    with startup.timed("first Helion calls"):
        fake_clock[0] += 0.5
    assert imported == ["hl_fake_kernels"]
    assert startup.summary() == "importing hlcore 1.5 s, first Helion calls 0.5 s"


def test_the_slowest_first_calls_are_named(fake_clock):
    """A phase timed per item names its slowest three, so a start-up log says which kernel loaded
    slowly (e.g. compiled instead of loading from the cache)."""
    for item, seconds in (("a M=1", 0.01), ("b M=8", 1.5), ("c M=2", 0.02), ("d M=16", 0.4)):
        with startup.timed("first Helion calls", item):
            fake_clock[0] += seconds
    assert startup.SECONDS["first Helion calls"] == pytest.approx(1.93)
    assert (
        startup.summary() == "first Helion calls 1.9 s (slowest: b M=8 1.50 s, d M=16 0.40 s, c M=2 0.02 s)"
    )


def test_one_named_item_is_not_repeated(fake_clock):
    with startup.timed("first Helion calls", "a M=1"):
        fake_clock[0] += 0.5
    assert startup.summary() == "first Helion calls 0.5 s"


def test_capture_line_splits_the_cache_loads(hl_env, caplog, monkeypatch):
    """The one line at the last Helion capture size says how many kernels came from the cache, the
    host seconds of their imports and first runs (hlcore.kernel_cache.load_seconds), and the phases."""
    import logging

    from hlcore import kernel_cache
    from hlvllm import dispatch, precompile

    precompile.set_capture_sizes([1, 2, 4])
    monkeypatch.setattr(
        kernel_cache, "stats", lambda: {"disk_hits": 21, "misses": 0, "writes": 0, "errors": 0}
    )
    monkeypatch.setattr(kernel_cache, "load_seconds", lambda: {"import": 0.25, "first_run": 3.5})
    with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
        dispatch._log_kernel_cache(2)  # not the smallest size: nothing yet
        assert "Helion kernels at CUDA-graph capture" not in caplog.text
        dispatch._log_kernel_cache(1)
    assert "21 loaded from the kernel cache (import 0.25 s, first runs 3.50 s), 0 compiled" in caplog.text
