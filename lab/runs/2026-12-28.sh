#!/usr/bin/env bash
# The GPU runs planned after 2026-12-05's fourth session (lab/results/2026-12-05-b), which shipped
# Qwen3-32B FP8's grid file (1.006-1.011x the shipped file in three processes), left Llama-3.1-8B's
# (0.989-1.003x), grid-tuned Qwen3-1.7B Block_FP8 in 208 s and 14 of Qwen3-4B's 28 Block keys, and
# found the keys' checks were half of each grid run (83-133 s): every key drew its weight copies on
# the CPU. From 4f6bfab a shape's copies are drawn once for all its M, on the GPU, and from af2b40e
# each key's untuned pick (timed by its check) is compiled with the grid's jobs. New phases:
#   CP   lab/scripts/check_inputs_probe.py (the old way's seconds per key against the new way's for
#        a shape's 7 M; Qwen3-1.7B and Qwen3-32B), then RT_MODEL grid-tuned in RT_FORMAT in a fresh
#        kernel cache with --gpus 1, as GA's --compile-alongside run (146 s for Qwen3-1.7B FP8,
#        139.6 s of run, 64.2 s of search): its wall time, `grid search:` and `check:` lines
#   GR   GM of 2026-12-24.sh resumed: SEED_GRID's file copied into the phase's grid folder first
#        (the keys it holds are skipped), e.g. Qwen3-4B Block_FP8's 14 tuned keys
#   other phases: as in 2026-12-27.sh (GM, BM through 2026-12-24.sh)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODEL=m RT_FORMAT=f [GRID_LIMIT=s] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-28.sh CP
#   RT_MODELS="m" RT_FORMAT=f SEED_GRID=dir LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-28.sh GR
# Order on one H200 (1,800 s; each line one call sent within seconds of the last reply):
#   part.00, part.01, part.02 (bare); part.03 + dist with CP RT_MODEL=qwen3-1.7b
#     RT_FORMAT=fp8_dynamic (LIMIT=260)
#   BM RT_MODELS=qwen3-1.7b RT_FORMAT=block_fp8 RB_SHIPPED=1 RB_RUNS="1 2"
#     GRID=lab/results/2026-12-05-b/raw/RM-block_fp8-qwen3-1.7b_qwen3-4b/grid KB_LIMIT=100 (LIMIT=320)
#   BM the same with RB_RUNS=3 (LIMIT=120), then GR RT_MODELS=qwen3-4b RT_FORMAT=block_fp8
#     SEED_GRID=lab/results/2026-12-05-b/raw/RM-block_fp8-qwen3-1.7b_qwen3-4b/grid (LIMIT=200)
#   BM RT_MODELS=qwen3-4b RT_FORMAT=block_fp8 RB_SHIPPED=1 with what is left
# On an H100 SXM instead (no H200 lent; 2026-12-05-c..-g ran there; every call names the kind held):
#   part.00..02; part.03 + dist with GM RT_MODELS=qwen3-32b RT_FORMAT=w8a8_int8 GRID_LIMIT=200
#     LIMIT=210 RES=/tmp/gpu-runs-fresh (a fresh output: the grid's wall time with 0da962f's
#     compile operands, which failed 2 keys out of memory in 2026-12-05-g), then GM of the next
#     slice (RT_MODELS=qwen3-1.7b or qwen3-4b, one format per call, KB_SHIPPED=1 GRID_LIMIT=300
#     KB_LIMIT=150, DG_JIT_CACHE_DIR=/tmp/dg-jit for block_fp8) and its BM (RB_RUNS="1 2 3":
#     ~70-100 s each; two phases fit one call of 600 s); every call planned before the first and
#     sent back to back (a reply read for more than ~30 s loses the machine; 2026-12-05-g's nine
#     calls fit 1,726 s that way). A GM call run twice resumes (its tuned keys skipped, failed
#     ones retried; the earlier log kept as grid-<m>.earlier-<time>.log)
# The bundle: PART_MIB=30 in .gpu/make-vllm-bundle.sh (4 parts).
set -u
phase=$1
here=$(dirname "$0")
case $phase in
CP) ;;
GR)
    read -r -a models <<<"${RT_MODELS:-qwen3-4b}"
    grid=${RES:-/tmp/gpu-runs}/RM-${RT_FORMAT:-block_fp8}-$(IFS=_; echo "${models[*]}")/grid
    mkdir -p "$grid" && cp -rn "${SEED_GRID:?SEED_GRID: the grid folder to resume}/scaled_mm" "$grid/"
    exec bash "$here/2026-12-27.sh" GM
    ;;
*) exec bash "$here/2026-12-27.sh" "$phase" ;;
esac
m=${RT_MODEL:-qwen3-1.7b}
f=${RT_FORMAT:-fp8_dynamic}
phase=CP-$f-$m
source "$here/phase-lib.sh"
phase_begin
run probe 120 python3 lab/scripts/check_inputs_probe.py --models "qwen3-1.7b,qwen3-32b" --format "$f"
tail -n 14 "$O/probe.log"
HL_KERNEL_CACHE_DIR= run grid "${GRID_LIMIT:-280}" python3 -m hltools autotune --model "$m" \
    --formats "$f" --effort grid --gpus 1 --compile-alongside --output "$O/grid"
grep -h -A1 "grid search:\|^check:" "$O/grid.log"
tail -n 1 "$O/grid.log"
phase_end
