#!/usr/bin/env bash
# The GPU runs planned after 2026-12-02 day, in phases of < 600 s (one device call each), in order of
# priority (a session of 1,800 s holds about three or four):
#   G   issue 20's warm start without helion (bbf06f3): the kernel-cache tests on the GPU (a fresh
#       process loads the GEMM from the cache with helion never imported, bitwise equal to the cold
#       one; real Triton JIT without Helion's import-time patches) (~150 s)
#   KA1 KB1, KA2 KB2, KA3 KB3   as in 2026-12-09.sh (the shipped marks from three processes, then
#       hltools configs from-bench on the CPU)
#   S1, P, S2   as in 2026-12-09.sh (FP8 engine pair cold and warm, whose capture log line now says
#       whether helion was imported; DeepGEMM prewarm and a Block_FP8 TTFT pair)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-10.sh G|KA1|KB1|KA2|KB2|KA3|KB3|S1|P|S2
set -u
phase=$1
here=$(dirname "$0")
if [ "$phase" != G ]; then exec bash "$here/2026-12-09.sh" "$phase"; fi
source "$here/phase-lib.sh"
phase_begin
HL_TEST_GPU=1 run gpu-tests-cache 300 python3 -m pytest -p no:cacheprovider -q -rfE -s \
    packages/hlcore/tests/test_kernel_cache.py
tail -15 "$O/gpu-tests-cache.log"
phase_end
