#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's third session, when HL_DISPATCH_AT=capture became the
# default and Block_FP8 keys started to record the scale_a layout they were measured on:
#   EG0, EG1  the default on a model whose Block_FP8 keys are row-major marks (Llama-3.1-8B, 32
#        layers): in capture mode hlvllm's speed guard times every one of them marked for Helion at
#        warm-up. EG0: DeepGEMM JIT prewarm for its shapes, then the off engine; EG1 (the next call,
#        same machine): the on engine with no HL_DISPATCH_AT in its environment (the default). What to
#        read: the guard's summary line (shapes checked, how many kept Helion, seconds), tokens/s at
#        concurrency 1-32 against EG0, start-up. Two rounds of the on engine: round 1 starts warm
#        (the guard's results and every kernel cache on disk), so it also answers FC on this model
#        (round 0's import / first-run split against round 1's) and "warm <= +1 s, guard included". Join: `hltools bench merge-e2e EG0/e2e-llama-block-off/*.json
#        EG1/e2e-llama-block-on/*.json --output DIR`
#   FC   the 3-5 s of Block_FP8 "first Helion calls" at capture (21 kernels from the cache; W8A8_INT8's
#        28 take 0.2 s): the on engine of EB1 in two rounds (1 repeat, concurrency 1 and 8, no TTFT),
#        round 1 with every cache warm (hl's kernels, Triton's, Inductor's, DeepGEMM's). The capture
#        line now splits the cache loads into their imports and first runs (Triton's launcher and
#        binary): first runs of seconds in round 0 and milliseconds in round 1 = Triton compiled in
#        the engine what the workers had compiled; still 3-5 s in round 1: not a compile (the
#        first-call check or vLLM's side)
#   other phases: as in 2026-12-14.sh (CDi, T3, TU through 2026-12-13.sh)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-15.sh EG0|EG1|FC|<a phase of 2026-12-14.sh>
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends.
set -u
phase=$1
here=$(dirname "$0")
case $phase in EG0 | EG1 | EG2 | FC) ;; *) exec bash "$here/2026-12-14.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels HL_PRECOMPILE_PROCESSES=8  # HL_DISPATCH_AT: the default
unset HL_DISPATCH_AT
export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
EG0) run deepgemm-prewarm 250 python3 lab/scripts/deepgemm_prewarm.py --model llama-3.1-8b
    tail -6 "$O/deepgemm-prewarm.log"
    e2e e2e-llama-block-off llama-3.1-8b block_fp8 1 --plugins off --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 20 --timeout 280 ;;
EG1) e2e e2e-llama-block-on llama-3.1-8b block_fp8 2 --plugins on --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 10 --timeout 280
    grep -rhoE "speed guard, block_fp8.*|first Helion calls [^)]*\)" "$O" --include='*.log' ;;
EG2) e2e e2e-llama-block-off2 llama-3.1-8b block_fp8 2 --plugins off --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 10 --timeout 280 ;;  # the off engine cold and warm, as EG1's on engine
FC) e2e e2e-8b-block-fc qwen3-8b block_fp8 2 --plugins on --repeats 1 --concurrency 1,8 --timeout 240
    grep -rhoE "first Helion calls [^)]*\)" "$O" --include='*.log' ;;
esac
grep -rhoE "Helion kernels at CUDA-graph capture.*|init engine.*" "$O" --include='*.log' | cut -c1-480
phase_end
