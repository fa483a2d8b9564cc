#!/usr/bin/env bash
# The GPU runs planned after 2026-12-01 (midnight), in phases of < 600 s (one device call each):
#   F1  issue 22's first fused kernel: the GPU tests of hlcore.fused_linear (Qwen3-8B shapes with the
#       shipped configs, graph replay) and lab/scripts/fused_block_bench.py (vLLM's quant + CUTLASS
#       block, vLLM's quant + Helion GEMM, the fused kernel; per shape and per decode step).
#   F2  Qwen3-8B Block_FP8 at full depth, plugin off vs on with HL_FUSED_QUANT=1 (the fused kernel in
#       the engine), 3 repeats (DeepGEMM baseline; VLLM_DEEP_GEMM_WARMUP=skip, one JIT cache).
#   E1, E3  issue 20's end to end on this commit: Qwen3-8B FP8_Dynamic and Block_FP8 (not run since the
#       lowering) at full depth, plugin off vs on, concurrency 1..32, 3 repeats.
#   T1, T2, T3  issue 20's TTFT at +1 %: more engine pairs, FP8_Dynamic / W8A8_INT8 / FP8_Dynamic
#       again, ABBA (lab/scripts/startup_ttft.py; each pair is two more cold start-ups too).
#   K1, K2, K3  the shipped marks from three processes (as lab/runs/2026-12-05.sh K1-K3), then the
#       report of the third.
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-06.sh F1|F2|E1|E3|T1|T2|T3|K1|K2|K3
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels
case $phase in
F1)
    HL_TEST_GPU=1 run gpu-tests-fused 200 python3 -m pytest -m gpu -p no:cacheprovider -q -rfE \
        packages/hlcore/tests/gpu/test_fused_linear_gpu.py
    tail -5 "$O/gpu-tests-fused.log"
    OUT=$O run fused-block-bench 300 python3 lab/scripts/fused_block_bench.py
    tail -9 "$O/fused-block-bench.log"
    ;;
F2) HL_FUSED_QUANT=1 VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block-fused qwen3-8b \
        block_fp8 1 --repeats 3 --ttft-lens 128,1024 --ttft-repeats 10 --timeout 280 ;;
E1) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --repeats 3 --timeout 260 ;;
E3) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block qwen3-8b block_fp8 1 --repeats 3 \
        --ttft-lens 128,1024 --ttft-repeats 10 --timeout 280 ;;
T1 | T2 | T3)
    fmt=fp8_dynamic; [ "$phase" = T2 ] && fmt=w8a8_int8
    run startup-ttft-$fmt 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format $fmt \
        --out "$O/$fmt" --repeats 40
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-$fmt.log"
    ;;
K1 | K2 | K3)
    kb marks-${phase#K} qwen3-1.7b,qwen3-4b,qwen3-8b,qwen3-14b,qwen3-32b,llama-3.1-8b fp8_dynamic,w8a8_int8,block_fp8
    if [ "$phase" = K3 ]; then
        run report-3 60 python3 -m hltools bench report "$O/marks-3"
        tail -20 "$O/report-3.log"
    fi
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
