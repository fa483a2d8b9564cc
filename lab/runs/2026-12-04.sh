#!/usr/bin/env bash
# The GPU runs planned after 2026-12-01 (evening), in phases of < 600 s (one device call each).
# What each phase answers:
#   T  (two-GPU kind) issue 8: Qwen3-8B FP8_Dynamic at TP=2, all 36 layers, plugin off and on.
#   G  the GPU tests of hlcore and hlvllm (the 2026-12-01 evening regression run was cut after 19
#      passed; since then the op fixture sets HL_UNTUNED_SHAPES=heuristic: a GPU without tuned
#      configs runs vLLM's kernel by default).
#   F  issue 4: the floor of a decode GEMM on the H200: a kernel that only reads the weight once
#      (best of 96 tilings) at the 25 benchmarked (N, K), and an empty kernel / the split-K fill per
#      graph node, timed like the kernel benchmarks (lab/scripts/stream_floor.py).
#   X  issue 4: the atomic split-K's output fill as a kernel that lets the GEMM start at once (PDL,
#      hlcore.split_k_fill): its GPU tests, then Qwen3-8B's shapes x M 1, 8, 32 x 3 formats, shipped
#      config with and without pdl, heuristic default with and without, next to vLLM's kernel.
#      (ran on 4b5b3d0: no gain, reverted; lab/gpu-runs.md)
#   Y  issue 4: GEMM tilings that mirror the best weight-read kernels of F (16 rows of N per program,
#      256/512-byte K steps, 8 warps, split-K 2-8) against the shipped config and vLLM's kernel,
#      Qwen3-8B's shapes x M 1, 8, 32 x 3 formats; then the GPU tests of hltools.
#   GV the GPU tests of hlvllm and hltools alone (G ran out of time in hlcore last session).
#   P  why is the plugin's time to first token longer (FP8_Dynamic +4 / +27 ms at concurrency 1 / 8;
#      Block_FP8 24.7 -> 59.1 ms at 1 on 2026-12-01 evening)? Torch-profiler traces of one 1024-token
#      prefill and a few decode steps of 8-layer Qwen3-8B FP8 engines, off and on (GEMMs only), and
#      the side-by-side kernel table (lab/scripts/profile_e2e.py).
#   PB the same question for Block_FP8, where the gap is largest: 8-layer engines with
#      `--quant block-fp8`, one 128-token prompt per prefill window (TTFT +34 ms at concurrency 1 at
#      full depth), VLLM_DEEP_GEMM_WARMUP=skip with one DeepGEMM JIT cache for both (the profiled
#      windows come after unprofiled warm-up calls, so JIT is not in them).
#   L2 issue 6: Qwen3-1.7B FP8_Dynamic at full depth, 2 rounds (the 2026-12-01 afternoon run had vLLM
#      1.3-1.5x slower than the midday one: host noise).
#   B1, B2  issue 6: Qwen3-8B Block_FP8 at full depth at all six concurrencies, vLLM (B1) then the
#      plugin (B2), one engine per device call, VLLM_DEEP_GEMM_WARMUP=skip and one DeepGEMM JIT cache
#      in /tmp/dg-jit (kept while the machine stays up), 7 repeats: on 2026-12-01 evening DeepGEMM's
#      JIT for prefill sizes it had not met stalled some concurrency-8 repeats of both engines by
#      5-20 s; more repeats keep the median clear of them. Join the two runs afterwards with
#      `hltools bench merge-e2e B1/e2e-8b-block-off/e2e-*.json B2/e2e-8b-block-on/e2e-*.json --output DIR`.
#   K2 issue 4: second sample of the kernel benchmarks of Qwen3-8B (3 formats) and Qwen3-1.7B
#      (fp8_dynamic, w8a8_int8) as shipped now (exact keys), on today's wheels.
#   A2 issue 4: does a longer quick search beat the heuristic default? `hltools autotune --effort
#      quick` of Qwen3-1.7B's four fp8 shapes at M = 8 with the phase's time (the evening run gave each
#      key 17-44 s of search and none beat the default).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-04.sh T|F|X|Y|GV|G|P|PB|L2|B1|B2|K2|A2
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
case $phase in
T) e2e e2e-8b-fp8-tp2 qwen3-8b fp8_dynamic 1 --tensor-parallel-size 2 --concurrency 1,8 --plugins off,on ;;
G)
    HL_TEST_GPU=1 run gpu-tests 540 python3 -m pytest -m gpu -p no:cacheprovider -q -rfE \
        packages/hlcore/tests/gpu packages/hlvllm/tests/gpu
    tail -15 "$O/gpu-tests.log"
    ;;
F)
    OUT=$O FLOOR_BUDGET_S=$(($(left) - 40)) run stream-floor python3 lab/scripts/stream_floor.py
    tail -32 "$O/stream-floor.log"
    ;;
X)  # the split-K fill as a PDL primary (hlcore.split_k_fill): GPU tests, then shipped configs with and without pdl
    HL_TEST_GPU=1 run gpu-tests-pdl 150 python3 -m pytest -m gpu -p no:cacheprovider -q -rfE \
        packages/hlcore/tests/gpu/test_scaled_mm_gpu.py -k pdl packages/hlcore/tests/test_split_k_fill.py
    tail -5 "$O/gpu-tests-pdl.log"
    OUT=$O SWEEP_BUDGET_S=$(($(left) - 60)) SWEEP_ONLY=none SWEEP_VARIANTS=default,default_pdl,default_ws,picked,picked_pdl \
        SWEEP_FORMATS=fp8_dynamic,w8a8_int8,block_fp8 SWEEP_MS=1,8,32 \
        SWEEP_SHAPES=6144x4096,4096x4096,24576x4096,4096x12288 run sweep-pdl python3 lab/scripts/sweep_scaled_mm.py
    tail -45 "$O/sweep-pdl.log"
    ;;
