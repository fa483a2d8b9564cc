#!/usr/bin/env bash
# The GPU runs planned after 2026-12-01 (aux kernels now off by default: `on` = Helion GEMMs only),
# in phases of < 600 s (one device call each). What each phase answers:
#   T  (two-GPU kind) issue 8: Qwen3-8B FP8_Dynamic at TP=2, all 36 layers, plugin off and on:
#      both ranks' kernels and captured sizes, agreement, tokens/s at concurrency 1 and 8.
#   W  issue 7: warm start-up with hlcore's kernel cache (8-layer Qwen3-8B FP8 engines, 2 rounds:
#      round 2 is the warm number), then issue 6: Qwen3-1.7B FP8_Dynamic at full depth, off / on.
#   E  issue 6: Qwen3-8B FP8_Dynamic full depth, off / on, 2 rounds (is concurrency 8's -4.4 % real?).
#   F  issue 6: Qwen3-8B W8A8_INT8 and Block_FP8 at full depth, off / on.
#   K  issue 4: kernel benchmarks of the shipped-model shapes with no key yet (Qwen3-32B in three
#      formats; Block_FP8 of Qwen3-4B, Qwen3-14B, Llama-3.1-8B); fold in with
#      `hltools configs from-bench <dir>/kernels.json --config-dir configs --only-new --output configs`.
#   R  issue 7: does a warm restart give the cold start's outputs? 8-layer Qwen3-8B FP8 engines,
#      2 rounds, HL_DETERMINISTIC=1 (split-K atomics make plain runs differ run to run: the W run of
#      2026-12-01 had on-r1 agree with on-r0 in 1/4 greedy prompts, off 4/4); a second warm start-up sample.
#   L  issue 6: Qwen3-1.7B FP8_Dynamic at full depth, off / on (W ran out of time after `off`).
#   B  issue 6: Qwen3-8B Block_FP8 at full depth, off / on, with VLLM_DEEP_GEMM_WARMUP=skip: vLLM's
#      default DeepGEMM warm-up JIT-compiles ~1200 GEMMs cold (> 10 min; both engines were killed at
#      240 s in it on 2026-12-01); skipped, DeepGEMM compiles the sizes it meets (captured ones at
#      start-up, prefill ones in the untimed warm-up generate), into one JIT cache for both engines
#      (DG_JIT_CACHE_DIR; vLLM's default is per VLLM_CACHE_ROOT, i.e. per engine here): `off` runs
#      first and pays DeepGEMM's JIT, so this phase's start-up delta favours the plugin; not reported.
#   S  issue 4: does programmatic dependent launch (the scaled_mm `pdl` tunable) cut the ~4 us fixed
#      cost per GEMM? lab/scripts/sweep_scaled_mm.py on Qwen3-8B's four shapes x 3 formats at M 1, 8, 32:
#      the shipped (picked) config and the heuristic default, each without and with `pdl`, vLLM's
#      kernel beside them; every call preceded by a small producer kernel that rewrites A
#      (SWEEP_PRODUCER=1), as the quant kernel does in a decode step. $O/sweep.json.
#   A  issue 4: what does a real autotune give and cost? `hltools autotune --effort quick` of Qwen3-1.7B's
#      four fp8 shapes at M = 8 in the phase's time (per key: Helion's search, then the check against
#      the reference and the timing against the default config and CUTLASS); the tuned file is in
#      $O/configs (carry it back to resume). Seconds per key: the run's summary.
#   P  torch-profiler traces (lab/scripts/profile_e2e.py, 8-layer Qwen3-8B FP8 engines): a 1024-token
#      prefill and 16 decode steps at 1 sequence, plugin off / on (GEMM-only) / on + HL_AUX_FUSION=1;
#      kernel tables in $O/off-vs-on.txt (prefill cost) and $O/on-vs-fused.txt (fused decode).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-02.sh T|W|E|F|K|P|R|L|B|S|A
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
case $phase in
T) e2e e2e-8b-fp8-tp2 qwen3-8b fp8_dynamic 1 --tensor-parallel-size 2 --concurrency 1,8 --plugins off,on ;;
W)
    e2e e2e-8b-fp8-warm qwen3-8b fp8_dynamic 2 --layers 8 --concurrency 1,8 --plugins off,on
    e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 1 --concurrency 1,8,32 --plugins off,on
    ;;
R) HL_DETERMINISTIC=1 e2e e2e-8b-fp8-restart qwen3-8b fp8_dynamic 2 --layers 8 --concurrency 1 --plugins off,on ;;
L) e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 1 --concurrency 1,8,32 --plugins off,on --timeout 270 ;;
B) VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR="$O/deep_gemm" e2e e2e-8b-block qwen3-8b block_fp8 1 --concurrency 1,8,32 --plugins off,on --timeout 270 ;;
S)
    SWEEP_PRODUCER=1 SWEEP_ONLY=none SWEEP_FORMATS=fp8_dynamic,w8a8_int8,block_fp8 SWEEP_MS=1,8,32 \
        SWEEP_SHAPES=6144x4096,4096x4096,24576x4096,4096x12288 SWEEP_BUDGET_S=$(($(left) - 90)) OUT="$O" \
        run sweep-pdl python3 lab/scripts/sweep_scaled_mm.py
    tail -40 "$O/sweep-pdl.log"
    ;;
A) run autotune-1.7b python3 -m hltools autotune --model qwen3-1.7b --formats fp8_dynamic --num-tokens 8 \
        --effort quick --budget-minutes $((($(left) - 90) / 60)) --seed 0 --output "$O/configs"
    tail -30 "$O/autotune-1.7b.log"
    ;;
E) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 2 --concurrency 1,8,32 --plugins off,on ;;
F)
    e2e e2e-8b-int8 qwen3-8b w8a8_int8 1 --concurrency 1,8,32 --plugins off,on
    e2e e2e-8b-block qwen3-8b block_fp8 1 --concurrency 1,8,32 --plugins off,on
    ;;
K)
    kb kernels-32b qwen3-32b fp8_dynamic,w8a8_int8,block_fp8
    kb kernels-block qwen3-4b,qwen3-14b,llama-3.1-8b block_fp8
    ;;
P)
    run prof-off 170 python3 lab/scripts/profile_e2e.py run --plugin off --layers 8 --out "$O/off"
    run prof-on 170 python3 lab/scripts/profile_e2e.py run --plugin on --layers 8 --out "$O/on"
    run prof-fused 170 python3 lab/scripts/profile_e2e.py run --plugin on --aux-fusion --layers 8 --out "$O/fused"
    python3 lab/scripts/profile_e2e.py summarize "$O/off" "$O/on" --json "$O/off-vs-on.json" >"$O/off-vs-on.txt" 2>&1
    python3 lab/scripts/profile_e2e.py summarize "$O/on" "$O/fused" --json "$O/on-vs-fused.json" >"$O/on-vs-fused.txt" 2>&1
    cat "$O/off-vs-on.txt" "$O/on-vs-fused.txt"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
