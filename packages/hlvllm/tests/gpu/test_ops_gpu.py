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
    """The registered op with no config file (``HL_CONFIG_DIR`` empty): every M <= 32 runs Helion
    with the heuristic config. (The shipped file marks some keys as slower, and those run CUTLASS:
    that would compare CUTLASS with itself. Marked keys: test_marked_keys_route_to_cutlass.)"""
    from hlcore.scaled_mm_config import clear_scaled_mm_config_cache
    from hlvllm import dispatch
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    monkeypatch.setenv("HL_LINEAR_BACKEND", "helion")
    monkeypatch.setenv("HL_CONFIG_DIR", str(tmp_path))
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
