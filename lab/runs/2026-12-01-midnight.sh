#!/usr/bin/env bash
# GPU runs of 2026-12-01 (midnight): issue 20 ("No cost to switch it on"), start-up and TTFT, in phases
# of < 600 s (one device call each). What each phase answers:
#   S1  Qwen3-8B FP8_Dynamic at full depth (36 layers): cold and warm start-up of the plugin off vs on
#       with the kernels compiled in 8 worker processes (HL_PRECOMPILE_PROCESSES=8), and TTFT of one
#       sequence alone at 128 and 1024 prompt tokens, both engines alive at once, one-token generates
#       alternating off/on, 40 each (lab/scripts/startup_ttft.py).
#   S2  the same for W8A8_INT8 (cold only), then the host time per linear call of the compiled graph
#       at M = 64..4096 (lab/scripts/prefill_host_time.py).
#   S3  S1 again without the worker processes and with the engines started in the other order (on
#       first): what the processes save, and a second pair of processes for the TTFT ratio.
#   S4, S5  after S1-S3 showed the first call of each off/on pair running up to 15 % slower whichever
#       engine it was, and the workers starting 17 s after the weights: TTFT in ABBA order, the
#       kernel calls recorded at weight processing (the timer only spawns the workers); FP8_Dynamic
#       (S4) and W8A8_INT8 (S5, with warm start-up).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-01-midnight.sh S1|S2|S3|S4|S5
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
case $phase in
S1)
    run startup-ttft-fp8 520 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8" --repeats 40 --warm --on-env HL_PRECOMPILE_PROCESSES=8
    grep -h "hlvllm\|startup_ttft\|kernel cache" "$O/startup-ttft-fp8.log" | grep -v "dispatch:" | tail -25
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-fp8.log"
    ;;
S2)
    run startup-ttft-int8 400 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format w8a8_int8 \
        --out "$O/int8" --repeats 40 --on-env HL_PRECOMPILE_PROCESSES=8
    grep -h "hlvllm\|startup_ttft" "$O/startup-ttft-int8.log" | grep -v "dispatch:" | tail -15
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-int8.log"
    export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels
    OUT=$O run prefill-host-time 150 python3 lab/scripts/prefill_host_time.py
    tail -14 "$O/prefill-host-time.log"
    ;;
S3)
    run startup-ttft-fp8-nopool 520 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8-nopool" --repeats 40 --order on,off --on-env HL_PRECOMPILE_PROCESSES=0
    grep -h "hlvllm\|startup_ttft" "$O/startup-ttft-fp8-nopool.log" | grep -v "dispatch:" | tail -15
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-fp8-nopool.log"
    ;;
S4 | S5)
    fmt=fp8_dynamic; warm=""; [ "$phase" = S5 ] && { fmt=w8a8_int8; warm=--warm; }
    run startup-ttft-$fmt 520 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format $fmt \
        --out "$O/$fmt" --repeats 40 $warm --on-env HL_PRECOMPILE_PROCESSES=8
    grep -h "init engine\|Compiling a graph\|capturing finished\|hlvllm: \(compiling\|precompiled\|Helion kernels\)\|startup_ttft\]" \
        "$O/startup-ttft-$fmt.log" | tail -24
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-$fmt.log"
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
