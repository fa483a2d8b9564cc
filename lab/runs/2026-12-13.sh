#!/usr/bin/env bash
# The GPU run of 2026-12-03 (second window): issue 20's dispatch at capture time.
#   CD   Qwen3-8B FP8_Dynamic, 36 layers, two engines side by side (lab/scripts/startup_ttft.py):
#        off (no plugin) vs on with HL_DISPATCH_AT=capture (vLLM's graph unchanged, one compile
#        range; Helion swapped in while vLLM captures CUDA graphs) and HL_PRECOMPILE_PROCESSES=8;
#        cold start-up, TTFT at 128 / 1,024 tokens (300 ABBA pairs each, the median pair ratio's
#        95 % interval), decode ms/step at concurrency 1 / 8 (ABBA), warm start-up; the engine's
#        capture line says how many Helion kernels ran at capture
#   CD2  CD again on the M = 1 fix (a27aa0b), shorter: cold pair, 150 TTFT pairs, decode, no warm restart
#   CDa  CD2's pair as a control: both engines without the plugin (--aa); does the engine started
#        last run a window of slow prefills by itself (2026-12-03 day)?
#   CDi, CDb   W8A8_INT8 and Block_FP8, shorter: cold pair, 40 TTFT pairs, decode 4 pairs, no warm restart
#   AB   without the vLLM bundle (helion and filecheck wheels from its cache, carried as .hlwheels):
#        the Helion GEMM at M 1 / 8 on Qwen3-8B's shapes, wheels of 53ccdab (dist-old, the kernel
#        before b83114a) against a27aa0b (dist-next), old then new, a fresh process each
#   PF   without the vLLM bundle (as AB, our wheels in dist): lab/scripts/pdl_prefetch.py, producer ->
#        GEMM pairs with the GEMM launched with PDL, prefetching its first weight tiles into L2 before it
#        waits for the producer (issue 22's "the GEMM waits only after it has started streaming")
#   T3   issue 23's "three formats <= 15 min": the grid search of Qwen3-8B in W8A8_INT8 and Block_FP8
#        (FP8_Dynamic took 187 s on 2026-12-03); resumable: run it again on the same machine and
#        RES if it hits its limit, and add the walls
#   other phases: as in 2026-12-12.sh
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-13.sh CD|CD2|CDa|CDi|CDb|T3|NLa|T|SC2|NLb|TU|N|P|S2
# Next session, in this order: CD2 (SETTLE=30 REPEATS=100 LIMIT=330), CDa, CDb, PF and AB (no bundle;
# one call), T3, TU, NLb
set -u
phase=$1
here=$(dirname "$0")
# AB and PF: helion from .hlwheels into /tmp/helion, the wheels of folder $1 into /tmp/hl
wheels() {
    python3 -m pip install -q --no-index --no-deps --target /tmp/helion .hlwheels/*.whl
    rm -rf /tmp/hl && python3 -m pip install -q --no-index --no-deps --target /tmp/hl "$1"/*.whl
}
if [ "$phase" = AB ]; then
    for w in dist-old dist-next; do
        wheels $w
        HL_COMMIT=$(cat $w/COMMIT) PYTHONPATH=/tmp/hl:/tmp/helion python3 lab/scripts/m1_ab.py 2>&1 | tail -1
    done
    exit 0
fi
if [ "$phase" = PF ]; then
    wheels dist
    mkdir -p "${OUT:-/tmp}/PF"
    HL_COMMIT=$(cat dist/COMMIT) PYTHONPATH=/tmp/hl:/tmp/helion python3 lab/scripts/pdl_prefetch.py ${PF_ARGS:-} 2>&1 |
        tee "${OUT:-/tmp}/PF/pdl_prefetch.log" | grep -v '^{"layer"'
    exit 0
fi
case $phase in CD* | T3) ;; *) exec bash "$here/2026-12-12.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels
case $phase in
T3)
    run grid-8b-int8-block 560 python3 -m hltools autotune --model qwen3-8b --formats w8a8_int8,block_fp8 \
        --effort grid --output "$O/grid"
    tail -40 "$O/grid-8b-int8-block.log"
    ;;
CD*)
    fmt=fp8_dynamic extra="--repeats 300 --decode 1,8 --warm"
    [ "$phase" = CD2 ] && extra="--repeats 150 --decode 1,8"  # a second pair, the M = 1 fix, no warm restart
    [ "$phase" = CDa ] && extra="--repeats 150 --aa"
    [ "$phase" = CDi ] && fmt=w8a8_int8 extra="--repeats 40 --decode 1,8 --decode-repeats 4"
    [ "$phase" = CDb ] && fmt=block_fp8 extra="--repeats 40 --decode 1,8 --decode-repeats 4"
    # Block_FP8: DeepGEMM's warm-up of every M took ~4 min per engine (CDb, 2026-12-03 day); JIT on use
    [ "$phase" = CDb ] && export VLLM_DEEP_GEMM_WARMUP=skip
    [ -n "${REPEATS:-}" ] && extra="$extra --repeats $REPEATS"  # a shorter run: the last --repeats wins
    [ -n "${GAP:-}" ] && extra="$extra --gap $GAP"  # seconds between TTFT pairs (spread over time)
    run startup-capture python3 lab/scripts/startup_ttft.py --model qwen3-8b --format $fmt \
        --out "$O/$fmt" --settle "${SETTLE:-40}" $extra \
        --on-env HL_DISPATCH_AT=capture --on-env HL_PRECOMPILE_PROCESSES=8
    sed -n '/^qwen3-8b/,$p' "$O/startup-capture.log" | head -20
    grep -q '^qwen3-8b' "$O/startup-capture.log" || grep -A8 "TTFT so far" "$O/startup-capture.log"  # cut
    grep -ho "Helion kernels at CUDA-graph capture.*" "$O/startup-capture.log" | cut -c1-300
    grep -hE "HL_DISPATCH_AT=capture|hlvllm: Helion .* failed|differs from vLLM|Traceback" \
        "$O/startup-capture.log" | sort | uniq -c | cut -c1-240
    grep -hE "Dynamo bytecode|Compiling a graph|Graph capturing finished|init engine" \
        "$O/startup-capture.log" | cut -c1-160
    ;;
esac
phase_end
