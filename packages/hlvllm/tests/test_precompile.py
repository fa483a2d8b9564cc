"""HL_PRECOMPILE_THREADS: a GEMM shape's CUDA-graph sizes compiled at its first Helion call;
HL_PRECOMPILE_PROCESSES: every registered shape's sizes compiled by worker processes."""

import logging
import threading
import time

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

N, K = 48, 96
SIZES = [1, 2, 4, 8, 16, 24, 32]


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
    precompile.set_capture_sizes([*SIZES, 40, 48])  # vLLM's list; 40, 48 > 32: vLLM's kernel
    return torch.ops.hlvllm.scaled_mm, dispatch, fallback_calls, helion_calls


def _args(m, seed=0):
    d = generate_scaled_mm_inputs(m, N, K, with_bias=True, seed=seed)
    return (d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"]), d


def _threads(hl_env, n):
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_PRECOMPILE_THREADS", str(n))
    get_settings.cache_clear()


def _no_grouping(hl_env):
    import hlvllm.ops as ops

    hl_env.setattr(ops, "compile_key", lambda fmt, m, n, k, device: m)  # every size its own kernel


def test_off_by_default_compiles_only_the_called_size(op):
    fn, dispatch, _, helion_calls = op
    fn(*_args(32)[0])
    assert [c[0] for c in helion_calls] == [32]


def test_first_call_compiles_one_size_per_kernel_of_the_shape(op, hl_env):
    import hlvllm.ops as ops

    fn, dispatch, fallback_calls, helion_calls = op
    _threads(hl_env, 4)
    args, d = _args(32)
    out = fn(*args)
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    keys = {s: ops.compile_key("fp8_dynamic", s, N, K, torch.device("cpu")) for s in SIZES}
    assert keys[1][1] == 1 and keys[16][1] == keys[32][1] == 16 and keys[2][1] == 0  # Triton's classes
    jobs, real = helion_calls[:-1], helion_calls[-1]
    assert real[0] == 32 and real[2] is args[0]  # then the real call, on the real operands
    ran = sorted(c[0] for c in jobs)
    assert 32 in ran and len(ran) == len(set(keys.values()))  # one size per kernel, its own size too
    assert {keys[s] for s in ran} == set(keys.values())  # (not 40, 48: above 32)
    a, b, scale_a, scale_b, bias = args[0], args[1], args[2], args[3], args[5]
    for m, _, a2, sa2, b2, sb2, bias2 in jobs:  # the real call's layouts, M rows of ones
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
    from hlvllm import precompile, routing

    fn, dispatch, _, helion_calls = op
    _threads(hl_env, 3)
    _no_grouping(hl_env)
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
    assert sorted(c[0] for c in helion_calls[:-1]) == [1, 2, 8, 16, 24, 32]
    assert len(names) > 1 and all(n.startswith("hlvllm-precompile") for n in names)
    assert "precompiled fp8_dynamic N=48 K=96 at M=1,2,4,8,16,24,32" in caplog.text
    assert "(3 threads); 1 failed" in caplog.text
    assert not routing._broken  # the failed job breaks nothing: M = 4's own call decides
    args, d = _args(4)
    out = fn(*args)
    assert dispatch.DISPATCH_COUNTS[("helion", 4, N, K)] == 1
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)


def test_a_precompile_error_never_fails_the_call(op, hl_env, caplog):
    from hlvllm import precompile

    fn, dispatch, _, helion_calls = op
    _threads(hl_env, 2)

    def broken(*a, **kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    hl_env.setattr(precompile, "precompile_shape", broken)
    args, d = _args(8)
    with caplog.at_level(logging.WARNING, logger="vllm.hlvllm"):
        out = fn(*args)
    assert "precompile of fp8_dynamic N=48 K=96 failed (CUDA error" in caplog.text
    assert dispatch.DISPATCH_COUNTS[("helion", 8, N, K)] == 1
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)


def test_no_precompile_under_capture_or_for_marked_sizes(op, hl_env):
    from hlvllm import precompile, routing

    fn, _, _, helion_calls = op
    _threads(hl_env, 2)
    _no_grouping(hl_env)
    real_decide = routing.decide

    def decide(fmt, m, n, k):  # M = 8 runs vLLM's kernel
        return routing.Route(routing.VLLM, "test") if m == 8 else real_decide(fmt, m, n, k)

    hl_env.setattr(routing, "decide", decide)
    fn(*_args(2)[0])
    assert sorted(c[0] for c in helion_calls[:-1]) == [1, 2, 4, 16, 24, 32]
    never = []
    assert precompile.precompile_shape("fp8_dynamic", 2, N, K, never.append, lambda s: True) == []  # done
    precompile._done.clear()
    hl_env.setattr(torch.cuda, "is_available", lambda: True)
    hl_env.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert precompile.precompile_shape("fp8_dynamic", 2, N, K, never.append, lambda s: True) == []
    assert never == [] and not precompile._done  # under capture: nothing, and not marked done


