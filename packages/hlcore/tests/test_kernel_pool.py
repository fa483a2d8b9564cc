"""hlcore.kernel_pool: a process's Helion GEMM calls recorded without launching, compiled by worker
processes into the kernel cache, then loaded (not compiled) by the process's own first calls.

The pool needs generated code, so it runs in the Triton-interpreter mode (and on a GPU with
``HL_TEST_GPU=1``); in Helion's eager mode only the metadata round trip runs."""

import os

import pytest
import torch

from hlcore import kernel_cache as kc
from hlcore import kernel_pool as kp
from hlcore import scaled_mm as sm
from hlcore.testing import rel_error, tolerance

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
GPU = os.environ.get("HL_TEST_GPU") == "1" and torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
needs_codegen = pytest.mark.skipif(HELION_MODE, reason="HELION_INTERPRET=1 generates no code: cache off")

# split_k 1: the Triton interpreter has no bf16 atomics
CFG = {"block_sizes": [16, 32, 128], "split_k": 1, "swap_ab": True, "num_warps": 4, "num_stages": 1}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "kc"
    monkeypatch.setenv(kc.ENV_VAR, str(directory))
    sm._kernel_for.cache_clear()
    yield directory
    sm._kernel_for.cache_clear()


def test_describe_rebuild_keeps_what_the_cache_key_reads():
    base = torch.arange(4 * 300, dtype=torch.float32).reshape(4, 300)
    offset_view = base[1:, 44:]  # storage offset 344, row stride 300
    col_major = torch.randn(6, 8).t()  # [8, 6], strides (1, 8)
    fp8 = torch.randn(3, 16).to(torch.float8_e4m3fn)
    args = (offset_view, col_major, fp8, offset_view, None, torch.bfloat16, 128, 2.5, True)
    items = kp.describe(args)
    assert items[3] == {"same": 0}
    rebuilt = kp.rebuild(items)
    for a, r in zip(args, rebuilt, strict=True):
        if isinstance(a, torch.Tensor):
            assert (r.shape, r.stride(), r.dtype, r.storage_offset()) == (
                a.shape,
                a.stride(),
                a.dtype,
                a.storage_offset(),
            )
            assert not r.any()  # zeros: values never matter for what compiles
        else:
            assert r == a
    assert rebuilt[3] is rebuilt[0]
    assert kc.call_key(rebuilt) == kc.call_key(args)  # the exact key a cache entry is found by


def test_describe_rejects_other_types():
    with pytest.raises(TypeError, match="argument 1 of type str"):
        kp.describe((torch.zeros(1), "x"))


def test_split_keeps_a_config_in_one_worker():
    jobs = [kp.Job("scaled_mm", f"c{i % 3}", [i]) for i in range(7)]  # c0 x3, c1 x2, c2 x2
    groups = kp.split(jobs, 2)
    assert len(groups) == 2 and sorted(len(g) for g in groups) == [3, 4]
    for g in groups:
        configs = {j.config for j in g}
        assert all(sum(j.config == c for j in jobs) == sum(j.config == c for j in g) for c in configs)
    assert len(kp.split(jobs, 8)) == 3  # never more workers than configs


def test_unknown_kernel_is_reported_not_raised():
    (report,) = kp.run_jobs([kp.Job("nope", "{}", [])])
    assert report["error"].startswith("ValueError: kernel_pool: unknown kernel 'nope'")


@needs_codegen
def test_recording_launches_nothing_and_the_pool_fills_the_cache(cache_dir):
    inputs = [sm.generate_scaled_mm_inputs(m, 64, 256, device=DEVICE, seed=m) for m in (3, 16)]
    before = kc.stats()
    with kp.recording() as jobs:
        outs = [sm.scaled_mm(**d, config=CFG) for d in inputs]
        sm.scaled_mm(**inputs[0], config=CFG)  # the same call again: one job
    assert [(o.shape, o.dtype) for o in outs] == [((3, 64), torch.bfloat16), ((16, 64), torch.bfloat16)]
    assert kp.recorder() is None
    assert kc.stats() == before  # no Helion call, no cache lookup
    assert len(jobs) == 2 and not list(cache_dir.glob("*/*.py"))

    report = kp.Pool(jobs, 2).start().wait(timeout=600)
    assert (report["ran"], report["failed"], report["workers"]) == (2, 0, 1), report["errors"]
    assert len(list(cache_dir.glob("_scaled_mm_body/*.py"))) == 2

    with kp.recording() as again:
        sm.scaled_mm(**inputs[1], config=CFG)
    assert again == []  # its entry exists now: a warm start records nothing

    for d in inputs:  # the process's own first calls load what the workers compiled
        out = sm.scaled_mm(**d, config=CFG)
        assert rel_error(out, sm.scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    delta = {k: kc.stats()[k] - before[k] for k in before}
    assert (delta["disk_hits"], delta["misses"]) == (2, 0)


@needs_codegen
def test_a_failing_job_is_reported(cache_dir):
    d = sm.generate_scaled_mm_inputs(2, 64, 256, device=DEVICE)
    with kp.recording() as jobs:
        sm.scaled_mm(**d, config=CFG)
    (job,) = jobs
    bad = kp.Job(job.kernel, job.config, job.args[:2])  # missing arguments
    (report,) = kp.run_jobs([bad])  # what a worker reports to the pool
    assert report["error"] is not None and "argument" in report["error"]
