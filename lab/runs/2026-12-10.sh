#!/usr/bin/env bash
# The GPU runs planned after 2026-12-02 day, in phases of < 600 s (one device call each), in order of
# priority (a session of 1,800 s holds about three or four):
#   G   issue 20's warm start without helion (bbf06f3): the kernel-cache tests on the GPU (a fresh
#       process loads the GEMM from the cache with helion never imported, bitwise equal to the cold
#       one; real Triton JIT without Helion's import-time patches), then S1 (FP8 engine pair cold
#       and warm: the capture line says whether helion was imported; TTFT in ABBA order)
#   KA1 KB1, KA2 KB2, KA3 KB3   the shipped marks from three processes, each process's models in two
#       calls (A: Qwen3-1.7B/4B/8B, B: Qwen3-14B/32B, Llama-3.1-8B; Helion vs vLLM's kernel only);
#       then on the CPU: hltools configs from-bench (3 processes, 2 % margin)
#   P, S2   DeepGEMM prewarm, then a second Block_FP8 TTFT pair in ABBA order
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-10.sh G|KA1|KB1|KA2|KB2|KA3|KB3|P|S2
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
G)
    HL_TEST_GPU=1 run gpu-tests-cache 150 python3 -m pytest -p no:cacheprovider -q -rfE -s \
        packages/hlcore/tests/test_kernel_cache.py
    tail -15 "$O/gpu-tests-cache.log"
    ;&
S1)
    run startup-ttft-fp8 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --repeats 30 --warm
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-fp8.log"
    grep -ho "Helion kernels at CUDA-graph capture.*" "$O/startup-ttft-fp8.log" | cut -c1-400
    grep -hE "engine ready|Model loading took|Dynamo bytecode transform|Compiling a graph|Graph capturing finished|init engine" \
        "$O/startup-ttft-fp8.log" | cut -c1-200 | head -40
    ;;
KA?)
    run marks-$phase python3 -m hltools bench kernels --model qwen3-1.7b,qwen3-4b,qwen3-8b --formats all \
        --baselines vllm --no-plots --jobs 16 --output "$O/marks-$phase"
    tail -5 "$O/marks-$phase.log"
    ;;
KB?)
    run marks-$phase python3 -m hltools bench kernels --model qwen3-14b,qwen3-32b,llama-3.1-8b --formats all \
        --baselines vllm --no-plots --jobs 16 --output "$O/marks-$phase"
    tail -5 "$O/marks-$phase.log"
    ;;
P)
    run deepgemm-prewarm 540 python3 lab/scripts/deepgemm_prewarm.py --model qwen3-8b
    tail -6 "$O/deepgemm-prewarm.log"
    ;;
S2)
    VLLM_DEEP_GEMM_WARMUP=skip run startup-ttft-block 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b \
        --format block_fp8 --out "$O/block_fp8" --repeats 30
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-block.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
