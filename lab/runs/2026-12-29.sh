#!/usr/bin/env bash
# The GPU runs planned after 2026-12-05's ninth session (lab/results/2026-12-05-g), whose Qwen3-32B
# W8A8_INT8 grid failed 2 keys with CUDA out of memory: 16 compile workers held 4.5-5.3 GiB each
# beside the timing process (operands drawn through float32). 0da962f draws them in their one-byte
# dtypes and gives cached blocks back after each job, and 57ad97f / 243f5e0 cap the workers by the
# GPU's free memory at an estimated 1 GiB plus twice the largest weight each; what a worker holds
# is unmeasured. New:
#   MEM_LOG=1   any phase run with a sampler of the GPU's memory (about every 0.3 s: every compute
#               process's, with its parent pid, and the GPU's in all) into
#               $OUT/mem-<phase>-<format>-<models>-<unix time>.csv (it comes back as a file of its
#               own), summarised after the phase by lab/scripts/gpu_mem_summary.py: per run (the
#               grid, then bench kernels, ...) its own peak, its workers' peaks and their largest sum
#   other phases: as in 2026-12-28.sh (CP, GR) and through it 2026-12-27.sh (GM, BM)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   MEM_LOG=1 RT_MODELS=m RT_FORMAT=f [...] LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-29.sh GM
# Order on an H100 SXM (1,800 s; every call names the kind held, planned before the first and sent
# back to back):
#   part.00..02 (bare); part.03 + dist with MEM_LOG=1 GM RT_MODELS=qwen3-32b RT_FORMAT=w8a8_int8
#     GRID_LIMIT=200 LIMIT=210 RES=/tmp/gpu-runs-fresh, then (MEM_LOG unset: the sampler's
#     nvidia-smi queries may disturb a bench's timings) GM RT_MODELS=qwen3-1.7b
#     RT_FORMAT=fp8_dynamic KB_SHIPPED=1 GRID_LIMIT=240 KB_LIMIT=110 LIMIT=340
#   BM qwen3-1.7b fp8_dynamic RB_RUNS="1 2 3" KB_LIMIT=100 LIMIT=300, then GM qwen3-1.7b w8a8_int8
#     KB_SHIPPED=1 GRID_LIMIT=220 KB_LIMIT=100 LIMIT=280
#   BM qwen3-1.7b w8a8_int8 RB_RUNS="1 2 3", then GM qwen3-4b fp8_dynamic KB_SHIPPED=1 with what is left
# On an H200: 2026-12-28.sh's H200 order, MEM_LOG=1 on its CP phase (a grid, no bench).
# Ran on an H100 SXM in the eleventh session of 2026-12-05 (lab/results/2026-12-05-h): the H100 order
# above, then GM and BM of Qwen3-1.7B block_fp8; a worker held at most 1.62 GiB (budget now 1.25 GiB
# plus twice the largest weight, e18535f). Left on an H100: GM and BM of Qwen3-4B block_fp8,
# which ran in the twelfth session (lab/results/2026-12-05-i; 1.021-1.022x, added to the H100 file).
set -u
here=$(dirname "$0")
phase=${1:?the phase to run: GM, BM, CP, GR, ...}
if [ "${MEM_LOG:-0}" != 1 ]; then
    exec bash "$here/2026-12-28.sh" "$@"
fi
read -r -a models <<<"${RT_MODELS:-${RT_MODEL:-x}}"
name=$(IFS=_; echo "$phase-${RT_FORMAT:-x}-${models[*]}" | tr -c 'A-Za-z0-9._\n-' _)
log=${OUT:-/tmp}/mem-$name-$(date +%s).csv
pids=$(mktemp)
sample() {
    while :; do
        t=$(date +%s.%N)
        ps -eo pid=,ppid= >"$pids"
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
            awk -v t="$t" 'NR == FNR { pp[$1] = $2; next }
                { sub(/,/, "", $1); print t ", " $1 ", " (($1 in pp) ? pp[$1] : 0) ", " $2 }' "$pids" -
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n 1 | sed "s/^/$t, gpu, /"
        sleep 0.3
    done
}
sample >"$log" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null; rm -f "$pids"' EXIT
trap 'exit 143' TERM INT
bash "$here/2026-12-28.sh" "$@"
rc=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
python3 "$here/../scripts/gpu_mem_summary.py" "$log"
exit $rc
