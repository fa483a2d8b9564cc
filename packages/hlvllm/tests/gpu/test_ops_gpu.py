"""torch.ops.hlvllm.scaled_mm on a CUDA GPU against vLLM's own cutlass_scaled_mm."""

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

pytestmark = pytest.mark.gpu
vllm_ops = pytest.importorskip("vllm._custom_ops", reason="vLLM's CUDA ops are not importable here")

QWEN3_8B = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]
TOL = tolerance("fp8_dynamic", torch.bfloat16)


@pytest.fixture
def op(monkeypatch, tmp_path):
    """The registered op with no config file (``HL_CONFIG_DIR`` empty) and
    ``HL_UNTUNED_SHAPES=heuristic`` (without it a GPU with no file runs CUTLASS): every M <= 32 runs
    Helion with the heuristic config. (The shipped file marks some keys as slower, and those run
    CUTLASS: that would compare CUTLASS with itself. Marked keys: test_marked_keys_route_to_cutlass.)"""
    from hlcore.scaled_mm_config import clear_scaled_mm_config_cache
    from hlvllm import dispatch
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    monkeypatch.setenv("HL_LINEAR_BACKEND", "helion")
    monkeypatch.setenv("HL_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("HL_UNTUNED_SHAPES", "heuristic")
    clear_scaled_mm_config_cache()
    get_settings.cache_clear()
    dispatch.reset()
    register()
    yield torch.ops.hlvllm.scaled_mm, dispatch
    get_settings.cache_clear()
    dispatch.reset()
    clear_scaled_mm_config_cache()


@pytest.mark.parametrize("nk", QWEN3_8B, ids=[f"N{n}K{k}" for n, k in QWEN3_8B])
def test_helion_matches_cutlass_on_qwen3_8b(op, nk):
    fn, dispatch = op
    n, k = nk
    for m in (1, 2, 4, 8, 16, 24, 32, 33):
        d = generate_scaled_mm_inputs(m, n, k, device="cuda", with_bias=True, seed=m)
        args = (d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, d["bias"])
        cutlass = vllm_ops.cutlass_scaled_mm(
            d["a"],
            d["b"],
            scale_a=d["scale_a"],
            scale_b=d["scale_b"],
            out_dtype=torch.bfloat16,
            bias=d["bias"],
        )
        first = fn(*args)  # M <= 32: Helion (first eager call compiles); M = 33: CUTLASS
        ref = scaled_mm_ref(**d)
        assert rel_error(first, cutlass) <= TOL, (m, n, k)
        assert rel_error(first, ref) <= TOL and rel_error(cutlass, ref) <= TOL, (m, n, k)
        path = "helion" if m <= 32 else "fallback"
        assert dispatch.DISPATCH_COUNTS[(path, m, n, k)] == 1


def test_capture_routes_to_helion_and_replay_matches(op):
    fn, dispatch = op
    n, k = 6144, 4096
    d = generate_scaled_mm_inputs(8, n, k, device="cuda", with_bias=False, seed=1)
    args = (d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, None)
    fn(*args)  # warm-up: Helion compile
    eager_fallback = fn(*args)  # second eager call: CUTLASS
    assert dispatch.DISPATCH_COUNTS[("fallback", 8, n, k)] == 1
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    assert dispatch.DISPATCH_COUNTS[("helion", 8, n, k)] == 2  # warm-up + capture
    assert {("helion", 8, n, k): 1} == dispatch.CAPTURE_COUNTS
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(captured, scaled_mm_ref(**d)) <= TOL
    assert rel_error(captured, eager_fallback) <= TOL


def test_marked_keys_route_to_cutlass(monkeypatch):
    """With the shipped H200 file, a key it marks ``"fallback": true`` runs vLLM's CUTLASS, even on
    the first eager call, and gives CUTLASS's bits."""
    from hlcore.scaled_mm_config import clear_scaled_mm_config_cache, pick_scaled_mm_config
    from hlvllm import dispatch
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    monkeypatch.setenv("HL_LINEAR_BACKEND", "helion")
    monkeypatch.delenv("HL_CONFIG_DIR", raising=False)
    clear_scaled_mm_config_cache()
    get_settings.cache_clear()
    dispatch.reset()
    register()
    marked = [
        (m, n, k)
        for n, k in QWEN3_8B
        for m in (1, 8, 32)
        if pick_scaled_mm_config("fp8_dynamic", m, n, k).fallback
    ]
    if not marked:
        pytest.skip("no shipped config file marks a Qwen3-8B fp8_dynamic key on this GPU")
    m, n, k = marked[0]
    d = generate_scaled_mm_inputs(m, n, k, device="cuda", with_bias=False, seed=3)
    out = torch.ops.hlvllm.scaled_mm(d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, None)
    cutlass = vllm_ops.cutlass_scaled_mm(
        d["a"], d["b"], scale_a=d["scale_a"], scale_b=d["scale_b"], out_dtype=torch.bfloat16
    )
    assert torch.equal(out, cutlass)
    assert dict(dispatch.DISPATCH_COUNTS) == {("fallback", m, n, k): 1}
    get_settings.cache_clear()
    dispatch.reset()
    clear_scaled_mm_config_cache()


def test_threaded_precompile_then_every_size_matches_cutlass(op, monkeypatch, caplog):
    """HL_PRECOMPILE_THREADS=8: the first call of a shape compiles the kernels of all its capture
    sizes in threads (Triton compiles in parallel); every size's own first call then matches CUTLASS,
    and the later sizes' first calls compile nothing new (fast). Prints the times for the record."""
    import logging
    import time

    from hlvllm import precompile
    from hlvllm.settings import get_settings

    fn, dispatch = op
    monkeypatch.setenv("HL_PRECOMPILE_THREADS", "8")
    get_settings.cache_clear()
    precompile.set_capture_sizes([1, 2, 4, 8, 16, 24, 32])
    n, k = 4096, 12288
    times = {}
    with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
        for m in (32, 24, 16, 8, 4, 2, 1):  # vLLM's capture order: largest first
            d = generate_scaled_mm_inputs(m, n, k, device="cuda", with_bias=False, seed=m)
            start = time.perf_counter()
            out = fn(d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, None)
            torch.cuda.synchronize()
            times[m] = time.perf_counter() - start
            cutlass = vllm_ops.cutlass_scaled_mm(
                d["a"], d["b"], scale_a=d["scale_a"], scale_b=d["scale_b"], out_dtype=torch.bfloat16
            )
            assert rel_error(out, cutlass) <= TOL, m
            assert dispatch.DISPATCH_COUNTS[("helion", m, n, k)] == 1
    print("first-call seconds with threaded precompile:", {m: round(t, 2) for m, t in times.items()})
    assert "precompiled fp8_dynamic N=4096 K=12288 at M=" in caplog.text  # one size per kernel
    assert max(times[m] for m in (24, 16, 8, 4, 2, 1)) < 1.0  # compiled already: no Helion compile left
