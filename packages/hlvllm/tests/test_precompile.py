"""HL_PRECOMPILE_THREADS: a GEMM shape's other CUDA-graph sizes compiled at its first Helion call."""

import logging
import threading
import time

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

N, K = 48, 96


@pytest.fixture
def op(hl_env):
    import hlvllm.ops as ops
    from hlvllm import dispatch, precompile
    from hlvllm.plugin import register

    register()
    fallback_calls, helion_calls = [], []
    real_helion = ops._helion_scaled_mm

    def fake_cutlass(a, b, scale_a, scale_b, out_dtype, bias):  # CUTLASS is CUDA-only
        fallback_calls.append(a.shape[0])
        return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias)

    def recording_helion(a, b, scale_a, scale_b, out_dtype, bias):
        helion_calls.append((a.shape[0], threading.current_thread().name, a, scale_a, b, scale_b, bias))
        return real_helion(a, b, scale_a, scale_b, out_dtype, bias)

    hl_env.setattr(ops, "_fallback_scaled_mm", fake_cutlass)
    hl_env.setattr(ops, "_helion_scaled_mm", recording_helion)
    precompile.set_capture_sizes([1, 2, 4, 8, 16, 24, 32, 40, 48])  # vLLM's list; 40, 48 > 32: vLLM's kernel
    return torch.ops.hlvllm.scaled_mm, dispatch, fallback_calls, helion_calls


def _args(m, seed=0):
    d = generate_scaled_mm_inputs(m, N, K, with_bias=True, seed=seed)
    return (d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"]), d


def _threads(hl_env, n):
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_PRECOMPILE_THREADS", str(n))
    get_settings.cache_clear()


def test_off_by_default_compiles_only_the_called_size(op):
    fn, dispatch, _, helion_calls = op
    fn(*_args(32)[0])
    assert [c[0] for c in helion_calls] == [32]


def test_first_call_compiles_every_other_helion_size_of_the_shape(op, hl_env):
    fn, dispatch, fallback_calls, helion_calls = op
    _threads(hl_env, 4)
    args, d = _args(32)
    out = fn(*args)
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    sizes = [c[0] for c in helion_calls]
    assert sorted(sizes[:-1]) == [1, 2, 4, 8, 16, 24] and sizes[-1] == 32  # not 40, 48: above 32
    a, b, scale_a, scale_b, bias = args[0], args[1], args[2], args[3], args[5]
    for m, _, a2, sa2, b2, sb2, bias2 in helion_calls[:-1]:  # the real call's layouts, M rows of ones
        assert a2.shape == (m, K) and a2.dtype == a.dtype and a2.is_contiguous()
        assert sa2.shape == (m, 1) and sa2.dtype == scale_a.dtype
        assert torch.all(a2.float() == 1) and torch.all(sa2 == 1)
        assert b2 is b and sb2 is scale_b and bias2 is bias  # the layer's own weight, scales, bias
    assert fallback_calls == [32]  # only the real call is checked against vLLM's kernel
    # every size's own first call still runs Helion and is checked against vLLM's kernel
    helion_calls.clear()
    for m in (1, 8, 24):
        args, d = _args(m, seed=m)
        out = fn(*args)
        assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
        assert dispatch.DISPATCH_COUNTS[("helion", m, N, K)] == 1
    assert [c[0] for c in helion_calls] == [1, 8, 24]  # no second precompile for the shape
    assert fallback_calls == [32, 1, 8, 24]


def test_jobs_run_in_threads_and_a_failing_size_only_reports(op, hl_env, caplog):
    import hlvllm.ops as ops
    from hlvllm import precompile

    fn, dispatch, _, helion_calls = op
    _threads(hl_env, 3)
    hl_env.setattr(precompile, "_interpreted", lambda: False)  # the CPU interpreters force one thread
    recording = ops._helion_scaled_mm

    def slow_or_failing(a, b, scale_a, scale_b, out_dtype, bias):
        if threading.current_thread().name.startswith("hlvllm-precompile"):
            time.sleep(0.05)
            if a.shape[0] == 4:
                raise RuntimeError("no resources for this config")
            helion_calls.append((a.shape[0], threading.current_thread().name, *[None] * 5))
            return None
        return recording(a, b, scale_a, scale_b, out_dtype, bias)

    hl_env.setattr(ops, "_helion_scaled_mm", slow_or_failing)
    with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
        fn(*_args(16)[0])
    names = {c[1] for c in helion_calls[:-1]}
    assert sorted(c[0] for c in helion_calls[:-1]) == [1, 2, 8, 24, 32]
    assert len(names) > 1 and all(n.startswith("hlvllm-precompile") for n in names)
    assert "precompiled fp8_dynamic N=48 K=96 at M=1,2,4,8,24,32" in caplog.text
    assert "(3 threads); 1 failed" in caplog.text
    assert not dispatch._broken  # the failed job breaks nothing: M = 4's own call decides
    args, d = _args(4)
    out = fn(*args)
    assert dispatch.DISPATCH_COUNTS[("helion", 4, N, K)] == 1
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)


def test_no_precompile_under_capture_or_for_marked_sizes(op, hl_env):
    from hlvllm import dispatch, precompile

    fn, _, _, helion_calls = op
    _threads(hl_env, 2)
    hl_env.setattr(dispatch, "tuned_fallback", lambda fmt, m, n, k: m == 8)  # M = 8 runs vLLM's kernel
    fn(*_args(2)[0])
    assert sorted(c[0] for c in helion_calls[:-1]) == [1, 4, 16, 24, 32]
    never = []
    assert precompile.precompile_shape("fp8_dynamic", 2, N, K, never.append, lambda s: True) == []  # done
    precompile._done.clear()
    hl_env.setattr(torch.cuda, "is_available", lambda: True)
    hl_env.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert precompile.precompile_shape("fp8_dynamic", 2, N, K, never.append, lambda s: True) == []
    assert never == [] and not precompile._done  # under capture: nothing, and not marked done


def test_capture_sizes_from_vllm_config(hl_env, graphs_on_config):
    from hlvllm import support

    graphs_on_config.compilation_config.cudagraph_capture_sizes = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert support.cudagraph_capture_sizes() == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    graphs_on_config.compilation_config.max_cudagraph_capture_size = 16
    assert support.cudagraph_capture_sizes() == [1, 2, 4, 8, 16]


def test_setting_is_validated(hl_env):
    from hlvllm.settings import get_settings

    _threads(hl_env, 8)
    assert get_settings().precompile_threads == 8
    hl_env.setenv("HL_PRECOMPILE_THREADS", "many")
    get_settings.cache_clear()
    with pytest.raises(ValueError, match="HL_PRECOMPILE_THREADS must be a non-negative integer"):
        get_settings()
