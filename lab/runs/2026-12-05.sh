#!/usr/bin/env bash
# The GPU runs planned after 2026-12-01 (night): issue 20 ("No cost to switch it on"), in phases of
# < 600 s (one device call each). What each phase answers:
#   A  does a linear layer above max_helion_size cost what vLLM's costs? Host time per call of the
#      compiled graph at M = 64..4096 for vLLM's op, hlvllm's op before and after the lowering pass,
#      and torch.cond (lab/scripts/prefill_host_time.py); then the speed guard on two models outside
#      the shipped file (Qwen2.5-7B/14B, FP8_Dynamic and W8A8_INT8), its decisions checked by a second
#      process (lab/scripts/guard_models.py decide / verify); then hlvllm's op GPU tests.
#   E1 Qwen3-8B FP8_Dynamic at full depth, plugin off vs on, concurrency 1..32, 3 repeats, and TTFT of
#      one sequence alone at 128 and 1024 prompt tokens (10 one-token generates each).
#   E2 the same for W8A8_INT8 (TTFT 20 -> 35 ms with the plugin before the lowering).
#   E3 the same for Block_FP8 (DeepGEMM baseline; VLLM_DEEP_GEMM_WARMUP=skip, one JIT cache).
#   P  where the plugin's time to first token goes: one 128-token prefill of 8-layer W8A8_INT8 engines,
#      off and on, under vLLM's torch profiler (host ops, GPU kernels) and timed 10x unprofiled.
#   K1, K2, K3  the shipped keys' fallback marks from margins: three independent processes of
#      `hltools bench kernels` over the six shipped models (each phase one process; the marks need
#      vLLM faster by > 2 % in the median of the three).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-05.sh A|E1|E2|E3|P|K1|K2|K3
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels
case $phase in
A)
    OUT=$O run prefill-host-time 150 python3 lab/scripts/prefill_host_time.py
    tail -12 "$O/prefill-host-time.log"
    OUT=$O run guard-decide 200 python3 lab/scripts/guard_models.py decide
    tail -3 "$O/guard-decide.log"
    OUT=$O run guard-verify 150 python3 lab/scripts/guard_models.py verify
    tail -25 "$O/guard-verify.log"
    HL_TEST_GPU=1 run gpu-tests-ops python3 -m pytest -m gpu -p no:cacheprovider -q -rfE \
        packages/hlvllm/tests/gpu/test_ops_gpu.py
    tail -5 "$O/gpu-tests-ops.log"
    ;;
E1) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --repeats 3 --ttft-lens 128,1024 --ttft-repeats 10 --timeout 260 ;;
E2) e2e e2e-8b-int8 qwen3-8b w8a8_int8 1 --repeats 3 --ttft-lens 128,1024 --ttft-repeats 30 --timeout 260 ;;
E3) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit e2e e2e-8b-block qwen3-8b block_fp8 1 \
        --repeats 3 --ttft-lens 128,1024 --ttft-repeats 10 --timeout 280 ;;
P)  # where does the plugin's TTFT go? one 128-token prefill of an 8-layer W8A8 engine, off vs on, traced
    for s in off on; do
        run prof-int8-$s 200 python3 lab/scripts/profile_e2e.py run --plugin $s --quant int8 --layers 8 \
            --prefill-prompts 1 --repeats 10 --out "$O/$s"
    done
    python3 lab/scripts/profile_e2e.py summarize "$O/off" "$O/on" --json "$O/off-vs-on.json" >"$O/off-vs-on.txt" 2>&1
    cat "$O/off-vs-on.txt"
    ;;
K1) kb marks-1 qwen3-1.7b,qwen3-4b,qwen3-8b,qwen3-14b,qwen3-32b,llama-3.1-8b fp8_dynamic,w8a8_int8,block_fp8 ;;
K2) kb marks-2 qwen3-1.7b,qwen3-4b,qwen3-8b,qwen3-14b,qwen3-32b,llama-3.1-8b fp8_dynamic,w8a8_int8,block_fp8 ;;
K3)
    kb marks-3 qwen3-1.7b,qwen3-4b,qwen3-8b,qwen3-14b,qwen3-32b,llama-3.1-8b fp8_dynamic,w8a8_int8,block_fp8
    run report-3 60 python3 -m hltools bench report "$O/marks-3"
    tail -20 "$O/report-3.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
