#!/usr/bin/env bash
# The GPU runs planned after 2026-12-03 evening: issue 20's end to end in dispatch-at-capture mode,
# one format per phase (< 600 s, one device call each):
#   EF, EI, EB   Qwen3-8B at 36 layers, FP8_Dynamic / W8A8_INT8 / Block_FP8: `hltools bench e2e`,
#        plugin off then on in one call (engines one at a time, one round: cold caches), the on
#        engine with HL_DISPATCH_AT=capture and HL_PRECOMPILE_PROCESSES=8; concurrency 1..32, 3
#        repeats; TTFT of one sequence alone at 128 and 1,024 prompt tokens, 20 one-token
#        generates each; the engines' `init engine` lines (cold start-up) and the capture line
#   other phases: as in 2026-12-13.sh
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-14.sh EF|EI|EB|<a phase of 2026-12-13.sh>
set -u
phase=$1
here=$(dirname "$0")
case $phase in EF | EI | EB) ;; *) exec bash "$here/2026-12-13.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels HL_DISPATCH_AT=capture HL_PRECOMPILE_PROCESSES=8  # off loads no plugin
# Block_FP8 starts the plugin's engine first: the engine started first pays DeepGEMM's JIT (one cache),
# so its cold start-up is the plugin's upper bound.
# one engine run per setting, killed at 270 s (the FP8 off + on pair took 324 s on 2026-12-02 night)
case $phase in
EF) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --plugins off,on --repeats 3 \
    --ttft-lens 128,1024 --ttft-repeats 20 --timeout 270 ;;
EI) e2e e2e-8b-int8 qwen3-8b w8a8_int8 1 --plugins off,on --repeats 3 \
    --ttft-lens 128,1024 --ttft-repeats 20 --timeout 270 ;;
EB) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit &&  # both engines
    e2e e2e-8b-block qwen3-8b block_fp8 1 --plugins on,off --repeats 3 --ttft-lens 128,1024 \
    --ttft-repeats 20 --timeout 270 ;;
esac
grep -rhoE "Helion kernels at CUDA-graph capture.*|init engine.*" "$O" --include='*.log' | cut -c1-240
phase_end
