"""hlvllm.guard: shapes without an exact tuned key keep Helion only where they time >= 2 % faster.

The timer is faked (no GPU here): it returns preset (Helion, vLLM) times per M and records what it
was asked to time; the first call of each side runs once so the calls the guard builds are checked
to compute the same GEMM.
"""

import json
import logging

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

N, K = 48, 96
GOOD = {"block_sizes": [16, 16, 32], "num_warps": 4, "num_stages": 1, "split_k": 1, "swap_ab": False}
SIZES = [1, 2, 4, 8, 16]
#: M -> (Helion µs, vLLM µs) the fake timer reports
TIMES = {1: (9.0, 10.0), 2: (9.9, 10.0), 4: (11.0, 10.0), 16: (8.0, 10.0)}


def _entry(m, fallback=False, n=N, k=K):
    e = {"key": {"format": "fp8_dynamic", "n": n, "k": k, "m": m}, "config": GOOD}
    if fallback:
        e["fallback"] = True
    return e


@pytest.fixture
def guarded(hl_env, tmp_path):
    """The op on a pretend H200 whose file has the key M = 8 of (N, K) only (the other sizes reuse
    it: no exact key), vLLM's kernel replaced by the reference, a fake timer, capture sizes
    1..16, the guard's cache under ``tmp_path / "cache"``."""
    import hlvllm.ops as ops
    from hlcore import scaled_mm_config as smc
    from hlcore.config_store import installed_helion_version
    from hlvllm import dispatch, guard, precompile
    from hlvllm.plugin import register

    register()
    calls = []
    hl_env.setattr(
        ops,
        "_fallback_scaled_mm",
        lambda a, b, sa, sb, dt, bias: (calls.append(a.shape[0]), scaled_mm_ref(a, b, sa, sb, dt, bias))[1],
    )
    hl_env.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")
    path = tmp_path / "configs" / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir(parents=True)
    meta = {"_metadata": {"gpu": "nvidia_h200", "helion": installed_helion_version()}}
    path.write_text(json.dumps([meta, _entry(8, fallback=True)]))
    hl_env.setenv("HL_CONFIG_DIR", str(tmp_path / "configs"))
    hl_env.setenv("HL_KERNEL_CACHE_DIR", str(tmp_path / "cache"))
    smc.clear_scaled_mm_config_cache()
    timed = []

    def timer(shape, m):  # the fake timer; the calls the guard would time are checked at M = 1
        if m == 1:
            helion_calls, vllm_calls = shape.make_calls(m, 2)
            h, v = helion_calls[1](), vllm_calls[1]()  # the weight copy: same GEMM, same result
            assert h.shape == v.shape == (1, N)
            assert rel_error(h, v) <= 2 * tolerance("fp8_dynamic", torch.bfloat16)
        timed.append(m)
        return TIMES[m]

    hl_env.setattr(guard, "TIMER", timer)
    precompile.set_capture_sizes(SIZES)
    d = generate_scaled_mm_inputs(1, N, K, fmt="fp8_dynamic", seed=0)
    guard.register_shape(ops.scaled_mm_guard_shape("fp8_dynamic", d["b"], d["scale_b"], None, torch.bfloat16))
    yield torch.ops.hlvllm.scaled_mm, dispatch, calls, timed
    smc.clear_scaled_mm_config_cache()


def _call(fn, m, seed=0):
    d = generate_scaled_mm_inputs(m, N, K, fmt="fp8_dynamic", seed=seed)
    out = fn(d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"])
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)


def _paths(dispatch):
    return {m: p for (p, m, _, _) in dispatch.DISPATCH_COUNTS}


