"""``hltools autotune``: tuned configs for every (format, N, K, M) of a model on this GPU
(:mod:`hltools.autotune`)."""

from __future__ import annotations

import os
import shlex
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hltools import options as opt
from hltools.provenance import git_commit
from hltools.shapes import UnknownLayer


class Effort(StrEnum):
    quick = "quick"
    full = "full"
    grid = "grid"


TpSizes = Annotated[
    str, typer.Option(help="Comma-separated tensor-parallel sizes (N/tp column-, K/tp row-parallel).")
]
NumTokens = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated M values; default 1,2,4,8,16,24,32, plus vLLM's capture sizes up to "
        "HL_MAX_HELION_SIZE when that is above 32."
    ),
]
EffortOption = Annotated[
    Effort | None,
    typer.Option(
        help="grid: every config of the decode search space (hltools.grid_search), one search per "
        "(format, N, K, M bucket), compiled in worker processes (one per CPU, --jobs) alongside the "
        "timing, on this machine's GPUs (--gpus) or a Ray cluster's (--ray), whole shapes per GPU. quick / full: "
        "Helion's autotuner at that effort, per key (full: about 10 minutes a key, by Helion's README). "
        "Default: grid."
    ),
]
BudgetMinutes = Annotated[
    float | None,
    typer.Option(min=0, help="Wall-clock budget for the whole run; keys left over resume on the next run."),
]
Seed = Annotated[int, typer.Option(help="Seed of the search and of the generated inputs.")]
Output = Annotated[
    Path | None,
    typer.Option(
        help="Config directory written as `<output>/scaled_mm/<gpu>.json`; default $HL_CONFIG_DIR, else "
        "./hl-configs (use `--output configs` in a checkout to update the shipped configs)."
    ),
]
Force = Annotated[bool, typer.Option(help="Retune keys that are already in the file.")]
List = Annotated[
    bool,
    typer.Option(
        "--list",
        help='Print the keys (and which are done; a done key marked "fallback": true runs vLLM\'s '
        "kernel) and exit; needs no GPU.",
    ),
]
Gpus = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Tune on this many local GPUs at once, one worker process each (every visible GPU when "
        "not given; the GPUs must be of one kind). The grid deals whole shapes (format, N, K; their M "
        "buckets when GPUs outnumber shapes), each worker compiling on its share of the CPUs; Helion's "
        "autotuner deals keys round-robin. A stopped run resumes.",
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Tune on the GPUs of a Ray cluster, one task per key on any free GPU (the grid: one per "
        "shard of whole shapes, with the node's CPUs per GPU), each key saved here as it returns (a "
        "stopped run resumes): 'auto' joins this machine's cluster, 'local' starts "
        "one here (on this machine's GPUs), else a cluster address. Needs Ray and hl on every node (pip install "
        '"hltools[ray]"), GPUs of one kind; this machine needs no GPU.',
    ),
]
BlockScaleA = Annotated[
    str,
    typer.Option(
        help="Layout of Block_FP8's activation scales Helion is tuned, checked and marked on: auto "
        "(the layout hlvllm's dispatch mode hands it: tma in capture mode, the default; row with "
        "HL_DISPATCH_AT=op; row with --ray), row (row-major, what hlvllm's op design quantizes into) "
        "or tma (vLLM's TMA-aligned column-major, what Helion reads in capture mode; not with --ray)."
    ),
]
CompileAlongside = Annotated[
    bool | None,
    typer.Option(
        "--compile-alongside/--compile-first",
        show_default=False,
        help="Grid search: compile alongside the timing (the grid's default: each group timed as soon "
        "as its candidates are built, one CPU left to the timing) or every candidate first; the same "
        "picks either way (docs/tuning.md). --effort quick/full compile their own candidates.",
    ),
]
CompileJobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        min=1,
        help="Grid search only (exit 2 with --effort quick / full): CPUs per GPU (default: all of them, "
        "shared among the GPUs): that many compile processes, one fewer when they compile alongside the "
        "timing (which keeps one); fewer still where a GPU's free memory is small (docs/tuning.md).",
    ),
]
Gpu = Annotated[
    str | None,
    typer.Option(
        help="With --list only: mark the keys done in this GPU's file (e.g. nvidia_h200) instead of "
        "this machine's GPU's; the file is `<output>/scaled_mm/<gpu>.json`, where without --output "
        "the directory is the one the plugin reads ($HL_CONFIG_DIR, else the shipped configs). A SM90 "
        "GPU's name (raw, e.g. 'NVIDIA H200', or canonical) or a config file's name; others exit 2."
    ),
]


