#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's thirteenth session, which had no machine (status: paused)
# and made the grid search run on several GPUs (autotune --gpus N, the default every visible GPU,
# and --ray: whole shapes per GPU, each worker compiling on its share of the CPUs; docs/tuning.md,
# "The grid on several GPUs"). On one H200 nothing changes: 2026-12-24.sh's plan stands, and its
# phases run through this script. One phase is new, for a machine of two or more GPUs:
#   GX   RT_MODEL grid-tuned in RT_FORMAT twice, on one GPU (--gpus 1, $O/g1) and on all of them
#        (--gpus N, $O/gN), each run's wall seconds (lanes.txt), its `grid search:` stage lines (one
#        per worker) and its last line printed; then how many keys picked the same config in both
#        files (timing noise can flip near-ties; the docs claim the split never changes the search)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   RT_MODEL=m RT_FORMAT=f [GX_GPUS=n GRID_LIMIT=s] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-25.sh GX
#   GX_GPUS: the GPUs of the second run (default: every visible one); GRID_LIMIT: each run (330 s)
# Order on one H200 (nvidia-h200): as in 2026-12-24.sh.
# Order on two (nvidia-h200-x2), if one is lent: the four bundle parts, then with dist
#   GX RT_MODEL=qwen3-8b RT_FORMAT=fp8_dynamic (LIMIT=560; its one-GPU grid took 187 s on
#   2026-12-03 in the old space), then GX RT_MODEL=qwen3-14b RT_FORMAT=fp8_dynamic (LIMIT=560).
set -u
phase=$1
here=$(dirname "$0")
case $phase in
GX) ;;
*) exec bash "$here/2026-12-24.sh" "$phase" ;;
esac
m=${RT_MODEL:-qwen3-8b}
f=${RT_FORMAT:-fp8_dynamic}
phase=GX-$f-$m
source "$here/phase-lib.sh"
phase_begin
n=${GX_GPUS:-$(nvidia-smi --list-gpus | wc -l)}
for g in 1 "$n"; do
    run "grid-g$g" "${GRID_LIMIT:-330}" python3 -m hltools autotune --model "$m" --formats "$f" --effort grid \
        --gpus $((g)) --output "$O/g$g"
    grep -h "grid search:\|GPUs (" "$O/grid-g$g.log"
    tail -n 1 "$O/grid-g$g.log"
done
python3 - "$O/g1" "$O/g$n" <<'PY'
import sys
from pathlib import Path

from hlcore.config_store import read_config_file

files = [next(Path(d, "scaled_mm").glob("*.json"), None) for d in sys.argv[1:]]
if None in files:
    sys.exit(f"a run wrote no file: {files}")
one, many = (read_config_file(f).entries for f in files)
same = sum(one[i].config == many[i].config for i in one if i in many)
print(f"GX: {len(one)} keys in g1, {len(many)} in {Path(sys.argv[2]).name}; {same} picked the same config")
PY
phase_end
