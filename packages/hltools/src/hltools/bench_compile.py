"""Parallel precompile for ``hltools bench kernels``: compile every Helion config (and DeepGEMM shape)
the timed loop will run in spawned processes first, so the loop finds Triton's and DeepGEMM's
on-disk caches warm and its timing never waits for a compiler.

This module imports torch; helion and vLLM only inside functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from hlcore.formats import get_format
from hltools import providers
from hltools.bench import BenchShape, Candidate, GemmInputs, block_scale_a


@dataclass(frozen=True)
class CompileJob:
    """Compile one kernel for a (format, N, K) at the given Ms: ``kind`` ``helion`` (``config``: the
    picked config's JSON) or ``deep_gemm`` (vLLM's DeepGEMM JIT)."""

    kind: str
    fmt: str
    n: int
    k: int
    ms: tuple[int, ...]
    config: str = ""
    out_dtype: str = "bf16"
    block_scale_a: str = "row"  # hltools.bench.BLOCK_SCALE_A_LAYOUTS: the layout the timed loop reads


def compile_jobs(
    shapes: Sequence[BenchShape],
    *,
    out_dtype: str = "bf16",
    candidates: Mapping[str, Sequence[Candidate]] | None = None,
    pick: Callable[[str, int, int, int], str] | None = None,
    block_scale_a: str = "row",
) -> list[CompileJob]:
    """One Helion job per (format, N, K, picked config) with the Ms that use it (Triton specializes
    M = 1, multiples of 16 and the rest: all of them run), and one DeepGEMM job per block-FP8 (N, K)
    when DeepGEMM is among the vLLM candidates. ``pick(fmt, m, n, k) -> config JSON`` defaults to
    :func:`hlcore.scaled_mm_config.pick_scaled_mm_config` for the current GPU; ``block_scale_a``:
    the Block_FP8 scale_a layout the Helion jobs compile for (Triton specializes unit strides)."""
    if pick is None:
        from hlcore.scaled_mm_config import pick_scaled_mm_config

        def pick(fmt, m, n, k):
            return pick_scaled_mm_config(fmt, m, n, k).config_json

    kernels = {c.kernel for cs in (candidates or {}).values() for c in cs}
    jobs: dict[tuple, list[int]] = {}
    for s in shapes:
        for m in s.ms:
            jobs.setdefault(("helion", s.fmt, s.n, s.k, pick(s.fmt, m, s.n, s.k)), []).append(m)
        if s.fmt == "block_fp8" and providers.DeepGemmBlock.name in kernels:
            jobs.setdefault(("deep_gemm", s.fmt, s.n, s.k, ""), []).extend(s.ms)
    return [
        CompileJob(
            kind,
            fmt,
            n,
            k,
            tuple(sorted(set(ms))),
            cfg,
            out_dtype,
            block_scale_a if kind == "helion" else "row",
        )
        for (kind, fmt, n, k, cfg), ms in jobs.items()
    ]


#: GPU memory budgeted to one compile worker besides its operands: its CUDA context and Triton's
#: and Helion's state. With twice the largest weight it covers the most one worker was seen to hold
#: (lab/results/2026-12-05-h, "What a compile worker holds"), with a little to spare.
WORKER_GPU_BYTES = 5 << 28  # 1.25 GiB
#: The share of the GPU's free memory compile workers may take together while a process times on
#: the same GPU (the grid's compiles alongside its timing); that process keeps the rest (one
#: shape's weight copies larger than L2, each drawn through float32).
WORKER_MEMORY_SHARE = 0.5


def workers_for_memory(
    workers: int, free_bytes: int, largest_weight_bytes: int, share: float = WORKER_MEMORY_SHARE
) -> int:
    """How many of ``workers`` compile workers fit on one GPU: each is budgeted
    :data:`WORKER_GPU_BYTES` plus twice ``largest_weight_bytes`` (the run's largest N x K, one byte
    per element: its weight operand and the caching allocator's slack), together at most ``share``
    of ``free_bytes`` (the GPU's free memory before the workers start: :data:`WORKER_MEMORY_SHARE`
    where a process times beside them, as the grid's; 1.0 where nothing runs beside them, as
    ``bench kernels``' precompile); at least 1. Every worker holds its own CUDA context on that GPU,
    and one per CPU is many on a small GPU (2026-12-05-g: 16 grid workers holding 4.5-5.3 GiB each
    ran an 80 GiB GPU out of memory).

    Raises ValueError when ``workers`` is below 1."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    per_worker = WORKER_GPU_BYTES + 2 * largest_weight_bytes
    return max(1, min(workers, int(free_bytes * share) // per_worker))


def workers_for_gpu_memory(
    workers: int, largest_weight_bytes: int, share: float = WORKER_MEMORY_SHARE
) -> tuple[int, str]:
    """:func:`workers_for_memory` on the current CUDA GPU's free memory: the count, and why fewer
    than ``workers`` (empty when the cap does not bind). No CUDA device: ``workers``, not capped."""
    if not torch.cuda.is_available():
        return workers, ""
    free, _ = torch.cuda.mem_get_info()
    capped = workers_for_memory(workers, free, largest_weight_bytes, share)
    if capped == workers:
        return workers, ""
    each = (WORKER_GPU_BYTES + 2 * largest_weight_bytes) / 1024**3
    within = "" if share >= 1 else f"{share:.0%} of "
    return capped, f"{each:.1f} GiB budgeted each, within {within}the GPU's {free / 1024**3:.1f} GiB free"


def _compile_inputs(job: CompileJob, m: int, device: str) -> GemmInputs:
    """Cheap random operands of the right dtypes and layouts (values do not matter for compiling).

    Each operand is drawn in its own one-byte dtype, never through a wider copy: the grid runs up
    to one compile worker per CPU beside the process that times on the same GPU, and a float32 draw of a
    large weight (and its temporaries) in every worker can exhaust the GPU's memory."""
    f = get_format(job.fmt)
    dtype = getattr(torch, f.operand_dtype)
    out_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[job.out_dtype]

    def q(rows):
        if dtype == torch.int8:
            return torch.randint(-127, 128, (rows, job.k), dtype=dtype, device=device)
        if dtype.itemsize != 1:
            raise ValueError(f"{job.fmt}: operand dtype {dtype} is not one byte wide")
        # bytes 0x00-0x6f: finite, non-negative values of every float8 format (no inf/NaN patterns)
        return torch.empty((rows, job.k), dtype=torch.uint8, device=device).random_(0, 0x70).view(dtype)

    sa = torch.rand(f.scale_a_shape(m, job.k), device=device) + 0.5
    sb = torch.rand(f.scale_b_shape(job.n, job.k), device=device) + 0.5
    return GemmInputs(job.fmt, job.n, job.k, q(m), sa, [(q(job.n).t(), sb)], out_dtype)


def short_error(exc: BaseException) -> str:
    """An error as a job's or a key's failure reason: its type and the first 300 characters of its
    message."""
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def run_compile_job(job: CompileJob, device: str = "cuda") -> str | None:
    """Compile (and run once) ``job`` in this process; None on success, else the error (short). On
    a GPU the process's cached blocks are then given back (a compile worker lives on beside the
    process that times on the same GPU)."""
    try:
        _run_compile_job(job, device)
        return None
    except Exception as exc:  # noqa: BLE001 - reported; the timed loop then skips or fails the kernel
        return short_error(exc)
    finally:
        if device == "cuda" and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def _run_compile_job(job: CompileJob, device: str) -> None:
    for m in job.ms:
        inputs = _compile_inputs(job, m, device)
        b, sb = inputs.weights[0]
        if job.kind == "helion":
            from hlcore.scaled_mm import scaled_mm

            sa = block_scale_a(inputs.scale_a, job.fmt, job.block_scale_a)
            scaled_mm(inputs.a, b, sa, sb, inputs.out_dtype, block_size=inputs.block_size, config=job.config)
        elif job.kind == "deep_gemm":
            providers.DeepGemmBlock(job.fmt, inputs.out_dtype, job.n, job.k)(inputs.a, b, inputs.scale_a, sb)
        else:
            raise ValueError(f"unknown compile job kind {job.kind!r}")
    if device == "cuda":
        torch.cuda.synchronize()


def precompile(
    jobs: Sequence[CompileJob],
    workers: int,
    on_done: Callable[[CompileJob, str | None], None] | None = None,
    device: str = "cuda",
) -> dict[CompileJob, str]:
    """Run ``jobs`` in ``workers`` spawned processes (each imports torch/helion once) so the timed
    loop finds Triton's and DeepGEMM's on-disk caches warm; returns the failed jobs' errors.
    ``workers <= 1`` runs them here, one after the other."""
    errors: dict[CompileJob, str] = {}
    run = functools.partial(run_compile_job, device=device)
    if workers <= 1:
        results = map(run, jobs)
    else:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(min(workers, len(jobs)) or 1)
        results = pool.imap(run, jobs, chunksize=1)
    try:
        for job, err in zip(jobs, results, strict=True):
            if err:
                errors[job] = err
            if on_done:
                on_done(job, err)
    finally:
        if workers > 1:
            pool.close()
            pool.join()
    return errors
