#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's sixth session, which measured (wheels of 2e5af85, one H200):
# Qwen3-8B W8A8_INT8 start-up -10.0 s cold / -0.5 s warm (SI), Block_FP8 -15.9 s cold (SB1; its warm
# pair was cut by the phase limit), and TTFT with three pinned FP8_Dynamic engines (T3: on/off medians
# 0.961 / 0.958 at 128 / 1,024 tokens, the plugin-free A/A control 1.008 / 0.977). What issue 20 still
# lacks is the same TTFT reading for the other two formats and Block_FP8's warm pair:
#   TI   W8A8_INT8: three engines pinned (4 CPUs each), off / ctl / on, ctl on off's caches (warm,
#        ~20 s instead of ~130 s: TTFT only), 60 rounds 0.5 s apart, every order of the three in turn
#   SB0  DeepGEMM's JIT cache filled for Qwen3-8B (2026-12-17.sh; ~250 s, then ~85 s more if cut)
#   TK   Block_FP8 as TI, after SB0 on the same machine, then all three restarted warm (--warm):
#        the warm start-up of on against off with ctl as the A/A (all pinned to 4 CPUs)
#   T2   (on nvidia-h200-x2, when it is lent and time is left; the bundle again on that machine)
#        Qwen3-8B FP8_Dynamic at TP 2, cold: off then on with the defaults (HL_PRECOMPILE_PROCESSES=auto
#        is off for several ranks, so each rank compiles its Helion kernels at capture: +34-36 s in
#        the op design on one GPU), then on alone with HL_PRECOMPILE_PROCESSES=4 (a pool per rank,
#        never measured): does a pool per rank take the compile off the capture, and at what cost?
#   other phases: as in 2026-12-17.sh (SB1, SI, SF, TA, TP, T3, TB) and through it 2026-12-16.sh,
#        2026-12-15.sh (TU for issue 23, ...), 2026-12-12.sh
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-18.sh TI|TK|T2|<a phase of 2026-12-17.sh>
# Order (1,800 s): the bundle's last part with TI (LIMIT=450), SB0 (LIMIT=340), TK (LIMIT=540), then
# TU (issue 23) or, on a second machine of kind nvidia-h200-x2, T2 with what is left (~400 s).
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends
# (and /tmp/dg-jit with it: TK needs SB0 on the same machine).
set -u
phase=$1
here=$(dirname "$0")
case $phase in TI | TK | T2) ;; *) exec bash "$here/2026-12-17.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
unset HL_DISPATCH_AT HL_PRECOMPILE_PROCESSES # the defaults
export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
if [ "$phase" = T2 ]; then
    e2e e2e-8b-fp8-tp2 qwen3-8b fp8_dynamic 1 --plugins off,on --repeats 1 --concurrency 1 \
        --tensor-parallel-size 2 --timeout 300
    HL_PRECOMPILE_PROCESSES=4 e2e e2e-8b-fp8-tp2-pool qwen3-8b fp8_dynamic 1 --plugins on --repeats 1 \
        --concurrency 1 --tensor-parallel-size 2 --timeout 300
else
    fmt=w8a8_int8 extra=""
    [ "$phase" = TK ] && fmt=block_fp8 extra="--warm"
    ttft3 startup-ttft-3 "$fmt" --repeats 60 $extra
fi
grep -rhoE "HL_PRECOMPILE_PROCESSES=auto: .*|Helion kernels at CUDA-graph capture: .*|init engine.*|engine ready in [0-9.]+ s.*" \
    "$O" --include='*.log' | cut -c1-480
phase_end
