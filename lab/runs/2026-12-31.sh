#!/usr/bin/env bash
# The GPU runs planned after 2026-12-06's fourteenth session (lab/results/2026-12-06-b), where
# `--effort full` on Qwen3-4B FP8_Dynamic's four shapes at M = 8 got 8 minutes for the four (3
# generations a key of its 20) and kept every grid pick. New phases (K6 added after F1 ran):
#   F1   `--effort full` on ONE key with the time to run its generations: Qwen3-4B FP8_Dynamic at
#        M = 8, the shape FULL_N (default 6144: qkv, where `--effort quick` once beat the grid by
#        1.5 % with block_k 512), the other three shapes of that run seeded as done from
#        2026-12-06-b's full8.json (so the run tunes that key only), FULL_MINUTES of budget
#        (default 8.5: one call of 600 s holds it with the bundle's set-up and the key's check).
#        The key's line reads LFBO's pick against the file in effect (the H100 file's grid pick,
#        or the H200 file's config).
#   K6   lab/scripts/grid_lfbo_knobs.py (the grid with F1's two picks' Helion knobs, and swap_ab off
#        at M <= 16 alone and with split_k doubled, tried next to each group's fastest config) on
#        each of RT_MODELS in RT_FORMAT (fp8_dynamic or w8a8_int8), then the grid as shipped on the
#        same model as a control, each in a fresh output; each log's decode-step table reads its
#        file against the file in effect, and the K6 log's last lines count the keys that picked
#        each kind of variant. Do F1's knobs carry over to other shapes and M?
#   other phases: as in 2026-12-30.sh (K5) and through it 2026-12-29.sh, 2026-12-28.sh (CP, GR),
#        2026-12-27.sh (GM, BM)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   FULL_N=6144 FULL_MINUTES=8.5 LIMIT=590 RES=/tmp/gpu-runs bash lab/runs/2026-12-31.sh F1
#   RT_MODELS="qwen3-4b qwen3-8b" RT_FORMAT=fp8_dynamic LIMIT=560 RES=/tmp/gpu-runs bash lab/runs/2026-12-31.sh K6
# Order on an H200: 2026-12-28.sh's H200 order (CP first, with 2026-12-29.sh's MEM_LOG=1).
# On an H100 SXM (1,800 s): part.00..02; part.03 + dist with F1 FULL_N=6144; then F1 FULL_N=19456
#   (gate_up) with what is left.
# F1 ran on an H100 SXM in 2026-12-06's fifteenth session (lab/results/2026-12-06-c): both keys'
#   searches stopped at generation 15 and beat the grid's picks by 1.7 % (qkv) and 1.8 % (gate_up).
# Next, on either GPU: K6 RT_MODELS="qwen3-4b qwen3-8b" RT_FORMAT=fp8_dynamic (LIMIT=560: a model's
#   grid took 63-80 s on an H100, 146-242 s on an H200 before the pruning; its control as long), then
#   K6 with RT_FORMAT=w8a8_int8; on an H200 after 2026-12-28.sh's order, one model a call.
# K6 ran on an H100 SXM in 2026-12-06's sixteenth session (lab/results/2026-12-06-d), both formats:
#   no measurable gain over the control (the knobs stay out of grid_search). Next: 2026-12-28.sh's
#   H200 order.
set -u
here=$(dirname "$0")
phase=${1:?the phase to run: F1, K6, K5, GM, BM, CP, GR, ...}
if [ "$phase" = K6 ]; then
    read -r -a models <<<"${RT_MODELS:-qwen3-4b}"
    f=${RT_FORMAT:-fp8_dynamic}
    phase=K6-$f-$(IFS=_; echo "${models[*]}")
    source "$here/phase-lib.sh"
    phase_begin
    for m in "${models[@]}"; do
        HL_KERNEL_CACHE_DIR= run "grid-$m" "${GRID_LIMIT:-200}" python3 lab/scripts/grid_lfbo_knobs.py autotune \
            --model "$m" --formats "$f" --effort grid --gpus 1 --output "$O/grid-$m"
        sed -n "/decode step/,/└/p" "$O/grid-$m.log"
        grep -h "grid search:" "$O/grid-$m.log"
        tail -n 4 "$O/grid-$m.log"
        HL_KERNEL_CACHE_DIR= run "ctl-$m" "${GRID_LIMIT:-200}" python3 -m hltools autotune \
            --model "$m" --formats "$f" --effort grid --gpus 1 --output "$O/ctl-$m"
        sed -n "/decode step/,/└/p" "$O/ctl-$m.log"
        grep -h "grid search:" "$O/ctl-$m.log"
    done
    phase_end
    exit 0
fi
[ "$phase" = F1 ] || exec bash "$here/2026-12-30.sh" "$@"
n=${FULL_N:-6144}
phase=F1-qwen3-4b-fp8_dynamic-n$n
source "$here/phase-lib.sh"
phase_begin
gpu=$(python3 -c "import hlcore.config_store as c; print(c.current_gpu_name())")
mkdir -p "$O/full/scaled_mm"
python3 - "$n" "$O/full/scaled_mm/$gpu.json" <<'EOF'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
rows = json.load(open("lab/results/2026-12-06-b/raw/full/full8.json"))
kept = [r for r in rows if r.get("key", {}).get("n") != n]
assert len(kept) == len(rows) - 1, f"no key with N = {n} in full8.json"
json.dump(kept, open(path, "w"), indent=1)
print(f"seeded {len(kept) - 1} keys as done into {path}")
EOF
run full "$(left)" python3 -m hltools autotune --model qwen3-4b --formats fp8_dynamic --num-tokens 8 \
    --effort full --budget-minutes "${FULL_MINUTES:-8.5}" --gpus 1 --output "$O/full"
grep -h "Generation\|Autotuning complete\|Qualified\|^tuned\|failed" "$O/full.log" | tail -n 30
sed -n "/format .*status/,/└/p" "$O/full.log"
phase_end
