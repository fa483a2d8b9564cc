"""``hltools bench e2e``: a real vLLM engine with dummy weights, with and without the plugin.

The parent (:func:`run_e2e`, CPU-side) writes a ``config.json`` (the model's architecture with
``--layers`` decoder layers and the format's ``quantization_config``; no weights, nothing
downloaded) and starts one *worker* process per engine run (``python -m hltools.e2e worker ...``,
:func:`worker_command`), one per *plugin setting* (:data:`PLUGINS`, default ``off`` and ``on``) and
round, the settings alternating, for ``rounds`` rounds:

* ``off``: ``VLLM_PLUGINS=`` (no plugin loaded), vLLM as it ships;
* ``on``: ``HL_LINEAR_BACKEND=helion``, the plugin's defaults: Helion GEMMs only (``HL_AUX_KERNELS``
  defaults to none: vLLM's own norm, activation and quant layers, which vLLM's torch.compile lets
  Inductor fuse; a ``HL_AUX_KERNELS`` the user set is kept);
* ``gemm``: ``HL_LINEAR_BACKEND=helion`` with an explicit ``HL_AUX_KERNELS=none``: Helion GEMMs only
  whatever the user set (the same engine as ``on`` by default);
* ``aux``: ``HL_LINEAR_BACKEND=helion`` with ``HL_AUX_KERNELS=all``: Helion GEMMs and Helion's
  auxiliary kernels (RMSNorm, SiluAndMul, QuantFP8; what ``on`` ran before they were off by
  default). ``aux`` next to ``on`` / ``gemm`` measures what the aux kernels add or cost end to end
  (they replace Inductor's fused norm+quant with more, separate kernel launches per decode step);
* ``fused``: ``HL_LINEAR_BACKEND=helion`` and ``HL_AUX_FUSION=1``, which turns the aux kernels on
  (unless ``HL_AUX_KERNELS`` is set): hlvllm's graph pass (:mod:`hlvllm.aux_fusion`) fuses each aux
  norm / silu_and_mul with the per-token fp8 quant after it into one kernel launch, as Inductor's
  fusion does for ``on``; ``fused`` next to ``aux`` and ``on`` measures what the fusion recovers.
  Only ``fused`` carries ``HL_AUX_FUSION`` (the other settings drop an inherited one).

``gemm``, ``aux`` and ``fused`` are the *extra settings* (:data:`EXTRA_SETTINGS`, in that order):
each adds summary keys and CSV columns ending in ``_<name>`` (after the ``off``/``on`` ones; empty
without its runs) and, only where it ran, columns in the markdown and the terminal table and series
in the PNG.

Round 0 starts from empty compile caches
(``VLLM_CACHE_ROOT``, ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``, ``HELION_CACHE_DIR`` and,
unless ``kernel_cache=False`` (``--no-hl-kernel-cache``), hlcore's ``HL_KERNEL_CACHE_DIR``; one set
per plugin setting under the output directory): its start-up time is the *cold* one; later rounds
reuse them (*warm*). ``--tensor-parallel-size N`` (default 1) passes ``tensor_parallel_size=N``
to ``vllm.LLM`` and, for N > 1, turns NVLink multicast off in the workers' environment
(:data:`TP_ENV`, unless set already); files then end in ``-tp<N>``.

Each worker (:func:`worker_main`, on the GPU) builds ``vllm.LLM(load_format="dummy",
max_num_seqs=32, enable_prefix_caching=False)`` with vLLM's defaults otherwise (torch.compile,
CUDA graphs), overwrites every parameter with seeded random values (:func:`fill_weights`: vLLM
0.26's dummy fp8 weights round to zero; the values are the same in every run), then per
concurrency ``c``: ``c`` random prompts of ``input_len`` tokens (the same in every run), greedy,
``ignore_eos``, one warm-up ``generate``, then ``repeats`` times ``generate`` with 1 and with
``output_len`` output tokens. Output tokens/s = ``c * output_len / median(t_full)``; per-token
latency (TPOT) = ``(median(t_full) - median(t_one)) / (output_len - 1)``; TTFT ~ ``median(t_one)``.
It also records the kernels vLLM chose per layer, greedy tokens of 4 short prompts (agreement
between the runs) and, with the plugin (``on``, ``gemm``, ``aux``, ``fused``), which sizes were captured
into CUDA graphs with Helion: rank 0's under ``kernels`` / ``captured``, every tensor-parallel
rank's under ``kernels_by_rank`` / ``captured_by_rank`` (``llm.apply_model`` runs in each rank);
:func:`summarize` counts the ranks where Helion was active.

Everything but :func:`worker_main` (and what it calls) runs without a GPU: the commands, the
environments, the aggregation (:func:`summarize`) and the files are tested on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMATS = ("fp8_dynamic", "w8a8_int8", "block_fp8")


@dataclass(frozen=True)
class ExtraSetting:
    """A plugin setting beyond ``off`` and ``on``: ``on`` (``HL_LINEAR_BACKEND=helion``) with ``env``
    set on top. Its summary keys and CSV columns end in ``_<name>`` (``speedup_<name>``: tokens/s over
    ``off``; start-up ``delta_<name>_cold_s``), and ``label`` heads its markdown / table columns.
    ``exclusive``: the other settings remove ``env``'s variables (else they keep a user's value)."""

    name: str
    env: Mapping[str, str]
    label: str
    about: str  # what it runs, for the markdown legend
    exclusive: bool = False

    @property
    def suffix(self) -> str:
        return f"_{self.name}"

    @property
    def env_text(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.env.items())


#: The extra settings, in column order: ``gemm`` Helion GEMMs only (``HL_AUX_KERNELS=none``, explicit),
#: ``aux`` Helion GEMMs and aux kernels (``HL_AUX_KERNELS=all``), ``fused`` the aux kernels with
#: hlvllm's aux fusion pass (``HL_AUX_FUSION=1``, which implies them unless ``HL_AUX_KERNELS`` is set).
EXTRA_SETTINGS: dict[str, ExtraSetting] = {
    s.name: s
    for s in (
        ExtraSetting(
            "gemm",
            {"HL_AUX_KERNELS": "none"},
            "GEMM only",
            "Helion GEMMs, `HL_AUX_KERNELS=none` (vLLM's norm/activation/quant layers, fused by Inductor)",
        ),
        ExtraSetting(
            "aux",
            {"HL_AUX_KERNELS": "all"},
            "GEMM+aux",
            "Helion GEMMs and aux kernels, `HL_AUX_KERNELS=all` (Helion's RMSNorm, SiluAndMul, QuantFP8)",
        ),
        ExtraSetting(
            "fused",
            {"HL_AUX_FUSION": "1"},
            "fused aux",
            "Helion GEMMs and aux kernels with `HL_AUX_FUSION=1` (each aux norm / silu_and_mul fused "
            "with the fp8 quant after it, one launch per pair)",
            exclusive=True,
        ),
    )
}
#: Plugin settings (see the module docstring): ``off`` no plugin, ``on`` the plugin's defaults (Helion
#: GEMMs only), then :data:`EXTRA_SETTINGS`: ``gemm`` Helion GEMMs only (``HL_AUX_KERNELS=none``),
#: ``aux`` Helion GEMMs and aux kernels (``HL_AUX_KERNELS=all``), ``fused`` ``HL_AUX_FUSION=1``.
PLUGINS = ("off", "on", *EXTRA_SETTINGS)
#: What runs when no settings are named (``--plugins off,on``).
DEFAULT_PLUGINS = ("off", "on")
#: The settings that load the plugin with ``HL_LINEAR_BACKEND=helion`` (Helion GEMMs active).
HELION_PLUGINS = ("on", *EXTRA_SETTINGS)
#: Variables only the setting that names them carries (``HL_AUX_FUSION``): the others remove them.
EXCLUSIVE_ENV = tuple(k for s in EXTRA_SETTINGS.values() if s.exclusive for k in s.env)
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32)
MAX_NUM_SEQS = 32
AGREEMENT_PROMPTS = 4
AGREEMENT_TOKENS = 16

_CT_GROUP = {"targets": ["Linear"]}


def _ct(kind: str, fmt_name: str) -> dict[str, Any]:
    """A compressed-tensors W8A8 config: per-channel weights, dynamic per-token activations."""
    args = {"num_bits": 8, "type": kind, "symmetric": True}
    return {
        "quant_method": "compressed-tensors",
        "format": fmt_name,
        "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                **_CT_GROUP,
                "weights": {**args, "strategy": "channel", "dynamic": False},
                "input_activations": {**args, "strategy": "token", "dynamic": True},
            }
        },
    }


#: The ``quantization_config`` of each format: compressed-tensors FP8_DYNAMIC and W8A8 int8, and
#: vLLM's ``fp8`` method with 128x128 weight blocks (dynamic 1x128 activation groups).
QUANT_CONFIGS: dict[str, dict[str, Any]] = {
    "fp8_dynamic": _ct("float", "float-quantized"),
    "w8a8_int8": _ct("int", "int-quantized"),
    "block_fp8": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
}


def quant_config(fmt: str) -> dict[str, Any]:
    """A copy of the ``quantization_config`` for ``fmt``; ``ValueError`` for an unknown format."""
    if fmt not in QUANT_CONFIGS:
        raise ValueError(f"unknown format {fmt!r}; choose from {list(QUANT_CONFIGS)}")
    return json.loads(json.dumps(QUANT_CONFIGS[fmt]))


def engine_model_config(config: Mapping[str, Any], fmt: str, layers: int | None = None) -> dict[str, Any]:
    """The ``config.json`` the engine loads: ``config`` with ``num_hidden_layers = layers`` (all when
    None), the format's ``quantization_config``, bf16, ``rope_parameters`` from ``rope_theta`` when
    missing (vLLM 0.26 reads either), and token ids the engine needs. Raises ``ValueError`` for an
    unknown format or a layer count outside ``1..num_hidden_layers``."""
    out = json.loads(json.dumps(dict(config)))
    total = out.get("num_hidden_layers")
    if layers is not None:
        if layers < 1 or (isinstance(total, int) and layers > total):
            raise ValueError(f"--layers must be in 1..{total}; got {layers}")
        out["num_hidden_layers"] = layers
    out["quantization_config"] = quant_config(fmt)
    out["torch_dtype"] = out["dtype"] = "bfloat16"
    if "rope_parameters" not in out and "rope_theta" in out:
        out["rope_parameters"] = {"rope_type": "default", "rope_theta": out["rope_theta"]}
    out.setdefault("bos_token_id", 1)
    out.setdefault("eos_token_id", 2)
    return out


def e2e_stem(model: str, fmt: str, tensor_parallel_size: int = 1) -> str:
    """The name of a benchmark's files and folder: ``e2e-<model>-<format>``, ``-tp<N>`` added for
    N > 1 (so runs of one model at several TP sizes can share an output directory)."""
    stem = f"e2e-{slug(model)}-{fmt}"
    return stem if tensor_parallel_size == 1 else f"{stem}-tp{tensor_parallel_size}"


def slug(text: str) -> str:
    """A file-name-safe short name: a config path's folder (or file stem), lower case."""
    p = Path(text)
    name = p.parent.name if p.name == "config.json" else (p.name if p.suffix != ".json" else p.stem)
    return re.sub(r"[^a-z0-9._-]+", "-", (name or text).lower()).strip("-") or "model"


