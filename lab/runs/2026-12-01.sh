#!/usr/bin/env bash
# The GPU runs planned for the next session (after 2026-11-30), in phases of < 600 s (one device
# call each). What each phase answers:
#   T   (two-GPU kind) issue 8: Qwen3-8B FP8_Dynamic at TP=2, all 36 layers, plugin off, on, gemm
#       (gemm last: at TP>1 our opaque RMSNorm also hides it from vLLM's allreduce+rms_norm fusion):
#       both ranks' kernels and captured sizes, greedy agreement, tokens/s at concurrency 1 and 8.
#   G   (two-GPU kind) GPU 1: the GPU tests that failed or never ran (aux fp16 5120 after a302028,
#       autotune, ops, kernel cache), then the compile-mode matrix (issue 7); GPU 0: full-depth
#       Qwen3-8B FP8_Dynamic e2e, engines off / on / gemm (Helion GEMMs without the aux kernels) /
#       fused (HL_AUX_FUSION=1: aux norm/silu + fp8 quant in one launch), concurrency 1, 8, 32.
#   E2  (two-GPU kind) GPU 0: Qwen3-8B W8A8_INT8 full depth off / on / gemm / fused; GPU 1: warm
#       start-up with hlcore's kernel cache (8-layer engines, 2 rounds; issue 7), then Qwen3-1.7B
#       FP8_Dynamic full depth off / on / gemm (issue 6).
#   K   (two-GPU kind) issue 4: kernel benchmarks of the shipped-model shapes with no key yet:
#       GPU 0 Qwen3-32B TP=1 in all three formats; GPU 1 Block_FP8 of Qwen3-4B, Qwen3-14B and
#       Llama-3.1-8B (then `hltools configs from-bench --only-new` folds them into the shipped file),
#       then lab/scripts/bench_aux_fusion.py (issue 5 / e2e question: our aux pairs vs Inductor's fusion).
#   G1, E1, E1B  (G1R: G1's rest) the same work on the one-GPU kind, one lane each (G1 = tests + compile modes,
#       E1 = 8B fp8, E1B = warm start-up + 1.7B fp8).
# Each phase writes under $RES/<phase> (outside $OUT: only a few files come back per call) and
# packs it into $OUT/<phase>.tgz at the end. Usage there (after the bundle's env.sh and
# lab/scripts/setup.sh):  LIMIT=s bash lab/runs/2026-12-01.sh T|G|K|E2|G1|E1|E1B
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
gpu_tests() { # the autotune test first (issue 4; ~150 s with its 2-minute search budget)
    run gpu-tests 330 python3 -m nox -s gpu_tests -- packages/hltools/tests/gpu/test_autotune_gpu.py \
        packages/hlcore/tests/test_kernel_cache.py packages/hlvllm/tests/gpu -v -rfE
}
compile_modes() { # issue 7: 4-layer Qwen3-8B-dims engines, four at a time on this GPU (fixed KV cache)
    local m pids=()
    local modes=(off:O2 off:custom-ops-all on:O2 fused:O2 on:piecewise on:full-decode on:custom-ops-all on:custom-ops-none on:O0 on:eager)
    mkdir -p "$O/modes"
    for i in "${!modes[@]}"; do
        local name=${modes[$i]%%:*} mode=${modes[$i]#*:} plugin extra=()
        plugin=$name; [ "$name" = fused ] && plugin=on && extra=(--aux-fusion) # HL_AUX_FUSION=1
        local c=$O/modes/cache-$name-$mode # own cold caches: no two engines share a compile cache
        run "mode-$name-$mode" 240 env VLLM_CACHE_ROOT="$c/vllm" TORCHINDUCTOR_CACHE_DIR="$c/inductor" \
            TRITON_CACHE_DIR="$c/triton" python3 lab/scripts/e2e_vllm.py run --plugin "$plugin" --compile "$mode" \
            "${extra[@]}" --layers 4 --kv-cache-gib 2 --gpu-memory-utilization 0.2 \
            --out "$O/modes/$name-$mode.json" &
        pids+=($!)
        if [ $(((i + 1) % 4)) -eq 0 ]; then wait "${pids[@]}"; pids=(); fi
    done
    wait
    for m in on-O2 fused-O2 on-piecewise on-full-decode on-custom-ops-all on-custom-ops-none on-O0 on-eager; do
        [ -f "$O/modes/$m.json" ] || { echo "mode $m: no result" >>"$O/modes.txt"; continue; }
        # the control (plugin off, vLLM's CUDA custom ops) is the noise floor of the logprob check
        python3 lab/scripts/e2e_vllm.py compare "$O/modes/$m.json" "$O/modes/off-O2.json" \
            --control "$O/modes/off-custom-ops-all.json" >>"$O/modes.txt" 2>&1
        echo "mode $m: compare rc=$?" >>"$O/modes.txt"
    done
    grep -E "^mode |batch|E2E" "$O/modes.txt" | tee -a "$O/lanes.txt"
}
phase_begin
case $phase in
T)
    e2e e2e-8b-fp8-tp2 qwen3-8b fp8_dynamic 1 --tensor-parallel-size 2 --concurrency 1,8 --plugins off,on,gemm
    ;;
