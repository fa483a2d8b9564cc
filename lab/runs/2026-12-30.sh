#!/usr/bin/env bash
# The GPU runs planned after 2026-12-06's thirteenth session (lab/results/2026-12-06), which found
# why `--effort quick` failed a key (fixed in eaa895f) and ran it beside the grid on eight Qwen3-4B
# FP8_Dynamic keys of an H100: one LFBO pick beat the grid's, by 1.5 % (qkv at M = 8, block_k 512
# at 3 stages, a value outside the grid's space). New phase:
#   K5   lab/scripts/grid_block_k512.py (the grid with block_k 512 at 3 and 4 stages tried next to
#        each group's fastest unsplit config) on each of RT_MODELS in RT_FORMAT (fp8_dynamic or
#        w8a8_int8), each in a fresh output; its log's decode-step table reads the run's file
#        against the file in effect (the packaged grid picks, for Qwen3-1.7B/4B on either GPU), and
#        its last line counts the keys that picked block_k 512. Does the space gain enough to hold it?
#        Ran on an H100 SXM in 2026-12-06-b (fourteenth session): picked for 14 of 168 keys, all
#        qkv; the grid tries it since d61edab, so K5 now only repeats the grid.
#   other phases: as in 2026-12-29.sh (MEM_LOG) and through it 2026-12-28.sh (CP, GR), 2026-12-27.sh
#        (GM, BM)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODELS="qwen3-4b qwen3-1.7b" RT_FORMAT=fp8_dynamic LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-30.sh K5
# Order on an H200 (1,800 s; each line one call sent within seconds of the last reply):
#   part.00, part.01, part.02 (bare); part.03 + dist with K5 RT_MODELS="qwen3-4b qwen3-1.7b"
#     RT_FORMAT=fp8_dynamic (LIMIT=400: about 150 s a model on the H200 with the grid's pruned space),
#     then 2026-12-28.sh's H200 order from its second line (Qwen3-1.7B Block_FP8's bench processes,
#     Qwen3-4B Block_FP8 resumed and benched).
# On an H100 SXM: part.00..02; part.03 + dist with K5 RT_MODELS="qwen3-4b qwen3-1.7b qwen3-8b"
#     RT_FORMAT=fp8_dynamic (LIMIT=330: 63-90 s a model there), then K5 with RT_FORMAT=w8a8_int8.
set -u
here=$(dirname "$0")
phase=${1:?the phase to run: K5, GM, BM, CP, GR, ...}
[ "$phase" = K5 ] || exec bash "$here/2026-12-29.sh" "$@"
read -r -a models <<<"${RT_MODELS:-qwen3-4b}"
f=${RT_FORMAT:-fp8_dynamic}
phase=K5-$f-$(IFS=_; echo "${models[*]}")
source "$here/phase-lib.sh"
phase_begin
for m in "${models[@]}"; do
    HL_KERNEL_CACHE_DIR= run "grid-$m" "${GRID_LIMIT:-240}" python3 lab/scripts/grid_block_k512.py autotune \
        --model "$m" --formats "$f" --effort grid --gpus 1 --output "$O/grid-$m"
    sed -n "/decode step/,/└/p" "$O/grid-$m.log"
    tail -n 3 "$O/grid-$m.log"
done
phase_end