def autotune(
    model: opt.Model,
    formats: opt.ModelFormats = None,
    tp: TpSizes = "1",
    num_tokens: NumTokens = None,
    layer: opt.Layers = None,
    effort: EffortOption = None,
    budget_minutes: BudgetMinutes = None,
    seed: Seed = 0,
    output: Output = None,
    force: Force = False,
    list_: List = False,
    gpu: Gpu = None,
    gpus: Gpus = None,
    ray: RayAddress = None,
    block_scale_a: BlockScaleA = "auto",
    compile_alongside: CompileAlongside = None,
    jobs: CompileJobs = None,
) -> None:
    """Tune the Helion scaled GEMM for every (format, N, K, M) of a model on this GPU.

    For each key: the grid search (the default; hltools.grid_search: the decode search space,
    seeded with the heuristic config) or Helion's autotuner (--effort quick / full: the default
    config seeded into the search, candidates checked against the fp32 reference, CUDA-graph
    benchmarking), then a check of the result against the reference and a timing against the
    default config and vLLM's kernel for the format (a key where vLLM's kernel is faster is saved
    with "fallback": true). Each key is saved as soon as it is done; rerunning resumes, --force
    retunes. Needs an SM90 CUDA GPU, the kind hlvllm runs on (except --list; `--list --gpu
    nvidia_h200` marks the keys that the shipped H200 file holds). Exits 1 if a key failed.
    """
    from hltools import autotune as at

    out = opt.console()
    source = opt.resolve_model(model)
    config = source.config
    fmts = opt.model_formats(formats, source)
    tps = opt.parse_ints(tp, "--tp")
    tokens = _num_tokens(num_tokens)
    try:
        keys = at.build_keys(config, fmts, tps, tokens, layer)
    except UnknownLayer as exc:
        raise opt.bad_parameter(exc, "--layer") from None
    except ValueError as exc:
        raise opt.bad_parameter(exc, "--tp") from None  # the formats were checked above
    if gpu is not None:
        gpu = opt.parse_gpu(gpu, [output] if output is not None else [])
        if not list_:
            raise typer.BadParameter(
                "only with --list (tuning runs on this machine's GPU)", param_hint="--gpu"
            )
    from hltools.bench import resolve_block_scale_a

    if block_scale_a == "auto" and ray is not None:
        block_scale_a = "row"  # the Ray tasks tune on row-major scales only
    try:
        block_scale_a = resolve_block_scale_a(block_scale_a)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--block-scale-a") from None
    if block_scale_a != "row" and ray is not None:
        raise typer.BadParameter(
            "tma: on this machine's GPUs only (not with --ray)", param_hint="--block-scale-a"
        )
    if gpus is not None and ray is not None:
        raise typer.BadParameter(
            "--gpus counts this machine's GPUs; with --ray leave it out", param_hint="--gpus"
        )
    effort = effort or Effort.grid
    for grid_only, given in (("--compile-alongside", bool(compile_alongside)), ("--jobs", jobs is not None)):
        if given and effort != Effort.grid:
            raise typer.BadParameter(
                f"only with --effort grid (Helion's autotuner compiles its own candidates); got --effort {effort.value}",
                param_hint=grid_only,
            )
    if list_:  # done as a run with this layout would count it (a bad combination above exits 2 first)
        title = f"autotune keys for {model} (tp {','.join(map(str, tps))})"
        _list_keys(out, keys, title, output, gpu, block_scale_a)
        return
    compile_alongside = effort == Effort.grid if compile_alongside is None else compile_alongside
    output = output if output is not None else _default_output()
    command = _resume_command(
        model,
        fmts,
        tps,
        tokens,
        effort,
        seed,
        output,
        budget_minutes,
        block_scale_a,
        compile_alongside,
        jobs,
        layer,
    )
    budget = None if budget_minutes is None else budget_minutes * 60
    options = at.TuneOptions(
        effort=effort.value,
        seed=seed,
        block_scale_a=block_scale_a,
        compile_alongside=compile_alongside,
        compile_workers=jobs,
    )
    if ray is not None:  # the run on the cluster, its table and counts (exit 1 if a key failed)
        command += f" --ray {shlex.quote(ray)}"
        _report(out, _tune_on_ray(out, ray, keys, output, command, options, force, budget, model), command)
        return
    try:
        backend = at.gpu_backend()
    except at.AutotuneError as exc:  # a GPU hlvllm does not run on
        opt.fail(str(exc), 2)
    if backend is None:
        opt.fail(
            "hltools autotune needs a CUDA GPU (every candidate config is timed on the device); "
            "none was found. `hltools autotune --list ...` prints the keys without one.",
            opt.NO_GPU_EXIT,
        )
    gpu_name, tune, check = backend
    path = at.output_path(output, gpu_name)
    gpu_ids = _local_gpus(gpus)
    if effort == Effort.grid and len(gpu_ids) <= 1:
        from hltools import grid_search

        tune = grid_search.make_grid_tuner(_keys_to_tune(keys, path, force, block_scale_a), options)
    meta = at.provenance(gpu_name, command=command, seed=seed, effort=effort.value, model=model)
    meta["commit"] = git_commit()
    meta["block_scale_a"] = block_scale_a
    at.apply_benchmark_env()
    out.print(f"GPU {gpu_name} -> {path}; {len(keys)} keys; effort {effort.value}; seed {seed}")
    if len(gpu_ids) > 1:
        summary = _tune_sharded(out, keys, path, options, gpu_ids, meta, force, budget)
    else:
        run = dict(tune=tune, check=check, metadata=meta, force=force, budget_seconds=budget)
        start = time.perf_counter()
        summary = _tune(out, keys, path, options, run)
        search = getattr(tune, "search", None)
        if search is not None and search.stages:
            out.print(
                f"{search.stage_report()}, of the run's {time.perf_counter() - start:.1f} s (the rest: "
                "each key's check against the fp32 reference, the default config and vLLM's kernel)",
                markup=False,
                highlight=False,
            )
        if (checked := at.check_stage_report()) is not None:
            out.print(checked, markup=False, highlight=False)
    _report(out, summary, command)


