#!/usr/bin/env bash
# The GPU runs planned after 2026-12-02 morning, in phases of < 600 s (one device call each), in
# order of priority (a session of 1,800 s holds about three or four):
#   N   issue 24's numerics line with the fixed check (38ea218: each scored sequence its own request
#       within max_helion_size), Qwen3-8B FP8_Dynamic, 36 layers, off / on / control (~420 s)
#   S1  issue 20's start-up with every GEMM config sharing one Helion binding (3ffbe86): FP8 engine
#       pair cold then warm, hlvllm's per-phase line, TTFT in ABBA order (~350 s)
#   GB  issue 20's guard on models outside the shipped file, Block_FP8 (Qwen2.5-7B/14B, M 1-32):
#       decide, then verify in a second process; DeepGEMM compiles its decode kernels on first use
#   KA1 KB1, KA2 KB2, KA3 KB3   the shipped marks from three processes, each process's models in two
#       calls (A: Qwen3-1.7B/4B/8B, B: Qwen3-14B/32B, Llama-3.1-8B; Helion vs vLLM's kernel only);
#       the later processes find the first's kernels in the caches of the warm machine
#   P, S2   DeepGEMM prewarm, then a second Block_FP8 TTFT pair in ABBA order (as 2026-12-08.sh)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-09.sh N|S1|GB|KA1|KB1|KA2|KB2|KA3|KB3|P|S2
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
N) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --repeats 3 --timeout 250 ;;
S1)
    run startup-ttft-fp8 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --repeats 30 --warm
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-fp8.log"
    grep -ho "start-up seconds in hlvllm.*" "$O/startup-ttft-fp8.log" | cut -c1-300
    grep -ho "Helion kernels at CUDA-graph capture.*" "$O/startup-ttft-fp8.log" | cut -c1-400
    grep -hE "engine ready|Model loading took|Dynamo bytecode transform|Compiling a graph|Graph capturing finished|init engine" \
        "$O/startup-ttft-fp8.log" | cut -c1-200 | head -40
    ;;
GB)
    OUT=$O run guard-block-decide 330 python3 lab/scripts/guard_models.py decide --formats block_fp8
    tail -3 "$O/guard-block-decide.log"
    OUT=$O run guard-block-verify python3 lab/scripts/guard_models.py verify --formats block_fp8
    tail -20 "$O/guard-block-verify.log"
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
