#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's tenth session, which measured (wheels of b5377f1, one H200):
# Qwen3-4B FP8_Dynamic's grid file 1.068-1.081x the shipped file over a decode step in three bench
# processes against one (RC), Qwen3-1.7B FP8_Dynamic grid-tuned in 226 s and 1.076-1.081x (both now
# shipped), Qwen3-4B W8A8_INT8 grid-tuned in 274 s and 1.057-1.072x (two of its bench processes came
# back: one more before it ships). A re-tune slice is two phases, because grid + four bench runs
# (~580 s) do not fit one call with the bundle's:
#   RG   RT_MODEL in RT_FORMAT grid-tuned (`hltools autotune --effort grid`) and `bench kernels` with
#        the shipped file, into $RES/RT-<model>-<format> (~230-280 s + ~70 s)
#   RB   that grid file (or GRID=<dir>, e.g. a committed one) benched in RB_RUNS processes (default
#        "1 2 3": kb-tuned1..3), after the shipped file once when RB_SHIPPED=1 and kb-shipped is not
#        there yet; `bench compare kb-shipped kb-tuned*` (a summary row per process, the slower
#        layers over their median) when
#        kb-shipped is there, and `configs from-bench` over the runs into a copy of configs/ when
#        there are three (~40-75 s a run)
#   other phases: as in 2026-12-21.sh (RC) and through it 2026-12-20.sh (RT, TW, TU3, KM), ...
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODEL=m RT_FORMAT=f [GRID=dir RB_RUNS="..."] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-22.sh RG | RB
#   (GRID_LIMIT, default 330 s: the grid run's limit; KB_LIMIT, default 100 s: each bench run's)
# Order (1,800 s), each line one call sent within seconds of the last reply (the machine is reset
# ~30 s after a call ends, /tmp with it):
#   the bundle's part.02 with RB RT_MODEL=qwen3-8b RT_FORMAT=block_fp8 RB_SHIPPED=1
#     GRID=lab/results/2026-12-04-d/raw/T3/grid (LIMIT=330: Qwen3-8B's committed Block_FP8 grid on
#     the capture layout, 1.010-1.086x the heuristic per step in its tuning process, never benched
#     against the shipped KC configs), then RB RT_MODEL=qwen3-4b RT_FORMAT=w8a8_int8 RB_RUNS=5
#     GRID=lab/results/2026-12-04-j/raw/RT-qwen3-4b-w8a8_int8/grid (LIMIT=100; its third process)
#   RG RT_MODEL=qwen3-1.7b RT_FORMAT=w8a8_int8 (LIMIT=400)
#   RB qwen3-1.7b w8a8_int8 (LIMIT=260)
#   RG RT_MODEL=qwen3-14b RT_FORMAT=fp8_dynamic (LIMIT=400) with what is left (its RB next session)
set -u
phase=$1
here=$(dirname "$0")
case $phase in
RG | RB) ;;
*) exec bash "$here/2026-12-21.sh" "$phase" ;;
esac
m=${RT_MODEL:-qwen3-4b} f=${RT_FORMAT:-fp8_dynamic}
step=$phase
phase=RT-$m-$f
source "$here/phase-lib.sh"
phase_begin
if [ "$step" = RG ]; then
    run "grid-$m-$f" "${GRID_LIMIT:-330}" python3 -m hltools autotune --model "$m" --formats "$f" --effort grid --output "$O/grid"
    tail -14 "$O/grid-$m-$f.log"
    run kb-shipped "${KB_LIMIT:-100}" python3 -m hltools bench kernels --model "$m" --formats "$f" --baselines vllm \
        --no-plots --jobs 16 --output "$O/kb-shipped"
    phase_end
    exit
fi
grid=${GRID:-$O/grid}
[ -d "$grid/scaled_mm" ] || { echo "no grid file under $grid: run RG first on this machine"; exit 1; }
if [ "${RB_SHIPPED:-0}" = 1 ] && [ ! -f "$O/kb-shipped/kernels.json" ]; then
    run kb-shipped "${KB_LIMIT:-100}" python3 -m hltools bench kernels --model "$m" --formats "$f" --baselines vllm \
        --no-plots --jobs 16 --output "$O/kb-shipped"
fi
runs=()
for i in ${RB_RUNS:-1 2 3}; do
    run "kb-tuned$i" "${KB_LIMIT:-100}" env HL_CONFIG_DIR="$grid" python3 -m hltools bench kernels --model "$m" \
        --formats "$f" --baselines vllm --no-plots --jobs 16 --output "$O/kb-tuned$i"
    [ -f "$O/kb-tuned$i/kernels.json" ] && runs+=("$O/kb-tuned$i")
done
if [ -f "$O/kb-shipped/kernels.json" ] && [ ${#runs[@]} -gt 0 ]; then
    run compare 60 python3 -m hltools bench compare "$O/kb-shipped" "${runs[@]}" --names shipped,tuned \
        --markdown "$O/compare.md"
    grep -A7 "over M (> 1" "$O/compare.log" | tail -n 4
    grep -A14 "layers slower" "$O/compare.log"
    grep "no layer slower" "$O/compare.log"
fi
if [ ${#runs[@]} -ge 3 ]; then
    cp -r configs "$O/configs-remarked"
    run remark 60 python3 -m hltools configs from-bench "${runs[@]}" --output "$O/configs-remarked" \
        --stats-output "$O/stats-remarked" --config-dir "$grid"
    tail -n 3 "$O/remark.log"
fi
phase_end