def test_ones_like_rows_keeps_the_layout():
    from hlvllm.precompile import ones_like_rows

    row = torch.zeros(4, 3)
    col = torch.zeros(3, 4).t()  # column-major [4, 3], e.g. DeepGEMM's activation scales
    assert ones_like_rows(row, 4, 2).stride() == (3, 1) and ones_like_rows(row, 4, 2).shape == (2, 3)
    c2 = ones_like_rows(col, 4, 2)
    assert c2.shape == (2, 3) and c2.stride() == (1, 2) and bool((c2 == 1).all())
    per_channel = torch.zeros(7, 1)
    assert ones_like_rows(per_channel, 4, 2) is per_channel and ones_like_rows(None, 4, 2) is None
    with pytest.raises(ValueError, match="layout not reproduced"):
        ones_like_rows(torch.zeros(4, 6)[:, ::2], 4, 2)


def test_capture_sizes_are_read_from_vllm_config_when_used(hl_env, graphs_on_config):
    from vllm.config import CUDAGraphMode

    from hlvllm import precompile, support

    cc = graphs_on_config.compilation_config
    cc.cudagraph_capture_sizes = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert support.capture_sizes_of(cc) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    precompile.set_compilation_config(cc)
    cc.max_cudagraph_capture_size = 16  # vLLM may change the sizes after model load
    assert precompile.capture_sizes() == (1, 2, 4, 8, 16)
    cc.cudagraph_mode = CUDAGraphMode.NONE
    assert precompile.capture_sizes() == ()


def test_setting_is_validated(hl_env):
    from hlvllm.settings import AUTO, get_settings

    _threads(hl_env, 8)
    assert get_settings().precompile_threads == 8
    hl_env.setenv("HL_PRECOMPILE_THREADS", "many")
    get_settings.cache_clear()
    with pytest.raises(ValueError, match="HL_PRECOMPILE_THREADS must be a non-negative integer"):
        get_settings()
    hl_env.delenv("HL_PRECOMPILE_THREADS")
    hl_env.setenv("HL_PRECOMPILE_PROCESSES", "-2")
    get_settings.cache_clear()
    with pytest.raises(
        ValueError, match="HL_PRECOMPILE_PROCESSES must be auto or a non-negative integer; got '-2'"
    ):
        get_settings()
    hl_env.setenv("HL_PRECOMPILE_PROCESSES", "many")
    get_settings.cache_clear()
    with pytest.raises(ValueError, match="must be auto or a non-negative integer; got 'many'"):
        get_settings()
    hl_env.setenv("HL_PRECOMPILE_PROCESSES", "4")
    get_settings.cache_clear()
    assert get_settings().precompile_processes == 4
    for auto in ("auto", " AUTO ", None):
        if auto is None:
            hl_env.delenv("HL_PRECOMPILE_PROCESSES")
        else:
            hl_env.setenv("HL_PRECOMPILE_PROCESSES", auto)
        get_settings.cache_clear()
        assert get_settings().precompile_processes == AUTO


