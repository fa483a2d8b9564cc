#!/usr/bin/env bash
# The GPU runs planned after 2026-12-03 evening: issue 20's end to end in dispatch-at-capture mode,
# one format per phase (< 600 s, one device call each):
#   EF, EI   Qwen3-8B at 36 layers, FP8_Dynamic / W8A8_INT8: `hltools bench e2e`,
#        plugin off then on in one call (engines one at a time, one round: cold caches), the on
#        engine with HL_DISPATCH_AT=capture and HL_PRECOMPILE_PROCESSES=8; concurrency 1..32, 3
#        repeats; TTFT of one sequence alone at 128 and 1,024 prompt tokens, 20 one-token
#        generates each; the engines' `init engine` lines (cold start-up) and the capture line
#   EB0, EB1   Block_FP8 as EF, one engine per call on one machine (back to back, within 30 s):
#        EB0 fills DeepGEMM's JIT cache (lab/scripts/deepgemm_prewarm.py, <= 250 s) then runs the off
#        engine; EB1 the on engine; both skip vLLM's DeepGEMM warm-up and read that cache, so neither
#        JIT-compiles inside its timed generates (2026-12-03 night, EB as one call without a prewarm:
#        both engines stalled 10-40 s per concurrency on JIT compiles and the on engine was killed).
#        Join: `hltools bench merge-e2e EB0/e2e-8b-block-off/*.json EB1/e2e-8b-block-on/*.json --output DIR`
#   EB2  EB1's off engine again, the call after EB1 on its machine (2026-12-04-b: the on and off
#        engines of one machine; EB0's off engine ran on another)
#   EB1P EB1 with prefetch_scales on every block_fp8 config (HL_CONFIG_DIR: a copy of configs/ made by
#        lab/scripts/configs_with_knob.py; the marks unchanged)
#   KC   Block_FP8 marks for capture mode: three `hltools bench kernels --block-scale-a tma` processes,
#        Qwen3-8B, Helion vs vLLM's kernel (PF=1: on the prefetch_scales configs); after a DeepGEMM
#        prewarm on the same machine. Then `hltools configs from-bench KC1 KC2 KC3 --output configs`
#   SL   lab/scripts/scale_a_layout_bench.py: the Helion Block GEMM on row-major vs vLLM's
#        column-major scale_a, each with and without prefetch_scales, M 1-32 (< 200 s)
#   PB   Block_FP8 capture mode's decode steps at M = 8 (2026-12-04: the on engine ran 6-11 % fewer
#        tokens/s at concurrency 2-32 than the op design's): lab/scripts/profile_e2e.py, 8-layer engines
#        off then on (capture), 8 sequences x 16 decode steps profiled, kernels side by side
#   MF   issue 22: lab/scripts/mlp_fp8_bench.py, Qwen3-8B's FP8_Dynamic MLP at M 1-32: three launches
#        (Helion and, with the bundle, CUTLASS GEMMs) vs hlcore.mlp_fp8's two and grouped pairs
#        (2026-12-03 night ran M 1 / 8 without the grouped pair)
#   other phases: as in 2026-12-13.sh
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-14.sh EF|EI|EB0|EB1|EB1P|EB2|KC|PB|MF|SL|<a phase of 2026-12-13.sh>
# 2026-12-04 ran EB0, EB1, EI, CDa, MF (lab/results/2026-12-04); its second session EB0, EB1, EB2 and the
# layout bench (lab/results/2026-12-04-b: vLLM's column-major scale_a costs the Helion GEMM 3-18 % from
# M = 2). Next session, on wheels with prefetch_scales: the bundle's last part with SL in the same
# call (LIMIT=200, after setup.sh); the DeepGEMM prewarm (deepgemm_prewarm.py, 250 s) then EB1P
# (LIMIT=330) and EB2 (LIMIT=300) if prefetch brings column-major within ~2 % of row-major; then KC
# (LIMIT=470, PF=1 when prefetch won): the capture-mode marks, to ship with prefetch_scales.
# The third session of 2026-12-04 ran SL, the prewarm, KC (PF=1), EB1P, EB2, EB1, EB1 with KC's file as
# HL_CONFIG_DIR, EB2, EB1 with KC's file again (lab/results/2026-12-04-c); the next plan: 2026-12-15.sh.
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends.
set -u
phase=$1
here=$(dirname "$0")
case $phase in EF | EI | EB0 | EB1 | EB1P | EB2 | KC | MF | PB | SL) ;; *) exec bash "$here/2026-12-13.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels HL_DISPATCH_AT=capture HL_PRECOMPILE_PROCESSES=8  # off loads no plugin
# one engine run per setting, killed at 270 s (the FP8 off + on pair took 324 s on 2026-12-02 night)
case $phase in
EF) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --plugins off,on --repeats 3 \
    --ttft-lens 128,1024 --ttft-repeats 20 --timeout 270 ;;
