#!/usr/bin/env bash
# The GPU runs planned after 2026-12-02 afternoon, in phases of < 600 s (one device call each), in
# order of priority (a session of 1,800 s holds about four):
#   NL  issue 22's first candidate: lab/scripts/norm_linear_bench.py, add + RMSNorm + fp8 quant +
#       GEMM as vLLM's two kernels, hlcore's two kernels and one fused Helion kernel (Qwen3-8B qkv and
#       gate_up, M 1-32; ~300 s), then the kernel-cache tests on the GPU with a 300 s lane (the
#       150 s lane of 2026-12-10.sh G cut the helion-free fresh-process test)
#   T   issue 23's grid search (hltools autotune --effort grid): Qwen3-8B FP8_Dynamic, its 28 keys,
#       wall time of the whole run (compile included; the done-when asks <= 5 min), the tuned file and
#       its per-key times against the heuristic config and vLLM's kernel
#   KT1 KT2 KT3   the marks of Qwen3-8B at TP 2 from three processes (the 63 keys the afternoon's
#       six processes did not time), then hltools configs from-bench on the CPU
#   SC1 SC2   issue 20's cold start with the compile moved off the capture: an FP8 engine pair from
#       empty caches, the plugin with HL_PRECOMPILE_PROCESSES=8 (few TTFT samples; two pairs so the
#       per-process noise of 17-49 s before the engine core shows)
#   N   Qwen3-8B FP8_Dynamic, 36 layers, end to end with the re-derived marks (2026-12-09.sh N)
#   P, S2   as in 2026-12-09.sh (DeepGEMM prewarm, a Block_FP8 TTFT pair)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-11.sh NL|T|KT1|KT2|KT3|SC1|SC2|N|P|S2
set -u
phase=$1
here=$(dirname "$0")
case $phase in NL | T | KT? | SC?) ;; *) exec bash "$here/2026-12-09.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels
case $phase in
NL)
    OUT=$O run norm-linear-bench 300 python3 lab/scripts/norm_linear_bench.py
    tail -9 "$O/norm-linear-bench.log"
    HL_TEST_GPU=1 run gpu-tests-cache 300 python3 -m pytest -p no:cacheprovider -q -rfE -s \
        packages/hlcore/tests/test_kernel_cache.py
    tail -8 "$O/gpu-tests-cache.log"
    ;;
T)
    run grid-8b-fp8 560 python3 -m hltools autotune --model qwen3-8b --formats fp8_dynamic --effort grid \
        --output "$O/grid"
    tail -40 "$O/grid-8b-fp8.log"
    ;;
SC?)
    run startup-cold-$phase 560 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --repeats 4 --on-env HL_PRECOMPILE_PROCESSES=8
    sed -n '/^qwen3-8b/,$p' "$O/startup-cold-$phase.log" | head -8
    grep -ho "Helion kernels at CUDA-graph capture.*" "$O/startup-cold-$phase.log" | cut -c1-300
    grep -hE "Dynamo bytecode|Compiling a graph|Graph capturing finished|init engine" "$O/startup-cold-$phase.log" | cut -c1-160
    ;;
KT?)
    run marks-$phase python3 -m hltools bench kernels --model qwen3-8b --tp 2 --formats all \
        --baselines vllm --no-plots --jobs 16 --output "$O/marks-$phase"
    tail -5 "$O/marks-$phase.log"
    ;;
esac
phase_end
