#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's eleventh session, which measured (wheels of 3b46ec0, one
# H200; lab/results/2026-12-04-k): the Qwen3-4B and Qwen3-1.7B W8A8_INT8 grid files 1.067-1.078x the
# shipped file per decode step (now shipped), Qwen3-14B FP8_Dynamic grid-tuned in 308 s and
# 1.030 / 1.033x in two bench processes (one more before it ships), Qwen3-8B's Block_FP8 grid file
# within noise of the shipped capture-layout configs (1.001-1.022x, not shipped).
# Phases: RG and RB of 2026-12-22.sh (a re-tune slice in two calls), unchanged but for two limits:
#   GRID_LIMIT  the grid run's limit (default 330 s; Qwen3-14B took 308 s, so 450 for Qwen3-32B)
#   KB_LIMIT    each bench run's limit (default 100 s; Qwen3-14B's took 78-79 s, so 140 for Qwen3-32B)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODEL=m RT_FORMAT=f [GRID=dir RB_RUNS="..." GRID_LIMIT=s KB_LIMIT=s] LIMIT=s RES=/tmp/gpu-runs \
#       bash lab/runs/2026-12-23.sh RG | RB
# `bench compare` and the re-mark run on the CPU afterwards (the phase limits skip them there).
# Order (1,800 s), each line one call sent within seconds of the last reply (the machine is reset
# ~30 s after a call ends, /tmp with it):
#   the bundle's part.02 with RB RT_MODEL=qwen3-14b RT_FORMAT=fp8_dynamic RB_RUNS=3
#     GRID=lab/results/2026-12-04-k/raw/RT-qwen3-14b-fp8_dynamic/grid (LIMIT=100: its third
#     process; then it ships), then RG RT_MODEL=llama-3.1-8b RT_FORMAT=fp8_dynamic (LIMIT=400)
#   RB llama-3.1-8b fp8_dynamic GRID=/tmp/gpu-runs/RT-llama-3.1-8b-fp8_dynamic/grid (LIMIT=280),
#     then RG RT_MODEL=qwen3-1.7b RT_FORMAT=block_fp8 (LIMIT=300; capture layout, the default)
#   RB qwen3-1.7b block_fp8 (LIMIT=280), then RB_RUNS=1 ... with what is left
#   RG RT_MODEL=qwen3-32b RT_FORMAT=fp8_dynamic GRID_LIMIT=450 KB_LIMIT=140 (LIMIT=590) if 600 s
#     are left, else RG qwen3-4b block_fp8 (LIMIT=300)
exec bash "$(dirname "$0")/2026-12-22.sh" "$@"
