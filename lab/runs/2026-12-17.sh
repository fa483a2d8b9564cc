#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's fifth session, which measured the first-run fixes on the
# GPU (12/12 Triton cache hits; "first runs 0.07-0.08 s" in the engines) and cold start within
# +10 s on Llama-3.1-8B Block_FP8 (+0.4 / +5.4 / +1.7 s) and Qwen3-8B FP8_Dynamic (-4.6 s). What
# issue 20's start-up criterion still lacks is Qwen3-8B in the other two formats with the fixes,
# cold and warm (Block_FP8's last cold pair, on af40db2 before the fixes, was +21.6 s):
#   SB0  DeepGEMM's JIT cache filled for Qwen3-8B (lab/scripts/deepgemm_prewarm.py, ~220 s)
#   SB1  Qwen3-8B Block_FP8, 36 layers, `hltools bench e2e --plugins off,on --rounds 2` (round 1
#        cold caches off then on, round 2 warm on then off), concurrency 1, 1 repeat, after SB0 on
#        the same machine (the DeepGEMM cache shared by both settings, as EG0-EG2 / EGc)
#   SI   Qwen3-8B W8A8_INT8, the same two rounds (no DeepGEMM)
#   SF   Qwen3-8B FP8_Dynamic, the same two rounds (EFc measured the cold pair only)
#   other phases: as in 2026-12-16.sh (OL, OLd, FR, EFc, EGc, EGr) and through it 2026-12-15.sh
#        (TU for issue 23, CDi, ...)
# The defaults throughout (no HL_DISPATCH_AT / HL_PRECOMPILE_PROCESSES): what a user gets.
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-17.sh SB0|SB1|SI|SF|<a phase of 2026-12-16.sh>
# Order: the bundle's last part with SB0 (LIMIT=300), SB1 (LIMIT=420), SI (LIMIT=420), then SF or TU
# as time allows. Send each call within seconds of the last reply: the machine is reset ~30 s after
# a call ends (and /tmp/dg-jit with it: SB1 needs SB0 on the same machine).
set -u
phase=$1
here=$(dirname "$0")
case $phase in SB0 | SB1 | SI | SF) ;; *) exec bash "$here/2026-12-16.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
unset HL_DISPATCH_AT HL_PRECOMPILE_PROCESSES # the defaults
export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
SB0) run deepgemm-prewarm 280 python3 lab/scripts/deepgemm_prewarm.py --model qwen3-8b
    tail -4 "$O/deepgemm-prewarm.log" ;;
SB1) ls /tmp/dg-jit >/dev/null || echo "no DeepGEMM cache: run SB0 first on this machine"
    e2e e2e-8b-block-start qwen3-8b block_fp8 2 --plugins off,on --repeats 1 --concurrency 1 --timeout 240 ;;
SI) e2e e2e-8b-int8-start qwen3-8b w8a8_int8 2 --plugins off,on --repeats 1 --concurrency 1 --timeout 240 ;;
SF) e2e e2e-8b-fp8-start qwen3-8b fp8_dynamic 2 --plugins off,on --repeats 1 --concurrency 1 --timeout 240 ;;
esac
grep -rhoE "speed guard, [a-z0-9_]+: .*|Helion kernels at CUDA-graph capture: [^;]*|init engine.*|engine ready in [0-9.]+ s" \
    "$O" --include='*.log' | cut -c1-300
phase_end