def test_guard_keeps_helion_only_with_a_2_percent_win(guarded, caplog):
    """At the first eager call every capture size without an exact key is timed once: Helion stays
    at M = 1 (10 % faster) and 16 (20 %), vLLM's kernel takes M = 2 (1 % is inside the margin) and
    4 (slower); M = 8 has an exact key (marked fallback: vLLM's kernel, not timed). One summary line."""
    fn, dispatch, calls, timed = guarded
    with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
        for m in SIZES:
            _call(fn, m)
    assert sorted(timed) == [1, 2, 4, 16]
    assert _paths(dispatch) == {1: "helion", 2: "fallback", 4: "fallback", 8: "fallback", 16: "helion"}
    from hlvllm import startup

    assert startup.SECONDS["speed guard"] > 0  # the four timings are counted as start-up
    (summary,) = [r.getMessage() for r in caplog.records if "speed guard" in r.getMessage()]
    assert "fp8_dynamic: 4 shapes checked: Helion on 2, vLLM's kernel on 2; took" in summary
    from hlvllm import routing

    assert (
        "speed guard: Helion 9.90 µs vs cutlass_scaled_mm 10.00 µs"
        in routing.decide("fp8_dynamic", 2, N, K).reason
    )


def test_guard_results_are_cached_on_disk(guarded, caplog, tmp_path):
    """A restart (state reset) reads the cache: no timing, the same decisions, said in the summary."""
    import hlvllm.ops as ops
    from hlvllm import guard

    fn, dispatch, calls, timed = guarded
    for m in SIZES:
        _call(fn, m)
    assert sorted(timed) == [1, 2, 4, 16]
    cache = json.loads((tmp_path / "cache" / "speed_guard.json").read_text())
    assert len(cache["entries"]) == 4 and all("nvidia_h200" in key for key in cache["entries"])
    before = _paths(dispatch)
    dispatch.reset()  # a new process: guard state and routes forgotten, the file stays
    d = generate_scaled_mm_inputs(1, N, K, fmt="fp8_dynamic", seed=0)
    guard.register_shape(ops.scaled_mm_guard_shape("fp8_dynamic", d["b"], d["scale_b"], None, torch.bfloat16))
    from hlvllm import precompile

    precompile.set_capture_sizes(SIZES)
    timed.clear()
    with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
        for m in SIZES:
            _call(fn, m)
    assert timed == [] and _paths(dispatch) == before
    assert any("(4 from the cache)" in r.getMessage() for r in caplog.records)


def test_a_guard_failure_sends_the_shape_to_vllm_with_one_warning(guarded, hl_env, caplog):
    from hlvllm import guard

    fn, dispatch, calls, timed = guarded

    def oom(shape, m):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 240 MiB")

    hl_env.setattr(guard, "TIMER", oom)
    with caplog.at_level(logging.WARNING, logger="vllm.hlvllm"):
        for m in SIZES:
            _call(fn, m)
    assert set(_paths(dispatch).values()) == {"fallback"}
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "speed guard" in r.getMessage()
    ]
    assert (
        len(warnings) == 1
        and "OutOfMemoryError" in warnings[0]
        and "vLLM's kernel runs this shape" in warnings[0]
    )


def test_hl_speed_guard_0_times_nothing(guarded, hl_env):
    from hlvllm.settings import get_settings

    fn, dispatch, calls, timed = guarded
    hl_env.setenv("HL_SPEED_GUARD", "0")
    get_settings.cache_clear()
    for m in SIZES:
        _call(fn, m)
    assert timed == []
    assert _paths(dispatch) == {1: "helion", 2: "helion", 4: "helion", 8: "fallback", 16: "helion"}


def test_a_fallback_mark_is_never_inherited(guarded):
    """The key M = 8 is marked fallback: M = 8 runs vLLM's kernel, but M = 16, which reuses that
    key's config (no exact key), is not marked by it: the guard decides it."""
    from hlvllm import routing

    assert not routing.decide("fp8_dynamic", 8, N, K).helion
    r16 = routing.decide("fp8_dynamic", 16, N, K)
    assert r16.helion and r16.guarded and r16.pick.source == "same_shape" and r16.pick.fallback
    r_other = routing.decide("fp8_dynamic", 8, N + 16, K)  # the nearest key's mark does not carry either
    assert r_other.helion and r_other.guarded and r_other.pick.source == "nearest"


def test_real_timer_is_off_without_a_gpu(hl_env):
    """Without a CUDA device (and the real timer) the guard times nothing."""
    from hlvllm import guard

    assert not torch.cuda.is_available()
    assert guard.TIMER is guard.time_shape and not guard._enabled()


