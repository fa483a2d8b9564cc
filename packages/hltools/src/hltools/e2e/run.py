"""The parent side of ``hltools bench e2e`` (:func:`run_e2e`): write the engine's ``config.json``,
start one worker process per engine run (:mod:`hltools.e2e.worker`) with its environment, collect
the results and write the files (:mod:`hltools.e2e.summary`). Runs without a GPU with a fake launcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hltools.e2e.plan import E2EOptions, RunSpec, e2e_stem, plan_runs, worker_command
from hltools.e2e.settings import DEFAULT_PLUGINS, engine_model_config, worker_env
from hltools.e2e.summary import write_e2e
from hltools.results import VERSION_DISTS


@dataclass
class E2EReport:
    """What :func:`run_e2e` did: the runs' results (raw dicts), failures (run name -> message), files."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)


Launcher = Callable[[list[str], dict[str, str], Path, float | None], int]  # (cmd, env, log, timeout) -> rc


def subprocess_launcher(cmd: list[str], env: dict[str, str], log: Path, timeout: float | None) -> int:
    """Run ``cmd`` with ``env``, stdout and stderr into ``log``; the return code (124 on timeout).

    The worker runs in its own process group, and on timeout the whole group is killed: vLLM's
    engine-core and tensor-parallel worker processes would otherwise outlive the worker and keep
    their GPU memory, and every later engine run would fail to start."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            f.write(f"\n[hltools] worker killed after {timeout} s\n")
            return 124
        finally:
            _kill_group(proc)  # leftovers of a worker that exited (or was interrupted)


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_e2e(
    *,
    model: str,
    model_config: Mapping[str, Any],
    fmt: str,
    layers: int | None,
    options: E2EOptions,
    output: Path,
    plugins: Sequence[str] = DEFAULT_PLUGINS,
    rounds: int = 2,
    python: str = sys.executable,
    launcher: Launcher = subprocess_launcher,
    timeout: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    on_run: Callable[[RunSpec, str], None] | None = None,
    kernel_cache: bool = True,
) -> E2EReport:
    """Run every engine of :func:`plan_runs` in turn and write the results (see the module docstring).

    Files under ``output`` (``<stem>``: :func:`e2e_stem`, ``e2e-<model>-<format>[-tp<N>]``):
    ``<stem>/model/config.json``, ``<stem>/runs/<plugin>-r<round>.{json,log}``, ``<stem>/cache-<plugin>/``
    (compile caches, emptied before round 0), and ``<stem>.{json,csv,md}`` (plus the PNG, drawn by the
    caller). A worker that fails is recorded (its log's tail in ``failed``) and the others still run.
    ``on_run(spec, event)`` is called with ``"start"``, ``"done"`` or ``"failed"``."""
    import shutil

    output = Path(output).resolve()  # the workers get absolute paths (vLLM reads a local model dir)
    stem = e2e_stem(model, fmt, options.tensor_parallel_size)
    workdir = output / stem
    cfg = engine_model_config(model_config, fmt, layers)
    model_dir = workdir / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    report = E2EReport()
    specs = plan_runs(workdir, plugins, rounds)
    for cache in {s.cache for s in specs}:
        shutil.rmtree(cache, ignore_errors=True)
    for spec in specs:
        cmd = worker_command(python, model_dir, spec.plugin, options, spec.out)
        env = worker_env(
            spec.plugin,
            spec.cache,
            tensor_parallel_size=options.tensor_parallel_size,
            kernel_cache=kernel_cache,
        )
        _run_one(spec, cmd, env, launcher, timeout, report, on_run)
    meta = {
        **dict(metadata or {}),
        "model": model,
        "format": fmt,
        "layers": cfg.get("num_hidden_layers"),
        "model_layers": model_config.get("num_hidden_layers"),
        "options": asdict(options),
        "tensor_parallel_size": options.tensor_parallel_size,
        "plugins": list(plugins),
        "rounds": rounds,
        "hl_kernel_cache": kernel_cache,
        "failed": report.failed,
    }
    if report.runs:
        first = report.runs[0]
        for key in ("gpu", *VERSION_DISTS):
            meta.setdefault(key, first.get(key, ""))
    written = write_e2e(output, stem, meta, report.runs)
    report.files = {**written, "stem": stem, "metadata": meta}
    return report


def _run_one(spec: RunSpec, cmd, env, launcher: Launcher, timeout, report: E2EReport, on_run) -> None:
    """One engine run: its result (with the parent's round) into ``report.runs``, or its log's tail
    into ``report.failed``."""
    spec.out.parent.mkdir(parents=True, exist_ok=True)
    spec.out.unlink(missing_ok=True)
    if on_run:
        on_run(spec, "start")
    rc = launcher(cmd, env, spec.log, timeout)
    if rc == 0 and spec.out.exists():
        result = json.loads(spec.out.read_text())
        result["round"] = spec.round
        result["cold"] = spec.cold
        report.runs.append(result)
        event = "done"
    else:
        tail = spec.log.read_text()[-2000:] if spec.log.exists() else ""
        report.failed[spec.name] = f"exit code {rc}; log {spec.log}:\n{tail}"
        event = "failed"
    if on_run:
        on_run(spec, event)