Y)
    OUT=$O SWEEP_BUDGET_S=$(($(left) - 150)) SWEEP_ONLY=none SWEEP_VARIANTS=picked \
        SWEEP_CONFIGS='{"r_n16_k256_s2_w8_st3":{"block_sizes":[16,16,256],"split_k":2,"swap_ab":false,"num_stages":3,"num_warps":8},"r_n16_k256_s2_w8_st4":{"block_sizes":[16,16,256],"split_k":2,"swap_ab":false,"num_stages":4,"num_warps":8},"r_n16_k256_s4_w8_st3":{"block_sizes":[16,16,256],"split_k":4,"swap_ab":false,"num_stages":3,"num_warps":8},"r_n16_k256_s4_w8_st4":{"block_sizes":[16,16,256],"split_k":4,"swap_ab":false,"num_stages":4,"num_warps":8},"r_n16_k256_s8_w8_st3":{"block_sizes":[16,16,256],"split_k":8,"swap_ab":false,"num_stages":3,"num_warps":8},"r_n16_k256_s8_w8_st4":{"block_sizes":[16,16,256],"split_k":8,"swap_ab":false,"num_stages":4,"num_warps":8},"r_n16_k512_s2_w8_st3":{"block_sizes":[16,16,512],"split_k":2,"swap_ab":false,"num_stages":3,"num_warps":8},"r_n16_k512_s2_w8_st4":{"block_sizes":[16,16,512],"split_k":2,"swap_ab":false,"num_stages":4,"num_warps":8},"r_n16_k512_s4_w8_st3":{"block_sizes":[16,16,512],"split_k":4,"swap_ab":false,"num_stages":3,"num_warps":8},"r_n16_k512_s4_w8_st4":{"block_sizes":[16,16,512],"split_k":4,"swap_ab":false,"num_stages":4,"num_warps":8},"r_n16_k512_s8_w8_st3":{"block_sizes":[16,16,512],"split_k":8,"swap_ab":false,"num_stages":3,"num_warps":8},"r_n16_k512_s8_w8_st4":{"block_sizes":[16,16,512],"split_k":8,"swap_ab":false,"num_stages":4,"num_warps":8},"r_n16_k512_s4_w4_st3":{"block_sizes":[16,16,512],"split_k":4,"swap_ab":false,"num_stages":3,"num_warps":4},"r_n32_k256_s4_w8_st3":{"block_sizes":[16,32,256],"split_k":4,"swap_ab":false,"num_stages":3,"num_warps":8}}' \
        SWEEP_FORMATS=fp8_dynamic,w8a8_int8,block_fp8 SWEEP_MS=1,8,32 \
        SWEEP_SHAPES=6144x4096,4096x4096,24576x4096,4096x12288 run sweep-read-tiles python3 lab/scripts/sweep_scaled_mm.py
    tail -45 "$O/sweep-read-tiles.log"
    HL_TEST_GPU=1 run gpu-tests-tools python3 -m pytest -m gpu -p no:cacheprovider -q -rfE packages/hltools/tests/gpu
    tail -8 "$O/gpu-tests-tools.log"
    ;;
GV)
    HL_TEST_GPU=1 run gpu-tests-vllm python3 -m pytest -m gpu -p no:cacheprovider -q -rfE \
        packages/hlvllm/tests/gpu packages/hltools/tests/gpu
    tail -15 "$O/gpu-tests-vllm.log"
    ;;
P)
    run prof-off 200 python3 lab/scripts/profile_e2e.py run --plugin off --layers 8 --out "$O/off"
    run prof-on 200 python3 lab/scripts/profile_e2e.py run --plugin on --layers 8 --out "$O/on"
    python3 lab/scripts/profile_e2e.py summarize "$O/off" "$O/on" --json "$O/off-vs-on.json" >"$O/off-vs-on.txt" 2>&1
    cat "$O/off-vs-on.txt"
    ;;
PB)
    export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
    for s in off on; do
        run prof-block-$s 240 python3 lab/scripts/profile_e2e.py run --plugin $s --quant block-fp8 --layers 8 \
            --prefill-prompts 1 --out "$O/$s"
    done
    python3 lab/scripts/profile_e2e.py summarize "$O/off" "$O/on" --json "$O/off-vs-on.json" >"$O/off-vs-on.txt" 2>&1
    cat "$O/off-vs-on.txt"
    ;;
L2) e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 2 --concurrency 1,8,32 --plugins off,on --timeout 260 ;;
B1) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block-off qwen3-8b block_fp8 1 \
        --concurrency 1,2,4,8,16,32 --repeats 7 --plugins off --timeout 520 ;;
B2) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block-on qwen3-8b block_fp8 1 \
        --concurrency 1,2,4,8,16,32 --repeats 7 --plugins on --timeout 520 ;;
K2)
    kb kernels-8b qwen3-8b fp8_dynamic,w8a8_int8,block_fp8
    kb kernels-1.7b qwen3-1.7b fp8_dynamic,w8a8_int8
    ;;
A2) run autotune-1.7b python3 -m hltools autotune --model qwen3-1.7b --formats fp8_dynamic --num-tokens 8 \
        --effort quick --budget-minutes $((($(left) - 120) / 60)) --seed 0 --output "$O/configs"
    tail -30 "$O/autotune-1.7b.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
