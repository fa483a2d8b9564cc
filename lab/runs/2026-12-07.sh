#!/usr/bin/env bash
# The GPU runs planned on 2026-12-02, in phases of < 600 s (one device call each):
#   H   issue 20's host time per linear call at prefill sizes, with a harness that compiles as vLLM
#       does (no Dynamo guards, one code object per variant: lab/scripts/prefill_host_time.py), then
#       DeepGEMM's JIT cache filled for Qwen3-8B's four (N, K) (lab/scripts/deepgemm_prewarm.py) for
#       B1 / B0, then the GPU tests of hlcore.fused_linear (issue 22's first fused kernel).
#   B1, B0  issue 20's Block_FP8 end to end on this commit (not run since the lowering): Qwen3-8B at
#       full depth, plugin on (B1) then off (B0), one engine per call, concurrency 1..32, 3 repeats,
#       TTFT alone at 128 / 1024 tokens; both engines skip DeepGEMM's warm-up and share H's warm JIT
#       cache. Joined afterwards with `hltools bench merge-e2e`.
#   T2  issue 20's TTFT at +1 %: a second W8A8_INT8 engine pair, ABBA (lab/scripts/startup_ttft.py).
#   H2  (added after H, B1, B0, T2 ran, for the session's last ~400 s) the host-time harness again with
#       its variants interleaved in 41 rounds and the generated code kept; then issue 22's fused
#       Block_FP8 kernel against vLLM's quant + GEMM (lab/scripts/fused_block_bench.py).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-07.sh H|B1|B0|T2|H2
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
H)
    OUT=$O run prefill-host-time 150 python3 lab/scripts/prefill_host_time.py
    tail -9 "$O/prefill-host-time.log"
    run deepgemm-prewarm 200 python3 lab/scripts/deepgemm_prewarm.py --model qwen3-8b
    tail -6 "$O/deepgemm-prewarm.log"
    HL_TEST_GPU=1 run gpu-tests-fused 150 python3 -m pytest -m gpu -p no:cacheprovider -q -rfE \
        packages/hlcore/tests/gpu/test_fused_linear_gpu.py
    tail -5 "$O/gpu-tests-fused.log"
    ;;
H2)
    ROUNDS=41 OUT=$O run prefill-host-time 120 python3 lab/scripts/prefill_host_time.py
    sed -n '/^host µs per call/,$p' "$O/prefill-host-time.log" | cut -c1-400
    OUT=$O run fused-block-bench 300 python3 lab/scripts/fused_block_bench.py
    tail -12 "$O/fused-block-bench.log"
    ;;
B1) VLLM_DEEP_GEMM_WARMUP=skip e2e e2e-8b-block-on qwen3-8b block_fp8 1 --plugins on --repeats 3 \
        --ttft-lens 128,1024 --ttft-repeats 10 --timeout 280 ;;
B0) VLLM_DEEP_GEMM_WARMUP=skip e2e e2e-8b-block-off qwen3-8b block_fp8 1 --plugins off --repeats 3 \
        --ttft-lens 128,1024 --ttft-repeats 10 --timeout 280 ;;
T2)
    run startup-ttft-w8a8_int8 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format w8a8_int8 \
        --out "$O/w8a8_int8" --repeats 40
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-w8a8_int8.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