G)
    ( export CUDA_VISIBLE_DEVICES=1; gpu_tests; compile_modes ) &
    ( # GPU 0: ~115 s per full-depth engine, four engines
        export CUDA_VISIBLE_DEVICES=0
        e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --plugins off,on,gemm,fused --concurrency 1,8,32
    ) &
    wait
    ;;
E2)
    ( # GPU 0: Qwen3-8B W8A8_INT8 full depth, four engines (int8: the fused pass saves launches over vLLM)
        export CUDA_VISIBLE_DEVICES=0
        e2e e2e-8b-int8 qwen3-8b w8a8_int8 1 --plugins off,on,gemm,fused --concurrency 1,8,32
    ) &
    ( # GPU 1: warm start-up (issue 7) on 8-layer engines, then Qwen3-1.7B FP8_Dynamic full depth
        export CUDA_VISIBLE_DEVICES=1
        e2e e2e-8b-fp8-warm qwen3-8b fp8_dynamic 2 --layers 8 --concurrency 1,8
        e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 1 --plugins off,on,gemm --concurrency 1,8,32
    ) &
    wait
    ;;
K)
    ( export CUDA_VISIBLE_DEVICES=0; kb kernels-32b qwen3-32b fp8_dynamic,w8a8_int8,block_fp8 ) &
    ( # GPU 1: the block shapes, then the aux pairs: Helion (2 launches / fused) vs Inductor vs vLLM
        export CUDA_VISIBLE_DEVICES=1
        kb kernels-block qwen3-4b,qwen3-14b,llama-3.1-8b block_fp8
        run aux-fusion 200 env OUT="$O" python3 lab/scripts/bench_aux_fusion.py --budget-s 150
    ) &
    wait
    ;;
G1) # one GPU: the tests beside the 4-layer engines (fixed 2 GiB KV caches, 0.2 of memory each)
    gpu_tests &
    compile_modes &
    wait
    ;;
G1R) # after G1 of 2026-12-01 04:12 (engines failed on a missing option, tests hit their limit): the rest
    run gpu-tests-rest 330 python3 -m nox -s gpu_tests -- packages/hltools/tests/gpu/test_autotune_gpu.py \
        packages/hlvllm/tests/gpu/test_ops_gpu.py -v -rfE &
    compile_modes &
    wait
    ;;
C) # controls for G1R and E1: a plugin-off engine with vLLM's CUDA custom ops (the aux-op noise floor
    # of the compile-mode compare), then the aux pairs at Qwen3-8B sizes (why fused was slow in E1)
    mkdir -p "$O/modes"
    run mode-off-custom-ops-all 150 python3 lab/scripts/e2e_vllm.py run --plugin off --compile custom-ops-all \
        --layers 4 --kv-cache-gib 2 --gpu-memory-utilization 0.2 --out "$O/modes/off-custom-ops-all.json"
    run aux-fusion 150 env OUT="$O" python3 lab/scripts/bench_aux_fusion.py --quick --budget-s 110
    ;;
E1) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --plugins off,on,gemm,fused --concurrency 1,8,32 ;;
E1B)
    e2e e2e-8b-fp8-warm qwen3-8b fp8_dynamic 2 --layers 8 --concurrency 1,8
    e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 1 --plugins off,on,gemm
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
