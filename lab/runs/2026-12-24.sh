#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's twelfth session, which ran nothing on the GPU (the
# machine stopped answering on the bundle's last part and no machine was lent again; 664 s of the
# budget spent: lab/gpu-runs.md) and halved the grid's decode space on the CPU (block_n 32 and
# swap_ab off left out at M <= 32, tried as neighbours of each bucket's best; a grid run now
# prints each stage's wall seconds: docs/tuning.md). 2026-12-23.sh's plan still stands; this
# script adds two phases that put two slices of one format into one grid folder and one bench
# process each (a bench process's fixed cost, start-up and precompile, was 40-60 s of its 47-80 s):
#   GM   RT_MODELS ("m1 m2") grid-tuned one after the other in RT_FORMAT into one folder
#        ($RES/RM-<format>-<m1>_<m2>/grid; a shape both models have is tuned once), each run's
#        `grid search:` stage line printed; with KB_SHIPPED=1 also `bench kernels` of both models
#        with the shipped file (kb-shipped)
#   BM   that folder (or GRID=<dir>) benched in RB_RUNS processes of both models (default
#        "1 2 3": kb-tuned1..3), after kb-shipped when RB_SHIPPED=1 and it is not there yet
#   RG, RB and the older phases: as in 2026-12-23.sh (through it 2026-12-22.sh, one model)
# `bench compare kb-shipped kb-tuned*` and `configs from-bench kb-tuned1..3 --config-dir <grid>`
# run on the CPU afterwards (both take several models).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODELS="m1 m2" RT_FORMAT=f [KB_SHIPPED=1 GRID=dir RB_RUNS="..." RB_SHIPPED=1 GRID_LIMIT=s
#       KB_LIMIT=s] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-24.sh GM | BM
#   GRID_LIMIT: each model's grid run (default 330 s); KB_LIMIT: each bench run (default 200 s)
# The bundle: make it with PART_MIB=30 in .gpu/make-vllm-bundle.sh (4 parts): the tracked tree is
# ~20 MB (lab/results), so a 40 MiB part with dist/ and .hlwheels crossed the 64 MiB carry limit.
# Order (1,800 s), each line one call sent within seconds of the last reply (the machine is reset
# ~30 s after a call ends, /tmp with it):
#   part.00, part.01, part.02 (bare); part.03 + dist with RB RT_MODEL=qwen3-14b
#     RT_FORMAT=fp8_dynamic RB_RUNS=3 GRID=lab/results/2026-12-04-k/raw/RT-qwen3-14b-fp8_dynamic/grid
#     (LIMIT=100; its third process, then it ships), then GM RT_MODELS="llama-3.1-8b qwen3-32b"
#     RT_FORMAT=fp8_dynamic (LIMIT=430: the pruned grid's first wall times)
#   BM RT_MODELS="llama-3.1-8b qwen3-32b" RT_FORMAT=fp8_dynamic RB_SHIPPED=1 RB_RUNS="1 2"
#     GRID=/tmp/gpu-runs/RM-fp8_dynamic-llama-3.1-8b_qwen3-32b/grid (LIMIT=560)
#   BM the same with RB_RUNS=3 (LIMIT=220), then GM RT_MODELS="qwen3-1.7b qwen3-4b"
#     RT_FORMAT=block_fp8 (LIMIT=350 in all)
#   BM RT_MODELS="qwen3-1.7b qwen3-4b" RT_FORMAT=block_fp8 RB_SHIPPED=1 with what is left
set -u
phase=$1
here=$(dirname "$0")
case $phase in
GM | BM) ;;
*) exec bash "$here/2026-12-23.sh" "$phase" ;;
esac
read -r -a models <<<"${RT_MODELS:-llama-3.1-8b qwen3-32b}"
f=${RT_FORMAT:-fp8_dynamic}
list=$(IFS=,; echo "${models[*]}")
step=$phase
# models joined by "_": the device tool brings back no file whose name holds "+" (2026-12-05,
# the first GM run's tgz was left out for its name)
phase=RM-$f-$(IFS=_; echo "${models[*]}")
source "$here/phase-lib.sh"
phase_begin
kbm() { # NAME [config dir]: every model of the list in one bench kernels process
    run "$1" "${KB_LIMIT:-200}" env ${2:+HL_CONFIG_DIR="$2"} python3 -m hltools bench kernels --model "$list" \
        --formats "$f" --baselines vllm --no-plots --jobs 16 --output "$O/$1"
    grep -h "precompiled\|^wrote" "$O/$1.log"
}
if [ "$step" = GM ]; then
    for m in "${models[@]}"; do
        run "grid-$m" "${GRID_LIMIT:-330}" python3 -m hltools autotune --model "$m" --formats "$f" --effort grid \
            --output "$O/grid"
        grep -h "grid search:" "$O/grid-$m.log"
        tail -n 1 "$O/grid-$m.log"
    done
    [ "${KB_SHIPPED:-0}" = 1 ] && kbm kb-shipped
    phase_end
    exit
fi
grid=${GRID:-$O/grid}
[ -d "$grid/scaled_mm" ] || { echo "no grid file under $grid: run GM first on this machine"; exit 1; }
if [ "${RB_SHIPPED:-0}" = 1 ] && [ ! -f "$O/kb-shipped/kernels.json" ]; then
    kbm kb-shipped
fi
for i in ${RB_RUNS:-1 2 3}; do
    kbm "kb-tuned$i" "$grid"
done
phase_end