# --------------------------------------------------------------------------------------------
# Options, commands, environments (parent side)
# --------------------------------------------------------------------------------------------
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

    @property
    def max_model_len(self) -> int:
        return self.input_len + self.output_len + 16


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
    """Runs in execution order: each round runs every plugin setting (alternating), round 0 cold."""
    bad = [p for p in plugins if p not in PLUGINS]
    if bad or not plugins:
        raise ValueError(f"plugins must be among {list(PLUGINS)}; got {list(plugins)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}")
    workdir = Path(workdir)
    return [
        RunSpec(
            p,
            r,
            workdir / "runs" / f"{p}-r{r}.json",
            workdir / "runs" / f"{p}-r{r}.log",
            workdir / f"cache-{p}",
        )
        for r in range(rounds)
        for p in dict.fromkeys(plugins)
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
        "--out",
        str(out),
    ]


CACHE_VARS = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "HELION_CACHE_DIR": "helion",
}
KERNEL_CACHE_VAR = "HL_KERNEL_CACHE_DIR"  # hlcore's on-disk cache of Helion's generated code
BASE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # apply_model sends fill_weights to the engine process
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # the GPU bundle has no FlashInfer
    "PYTHONUNBUFFERED": "1",
}
#: Defaults for tensor-parallel runs (size > 1): NVLink multicast off (NCCL NVLS, torch symmetric
#: memory, NVSHMEM); the lent multi-GPU machines must not use it.
TP_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def default_env(env: MutableMapping[str, str], tensor_parallel_size: int = 1) -> None:
    """:data:`BASE_ENV`, and :data:`TP_ENV` when ``tensor_parallel_size > 1``, into ``env`` where
    not set already (a value the user set wins)."""
    for k, v in {**BASE_ENV, **(TP_ENV if tensor_parallel_size > 1 else {})}.items():
        env.setdefault(k, v)