def test_a_cached_verdict_is_not_reused_by_another_dispatch_mode_or_kernel_source(hl_env):
    """The op design and capture mode hand Helion other activation-scale layouts (Block_FP8), and a
    changed hlcore kernel is another kernel: neither reuses the other's verdict."""
    from hlcore import kernel_cache
    from hlvllm import guard
    from hlvllm.settings import get_settings

    keys = {}
    for mode in ("op", "capture"):
        hl_env.setenv("HL_DISPATCH_AT", mode)
        get_settings.cache_clear()
        keys[mode] = guard._cache_key("nvidia_h200", "block_fp8", 8, 4096, 4096, "{}", "DeepGemm")
    assert keys["op"] != keys["capture"]
    hl_env.setattr(kernel_cache, "source_digest", lambda: "0" * 64)
    assert guard._cache_key("nvidia_h200", "block_fp8", 8, 4096, 4096, "{}", "DeepGemm") != keys["capture"]


@pytest.mark.parametrize("mode", ["op", "capture"])
def test_a_block_mark_holds_only_where_its_scale_a_layout_settles_it(hl_env, tmp_path, mode, caplog):
    """Block_FP8 keys measured on row-major scale_a (what the op design hands Helion) and on vLLM's
    column-major one ("tma", what capture mode hands it, slower for Helion): in its own mode a key
    runs as marked; in the other a row-major "vLLM wins" and a column-major "Helion wins" still hold
    (the layout only makes them surer), the other two are timed by the speed guard (one INFO line)."""
    import logging

    from hlcore import scaled_mm_config as smc
    from hlcore.config_store import installed_helion_version
    from hlvllm import routing
    from hlvllm.settings import get_settings

    n, k = 256, 512
    entries = [{"_metadata": {"gpu": "nvidia_h200", "helion": installed_helion_version()}}]
    for m, layout, fallback in ((1, None, False), (2, "tma", False), (4, None, True), (8, "tma", True)):
        e = {"key": {"format": "block_fp8", "n": n, "k": k, "m": m}, "config": GOOD}
        if layout:
            e["block_scale_a"] = layout
        if fallback:
            e["fallback"] = True
        entries.append(e)
    entries.append(
        {"key": {"format": "fp8_dynamic", "n": n, "k": k, "m": 1}, "config": GOOD, "block_scale_a": "tma"}
    )
    path = tmp_path / "configs" / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(entries))
    hl_env.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")
    hl_env.setenv("HL_CONFIG_DIR", str(tmp_path / "configs"))
    hl_env.setenv("HL_DISPATCH_AT", mode)
    get_settings.cache_clear()
    smc.clear_scaled_mm_config_cache()
    routing.reset()
    try:
        with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
            r = {m: routing.decide("block_fp8", m, n, k) for m in (1, 2, 4, 8)}
            fp8 = routing.decide("fp8_dynamic", 1, n, k)  # per-token scale_a has one layout: moot
    finally:
        smc.clear_scaled_mm_config_cache()
    assert routing.block_scale_a() == ("row" if mode == "op" else "tma")
    own_win, own_loss = (1, 4) if mode == "op" else (2, 8)
    assert r[own_win].helion and not r[own_win].guarded and r[own_win].reason == "tuned key"
    assert not r[own_loss].helion
    if mode == "op":  # column-major marks: "Helion wins" holds on row-major, "vLLM wins" is timed
        assert r[2].helion and not r[2].guarded
        assert r[8].helion and r[8].guarded and r[8].pick.fallback and "scale_a" in r[8].reason
    else:  # row-major marks: "vLLM wins" holds on column-major, "Helion wins" is timed
        assert not r[4].helion
        assert r[1].helion and r[1].guarded and r[1].pick.source == "exact" and "scale_a" in r[1].reason
    assert fp8.helion and not fp8.guarded and fp8.reason == "tuned key"
    lines = [rec.getMessage() for rec in caplog.records if "were measured on" in rec.getMessage()]
    assert len(lines) == 1 and f"--block-scale-a {routing.block_scale_a()}" in lines[0]