def _keys_to_tune(keys, path, force: bool, block_scale_a: str = "row"):
    """The keys a grid run searches (and compiles): those not yet in the output file (Block_FP8: on
    ``block_scale_a``), or all with --force or when all are done (a corrupt file: the run itself
    reports it)."""
    from hltools import autotune as at

    try:
        done = set() if force else at.done_keys(at.load_existing(path), block_scale_a)
    except at.AutotuneError:
        done = set()
    return [k for k in keys if tuple(sorted(k.key.items())) not in done] or keys


def _report(out: Console, summary, command: str) -> None:
    """The run's table and counts; exit 1 when a key failed (with the command that retries)."""
    from hltools import autotune as at

    out.print(at.summary_table(summary).rich())
    step = at.step_table(summary)
    if step is not None:
        out.print(step.rich())
    counts = ", ".join(f"{summary.count(c)} {c}" for c in ("tuned", "skipped", "failed", "not run"))
    out.print(f"{counts} -> {summary.path}", style="bold red" if summary.failed else "bold green")
    if summary.count("not run"):
        out.print("budget spent: rerun the same command to resume", style="yellow")
    if summary.failed:
        out.print(
            "rerun the same command to retry the failed keys (done keys are skipped; a larger --budget-minutes "
            "where the search found no config in its share):",
            style="bold",
        )
        out.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _resume_command(
    model,
    fmts,
    tps,
    tokens,
    effort,
    seed,
    output,
    budget_minutes,
    block_scale_a="row",
    alongside=False,
    jobs=None,
    layers=None,
) -> str:
    """The command line that reruns this tuning (without --force: a rerun resumes)."""
    parts = [
        "hltools",
        "autotune",
        "--model",
        model,
        "--formats",
        ",".join(fmts),
        "--tp",
        ",".join(map(str, tps)),
    ]
    parts += ["--num-tokens", ",".join(map(str, tokens))]
    parts += [word for name in dict.fromkeys(layers or ()) for word in ("--layer", name)]
    parts += ["--effort", effort.value, "--seed", str(seed)]
    parts += ["--output", str(output)]
    parts += ["--budget-minutes", f"{budget_minutes:g}"] if budget_minutes is not None else []
    parts += ["--block-scale-a", block_scale_a]  # explicit: the default follows HL_DISPATCH_AT
    if effort == Effort.grid:
        parts += ["--compile-alongside" if alongside else "--compile-first"]
        parts += ["--jobs", str(jobs)] if jobs is not None else []
    return shlex.join(parts)


