#!/usr/bin/env bash
# The GPU runs of the 2026-11-30 night session on the two-GPU kind (nvidia-h200-x2), in phases of
# < 600 s (one device call each). Each phase writes under $RES/<phase> (outside $OUT: only a few
# files come back per call) and packs it into $OUT/<phase>.tgz at the end.
#   A  two lanes at once, one per GPU: GPU 1 correctness (GPU tests), GPU 0 timings (kernel
#      benchmark of the Qwen3-8B TP=2 shapes and of more models; then the aux config sweep).
#   TP, TPB  tensor-parallel engines over both GPUs, plugin on and off (issue 8), one at a time.
#   E  one engine per GPU at a time: full-depth single-GPU e2e (issue 6; warm start-up, issue 7).
#   E1 the same on the one-GPU kind: Qwen3-8B FP8_Dynamic only.
# (2026-11-30 night: phase TP first derived TP=2 configs from phase A's benchmark; dropped, the
# benchmark rows did not record their configs then. Engine timeouts were 120-150 s then: too short.)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s bash lab/runs/2026-11-30-night.sh A|TP|TPB|E|E1
set -u
phase=$1
RES=${RES:-/tmp/night}
O=$RES/$phase
START=$(date +%s)
LIMIT=${LIMIT:-540}
source "$(dirname "$0")/phase-lib.sh"
mkdir -p "$O"
nvidia-smi --query-gpu=index,name,memory.used,clocks.max.sm --format=csv >"$O/gpus.csv"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
case $phase in
A)
    ( # GPU 1: correctness (nothing here is timed for a claim)
        export CUDA_VISIBLE_DEVICES=1
        run gpu-tests 330 python3 -m nox -s gpu_tests -- packages/hlvllm/tests/gpu \
            packages/hltools/tests/gpu/test_autotune_gpu.py packages/hlcore/tests/gpu -v -rfE
        run aux-sweep env OUT="$O" python3 lab/scripts/sweep_aux_configs.py --jobs 6 --grace-s 30 \
            --budget-s $(($(left) - 50))
    ) &
    ( # GPU 0: timings
        export CUDA_VISIBLE_DEVICES=0
        run kernels-tp2 200 python3 -m hltools bench kernels --model qwen3-8b --tp 2 \
            --formats fp8_dynamic,w8a8_int8,block_fp8 --no-plots --jobs 8 --output "$O/kernels-tp2"
        run kernels-more python3 -m hltools bench kernels --model qwen3-4b,llama-3.1-8b,qwen3-14b \
            --formats fp8_dynamic,w8a8_int8 --no-plots --jobs 8 --output "$O/kernels-more"
    ) &
    wait
    ;;
TP) # both GPUs: Qwen3-8B FP8_Dynamic at TP=2, all 36 layers (a full-depth engine needs ~100 s to start)
    run e2e-8b-fp8-tp2 python3 -m hltools bench e2e --model qwen3-8b --format fp8_dynamic --rounds 1 \
        --repeats 5 --tensor-parallel-size 2 --concurrency 1,8 --output "$O/e2e-8b-fp8-tp2" --timeout 250
    ;;
TPB) # both GPUs: Block_FP8 at TP=2 (DeepGEMM's JIT adds to the start-up), 12 layers
    run e2e-8b-block-tp2 python3 -m hltools bench e2e --model qwen3-8b --format block_fp8 --layers 12 \
        --rounds 1 --repeats 5 --tensor-parallel-size 2 --concurrency 1,8 --output "$O/e2e-8b-block-tp2" \
        --timeout 250
    ;;
E) # one single-GPU engine lane per GPU, full depth (two-GPU kind)
    (
        export CUDA_VISIBLE_DEVICES=0
        run e2e-8b-fp8 python3 -m hltools bench e2e --model qwen3-8b --format fp8_dynamic --rounds 2 \
            --repeats 5 --output "$O/e2e-8b-fp8" --timeout 240
    ) &
    (
        export CUDA_VISIBLE_DEVICES=1
        run e2e-8b-int8 python3 -m hltools bench e2e --model qwen3-8b --format w8a8_int8 --rounds 1 \
            --repeats 5 --output "$O/e2e-8b-int8" --timeout 240
        run e2e-1.7b-fp8 python3 -m hltools bench e2e --model qwen3-1.7b --format fp8_dynamic --rounds 1 \
            --repeats 5 --output "$O/e2e-1.7b-fp8" --timeout 200
    ) &
    wait
    ;;
E1) # the one-GPU kind: Qwen3-8B FP8_Dynamic, cold and warm
    run e2e-8b-fp8 python3 -m hltools bench e2e --model qwen3-8b --format fp8_dynamic --rounds 2 \
        --repeats 5 --output "$O/e2e-8b-fp8" --timeout 240
    ;;
esac
echo "phase $phase done in $(($(date +%s) - START)) s" | tee -a "$O/lanes.txt"
cat "$O/lanes.txt"
if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/$phase.tgz" --exclude='cache-*' --exclude=model --exclude='*.bin' -C "$RES" "$phase"
    ls -la "$OUT"
fi
