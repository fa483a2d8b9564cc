#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's fourteenth session, which had no machine (status: paused)
# and added `autotune --compile-alongside` (hltools.grid_search.GridSearch's compile_pool): every
# compile job is submitted at once and each (format, N, K, M bucket) group is timed as soon as its
# own candidates are built, so the GPU times while the CPUs compile (Qwen3-14B FP8 took 308 s, 194
# of them before its first key; how they split between compiling and timing is unmeasured). The
# default stays --compile-first until this phase says the picks are as good and the wall shorter:
#   GA   RT_MODEL grid-tuned in RT_FORMAT twice, each in a fresh kernel cache (HL_KERNEL_CACHE_DIR
#        empty: a new folder per run, Triton's files in it): --compile-first ($O/first) then
#        --compile-alongside ($O/along); each run's wall seconds (lanes.txt) and `grid search:`
#        stage line; then per key whether both picked the same config and the ratio of the picks'
#        times as each run's check measured them (after its search, no compile running): alongside /
#        first, geomean and range (timing noise flips near-ties; what matters is that the ratio
#        stays ~1), and the same ratio of the heuristic config's times (the noise floor). The
#        second run finds the OS file cache warm (imports, the model's files): a few seconds in
#        its favour, small against the ~100 s the overlap can save
#   other phases: as in 2026-12-25.sh (GX) and through it 2026-12-24.sh
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODEL=m RT_FORMAT=f [GRID_LIMIT=s] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-26.sh GA
#   GRID_LIMIT: each of the two runs (default 280 s)
# Order on one H200 (1,800 s; each line one call sent within seconds of the last reply):
#   part.00, part.01, part.02 (bare); part.03 + dist with RB RT_MODEL=qwen3-14b
#     RT_FORMAT=fp8_dynamic RB_RUNS=3 GRID=lab/results/2026-12-04-k/raw/RT-qwen3-14b-fp8_dynamic/grid
#     (LIMIT=100), then GA RT_MODEL=qwen3-1.7b RT_FORMAT=fp8_dynamic (LIMIT=480; its grid took
#     226 s on 2026-12-04-j)
#   then 2026-12-24.sh's order from GM RT_MODELS="llama-3.1-8b qwen3-32b" on.
# Order on two or more GPUs: as in 2026-12-25.sh.
set -u
phase=$1
here=$(dirname "$0")
case $phase in
GA) ;;
*) exec bash "$here/2026-12-25.sh" "$phase" ;;
esac
m=${RT_MODEL:-qwen3-1.7b}
f=${RT_FORMAT:-fp8_dynamic}
phase=GA-$f-$m
source "$here/phase-lib.sh"
phase_begin
HL_KERNEL_CACHE_DIR= run grid-first "${GRID_LIMIT:-280}" python3 -m hltools autotune --model "$m" \
    --formats "$f" --effort grid --gpus 1 --compile-first --output "$O/first"
HL_KERNEL_CACHE_DIR= run grid-along "${GRID_LIMIT:-280}" python3 -m hltools autotune --model "$m" \
    --formats "$f" --effort grid --gpus 1 --compile-alongside --output "$O/along"
for how in first along; do
    grep -h "grid search:" "$O/grid-$how.log"
    tail -n 1 "$O/grid-$how.log"
done
python3 - "$O/grid-first.log" "$O/grid-along.log" <<'PY'
import math
import re
import statistics
import sys

# "tuned fp8_dynamic N=7168 K=5120 M=1 in 194 s: 12.6 µs (default 12.8, ..."
line = re.compile(r"tuned (\S+) N=(\d+) K=(\d+) M=(\d+) in \d+ s: ([\d.]+) µs \(default ([\d.]+)")
runs = []
for log in sys.argv[1:]:
    keys = {}
    for text in open(log, encoding="utf-8", errors="replace"):
        if hit := line.search(text):
            keys[hit.groups()[:4]] = (float(hit.group(5)), float(hit.group(6)))
    runs.append(keys)
first, along = runs
both = sorted(set(first) & set(along))
if not both:
    sys.exit(f"GA: no key tuned in both runs ({len(first)} first, {len(along)} alongside)")


def ratio(i):
    r = [along[k][i] / first[k][i] for k in both]
    return f"{math.exp(statistics.fmean(map(math.log, r))):.3f} ({min(r):.3f}-{max(r):.3f})"


print(f"GA: {len(both)} keys in both runs ({len(first)} first, {len(along)} alongside)")
print(f"GA: picks' times alongside / first {ratio(0)}; heuristic's {ratio(1)} (noise)")
PY
cfg() { ls "$O/$1"/scaled_mm/*.json 2>/dev/null | head -1; }
if [ -n "$(cfg first)" ] && [ -n "$(cfg along)" ]; then
    python3 - "$(cfg first)" "$(cfg along)" <<'PY'
import sys

from hlcore.config_store import read_config_file

one, two = (read_config_file(f).entries for f in sys.argv[1:])
same = sum(one[i].config == two[i].config for i in one if i in two)
print(f"GA: {same} of {len(set(one) & set(two))} keys picked the same config")
PY
fi
phase_end