def _local_gpus(count: int | None) -> list[str]:
    """The CUDA device ids (as ``CUDA_VISIBLE_DEVICES`` names them) of the first ``count`` visible
    GPUs (all when None); more than are visible is a bad ``--gpus`` (exit 2)."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = [g.strip() for g in visible.split(",") if g.strip()] if visible else []
    ids = ids[: torch.cuda.device_count()] or [str(i) for i in range(torch.cuda.device_count())]
    if count is not None and count > len(ids):
        raise typer.BadParameter(f"{count} GPUs asked for, {len(ids)} visible", param_hint="--gpus")
    return ids if count is None else ids[:count]


def _tune_sharded(out: Console, keys, path: Path, options, gpu_ids, meta, force, budget):
    """:func:`hltools.autotune_shards.run_sharded` on ``gpu_ids``, a status line per key from each
    worker; exit 2 when the run cannot start."""
    from hltools import autotune as at
    from hltools import autotune_shards

    dealt = "whole shapes per GPU (grid search)" if options.effort == "grid" else "keys dealt round-robin"
    out.print(
        f"{len(keys)} keys over {len(gpu_ids)} GPUs ({', '.join(gpu_ids)}), one worker process each, {dealt}"
    )
    try:
        return autotune_shards.run_sharded(
            keys, path, gpu_ids, options=options, metadata=meta, force=force, budget_seconds=budget
        )
    except at.AutotuneError as exc:
        opt.fail(str(exc), 2)


def _tune_on_ray(out: Console, address, keys, output: Path, command, options, force, budget, model):
    """:func:`hltools.autotune_ray.run_on_ray` on the cluster at ``address``, a status line per key;
    exit 2 when the run cannot start (no Ray, no GPU in the cluster or, for ``local``, on this
    machine, another GPU's file)."""
    from hltools import autotune as at
    from hltools import autotune_ray

    if address == "local" and opt.cuda_device_count() == 0:  # before Ray's seconds of start-up
        opt.fail(
            "--ray local: this machine has no CUDA GPU (torch.cuda.device_count() is 0), so a local Ray "
            "cluster would have none to tune on; run it on a GPU machine, or give a cluster's address "
            "(--ray auto, --ray HOST:PORT)",
            2,
        )
    try:
        ray = autotune_ray.connect(address)
        gpu_name = autotune_ray.gpu_name_of_cluster(ray)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        path = at.output_path(output, gpu_name)
        meta = at.provenance(gpu_name, command=command, seed=options.seed, effort=options.effort, model=model)
        meta["commit"] = git_commit()
        per = "one task per shard of whole shapes" if options.effort == "grid" else "one task per key"
        out.print(f"Ray cluster: {gpus} x {gpu_name} -> {path}; {len(keys)} keys, {per}")
        return autotune_ray.run_on_ray(
            ray,
            keys,
            path,
            gpu_name=gpu_name,
            options=options,
            metadata=meta,
            force=force,
            budget_seconds=budget,
            env=at.benchmark_env(),
            on_done=lambda status: out.print(at.status_line(status), highlight=False),
            on_report=lambda report: out.print(report, markup=False, highlight=False),
        )
    except at.AutotuneError as exc:
        opt.fail(str(exc), 2)


def _num_tokens(text: str | None) -> list[int]:
    """``--num-tokens``, else the decode sizes (and vLLM's capture sizes up to HL_MAX_HELION_SIZE)."""
    if text is not None:
        return opt.parse_ints(text, "--num-tokens")
    from hltools.autotune import decode_num_tokens
    from hlvllm.settings import get_settings

    try:
        return decode_num_tokens(get_settings().max_helion_size)
    except ValueError as exc:
        raise opt.bad_parameter(exc, "HL_MAX_HELION_SIZE") from None


def _default_output() -> Path:
    raw = os.environ.get("HL_CONFIG_DIR", "").strip()
    return Path(raw).expanduser() if raw else Path("hl-configs")


def _list_keys(
    out: Console, keys: list, title: str, output: Path | None, gpu: str | None, block_scale_a: str
) -> None:
    """The keys and which are done (or marked fallback) in the config file of ``gpu`` (default this
    machine's GPU; without one, nothing is marked). A Block_FP8 key counts as done only when it was
    tuned on ``block_scale_a``, the layout a run would tune it on (the other layout's is tuned again)."""
    import torch

    from hltools import autotune as at

    if gpu is not None and output is None:
        from hlcore.configs import config_dir

        output = config_dir()  # $HL_CONFIG_DIR, else the shipped configs
    output = output if output is not None else _default_output()
    gpu_name = (
        gpu if gpu is not None else (torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    )
    try:
        path = at.output_path(output, gpu_name) if gpu_name else None
    except ValueError as exc:
        raise opt.bad_parameter(exc, "--gpu") from None
    try:
        existing = at.load_existing(path) if path else None
    except at.AutotuneError as exc:
        out.print(f"[yellow]{exc}")
        existing = None
    done, fallback = at.done_keys(existing, block_scale_a), at.fallback_keys(existing)
    out.print(at.keys_table(keys, done, fallback, title).rich())
    where = (
        f" in {path}" + ("" if path.exists() else " (no such file yet)")
        if path
        else " (no GPU: the file is named after the GPU, so nothing is marked done; --gpu NAME picks one)"
    )
    n_fallback = sum(at.key_status(k, done, fallback) == at.FALLBACK_STATUS for k in keys)
    n_done = sum(at.key_status(k, done, fallback) != "to tune" for k in keys)
    marked = f" ({n_fallback} of them fallback: vLLM's kernel runs there)" if n_fallback else ""
    blocks = any(at.is_block_format(k.fmt) for k in keys)
    layout = f"; block formats counted on {block_scale_a} scale_a (--block-scale-a)" if blocks else ""
    out.print(f"{len(keys)} keys, {n_done} done{marked}{where}{layout}")


def _tune(out: Console, keys: list, path: Path, options, run: dict):
    """:func:`hltools.autotune.run_autotune` under a progress bar, a line per finished key; exit 2
    when the run cannot start (a file of another GPU or helion version without --force)."""
    from hltools import autotune as at

    progress = opt.progress(out, eta=True)

    def on_done(status) -> None:
        progress.console.print(at.status_line(status), highlight=False)
        progress.advance(task)

    with progress:
        task = progress.add_task("autotune", total=len(keys))
        try:
            return at.run_autotune(
                keys, path, options=options, on_done=on_done,
                on_start=lambda key: progress.update(task, description=f"tuning {key.label}"), **run,
            )  # fmt: skip
        except at.AutotuneError as exc:
            opt.fail(str(exc), 2)
