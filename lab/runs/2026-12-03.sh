#!/usr/bin/env bash
# The GPU runs planned after 2026-12-01 (afternoon), in phases of < 600 s (one device call each).
# What each phase answers:
#   T  (two-GPU kind) issue 8: Qwen3-8B FP8_Dynamic at TP=2, all 36 layers, plugin off and on.
#   G  GPU tests of what is new: hlvllm.precompile (HL_PRECOMPILE_THREADS=8: the other sizes of a
#      shape compiled in threads, then every size matches CUTLASS and compiles nothing; prints the
#      first-call seconds) and the scaled_mm pdl test (a PDL kernel waits for its producer).
#   C  issue 7: does HL_PRECOMPILE_THREADS=16 cut the cold start-up? 8-layer Qwen3-8B FP8 engines
#      from empty caches: vLLM, the plugin as shipped, the plugin with threaded precompile (its
#      log's "precompiled ..." lines give the seconds per shape). Compare start-up and capture time.
#   B1, B2  issue 6: Qwen3-8B Block_FP8 at full depth, vLLM (B1) then the plugin (B2), one engine per
#      device call (each ~130-160 s to start, and the measurement took > 110 s on 2026-12-01: the
#      worker now prints its progress), VLLM_DEEP_GEMM_WARMUP=skip, one DeepGEMM JIT cache for both in
#      /tmp/dg-jit (kept while the machine stays up). Join them afterwards with
#      `hltools bench merge-e2e B1/e2e-8b-block-off/e2e-*.json B2/e2e-8b-block-on/e2e-*.json --output DIR`.
#      Likely cause of the slow measurement: DeepGEMM JIT-compiles (nvcc) a kernel per new block_m
#      choice, and the prefills (64, 128, 1024, 4096 tokens) meet new ones with the warm-up skipped.
#   L2 issue 6: Qwen3-1.7B FP8_Dynamic at full depth again, 2 rounds (the 2026-12-01 afternoon run had
#      vLLM 1.3-1.5x slower than the midday one: host noise; round 1 starts warm, so it is quick).
#   K  issue 4: kernel benchmarks of the shipped-model shapes with no key yet (Qwen3-32B in three
#      formats; Block_FP8 of Qwen3-4B, Qwen3-14B, Llama-3.1-8B); fold in with
#      `hltools configs from-bench <dir>/kernels.json --config-dir configs --only-new --output configs`.
#   A  issue 4: `hltools autotune --effort quick` of Qwen3-1.7B's four fp8 shapes at M = 8: seconds
#      per key, tuned vs shipped vs CUTLASS ($O/configs).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-03.sh T|G|C|B1|B2|L2|K|A
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
case $phase in
T) e2e e2e-8b-fp8-tp2 qwen3-8b fp8_dynamic 1 --tensor-parallel-size 2 --concurrency 1,8 --plugins off,on ;;
G)
    HL_TEST_GPU=1 run gpu-tests 240 python3 -m pytest -m gpu -p no:cacheprovider -s -q -k "precompile or pdl" \
        packages/hlvllm/tests/gpu/test_ops_gpu.py packages/hlcore/tests/gpu
    tail -30 "$O/gpu-tests.log"
    ;;
C)
    e2e e2e-8b-fp8-cold qwen3-8b fp8_dynamic 1 --layers 8 --concurrency 1 --plugins off,on
    HL_PRECOMPILE_THREADS=16 e2e e2e-8b-fp8-precompile qwen3-8b fp8_dynamic 1 --layers 8 --concurrency 1 --plugins on
    grep -h "precompiled\|Graph capturing finished\|engine ready" "$O"/e2e-8b-fp8-*/e2e-*/runs/on-r0.log | cut -c1-200
    ;;
B1) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block-off qwen3-8b block_fp8 1 \
        --concurrency 1,8,32 --plugins off --timeout 520 ;;
B2) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block-on qwen3-8b block_fp8 1 \
        --concurrency 1,8,32 --plugins on --timeout 520 ;;
L2) e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 2 --concurrency 1,8,32 --plugins off,on --timeout 260 ;;
K)
    kb kernels-32b qwen3-32b fp8_dynamic,w8a8_int8,block_fp8
    kb kernels-block qwen3-4b,qwen3-14b,llama-3.1-8b block_fp8
    ;;
A) run autotune-1.7b python3 -m hltools autotune --model qwen3-1.7b --formats fp8_dynamic --num-tokens 8 \
        --effort quick --budget-minutes $((($(left) - 90) / 60)) --seed 0 --output "$O/configs"
    tail -30 "$O/autotune-1.7b.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
