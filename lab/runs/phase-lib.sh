# Sourced by the lab/runs/<date>.sh phase scripts after they set ``phase``: sets RES (default
# /tmp/gpu-runs), O=$RES/$phase, START, LIMIT (default 540 s) and defines
#   phase_begin     mkdir $O, GPU list in $O/gpus.csv, NCCL/NVSHMEM multicast off
#   phase_end       lanes summary and e2e tables printed; $RES/$phase packed into $OUT/$phase.tgz
#   e2e NAME MODEL FORMAT ROUNDS [hltools bench e2e args]    one bench e2e run (5 repeats, 240 s/engine)
#   kb NAME MODELS FORMATS                                    one bench kernels run
#   ttft3 NAME FORMAT [startup_ttft.py args]   three Qwen3-8B engines off / ctl / on pinned, ctl on
#                   off's caches (lab/scripts/startup_ttft.py), its tables printed
#   left            seconds left of the phase's LIMIT
#   run NAME [TIMEOUT] CMD...
#                   run CMD limited to TIMEOUT or to what is left of the phase (whichever is less;
#                   skipped under 30 s), output in $O/NAME.log (an earlier one kept as
#                   NAME.earlier-<time>.log), "NAME rc=... s" appended to $O/lanes.txt
left() { echo $((LIMIT - ($(date +%s) - START))); }
run() {
    local name=$1; shift
    local t; t=$(left)
    if [[ $1 =~ ^[0-9]+$ ]]; then [ "$1" -lt "$t" ] && t=$1; shift; fi
    if [ "$t" -lt 30 ]; then echo "SKIP $name (no time left)" | tee -a "$O/lanes.txt"; return; fi
    local t0; t0=$(date +%s)
    # a phase run again on the same machine keeps the earlier log (2026-12-05-f lost a grid log)
    [ -f "$O/$name.log" ] && mv "$O/$name.log" "$O/$name.earlier-$t0.log"
    timeout -k 5 "$t" "$@" >"$O/$name.log" 2>&1
    echo "$name rc=$? $(($(date +%s) - t0)) s (limit $t s)" | tee -a "$O/lanes.txt"
}

RES=${RES:-/tmp/gpu-runs}
O=$RES/$phase
START=$(date +%s)
LIMIT=${LIMIT:-540}
phase_begin() {
    mkdir -p "$O"
    nvidia-smi --query-gpu=index,name,memory.used,clocks.max.sm --format=csv >"$O/gpus.csv"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}
phase_end() {
    echo "phase $phase done in $(($(date +%s) - START)) s" | tee -a "$O/lanes.txt"
    cat "$O/lanes.txt"
    for f in "$O"/*/e2e-*.md; do [ -f "$f" ] && cat "$f"; done
    if [ -n "${OUT:-}" ]; then
        tar czf "$OUT/$phase.tgz" --exclude='cache-*' --exclude='*.json.gz' --exclude=model --exclude='*.bin' \
            -C "$RES" "$phase"
        ls -la "$OUT"
    fi
}
e2e() {
    local name=$1 model=$2 fmt=$3 rounds=$4; shift 4
    run "$name" python3 -m hltools bench e2e --model "$model" --format "$fmt" --rounds "$rounds" \
        --repeats 5 --output "$O/$name" --timeout 240 "$@"
}
kb() {
    run "$1" python3 -m hltools bench kernels --model "$2" --formats "$3" --no-plots --jobs 8 --output "$O/$1"
}
ttft3() {
    local name=$1 fmt=$2; shift 2
    if [ "$fmt" = block_fp8 ]; then
        ls /tmp/dg-jit >/dev/null || echo "no DeepGEMM cache: run SB0 first on this machine"
    fi
    run "$name" python3 lab/scripts/startup_ttft.py --model qwen3-8b --format "$fmt" --out "$O/$fmt" \
        --settle 30 --gap 0.5 --pin --order off,ctl,on --cache-of ctl=off "$@"
    grep -h "CPU sets\|not a multiple\|no engine-core" "$O/$name.log"
    sed -n '/^qwen3-8b/,$p' "$O/$name.log" | head -34
    grep -q '^qwen3-8b' "$O/$name.log" || grep -A12 "TTFT so far" "$O/$name.log"
}
