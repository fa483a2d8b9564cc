"""What ``hltools bench e2e`` runs: the options every engine run measures with (:class:`E2EOptions`),
the runs in order (:func:`plan_runs`: plugin settings in turn, reversed every other round, round 0
with cold compile caches),
each worker's command line (:func:`worker_command`) and the file names (:func:`e2e_stem`).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hltools.e2e.settings import DEFAULT_PLUGINS, PLUGINS
from hltools.shapes import path_model_name

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32)
MAX_NUM_SEQS = 32
AGREEMENT_PROMPTS = 4
AGREEMENT_TOKENS = 16
#: The numerics check scores fixed sequences of these lengths (token ids), the logprob of each token
#: after the first, teacher-forced (vLLM's ``prompt_logprobs``). Each sequence is its own request, so
#: its prefill runs num_tokens = its length: every length is a CUDA-graph capture size <= the default
#: max_helion_size (32), where the plugin runs Helion's kernels (one batch of all of them, 264 tokens,
#: ran vLLM's kernels in the plugin's engine too and could not tell Helion from vLLM).
NUMERICS_LENGTHS = (32, 24, 16, 8, 4, 2, 32, 16)
NUMERICS_PROMPTS = len(NUMERICS_LENGTHS)
#: Scored positions in all (vLLM gives a sequence's first token no logprob).
NUMERICS_TOKENS = sum(n - 1 for n in NUMERICS_LENGTHS)


def e2e_stem(model: str, fmt: str, tensor_parallel_size: int = 1) -> str:
    """The name of a benchmark's files and folder: ``e2e-<model>-<format>``, ``-tp<N>`` added for
    N > 1 (so runs of one model at several TP sizes can share an output directory)."""
    stem = f"e2e-{slug(model)}-{fmt}"
    return stem if tensor_parallel_size == 1 else f"{stem}-tp{tensor_parallel_size}"


def slug(text: str) -> str:
    """A file-name-safe short name: a config path's folder (or file stem), lower case."""
    name = path_model_name(text)
    return re.sub(r"[^a-z0-9._-]+", "-", (name or text).lower()).strip("-") or "model"


@dataclass(frozen=True)
class E2EOptions:
    """What one worker measures (the same for every run of a benchmark)."""

    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    input_len: int = 128
    output_len: int = 128
    repeats: int = 3
    max_num_seqs: int = MAX_NUM_SEQS
    gpu_memory_utilization: float = 0.6
    seed: int = 0
    tensor_parallel_size: int = 1
    #: prompt lengths at which TTFT is also measured alone: one sequence, ``ttft_repeats`` one-token
    #: generates each (:func:`hltools.e2e.worker.measure_ttft`)
    ttft_lens: tuple[int, ...] = ()
    ttft_repeats: int = 10

    def __post_init__(self) -> None:
        tp = self.tensor_parallel_size
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tensor_parallel_size must be a positive integer; got {tp!r}")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError(f"concurrency values must be positive; got {self.concurrency}")
        if max(self.concurrency) > self.max_num_seqs:
            raise ValueError(
                f"concurrency {max(self.concurrency)} exceeds max_num_seqs {self.max_num_seqs}: "
                "those sequences would queue, not decode together"
            )
        if self.input_len < 1 or self.output_len < 2 or self.repeats < 1:
            raise ValueError("input_len >= 1, output_len >= 2 and repeats >= 1 are required")
        if any(n < 1 for n in self.ttft_lens) or self.ttft_repeats < 1:
            raise ValueError(
                f"ttft lengths and ttft_repeats must be positive; got {self.ttft_lens}, {self.ttft_repeats}"
            )

    @property
    def max_model_len(self) -> int:
        return max([self.input_len + self.output_len, *(n + 1 for n in self.ttft_lens)]) + 16


@dataclass(frozen=True)
class RunSpec:
    """One engine run: plugin setting, round (0 = cold compile caches) and its files."""

    plugin: str
    round: int
    out: Path
    log: Path
    cache: Path

    @property
    def cold(self) -> bool:
        return self.round == 0

    @property
    def name(self) -> str:
        return f"{self.plugin}-r{self.round}"


def plan_runs(workdir: Path, plugins: Sequence[str] = DEFAULT_PLUGINS, rounds: int = 2) -> list[RunSpec]:
    """Runs in execution order: each round runs every plugin setting, in the given order in even
    rounds and reversed in odd ones (off, on, on, off, ...: the engine started second has measured
    slower TTFT and start-up by itself on the H200 VM, lab/results/2026-12-04), round 0 cold;
    ``control`` (untimed: its logprobs are the same in every round) runs in round 0 only."""
    bad = [p for p in plugins if p not in PLUGINS]
    if bad or not plugins:
        raise ValueError(f"plugins must be among {list(PLUGINS)}; got {list(plugins)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}")
    workdir = Path(workdir)
    order = list(dict.fromkeys(plugins))
    return [
        RunSpec(
            p,
            r,
            workdir / "runs" / f"{p}-r{r}.json",
            workdir / "runs" / f"{p}-r{r}.log",
            workdir / f"cache-{p}",
        )
        for r in range(rounds)
        for p in (order if r % 2 == 0 else order[::-1])
        if r == 0 or p != "control"
    ]


def worker_command(python: str, model_dir: Path, plugin: str, options: E2EOptions, out: Path) -> list[str]:
    """The command line of one worker (``python -m hltools.e2e worker ...``)."""
    return [
        python,
        "-m",
        "hltools.e2e",
        "worker",
        "--plugin",
        plugin,
        "--model-dir",
        str(model_dir),
        "--concurrency",
        ",".join(map(str, options.concurrency)),
        "--input-len",
        str(options.input_len),
        "--output-len",
        str(options.output_len),
        "--repeats",
        str(options.repeats),
        "--max-num-seqs",
        str(options.max_num_seqs),
        "--gpu-memory-utilization",
        str(options.gpu_memory_utilization),
        "--seed",
        str(options.seed),
        "--tensor-parallel-size",
        str(options.tensor_parallel_size),
        *(["--ttft-lens", ",".join(map(str, options.ttft_lens))] if options.ttft_lens else []),
        *(["--ttft-repeats", str(options.ttft_repeats)] if options.ttft_lens else []),
        "--out",
        str(out),
    ]


def shell_line(cmd: Sequence[str], env: Mapping[str, str], base: Mapping[str, str] | None = None) -> str:
    """``cmd`` as one shell line, prefixed by the variables ``env`` sets or changes against ``base``."""
    base = dict(os.environ if base is None else base)
    changed = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if base.get(k) != v]
    return " ".join([*changed, shlex.join(cmd)])
