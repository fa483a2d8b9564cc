#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's ninth session, which measured (wheels of 59ca6d7, one H200):
# TTFT with all three engines warm (TW FP8_Dynamic): the A/A still 1.048 / 1.091 (off fastest now),
# so issue 20's +1 % is out of reach of engine-process comparisons on this budget (reported blocked);
# Qwen2.5-7B W8A8_INT8 tuned 1.029x over the nearest dispatch (TU3); the timer's spin-up fixed the
# first point (KM); Qwen3-4B FP8_Dynamic grid-tuned in 242 s, 1.036-1.045x over the heuristic in the
# tuning process, its tuned bench run cut (RT).
#   RC   issue 23: the committed Qwen3-4B FP8_Dynamic grid file (lab/results/2026-12-04-i/raw/
#        RT-qwen3-4b-fp8_dynamic/grid, no re-tuning) benched three times against vLLM's kernel,
#        once with the shipped file, `bench compare shipped tuned` (the process-separated step gain
#        over the shipped file the issue asks >= 3 % of), `configs from-bench` over the three tuned
#        runs (the marks by the shipped rule; the result is what would go into the shipped file)
#        (~300 s)
#   RT   as in 2026-12-20.sh, now with autotune's `tuned vs untuned` column (wheels from 2026-12-04's
#        ninth session on): RT_MODEL / RT_FORMAT, e.g. qwen3-4b w8a8_int8, qwen3-1.7b fp8_dynamic
#   other phases: as in 2026-12-20.sh (TW, TU3, KM) and through it 2026-12-19.sh, 2026-12-18.sh, ...
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-21.sh RC | RT | <an older phase>
# Order (1,800 s): the bundle's last part with RC (LIMIT=330); then RT RT_MODEL=qwen3-4b
# RT_FORMAT=w8a8_int8 (LIMIT=330); then RT RT_MODEL=qwen3-1.7b (LIMIT=330) with what is left. Send
# each call within seconds of the last reply: the machine is reset ~30 s after a call ends.
set -u
phase=$1
here=$(dirname "$0")
case $phase in
RC) ;;
*) exec bash "$here/2026-12-20.sh" "$phase" ;;
esac
source "$here/phase-lib.sh"
phase_begin
grid=lab/results/2026-12-04-i/raw/RT-qwen3-4b-fp8_dynamic/grid
kbq() { # NAME [config dir]: Qwen3-4B FP8_Dynamic against vLLM's kernel (HL_CONFIG_DIR when given)
    run "$1" 100 env ${2:+HL_CONFIG_DIR="$2"} python3 -m hltools bench kernels --model qwen3-4b \
        --formats fp8_dynamic --baselines vllm --no-plots --jobs 16 --output "$O/$1"
}
kbq kb-tuned1 "$grid"
kbq kb-shipped
kbq kb-tuned2 "$grid"
kbq kb-tuned3 "$grid"
run compare 60 python3 -m hltools bench compare "$O/kb-shipped" "$O/kb-tuned1" --names shipped,tuned \
    --markdown "$O/compare.md"
tail -n 12 "$O/compare.log"
cp -r "$grid" "$O/grid-remarked"
run remark 60 python3 -m hltools configs from-bench "$O/kb-tuned1" "$O/kb-tuned2" "$O/kb-tuned3" \
    --output "$O/grid-remarked" --stats-output "$O/grid-remarked-stats"
tail -n 6 "$O/remark.log"
phase_end