def worker_env(
    plugin: str,
    cache: Path,
    base: Mapping[str, str] | None = None,
    tensor_parallel_size: int = 1,
    kernel_cache: bool = True,
) -> dict[str, str]:
    """The worker's environment: ``base`` (default ``os.environ``) plus :data:`BASE_ENV` defaults
    (and :data:`TP_ENV` ones for ``tensor_parallel_size > 1``), the compile-cache directories under
    ``cache`` (with ``kernel_cache``, hlcore's ``HL_KERNEL_CACHE_DIR`` too; without, that variable is
    set empty: off), and the plugin switch (:func:`set_plugin`): ``on`` sets ``HL_LINEAR_BACKEND=helion``,
    ``gemm`` that and ``HL_AUX_KERNELS=none``, ``aux`` that and ``HL_AUX_KERNELS=all``, ``fused`` that
    and ``HL_AUX_FUSION=1``, ``off`` sets ``VLLM_PLUGINS=`` (vLLM loads no general plugin) and drops
    ``HL_LINEAR_BACKEND``."""
    env = dict(os.environ if base is None else base)
    default_env(env, tensor_parallel_size)
    for var, sub in CACHE_VARS.items():
        env[var] = str(Path(cache) / sub)
    if kernel_cache:
        env[KERNEL_CACHE_VAR] = str(Path(cache) / "hl-kernels")
    else:
        env[KERNEL_CACHE_VAR] = ""  # empty: off (unset, hlvllm would use its default directory)
    set_plugin(env, plugin)
    return env


def set_plugin(env: MutableMapping[str, str], plugin: str) -> None:
    """The plugin switch in ``env``: ``on`` -> ``HL_LINEAR_BACKEND=helion`` (and no empty
    ``VLLM_PLUGINS``; ``HL_AUX_KERNELS`` is not set, so the plugin's default, no aux kernel, applies;
    a value already set is kept); an extra setting (:data:`EXTRA_SETTINGS`) -> the same and its
    variables: ``gemm`` ``HL_AUX_KERNELS=none`` (Helion GEMMs only), ``aux`` ``HL_AUX_KERNELS=all``
    (Helion GEMMs and aux kernels), ``fused`` ``HL_AUX_FUSION=1`` (the aux kernels with it, unless a
    user's ``HL_AUX_KERNELS`` says otherwise: kept); ``off`` -> ``VLLM_PLUGINS=`` and no
    ``HL_LINEAR_BACKEND``. Every setting but ``fused`` removes an inherited ``HL_AUX_FUSION``
    (:data:`EXCLUSIVE_ENV`)."""
    if plugin not in PLUGINS:
        raise ValueError(f"plugin must be one of {list(PLUGINS)}; got {plugin!r}")
    for var in EXCLUSIVE_ENV:
        env.pop(var, None)
    if plugin in HELION_PLUGINS:
        env["HL_LINEAR_BACKEND"] = "helion"
        if env.get("VLLM_PLUGINS") == "":
            del env["VLLM_PLUGINS"]
        if plugin in EXTRA_SETTINGS:
            env.update(EXTRA_SETTINGS[plugin].env)
    else:  # off
        env["VLLM_PLUGINS"] = ""
        env.pop("HL_LINEAR_BACKEND", None)


def shell_line(cmd: Sequence[str], env: Mapping[str, str], base: Mapping[str, str] | None = None) -> str:
    """``cmd`` as one shell line, prefixed by the variables ``env`` sets or changes against ``base``."""
    base = dict(os.environ if base is None else base)
    changed = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if base.get(k) != v]
    return " ".join([*changed, shlex.join(cmd)])