EI) e2e e2e-8b-int8 qwen3-8b w8a8_int8 1 --plugins off,on --repeats 3 \
    --ttft-lens 128,1024 --ttft-repeats 20 --timeout 270 ;;
EB0) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
    run deepgemm-prewarm 250 python3 lab/scripts/deepgemm_prewarm.py --model qwen3-8b
    tail -6 "$O/deepgemm-prewarm.log"
    e2e e2e-8b-block-off qwen3-8b block_fp8 1 --plugins off --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 20 --timeout 280 ;;
EB1) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
    e2e e2e-8b-block-on qwen3-8b block_fp8 1 --plugins on --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 20 --timeout 280 ;;
EB1P) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
    python3 lab/scripts/configs_with_knob.py --format block_fp8 --set prefetch_scales=true --out /tmp/hl-configs-pf
    export HL_CONFIG_DIR=/tmp/hl-configs-pf
    e2e e2e-8b-block-on-pf qwen3-8b block_fp8 1 --plugins on --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 20 --timeout 280 ;;
KC) export DG_JIT_CACHE_DIR=/tmp/dg-jit  # after the DeepGEMM prewarm on this machine
    if [ "${PF:-0}" = 1 ]; then
        python3 lab/scripts/configs_with_knob.py --format block_fp8 --set prefetch_scales=true --out /tmp/hl-configs-pf
        export HL_CONFIG_DIR=/tmp/hl-configs-pf
    fi
    for i in 1 2 3; do
        run marks-KC$i 150 python3 -m hltools bench kernels --model qwen3-8b --formats block_fp8 --baselines vllm \
            --block-scale-a tma --no-plots --jobs 8 --output "$O/marks-KC$i"
    done
    grep -h "geomean" "$O"/marks-KC*.log ;;
SL) OUT=$O run scale-a-layout 200 python3 lab/scripts/scale_a_layout_bench.py --ms 1,2,4,8,16,32 --budget-s 150
    grep "^|" "$O/scale-a-layout.log" ;;
EB2) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit  # EB1's off engine, same machine
    e2e e2e-8b-block-off2 qwen3-8b block_fp8 1 --plugins off --repeats 3 --ttft-lens 128,1024 \
        --ttft-repeats 20 --timeout 280 ;;
PB) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit  # EB0's cache when on its machine
    for p in off on; do
        run prof-block-$p 230 python3 lab/scripts/profile_e2e.py run --plugin $p --quant block-fp8 --layers 8 \
            --decode-prompts 8 --out "$O/$p"
    done
    python3 lab/scripts/profile_e2e.py summarize "$O/off" "$O/on" --json "$O/off-vs-on.json" >"$O/off-vs-on.txt" 2>&1
    head -60 "$O/off-vs-on.txt" ;;
MF) if ! python3 -c "import helion" 2>/dev/null; then  # no bundle: helion from .hlwheels
        python3 -m pip install -q --no-index --no-deps --target /tmp/helion .hlwheels/*.whl
        export PYTHONPATH=${PYTHONPATH:-}:/tmp/helion
    fi
    OUT=$O run mlp-fp8-bench 280 python3 lab/scripts/mlp_fp8_bench.py --budget-s 200
    sed -n '/^| M |/,$p' "$O/mlp-fp8-bench.log" ;;
esac
grep -rhoE "Helion kernels at CUDA-graph capture.*|init engine.*" "$O" --include='*.log' | cut -c1-480
phase_end
