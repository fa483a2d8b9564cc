"""``hltools bench e2e``: a real vLLM engine with dummy weights, with and without the plugin.

The parent (:func:`run_e2e`, CPU-side) writes a ``config.json`` (the model's architecture with
``--layers`` decoder layers and the format's ``quantization_config``; no weights, nothing
downloaded) and starts one *worker* process per engine run (``python -m hltools.e2e worker ...``,
:func:`worker_command`), one per *plugin setting* (:data:`PLUGINS`, default ``off``, ``on`` and ``control``) and
round, the settings in turn (reversed every other round), for ``rounds`` rounds:

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

* ``control``: no plugin, with vLLM's first-choice kernel of each format disabled
  (``VLLM_DISABLED_KERNELS``, :data:`CONTROL_ENV`), so vLLM's next one runs (fp8_dynamic:
  ``torch._scaled_mm``; w8a8_int8: Triton; block_fp8: CUTLASS instead of DeepGEMM). Untimed and in
  round 0 only: its logprobs are the yardstick of the numerics check (two of vLLM's own kernels
  differ this much). It runs by default (``off,on,control``).

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
between the runs), teacher-forced logprobs of 8 fixed sequences of 2-32 tokens, each its own
request so that its prefill runs in the plugin's CUDA-graph range (``numerics``, :data:`NUMERICS_LENGTHS`:
every run scores the same tokens; :mod:`~hltools.e2e.numerics` compares each setting's with ``off``'s
and the plugin's |Δlogprob| with the ``control``'s) and, with the plugin (``on``, ``gemm``, ``aux``, ``fused``), which sizes were captured
into CUDA graphs with Helion: rank 0's under ``kernels`` / ``captured``, every tensor-parallel
rank's under ``kernels_by_rank`` / ``captured_by_rank`` (``llm.apply_model`` runs in each rank);
:func:`summarize` counts the ranks where Helion was active.

Modules: :mod:`~hltools.e2e.settings` (the plugin settings, the engine's ``config.json``, the
workers' environments), :mod:`~hltools.e2e.plan` (options, runs, worker command lines),
:mod:`~hltools.e2e.run` (the parent: :func:`run_e2e`), :mod:`~hltools.e2e.summary` (aggregation, tables,
files), :mod:`~hltools.e2e.numerics` (the logprob check) and :mod:`~hltools.e2e.worker` (the GPU side). Everything but :func:`worker_main` (and what it
calls) runs without a GPU: the commands, the environments, the aggregation (:func:`summarize`) and the
files are tested on the CPU. This package re-exports their public names.
"""

from __future__ import annotations

from hltools.e2e.numerics import (
    KERNEL_NAMES,
    NUMERICS_LIMIT,
    abs_deltas,
    numerics,
    numerics_line,
)
from hltools.e2e.plan import (
    AGREEMENT_PROMPTS,
    AGREEMENT_TOKENS,
    DEFAULT_CONCURRENCY,
    MAX_NUM_SEQS,
    NUMERICS_LENGTHS,
    NUMERICS_PROMPTS,
    NUMERICS_TOKENS,
    E2EOptions,
    RunSpec,
    e2e_stem,
    plan_runs,
    shell_line,
    slug,
    worker_command,
)
from hltools.e2e.run import (
    E2EReport,
    Launcher,
    run_e2e,
    subprocess_launcher,
)
from hltools.e2e.settings import (
    BASE_ENV,
    CACHE_VARS,
    CONTROL_DISABLED_KERNELS,
    CONTROL_ENV,
    DEFAULT_PLUGINS,
    EXCLUSIVE_ENV,
    EXTRA_SETTINGS,
    HELION_PLUGINS,
    KERNEL_CACHE_VAR,
    PLUGINS,
    QUANT_CONFIGS,
    TIMED_PLUGINS,
    TP_ENV,
    ExtraSetting,
    default_env,
    engine_model_config,
    quant_config,
    set_plugin,
    worker_env,
)
from hltools.e2e.summary import (
    NOISY_SPREAD_PCT,
    STALL_SPREAD_PCT,
    SUMMARY_FIELDS,
    extra_settings,
    has_gemm,
    has_setting,
    helion_line,
    helion_ranks,
    numerics_lines,
    spread_text,
    startup_table,
    summarize,
    summary_markdown,
    summary_parts,
    throughput_table,
    ttft_table,
    write_e2e,
    write_markdown,
)
from hltools.e2e.worker import (
    aux_capture_counts,
    dispatch_counts,
    fill_weights,
    linear_kernels,
    llm_kwargs,
    main,
    measure_throughput,
    measure_ttft,
    numerics_prompts,
    prompt_logprobs,
    record_numerics,
    worker_main,
)

__all__ = [
    "AGREEMENT_PROMPTS",
    "AGREEMENT_TOKENS",
    "BASE_ENV",
    "CACHE_VARS",
    "CONTROL_DISABLED_KERNELS",
    "CONTROL_ENV",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PLUGINS",
    "E2EOptions",
    "E2EReport",
    "EXCLUSIVE_ENV",
    "EXTRA_SETTINGS",
    "ExtraSetting",
    "HELION_PLUGINS",
    "KERNEL_CACHE_VAR",
    "KERNEL_NAMES",
    "Launcher",
    "MAX_NUM_SEQS",
    "NOISY_SPREAD_PCT",
    "NUMERICS_LENGTHS",
    "NUMERICS_LIMIT",
    "NUMERICS_PROMPTS",
    "NUMERICS_TOKENS",
    "PLUGINS",
    "QUANT_CONFIGS",
    "RunSpec",
    "STALL_SPREAD_PCT",
    "SUMMARY_FIELDS",
    "TIMED_PLUGINS",
    "TP_ENV",
    "abs_deltas",
    "aux_capture_counts",
    "default_env",
    "dispatch_counts",
    "e2e_stem",
    "engine_model_config",
    "extra_settings",
    "fill_weights",
    "has_gemm",
    "has_setting",
    "helion_line",
    "helion_ranks",
    "linear_kernels",
    "llm_kwargs",
    "main",
    "measure_throughput",
    "measure_ttft",
    "numerics",
    "numerics_line",
    "numerics_lines",
    "numerics_prompts",
    "plan_runs",
    "prompt_logprobs",
    "quant_config",
    "record_numerics",
    "run_e2e",
    "set_plugin",
    "shell_line",
    "slug",
    "spread_text",
    "startup_table",
    "subprocess_launcher",
    "summarize",
    "summary_markdown",
    "summary_parts",
    "throughput_table",
    "ttft_table",
    "worker_command",
    "worker_env",
    "worker_main",
    "write_e2e",
    "write_markdown",
]
