"""hltools.bench_compile on the CPU: the compile jobs of a benchmark's shapes, and one run here."""

import pytest

from hltools import bench, bench_compile
from hltools.bench import BenchShape


def test_compile_jobs_group_by_config():
    shapes = [
        BenchShape("t", "fp8_dynamic", "o", 64, 128, (1, 2, 32)),
        BenchShape("t", "block_fp8", "o", 64, 128, (1,)),
    ]

    def pick(fmt, m, n, k):
        return "small" if m <= 16 else "large"

    jobs = bench_compile.compile_jobs(shapes, pick=pick, candidates=bench.default_candidates())
    assert [(j.kind, j.fmt, j.ms, j.config) for j in jobs] == [
        ("helion", "fp8_dynamic", (1, 2), "small"),
        ("helion", "fp8_dynamic", (32,), "large"),
        ("helion", "block_fp8", (1,), "small"),
        ("deep_gemm", "block_fp8", (1,), ""),
    ]
    no_dg = bench_compile.compile_jobs(
        shapes, pick=pick, candidates=bench.default_candidates(block_order=["cutlass"])
    )
    assert all(j.kind == "helion" for j in no_dg)


@pytest.mark.triton_interpret  # compiles generated code (W8A8_INT8 among the jobs)
def test_compile_job_runs_helion_on_the_cpu():
    shape = BenchShape("t", "w8a8_int8", "o", 32, 128, (1, 3))
    (job,) = bench_compile.compile_jobs([shape])
    assert bench_compile.run_compile_job(job, device="cpu") is None
    done = []
    assert bench_compile.precompile([job], 1, on_done=lambda j, e: done.append((j, e)), device="cpu") == {}
    assert done == [(job, None)]
    broken = bench_compile.CompileJob("helion", "fp8_dynamic", 32, 128, (1,), config='{"block_sizes": [3]}')
    assert bench_compile.run_compile_job(broken, device="cpu")
    assert bench_compile.run_compile_job(
        bench_compile.CompileJob("nope", "fp8_dynamic", 32, 128, (1,)), device="cpu"
    ).startswith("ValueError")


@pytest.mark.triton_interpret
def test_compile_jobs_compile_helion_for_the_block_scale_layout_timed(monkeypatch):
    shapes = [BenchShape("t", "block_fp8", "o", 64, 128, (1, 8))]
    jobs = bench_compile.compile_jobs(
        shapes, pick=lambda *a: "c", candidates=bench.default_candidates(), block_scale_a="tma"
    )
    assert [(j.kind, j.block_scale_a) for j in jobs] == [("helion", "tma"), ("deep_gemm", "row")]
    from hlcore import scaled_mm as sm

    seen, real = [], sm.scaled_mm
    monkeypatch.setattr(
        sm, "scaled_mm", lambda a, b, sa, *r, **kw: seen.append(sa.stride()) or real(a, b, sa, *r, **kw)
    )
    (job,) = bench_compile.compile_jobs(shapes, candidates={}, block_scale_a="tma")
    assert bench_compile.run_compile_job(job, device="cpu") is None
    assert seen == [(1, 4), (1, 8)]  # M = 1 and 8, TMA-aligned column-major


@pytest.mark.parametrize("fmt", ["fp8_dynamic", "w8a8_int8", "block_fp8"])
def test_compile_operands_are_drawn_without_a_wider_copy_of_the_weight(fmt):
    """A compile worker per CPU runs beside the timing process on one GPU: a weight drawn through a
    float32 copy held several times its bytes in each worker, and on an 80 GiB H100 the timing
    process ran out of memory (Qwen3-32B W8A8_INT8, lab/results/2026-12-05-g). Every tensor an op
    makes while drawing the operands is at most one byte an element once it is weight-sized."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    n, k = 256, 512
    made = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            made.extend(t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
            return out

    job = bench_compile.CompileJob("helion", fmt, n, k, (4,))
    with Record():
        inputs = bench_compile._compile_inputs(job, 4, "cpu")
    big = [(t.dtype, t.numel()) for t in made if t.numel() >= n * k]
    assert big and all(t.element_size() == 1 for t in made if t.numel() >= n * k), big
    b, _ = inputs.weights[0]
    assert b.shape == (k, n) and inputs.a.shape == (4, k)
    for t in (inputs.a, b):
        wide = t.float()
        assert t.dtype == getattr(torch, bench_compile.get_format(fmt).operand_dtype)
        assert torch.isfinite(wide).all() and wide.abs().max() <= 448 and wide.std() > 0


def test_bench_precompile_starts_fewer_workers_where_the_gpus_free_memory_is_small(monkeypatch):
    """``bench kernels``' precompile asks for 16 processes; with 16 GiB free and Qwen3-32B's
    gate_up (N 51200, K 5120) it starts 9 (all the free memory: nothing times beside them) and
    says why; with 139 GiB free all 16, silently. The jobs and the pool are faked (no GPU here)."""
    import io

    from rich.console import Console

    from hltools.commands import bench_kernels

    gib = 1024**3
    started = []
    monkeypatch.setattr(bench_compile, "compile_jobs", lambda shapes, **kw: ["job"])
    monkeypatch.setattr(
        bench_compile, "precompile", lambda todo, workers, on_done: started.append(workers) or {}
    )
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    shapes = [BenchShape("qwen3-32b", "fp8_dynamic", "gate_up", 51200, 5120, (1, 2)),
              BenchShape("qwen3-32b", "fp8_dynamic", "o", 5120, 8192, (1, 2))]  # fmt: skip
    for free, want, said in [
        (
            16 * gib,
            9,
            "precompiling with 9 processes, not 16: 1.7 GiB budgeted each, within the GPU's 16.0 GiB free",
        ),
        (139 * gib, 16, None),
    ]:
        monkeypatch.setattr("torch.cuda.mem_get_info", lambda free=free: (free, 140 * gib))
        text = io.StringIO()
        bench_kernels._precompile(Console(file=text, width=300), shapes, {}, "bf16", 16, {}, 0.0)
        assert started[-1] == want
        out = " ".join(text.getvalue().split())
        assert "precompiled 1 kernels in" in out and f"with {want} processes" in out
        assert (said in out) if said else "not 16" not in out
