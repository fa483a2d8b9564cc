#!/usr/bin/env bash
# The GPU runs planned after 2026-12-05's second session (lab/results/2026-12-05), which shipped
# Qwen3-14B FP8's grid file, made --compile-alongside the grid's default (146 s against 192 s, the
# same picks) and grid-tuned Llama-3.1-8B and Qwen3-32B FP8 in 150 s and 171 s, but lost their grid
# files: the phase's tgz held a "+" in its name and the device tool brings back no such file
# (2026-12-24.sh now joins the models with "_"). No new phase; the order, each line one call sent
# within seconds of the last reply (1,800 s on one H200; the machine is reset ~30 s after a call):
#   part.00, part.01, part.02 (bare); part.03 + dist with GM RT_MODELS="llama-3.1-8b qwen3-32b"
#     RT_FORMAT=fp8_dynamic (LIMIT=400: 150 + 171 s last time)
#   BM RT_MODELS="llama-3.1-8b qwen3-32b" RT_FORMAT=fp8_dynamic RB_SHIPPED=1 RB_RUNS="1 2"
#     GRID=/tmp/gpu-runs/RM-fp8_dynamic-llama-3.1-8b_qwen3-32b/grid (LIMIT=560)
#   BM the same with RB_RUNS=3 (LIMIT=220), then GM RT_MODELS="qwen3-1.7b qwen3-4b"
#     RT_FORMAT=block_fp8 (LIMIT=300)
#   BM RT_MODELS="qwen3-1.7b qwen3-4b" RT_FORMAT=block_fp8 RB_SHIPPED=1 with what is left
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh), as 2026-12-24.sh's phases:
#   RT_MODELS="m1 m2" RT_FORMAT=f [...] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-27.sh GM | BM
# The bundle: PART_MIB=30 in .gpu/make-vllm-bundle.sh (4 parts).
exec bash "$(dirname "$0")/2026-12-26.sh" "$@"
