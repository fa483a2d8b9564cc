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
# Usage there (after the bundle's env.sh and ci/gpu/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash ci/gpu/runs/2026-12-02.sh T|W|E|F|K
set -u
phase=$1
RES=${RES:-/tmp/gpu-runs}
O=$RES/$phase
START=$(date +%s)
LIMIT=${LIMIT:-540}
source "$(dirname "$0")/phase-lib.sh"
e2e() { # e2e NAME MODEL FORMAT ROUNDS [more hltools bench e2e args]
    local name=$1 model=$2 fmt=$3 rounds=$4; shift 4
    run "$name" python3 -m hltools bench e2e --model "$model" --format "$fmt" --rounds "$rounds" \
        --repeats 5 --output "$O/$name" --timeout 240 "$@"
}
kb() { # kb NAME MODELS FORMATS
    run "$1" python3 -m hltools bench kernels --model "$2" --formats "$3" --no-plots --jobs 8 --output "$O/$1"
}
mkdir -p "$O"
nvidia-smi --query-gpu=index,name,memory.used,clocks.max.sm --format=csv >"$O/gpus.csv"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
case $phase in
T) e2e e2e-8b-fp8-tp2 qwen3-8b fp8_dynamic 1 --tensor-parallel-size 2 --concurrency 1,8 --plugins off,on ;;
W)
    e2e e2e-8b-fp8-warm qwen3-8b fp8_dynamic 2 --layers 8 --concurrency 1,8 --plugins off,on
    e2e e2e-1.7b-fp8 qwen3-1.7b fp8_dynamic 1 --concurrency 1,8,32 --plugins off,on
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
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
echo "phase $phase done in $(($(date +%s) - START)) s" | tee -a "$O/lanes.txt"
cat "$O/lanes.txt"
for f in "$O"/*/e2e-*.md; do [ -f "$f" ] && cat "$f"; done
if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/$phase.tgz" --exclude='cache-*' --exclude='*.json.gz' --exclude=model --exclude='*.bin' -C "$RES" "$phase"
    ls -la "$OUT"
fi