@pytest.mark.parametrize(
    ("cuda", "tp", "dp", "cpus", "expected"),
    [
        (True, 1, 1, 16, 8),  # the H200 machine of every capture-mode measurement
        (True, 1, 1, 6, 3),  # half the cores
        (True, 1, 1, 1, 1),
        (True, 2, 1, 64, 0),  # several ranks: each would start a pool for the same kernels
        (True, 1, 2, 64, 0),  # several engines (data parallel)
        (False, 1, 1, 16, 0),  # no CUDA: nothing to compile for
    ],
)
def test_auto_worker_processes_only_for_one_gpu_engine(hl_env, cuda, tp, dp, cpus, expected):
    """HL_PRECOMPILE_PROCESSES=auto (the default) resolves, where the pool would start, to
    min(8, cores // 2) for an engine on one GPU and to 0 otherwise; an explicit N is used as given."""
    from vllm.config import DeviceConfig, ParallelConfig, VllmConfig, set_current_vllm_config

    from hlvllm import precompile
    from hlvllm.settings import get_settings

    hl_env.setattr(torch.cuda, "is_available", lambda: cuda)
    hl_env.setattr(precompile.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    hl_env.setenv("HL_KERNEL_CACHE_DIR", "/tmp/hl-test-unused")
    for interpreter in ("HELION_INTERPRET", "TRITON_INTERPRET"):  # as on a GPU (nothing runs here)
        hl_env.delenv(interpreter, raising=False)
    hl_env.delenv("HL_PRECOMPILE_PROCESSES", raising=False)
    get_settings.cache_clear()
    config = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        parallel_config=ParallelConfig(tensor_parallel_size=tp, data_parallel_size=dp),
    )
    precompile.reset()
    with set_current_vllm_config(config):
        assert precompile.auto_pool_processes() == expected
        assert precompile._pool_processes() == expected
    assert precompile._pool_processes() == expected  # resolved once: the timer thread asks outside
    hl_env.setenv("HL_PRECOMPILE_PROCESSES", "3")
    get_settings.cache_clear()
    assert precompile._pool_processes() == (3 if cuda else 0)
    precompile.reset()


@pytest.mark.triton_interpret  # the workers compile generated code
def test_worker_processes_get_every_helion_size_and_the_first_call_waits(op, hl_env, tmp_path, caplog):
    """HL_PRECOMPILE_PROCESSES: the registered shape's Helion GEMM at every capture size <= 32,
    recorded without launching, goes to the worker pool (a fake here that runs the jobs in this
    process; hlcore's tests spawn real workers), and the first call waits for it."""
    import hlvllm.ops as ops
    from hlcore import kernel_pool
    from hlcore import scaled_mm as sm
    from hlvllm import guard, precompile
    from hlvllm.settings import get_settings

    fn, dispatch, fallback_calls, helion_calls = op
    hl_env.setenv("HL_KERNEL_CACHE_DIR", str(tmp_path / "kc"))
    hl_env.setenv("HL_PRECOMPILE_PROCESSES", "3")
    get_settings.cache_clear()
    sm._kernel_for.cache_clear()
    hl_env.setattr(precompile, "POOL_DELAY", 3600.0)  # the first call starts the pool, not the timer
    started = []

    class FakePool:
        def __init__(self, jobs, processes):
            self.jobs, self.processes, self._procs = list(jobs), processes, [None]

        def start(self):
            started.append(self)
            return self

        def wait(self, timeout):
            reports = kernel_pool.run_jobs(self.jobs)
            failed = [r["error"] for r in reports if r["error"]]
            return {
                "jobs": len(reports),
                "ran": len(reports) - len(failed),
                "failed": len(failed),
                "workers": 1,
                "seconds": 0.0,
                "errors": failed,
            }

    hl_env.setattr(kernel_pool, "Pool", FakePool)
    try:
        args, d = _args(8)
        guard.register_shape(
            ops.scaled_mm_guard_shape("fp8_dynamic", args[1], args[3], args[5], torch.bfloat16)
        )
        assert precompile._pool_timer is not None  # armed by the registration
        helion_calls.clear()
        with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
            out = fn(*args)
        assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
        (pool,) = started
        assert pool.processes == 3
        # M of each job (not 40, 48): the output's rows (A's one row at M = 1 goes as a stride-0 pair)
        assert sorted(job.args[5]["tensor"][0][0] for job in pool.jobs) == SIZES
        for job in pool.jobs:
            m = job.args[5]["tensor"][0][0]
            a_layout = [[2, K], [0, 1]] if m == 1 else [[m, K], [K, 1]]
            assert job.args[0]["tensor"][:3] == [*a_layout, "float8_e4m3fn"]  # the quant's layouts
            assert job.args[1]["tensor"][:3] == [[N, K], [K, 1], "float8_e4m3fn"]  # the layer's weight
        assert any("precompiled 7 of 7 Helion kernels" in r.getMessage() for r in caplog.records)
        assert fallback_calls == [8]  # the real call, checked against vLLM's kernel as always
        from hlvllm import startup  # each phase of ours on this path was timed

        for phase in ("shape registration", "recording", "waiting for workers", "first Helion calls"):
            assert startup.SECONDS[phase] > 0, phase
        assert startup.SECONDS["checks against vLLM"] > 0
        assert startup.SECONDS["recording"] <= startup.SECONDS["shape registration"]
        assert precompile.wait_pool() is None  # once per process
    finally:
        sm._kernel_for.cache_clear()