# --------------------------------------------------------------------------------------------
# Aggregation and files (parent side)
# --------------------------------------------------------------------------------------------
def _median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def helion_ranks(run: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per tensor-parallel rank of a plugin run (:data:`HELION_PLUGINS`: ``on``, ``gemm``, ``aux``,
    ``fused``): did it use a Helion linear kernel (a class name ``Helion...`` in ``kernels_by_rank``)
    and capture sizes into CUDA graphs with Helion (a ``helion`` route in ``captured_by_rank``)?
    ``{"ranks", "kernels", "captured", "active", "inactive"}`` (counts; ``inactive``: rank -> what it
    lacks); older results without ``*_by_rank`` count rank 0 alone. None when the run holds no
    kernel record."""
    kernels = run.get("kernels_by_rank")
    if kernels is None:
        if "kernels" not in run:
            return None
        kernels = [run["kernels"]]
    captured = run.get("captured_by_rank")
    if captured is None:
        captured = [run.get("captured") or {}]
    n = max(len(kernels), len(captured), int(run.get("tensor_parallel_size", 1)))
    counts = {"ranks": n, "kernels": 0, "captured": 0, "active": 0}
    inactive: dict[str, str] = {}
    for rank in range(n):
        k = kernels[rank] if rank < len(kernels) else None
        c = captured[rank] if rank < len(captured) else None
        has_k = any(str(v).startswith("Helion") for v in (k or {}).values())
        has_c = bool((c or {}).get("helion"))
        counts["kernels"] += has_k
        counts["captured"] += has_c
        counts["active"] += has_k and has_c
        lacks = [
            w for w, ok in (("no Helion kernel", has_k), ("no size captured with Helion", has_c)) if not ok
        ]
        if lacks:
            inactive[str(rank)] = ", ".join(lacks)
    return {**counts, "inactive": inactive}


#: Above this spread of a setting's timed repeats (slowest / fastest - 1, %), a row's ratio is noise.
NOISY_SPREAD_PCT = 10.0
#: Above this spread of the one-token generates (TTFT), a repeat stalled (a 20-40 ms TTFT varies by
#: tens of % on a busy host; a JIT compile in a repeat makes it seconds).
STALL_SPREAD_PCT = 200.0


def _spread_pct(samples: Sequence[float]) -> float | None:
    """Slowest over fastest timed ``generate``, minus 1, in % (None without two samples)."""
    samples = [x for x in samples if x and x > 0]
    return 100.0 * (max(samples) / min(samples) - 1.0) if len(samples) > 1 else None


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate worker results: per concurrency, each plugin setting's tokens/s, TPOT and TTFT
    (median over rounds; ``None`` for a setting without runs), the spread of its timed repeats over
    all rounds (``spread_pct_<setting>``: slowest / fastest - 1 of the full-length generates, in %;
    ``ttft_spread_pct_<setting>``: the same of the one-token generates that give TTFT, where a stall
    shows first, e.g. a JIT compile) and the ratios to ``off`` (``speedup``,
    ``tpot_speedup``: ``on``; ``speedup_<name>``, ``tpot_speedup_<name>``: each extra setting,
    ``gemm``, ``aux``, ``fused``); start-up times (cold = round 0, warm = median of later rounds) and their
    deltas to ``off`` (``delta_*``: ``on``; ``delta_<name>_*``, with that setting's runs only); greedy
    agreement of the plugin's runs with the no-plugin run of round 0; ``restart_agreement``: greedy
    agreement of each warm run (round > 0) with its own setting's cold run (round 0), ``None`` with
    one round (vLLM's kernels repeat bitwise; Helion GEMMs whose config splits K add their partial sums
    with atomics in no fixed order, so they repeat bitwise only with ``HL_DETERMINISTIC=1``); the
    tensor-parallel size; per
    plugin run (``on``, ``gemm``, ``aux``, ``fused``), in how many ranks Helion was active
    (:func:`helion_ranks`); the settings present (``plugins``, in :data:`PLUGINS` order)."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["plugin"], []).append(r)
    concurrency = sorted({int(c) for r in runs for c in r.get("throughput", {})})
    rows = []
    for c in concurrency:
        row: dict[str, Any] = {"concurrency": c}
        for p in PLUGINS:
            pts = [r["throughput"][str(c)] for r in by.get(p, []) if str(c) in r.get("throughput", {})]
            row[f"tokens_per_s_{p}"] = _median([t["tokens_per_s"] for t in pts])
            row[f"tpot_ms_{p}"] = _median([t["tpot_ms"] for t in pts])
            row[f"ttft_ms_{p}"] = _median([t["ttft_ms"] for t in pts])
            row[f"spread_pct_{p}"] = _spread_pct([x for t in pts for x in t.get("samples_full_s") or ()])
            row[f"ttft_spread_pct_{p}"] = _spread_pct([x for t in pts for x in t.get("samples_one_s") or ()])
        off, loff = row["tokens_per_s_off"], row["tpot_ms_off"]
        for p, suffix in (("on", ""), *((x.name, x.suffix) for x in EXTRA_SETTINGS.values())):
            tps, lat = row[f"tokens_per_s_{p}"], row[f"tpot_ms_{p}"]
            row[f"speedup{suffix}"] = tps / off if tps and off else None
            row[f"tpot_speedup{suffix}"] = loff / lat if lat and loff else None
        rows.append(row)
    startup: dict[str, Any] = {}
    for p, rs in by.items():
        cold = [r["startup_s"] for r in rs if r.get("round") == 0]
        warm = [r["startup_s"] for r in rs if r.get("round", 0) > 0]
        startup[p] = {"cold_s": cold[0] if cold else None, "warm_s": _median(warm)}
    for p, prefix in (("on", "delta_"), *((x.name, f"delta_{x.name}_") for x in EXTRA_SETTINGS.values())):
        if p != "on" and p not in by:
            continue  # summaries without this extra setting's runs keep the older keys
        for kind in ("cold_s", "warm_s"):
            a, b = startup.get(p, {}).get(kind), startup.get("off", {}).get(kind)
            startup[f"{prefix}{kind}"] = a - b if a is not None and b is not None else None

    def cold(p):  # the setting's round-0 run with greedy tokens
        return next((r for r in by.get(p, []) if r.get("round") == 0 and r.get("greedy")), None)

    def agree(r, ref):  # "same/total" prompts with identical greedy tokens
        same = sum(a == b for a, b in zip(r["greedy"], ref["greedy"], strict=False))
        return f"{same}/{len(ref['greedy'])}"

    agreement = None
    ref = cold("off")
    if ref:
        agreement = {
            f"{p}-r{r.get('round')}": agree(r, ref)
            for p in HELION_PLUGINS
            for r in by.get(p, [])
            if r.get("greedy")
        }
    restart = {
        f"{p}-r{r.get('round')}": agree(r, cold(p))
        for p, rs in by.items()
        for r in rs
        if cold(p) and r.get("round", 0) > 0 and r.get("greedy")
    }
    sizes = sorted({int(r.get("tensor_parallel_size", 1)) for r in runs}) or [1]
    helion = {}
    for p in HELION_PLUGINS:
        for r in by.get(p, []):
            ranks = helion_ranks(r)
            if ranks is not None:
                helion[f"{p}-r{r.get('round')}"] = ranks
    return {
        "rows": rows,
        "startup": startup,
        "greedy_agreement": agreement,
        "restart_agreement": restart or None,
        "tensor_parallel_size": sizes[0] if len(sizes) == 1 else sizes,
        "helion_ranks": helion,
        "plugins": [p for p in PLUGINS if p in by],
    }


def has_setting(summary: Mapping[str, Any], name: str) -> bool:
    """Whether a :func:`summarize` result holds runs of plugin setting ``name``; summaries without a
    ``plugins`` list (older files) are judged by their rows."""
    if "plugins" in summary:
        return name in summary["plugins"]
    return any(r.get(f"tokens_per_s_{name}") is not None for r in summary.get("rows", []))


def has_gemm(summary: Mapping[str, Any]) -> bool:
    """Whether a :func:`summarize` result holds ``gemm`` runs (Helion GEMMs only)."""
    return has_setting(summary, "gemm")


def extra_settings(summary: Mapping[str, Any]) -> list[ExtraSetting]:
    """The :data:`EXTRA_SETTINGS` with runs in ``summary`` (:func:`has_setting`), in column order."""
    return [x for x in EXTRA_SETTINGS.values() if has_setting(summary, x.name)]


SUMMARY_FIELDS = (
    "concurrency",
    "tokens_per_s_off",
    "tokens_per_s_on",
    "speedup",
    "tpot_ms_off",
    "tpot_ms_on",
    "tpot_speedup",
    "ttft_ms_off",
    "ttft_ms_on",
    # per extra setting (``gemm``: Helion GEMMs only, HL_AUX_KERNELS=none; ``aux``: Helion GEMMs and
    # aux kernels, HL_AUX_KERNELS=all; then ``fused``: HL_AUX_FUSION=1), empty without its runs
    *(
        f"{key}_{x.name}"
        for x in EXTRA_SETTINGS.values()
        for key in ("tokens_per_s", "speedup", "tpot_ms", "tpot_speedup", "ttft_ms")
    ),
    "spread_pct_off",
    "spread_pct_on",
    "ttft_spread_pct_off",
    "ttft_spread_pct_on",
)


def write_e2e(
    output: Path, stem: str, metadata: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]
) -> dict:
    """``output/<stem>.json`` (metadata, summary, raw runs) and ``<stem>.csv`` (one row per
    concurrency, :data:`SUMMARY_FIELDS`); returns ``{"json": path, "csv": path, "summary": ...}``."""
    from hltools.bench import write_csv, write_json

    summary = summarize(runs)
    paths = {"json": Path(output) / f"{stem}.json", "csv": Path(output) / f"{stem}.csv"}
    write_json(paths["json"], {"metadata": dict(metadata), "summary": summary, "runs": list(runs)})
    write_csv(paths["csv"], summary["rows"], SUMMARY_FIELDS)
    return {**paths, "summary": summary}


def _per_setting(rows, key: str, settings, f) -> str:
    """``label v1 / v2 / ...; label ...``: each setting's ``<key>_<setting>`` per row, as a whole %."""
    return "; ".join(
        f"{label} " + " / ".join(f(r.get(f"{key}_{p}"), ".0f") for r in rows) for p, label in settings
    )


def _rows_over(rows, key: str, limit: float) -> list[int]:
    """The concurrencies whose ``key`` is above ``limit``."""
    return [r["concurrency"] for r in rows if (r.get(key) or 0) > limit]


def summary_markdown(metadata: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """The e2e summary as markdown (provenance, one row per concurrency, start-up times). With runs
    of an extra setting (:func:`extra_settings`: ``gemm``, ``aux``, ``fused``), columns for it (headed
    by its label, "GEMM only", "GEMM+aux", "fused aux") follow the ``off``/``on`` ones, and a legend
    says what each runs."""

    def f(v, spec):
        return "-" if v is None else format(v, spec)

    tp = metadata.get("tensor_parallel_size") or summary.get("tensor_parallel_size", 1)
    lines = [
        f"# vLLM end to end: {metadata.get('model')} {metadata.get('format')}, {metadata.get('layers')} "
        f"layers, TP {tp}",
        "",
        " · ".join(
            f"{k} {metadata[k]}"
            for k in ("gpu", "torch", "triton", "helion", "vllm", "commit", "date")
            if metadata.get(k)
        ),
        "",
    ]
    extras = extra_settings(summary)
    if extras:
        legend = [
            "vLLM: no plugin",
            "hlvllm: the plugin's defaults (Helion GEMMs; vLLM's norm/activation/quant layers)",
            *(f"{x.label}: {x.about}" for x in extras),
        ]
        lines += [" · ".join(legend) + ". Speedups are tokens/s over vLLM's.", ""]
    head = "| concurrency | tok/s vLLM | tok/s hlvllm | speedup | TPOT ms vLLM | TPOT ms hlvllm | TTFT ms vLLM | TTFT ms hlvllm |"
    for x in extras:
        head += f" tok/s {x.label} | speedup {x.label} | TPOT ms {x.label} | TTFT ms {x.label} |"
    lines += [head, "|" + " --- |" * head.count(" | ") + " --- |"]
    for r in summary["rows"]:
        line = (
            f"| {r['concurrency']} | {f(r['tokens_per_s_off'], '.0f')} | {f(r['tokens_per_s_on'], '.0f')} | "
            f"{f(r['speedup'], '.3f')} | {f(r['tpot_ms_off'], '.2f')} | {f(r['tpot_ms_on'], '.2f')} | "
            f"{f(r['ttft_ms_off'], '.1f')} | {f(r['ttft_ms_on'], '.1f')} |"
        )
        for x in extras:
            n = x.suffix
            line += (
                f" {f(r.get('tokens_per_s' + n), '.0f')} | {f(r.get('speedup' + n), '.3f')} | "
                f"{f(r.get('tpot_ms' + n), '.2f')} | {f(r.get('ttft_ms' + n), '.1f')} |"
            )
        lines.append(line)
    rows = summary["rows"]
    settings = [("off", "vLLM"), ("on", "hlvllm"), *((x.name, x.label) for x in extras)]
    settings = [
        (p, label) for p, label in settings if any(r.get(f"spread_pct_{p}") is not None for r in rows)
    ]
    if settings:
        per = _per_setting(rows, "spread_pct", settings, f)
        noisy = [
            f"{label} at concurrency {', '.join(map(str, cs))}"
            for p, label in settings
            if (cs := _rows_over(rows, f"spread_pct_{p}", NOISY_SPREAD_PCT))
        ]
        line = f"Spread of the timed repeats (slowest / fastest - 1, %, per concurrency as above): {per}."
        if noisy:
            line += (
                f" **Noisy (> {NOISY_SPREAD_PCT:.0f} %): {'; '.join(noisy)}: a speedup there is noise** "
                "(vLLM's spread counts for every speedup of its row)."
            )
        ttft = [
            (p, label)
            for p, label in settings
            if any(r.get(f"ttft_spread_pct_{p}") is not None for r in rows)
        ]
        if ttft:
            stalled = any(_rows_over(rows, f"ttft_spread_pct_{p}", STALL_SPREAD_PCT) for p, _ in ttft)
            line += (
                f" Of the one-token generates (TTFT): {_per_setting(rows, 'ttft_spread_pct', ttft, f)}"
                + (
                    f". A TTFT spread over {STALL_SPREAD_PCT:.0f} % is a stall (e.g. a JIT compile in a repeat): "
                    "that TTFT and the TPOT derived from it are not a result."
                    if stalled
                    else "."
                )
            )
        lines += ["", line]
    s = summary["startup"]
    head = "| start-up | vLLM s | hlvllm s | delta s |" + "".join(
        f" {x.label} s | delta {x.label} s |" for x in extras
    )
    lines += ["", head, "|" + " --- |" * (4 + 2 * len(extras))]
    for kind, label in (("cold_s", "cold caches"), ("warm_s", "warm caches")):
        off, on = s.get("off", {}).get(kind), s.get("on", {}).get(kind)
        line = f"| {label} | {f(off, '.1f')} | {f(on, '.1f')} | {f(s.get('delta_' + kind), '+.1f')} |"
        for x in extras:
            g = s.get(x.name, {}).get(kind)
            line += f" {f(g, '.1f')} | {f(s.get(f'delta_{x.name}_{kind}'), '+.1f')} |"
        lines.append(line)
    if summary.get("greedy_agreement"):
        agree = ", ".join(f"{k}: {v}" for k, v in summary["greedy_agreement"].items())
        lines += [
            "",
            f"Greedy agreement with the no-plugin run ({AGREEMENT_PROMPTS} prompts x {AGREEMENT_TOKENS} tokens): {agree}.",
        ]
    if summary.get("restart_agreement"):
        agree = ", ".join(f"{k}: {v}" for k, v in summary["restart_agreement"].items())
        lines += ["", f"Greedy agreement of each warm restart with its setting's cold run: {agree}."]
    if summary.get("helion_ranks"):
        lines += ["", helion_line(summary["helion_ranks"])]
    return "\n".join(lines) + "\n"


def helion_line(helion: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence from ``summarize()["helion_ranks"]``: per plugin run (``on-r0``, ``gemm-r0``,
    ``aux-r0``, ``fused-r0``, ...), in how many ranks Helion was active (a Helion linear kernel and sizes
    captured into CUDA graphs with it), and what the other ranks lack."""
    parts = []
    for name, h in helion.items():
        part = f"{name}: Helion active in {h['active']}/{h['ranks']} ranks"
        if h.get("inactive"):
            part += " (" + "; ".join(f"rank {k}: {v}" for k, v in h["inactive"].items()) + ")"
        parts.append(part)
    return (
        "Helion linear kernels and CUDA-graph sizes captured with Helion, per rank: " + "; ".join(parts) + "."
    )


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
            if on_run:
                on_run(spec, "done")
        else:
            tail = spec.log.read_text()[-2000:] if spec.log.exists() else ""
            report.failed[spec.name] = f"exit code {rc}; log {spec.log}:\n{tail}"
            if on_run:
                on_run(spec, "failed")
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
        for key in ("gpu", "torch", "triton", "helion", "vllm"):
            meta.setdefault(key, first.get(key, ""))
    written = write_e2e(output, stem, meta, report.runs)
    md = output / f"{stem}.md"
    md.write_text(summary_markdown(meta, written["summary"]))
    report.files = {**written, "md": md, "stem": stem, "metadata": meta}
    return report


# --------------------------------------------------------------------------------------------
# Worker (GPU side)
# --------------------------------------------------------------------------------------------
def fill_weights(model) -> int:
    """Overwrite every parameter in place with seeded values (identical across processes): fp8 and
    int8 weights random, weight scales ~ 1/sqrt(K) (so activations keep their size), norms 1.

    Each parameter's generator is seeded from its name alone, never the rank: with tensor parallelism
    every rank fills its shard of a parameter with the same values (shards of one name have one shape),
    the same in every run at one TP size. K is the rank's (sharded) K, so row-parallel layers' outputs
    grow by about sqrt(TP) after the all-reduce (the norms bound it; fine for timing)."""
    import torch

    g = torch.Generator(device="cuda")
    count = 0
    params = dict(model.named_parameters())
    for name, p in sorted(params.items(), key=lambda kv: kv[0]):
        g.manual_seed(zlib.crc32(name.encode()))
        with torch.no_grad():
            if p.dtype == torch.float8_e4m3fn:  # CUTLASS: [K, N] view of [N, K]; block: [N, K]
                p.copy_(torch.randn(p.shape, generator=g, device=p.device).to(p.dtype))
            elif p.dtype == torch.int8:  # vLLM 0.26 leaves dummy int8 weights uninitialised
                p.copy_(torch.randint(-127, 128, p.shape, generator=g, device=p.device, dtype=torch.int8))
            elif name.endswith("weight_scale_inv") or (
                name.endswith("weight_scale") and p.numel() > 1 and p.dim() == 2 and p.shape[1] > 1
            ):
                k = p.shape[1] * 128  # 128x128 block scales [N/128, K/128]
                p.copy_((0.75 + 0.5 * torch.rand(p.shape, generator=g, device=p.device)) / k**0.5)
            elif name.endswith("weight_scale"):
                w = params[name.replace("weight_scale", "weight")]
                k = w.shape[0]  # per-channel formats hold the [K, N] view
                amax = 127.0 if w.dtype == torch.int8 else 1.0
                p.copy_((0.75 + 0.5 * torch.rand(p.shape, generator=g, device=p.device)) / (amax * k**0.5))
            elif "norm" in name:
                p.fill_(1.0)
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=g, device=p.device).to(p.dtype))
            else:
                p.copy_((0.02 * torch.randn(p.shape, generator=g, device=p.device)).to(p.dtype))
        count += 1
    return count


def linear_kernels(model) -> dict[str, str]:
    """Layer kind (last name part, e.g. ``qkv_proj``) -> class name of the linear kernel vLLM chose."""
    kinds = {}
    for name, mod in model.named_modules():
        for owner in (getattr(mod, "scheme", None), getattr(mod, "quant_method", None)):
            kernel = getattr(owner, "fp8_linear", None) or getattr(owner, "kernel", None)
            if kernel is not None:
                kinds[name.split(".")[-1]] = type(kernel).__name__
    return kinds


def dispatch_counts(model) -> dict[str, dict[str, list[list[int]]]]:
    """hlvllm's ``CAPTURE_COUNTS`` in the process that holds ``model``: route -> M -> [[N, K, count]]."""
    try:
        from hlvllm.dispatch import CAPTURE_COUNTS
    except ImportError:
        return {}
    out: dict[str, dict[str, list[list[int]]]] = {}
    for (route, m, n, k), c in sorted(CAPTURE_COUNTS.items()):
        out.setdefault(route, {}).setdefault(str(m), []).append([n, k, c])
    return out


def aux_capture_counts(model) -> dict[str, dict[str, list[list[int]]]]:
    """hlvllm's aux-op ``AUX_CAPTURE_COUNTS`` (RMSNorm, SiluAndMul, quant ops captured into CUDA graphs)
    in the process that holds ``model``: ``"op/path"`` -> num_tokens -> [[hidden, count]]."""
    try:
        from hlvllm.aux_ops import AUX_CAPTURE_COUNTS
    except ImportError:
        return {}
    out: dict[str, dict[str, list[list[int]]]] = {}
    for (op, path, t, h), c in sorted(AUX_CAPTURE_COUNTS.items()):
        out.setdefault(f"{op}/{path}", {}).setdefault(str(t), []).append([h, c])
    return out


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[dict[str, list[int]]]:
    import random

    rng = random.Random(seed)
    hi = max(4, min(vocab, 32000)) - 1
    return [{"prompt_token_ids": [rng.randint(3, hi) for _ in range(length)]} for _ in range(n)]


def measure_throughput(
    generate, make_prompts, options: E2EOptions, clock=time.perf_counter, progress=None
) -> dict:
    """Per concurrency: tokens/s, TPOT and TTFT from timed ``generate(prompts, max_tokens)`` calls
    (see the module docstring). ``generate`` returns the number of output tokens it produced.
    ``progress(line)``, when given, gets one line after each concurrency's untimed warm-up and one
    after its timed repeats (so a killed engine's log says where the time went)."""
    out = {}
    for c in options.concurrency:
        prompts = make_prompts(c)
        t0 = clock()
        generate(prompts, options.output_len)  # warm-up (first prefill at this batch size)
        if progress:
            progress(f"concurrency {c}: untimed warm-up {clock() - t0:.1f} s")
        full, one = [], []
        for _ in range(options.repeats):
            t0 = clock()
            generate(prompts, 1)
            one.append(clock() - t0)
            t0 = clock()
            produced = generate(prompts, options.output_len)
            full.append(clock() - t0)
        if produced != c * options.output_len:
            raise RuntimeError(
                f"concurrency {c}: {produced} output tokens, expected {c * options.output_len}"
            )
        t_full, t_one = statistics.median(full), statistics.median(one)
        if progress:
            progress(f"concurrency {c}: {options.repeats} repeats, median {t_full:.3f} s per generate")
        out[str(c)] = {
            "tokens_per_s": c * options.output_len / t_full,
            # None: the one-token generates took longer than the full ones (a stall), no TPOT
            "tpot_ms": 1e3 * (t_full - t_one) / (options.output_len - 1) if t_full > t_one else None,
            "ttft_ms": 1e3 * t_one,
            "samples_full_s": full,
            "samples_one_s": one,
        }
    return out


def llm_kwargs(model_dir: Path | str, options: E2EOptions) -> dict[str, Any]:
    """The keyword arguments of the worker's ``vllm.LLM(...)`` (see the module docstring)."""
    return {
        "model": str(model_dir),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "dtype": "bfloat16",
        "max_model_len": options.max_model_len,
        "max_num_seqs": options.max_num_seqs,
        "enable_prefix_caching": False,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "seed": options.seed,
        "tensor_parallel_size": options.tensor_parallel_size,
    }


def worker_main(args: argparse.Namespace) -> int:
    """One engine run (on the GPU); writes ``args.out``. Sets the plugin switch of ``args.plugin`` in
    its own environment too (as :func:`worker_env` does), before vLLM is imported."""
    import importlib.metadata as md

    default_env(os.environ, args.tensor_parallel_size)
    set_plugin(os.environ, args.plugin)

    import torch
    from vllm import LLM, SamplingParams

    from hltools.provenance import versions

    options = E2EOptions(
        concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        input_len=args.input_len,
        output_len=args.output_len,
        repeats=args.repeats,
        max_num_seqs=args.max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization,
        seed=args.seed,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    config = json.loads((Path(args.model_dir) / "config.json").read_text())
    t0 = time.perf_counter()
    llm = LLM(**llm_kwargs(args.model_dir, options))
    startup_s = time.perf_counter() - t0
    # Functions sent to the ranks are pickled by reference: take them from the importable module, not
    # from ``__main__`` (``python -m hltools.e2e``), which the worker processes cannot resolve.
    import hltools.e2e as rank_fns

    filled_by_rank = list(llm.apply_model(rank_fns.fill_weights))  # one entry per tensor-parallel rank
    kernels_by_rank = list(llm.apply_model(rank_fns.linear_kernels))
    filled, kernels = filled_by_rank[0], kernels_by_rank[0]
    print(
        f"[hltools] engine ready in {startup_s:.1f} s (TP {options.tensor_parallel_size}); parameters "
        f"filled per rank {filled_by_rank}; rank 0 kernels {kernels}",
        flush=True,
    )
    vocab = int(config.get("vocab_size", 32000))

    def generate(prompts, max_tokens: int) -> int:
        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, detokenize=False)
        outs = llm.generate(prompts, sp, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    greedy_sp = SamplingParams(
        max_tokens=AGREEMENT_TOKENS, temperature=0.0, ignore_eos=True, detokenize=False
    )

    def progress(line: str) -> None:
        print(f"[hltools] {time.perf_counter() - t0:.1f} s: {line}", flush=True)

    t1 = time.perf_counter()
    outs = llm.generate(_prompts(AGREEMENT_PROMPTS, 16, vocab, options.seed + 1), greedy_sp, use_tqdm=False)
    greedy = [list(o.outputs[0].token_ids) for o in outs]
    progress(f"greedy prompts done in {time.perf_counter() - t1:.1f} s")
    throughput = measure_throughput(
        generate,
        lambda c: _prompts(c, options.input_len, vocab, options.seed + 100 + c),
        options,
        progress=progress,
    )
    helion_on = args.plugin in HELION_PLUGINS  # on, gemm, aux and fused load the plugin with Helion GEMMs
    captured_by_rank = list(llm.apply_model(rank_fns.dispatch_counts)) if helion_on else []
    captured = captured_by_rank[0] if captured_by_rank else {}
    # on and gemm (no aux kernel) record them too: they should show no aux op on Helion's path
    aux_by_rank = list(llm.apply_model(rank_fns.aux_capture_counts)) if helion_on else []
    v = versions()
    result = {
        "plugin": args.plugin,
        "gpu": torch.cuda.get_device_name(),
        "gpu_count": torch.cuda.device_count(),
        "tensor_parallel_size": options.tensor_parallel_size,
        **{d: v.get(d, "") for d in ("torch", "triton", "helion", "vllm")},
        "hlvllm": _dist_version(md, "hlvllm"),
        "layers": config.get("num_hidden_layers"),
        "startup_s": startup_s,
        "filled": filled,
        "filled_by_rank": filled_by_rank,
        "kernels": kernels,
        "kernels_by_rank": kernels_by_rank,
        "captured": captured,
        "captured_by_rank": captured_by_rank,
        "aux_captured_by_rank": aux_by_rank,
        "greedy": greedy,
        "throughput": throughput,
        "options": asdict(options),
        "env": {
            k: os.environ.get(k)
            for k in (
                "HL_LINEAR_BACKEND",
                "HL_AUX_KERNELS",
                "HL_AUX_FUSION",
                "VLLM_PLUGINS",
                "HL_DETERMINISTIC",
                "HL_PRECOMPILE_THREADS",
                "VLLM_USE_DEEP_GEMM",
                "VLLM_DEEP_GEMM_WARMUP",
                "DG_JIT_CACHE_DIR",
                *TP_ENV,
            )
        },
    }
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    summary = {c: round(t["tokens_per_s"], 1) for c, t in throughput.items()}
    print(f"[hltools] plugin {args.plugin}: start-up {startup_s:.1f} s; tokens/s {summary}", flush=True)
    return 0


def _dist_version(md, dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return ""


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hltools.e2e worker ...`` (what :func:`worker_command` builds)."""
    p = argparse.ArgumentParser(prog="python -m hltools.e2e", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="one engine run (needs a GPU); the plugin switch is in the environment")
    w.add_argument(
        "--plugin",
        choices=PLUGINS,
        required=True,
        help="off, on (the plugin's defaults: Helion GEMMs only), gemm (Helion GEMMs only, "
        "HL_AUX_KERNELS=none), aux (Helion GEMMs and aux kernels, HL_AUX_KERNELS=all) or fused "
        "(HL_AUX_FUSION=1: the aux kernels fused with the fp8 quant)",
    )
    w.add_argument("--model-dir", required=True)
    w.add_argument("--concurrency", default=",".join(map(str, DEFAULT_CONCURRENCY)))
    w.add_argument("--input-len", type=int, default=128)
    w.add_argument("--output-len", type=int, default=128)
    w.add_argument("--repeats", type=int, default=3)
    w.add_argument("--max-num-seqs", type=int, default=MAX_NUM_SEQS)
    w.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--tensor-parallel-size", type=int, default=1)
    w.add_argument("--out", required=True)
    args = p.parse_args(argv)
    return worker_main(args)


if __name__ == "__main__":
    sys.exit(main())
