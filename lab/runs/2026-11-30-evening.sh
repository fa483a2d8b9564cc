#!/usr/bin/env bash
# The GPU runs of the 2026-11-30 evening session on one H200, in phases of < 600 s (one device call
# each). Correctness runs (tests; engines whose outputs are compared, not timed) share the GPU in
# phase B; every timing (C, D) runs alone. TP2 needs the two-GPU kind.
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh): LIMIT=s bash lab/runs/2026-11-30-evening.sh B|C|D|TP2
set -u
phase=$1
OUT=${OUT:-$PWD/out}
START=$(date +%s)
LIMIT=${LIMIT:-560}
left() { echo $((LIMIT - ($(date +%s) - START))); }
run() { # run NAME CMD...: time-limited to what is left of the phase, log in $OUT/NAME.log
    local name=$1; shift
    local t; t=$(left)
    if [ "$t" -lt 20 ]; then echo "SKIP $name (no time left)" | tee -a "$OUT/skipped.txt"; return; fi
    local t0; t0=$(date +%s)
    timeout "$t" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? $(($(date +%s) - t0)) s" | tee -a "$OUT/lanes.txt"
}
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.used --format=csv >"$OUT/gpus-$phase.csv"
MODEL8B=qwen3-8b
eng() { # eng NAME ARGS...: one in-process engine (not timed) with its own compile caches
    local name=$1; shift
    run "eng-$name" env VLLM_USE_DEEP_GEMM=0 VLLM_CACHE_ROOT=/tmp/vc/$name TORCHINDUCTOR_CACHE_DIR=/tmp/ic/$name \
        python3 lab/scripts/e2e_vllm.py run --gpu-memory-utilization 0.17 --kv-cache-gib 4 --out "$OUT/eng-$name.json" "$@"
}
case $phase in
B) # correctness only (nothing timed for a claim): GPU tests next to two waves of four engines
    (
        run gpu-tests python3 -m nox -s gpu_tests -- packages/hltools/tests/gpu/test_formats_vs_vllm_gpu.py \
            packages/hlvllm/tests/gpu -v -rfE
        run more-tests python3 -m nox -s gpu_tests -- packages/hltools/tests/gpu/test_autotune_gpu.py \
            packages/hlcore/tests/gpu packages/hltools/tests/gpu/test_bench_gpu.py -v -rfE
    ) &
    (
        eng int8-on --plugin on --quant int8 &
        eng int8-on-noaux --plugin on --quant int8 --aux-kernels none &
        eng int8-off --plugin off --quant int8 &
        eng block-off2 --plugin off --quant block-fp8 &
        wait
        eng block-on --plugin on --quant block-fp8 &
        eng block-on-noaux --plugin on --quant block-fp8 --aux-kernels none &
        eng block-off --plugin off --quant block-fp8 &
        eng block-ctl --plugin off --quant block-fp8 --disable-kernels CutlassFp8BlockScaledMMKernel &
        wait
        for p in int8-on:int8-off int8-on-noaux:int8-off block-on:block-off block-on-noaux:block-off \
            block-ctl:block-off block-off2:block-off; do
            python3 lab/scripts/e2e_vllm.py compare "$OUT/eng-${p%%:*}.json" "$OUT/eng-${p##*:}.json" \
                >"$OUT/cmp-${p%%:*}-vs-${p##*:}.txt" 2>&1
            echo "compare $p rc=$?" | tee -a "$OUT/lanes.txt"
        done
    ) &
    wait
    ;;
C) # timings, one at a time: design sweep, then kernel benchmarks (block last: DeepGEMM JIT)
    run sweep env SWEEP_MS=1,8,32 SWEEP_JOBS=14 SWEEP_BUDGET_S=150 OUT="$OUT" \
        SWEEP_ONLY=s1_n64_k128_sw,s1_n32_k256_tma,s1_n64_k256_sw_tma,s4_n64_k128_sw_tma,s4_n128_k128_sw_tma,s2_n32_k256_tma,s4_n64_k128_sw_ws,s8_n64_k128_sw_ws,s16_n64_k128_sw_ws \
        python3 lab/scripts/sweep_scaled_mm.py
    run kernels python3 -m hltools bench kernels --model $MODEL8B,qwen3-1.7b --formats fp8_dynamic,w8a8_int8 \
        --no-plots --jobs 14 --output "$OUT/kernels"
    run kernels-block python3 -m hltools bench kernels --model $MODEL8B,qwen3-1.7b --formats block_fp8 \
        --no-plots --jobs 14 --output "$OUT/kernels-block"
    ;;
D) # timings: engines with and without the plugin, then the aux config sweep
    run e2e-8b-fp8 python3 -m hltools bench e2e --model $MODEL8B --format fp8_dynamic --layers 8 --rounds 1 \
        --output "$OUT/e2e-8b" --timeout 200
    run e2e-1.7b-fp8 python3 -m hltools bench e2e --model qwen3-1.7b --format fp8_dynamic --layers 8 --rounds 1 \
        --output "$OUT/e2e-1.7b" --timeout 170
    run aux-sweep python3 lab/scripts/sweep_aux_configs.py --budget-s $(($(left) - 70))
    ;;
TP2) # the two-GPU kind
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    run e2e-8b-tp2 python3 -m hltools bench e2e --model $MODEL8B --format fp8_dynamic --layers 8 --rounds 1 \
        --tensor-parallel-size 2 --concurrency 1,8 --output "$OUT/e2e-8b-tp2" --timeout 240
    ;;
esac
echo "phase $phase done in $(($(date +%s) - START)) s" | tee -a "$OUT/lanes.txt"
cat "$OUT/lanes.txt"
