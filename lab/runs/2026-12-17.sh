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
#   TA   TTFT A/A control with each engine pinned to its own CPUs (lab/scripts/startup_ttft.py --aa
#        --pin: driver on 2 CPUs, each engine core and its children on an equal set of whole cores): two plugin-free Qwen3-8B
#        FP8_Dynamic engines side by side, 60 ABBA pairs at 128 / 1,024 tokens, 1 s apart. Unpinned
#        (CDa, 2026-12-04) their medians were 10-12 % apart: is host placement the cause?
#   TP   the same pinned, plugin off vs on (the defaults): issue 20's TTFT criterion, if TA is even.
#   T3   TA and TP in one run (2026-12-04, sixth session): three engines pinned, off / ctl (plugin-free)
#        / on (the defaults), 4 CPUs each, every order of the three in turn, 60 rounds 0.5 s apart;
#        ctl/off is the A/A control and on/off the measurement, on the same machine state (this T3
#        shadows 2026-12-13.sh's T3, the fourth session's grid search: call that file for it)
#        Read only TTFT from TA / TP: on ~7 CPUs per engine, HL_PRECOMPILE_PROCESSES=auto starts 3
#        workers (not 8) and Inductor's compile threads drop too, so their start-up is not a user's
#   TB   issue 23: the Block_FP8 grid search on two more shipped models (Llama-3.1-8B, then Qwen3-14B;
#        capture layout, `--block-scale-a auto`; each model capped at half the time left, DeepGEMM
#        JIT-compiling their new shapes during the run): T3 found Qwen3-8B's Block_FP8 keys 1-8.6 %
#        faster per step than the heuristic, mostly with deeper split-K (16 / 32), num_stages 2 and
#        prefetch_scales; does that hold on other shapes (a heuristic rule, or only tuned files)?
#   other phases: as in 2026-12-16.sh (OL, OLd, FR, EFc, EGc, EGr) and through it 2026-12-15.sh
#        (TU for issue 23, CDi, ...)
# The defaults throughout (no HL_DISPATCH_AT / HL_PRECOMPILE_PROCESSES): what a user gets.
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-17.sh SB0|SB1|SI|SF|TA|TP|TB|<a phase of 2026-12-16.sh>
# Order (~1,800 s of device time; a machine start and the bundle ~100 s): the bundle's last part with
# SB0 (LIMIT=260: the prewarm took 189 s for Llama), SB1 (LIMIT=360: four engines, two warm), SI
# (LIMIT=360), TA (LIMIT=400); then TP if TA's two medians are within ~1 %, else TU (issue 23's
# models outside the shipped file, via 2026-12-12.sh); TB and SF only if time is left.
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends (and /tmp/dg-jit with it: SB1 needs SB0 on the same machine).
set -u
phase=$1
here=$(dirname "$0")
case $phase in SB0 | SB1 | SI | SF | TA | TP | T3 | TB) ;; *) exec bash "$here/2026-12-16.sh" "$phase" ;; esac
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
TA | TP) extra=""; [ "$phase" = TA ] && extra="--aa"
    run startup-ttft-pinned python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --settle 30 --repeats 60 --gap 1 --pin $extra
    grep -h "CPU sets" "$O/startup-ttft-pinned.log"
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-pinned.log" | head -20
    grep -q '^qwen3-8b' "$O/startup-ttft-pinned.log" || grep -A8 "TTFT so far" "$O/startup-ttft-pinned.log" ;;
T3) run startup-ttft-3 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --settle 30 --repeats 60 --gap 0.5 --pin --order off,ctl,on
    grep -h "CPU sets" "$O/startup-ttft-3.log"
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-3.log" | head -24
    grep -q '^qwen3-8b' "$O/startup-ttft-3.log" || grep -A10 "TTFT so far" "$O/startup-ttft-3.log" ;;
TB) for model in llama-3.1-8b qwen3-14b; do
        cap=$(($(left) / 2)); [ "$model" = qwen3-14b ] && cap=$(left)
        run "grid-$model-block" "$cap" python3 -m hltools autotune --model "$model" --formats block_fp8 --effort grid \
            --output "$O/grid-$model"
        tail -14 "$O/grid-$model-block.log"
    done ;;
SF) e2e e2e-8b-fp8-start qwen3-8b fp8_dynamic 2 --plugins off,on --repeats 1 --concurrency 1 --timeout 240 ;;
esac
grep -rhoE "speed guard, [a-z0-9_]+: .*|Helion kernels at CUDA-graph capture: .*|init engine.*|engine ready in [0-9.]+ s" \
    "$O" --include='*.log' | cut -c1-480
phase_end
