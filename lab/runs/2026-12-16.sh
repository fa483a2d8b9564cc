#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's fourth session, which found the cold engine's "first
# runs" of kernels loaded from hlcore's cache (0.17-0.5 s each, 4.0 s for Llama-3.1-8B's 24
# Block_FP8 kernels, 5.6 s for 25 FP8_Dynamic ones; ~2 ms each warm). Two causes read in the
# sources, both arising after hlcore's precompile workers were spawned: Inductor's first compile
# switches Triton to torch's ptxas (Triton's cache key holds the ptxas version: every worker
# kernel missed), and with TRITON_CACHE_DIR unset (the users' default) points it at its own folder.
# Fixed on the CPU: hlvllm.plugin applies Inductor's ptxas rule before anything compiles
# (hlcore.kernel_cache.use_inductors_ptxas), and Triton's files of hlcore's kernels live in
# <HL_KERNEL_CACHE_DIR>/triton for workers and engine alike (triton_cache_scope).
#   FR   no bundle (helion from .hlwheels, our wheels in dist): lab/scripts/first_run_probe.py three
#        times, each a fresh process and folder: both fixes, --late-ptxas (without the first),
#        --late-ptxas --no-scope (the behaviour before). What to read: per kernel, Triton compiles
#        that hit its cache, C-compiler builds (launchers) and the first call's ms; with both fixes
#        every compile should be a hit, no C build, a few ms per call
#   OL   no bundle, as FR: issue 22's one-launch producer + GEMM (lab/scripts/one_launch_bench.py:
#        the producer (per-token fp8 quantization; fused add + RMSNorm + quantization), hl.barrier(),
#        the GEMM with split_k 1 and 4 (the split-K output zeroed in phase 1: no fill launch), each
#        also with a persistent barrier semaphore, one persistent cooperative launch) against
#        hlcore's two launches (shipped config; same tiles with split_k 1), Qwen3-8B's FP8_Dynamic
#        shapes at M 1 / 8, CUDA graphs, weights rotated past L2; then the norm layers with
#        block_n 128
#   OLd  no bundle: OL's quant producer at split_k 1 with --decompose (the GEMM phase alone: flat
#        programs, persistent ones, persistent after a trivial barrier): where the one launch's time goes
#   EFc  Qwen3-8B FP8_Dynamic, 36 layers, off then on (the defaults: capture mode, auto precompile),
#        cold, 1 repeat at concurrency 1 and 8, no TTFT: the on engine's capture line ("first runs"
#        against 5.6 s on 2026-12-04) and `init engine` of both
#   EGc  as EFc on Llama-3.1-8B Block_FP8 (the speed guard times its keys), after EG0's DeepGEMM
#        prewarm: the cold pair of issue 20's start-up target with both first-run fixes
#   EGr  EGc's pair again on its machine (the DeepGEMM cache kept), the on engine first, concurrency 1
#   other phases: as in 2026-12-15.sh (EG0/EG1/EG2, FC, and through it 2026-12-14.sh's)
# Usage there (FR, OL without the bundle; EFc after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-16.sh FR|OL|OLd|EFc|EGc|EGr|<a phase of 2026-12-15.sh>
# Order: FR and OL in one call without the bundle (carry dist, .hlwheels), then the bundle and EFc.
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends.
set -u
phase=$1
here=$(dirname "$0")
install_no_bundle() {  # OL, OLd, FR: helion from .hlwheels, hlcore from dist/, no vLLM
    python3 -m pip install -q --no-index --no-deps --target /tmp/helion .hlwheels/*.whl
    rm -rf /tmp/hl && python3 -m pip install -q --no-index --no-deps --target /tmp/hl dist/*.whl
}
if [ "$phase" = OL ]; then
    install_no_bundle
    mkdir -p "${OUT:-/tmp}/OL"
    HL_COMMIT=$(cat dist/COMMIT) PYTHONPATH=/tmp/hl:/tmp/helion timeout 300 python3 \
        lab/scripts/one_launch_bench.py --block-n 64 2>&1 | tee "${OUT:-/tmp}/OL/bn64.log" | tail -20
    HL_COMMIT=$(cat dist/COMMIT) PYTHONPATH=/tmp/hl:/tmp/helion timeout 150 python3 \
        lab/scripts/one_launch_bench.py --block-n 128 --ms 1,8 --producers norm 2>&1 | tee "${OUT:-/tmp}/OL/bn128.log" | tail -6
    exit 0
fi
if [ "$phase" = OLd ]; then  # where the one launch's time goes: the GEMM phase flat, persistent, after a barrier
    install_no_bundle
    mkdir -p "${OUT:-/tmp}/OLd"
    HL_COMMIT=$(cat dist/COMMIT) PYTHONPATH=/tmp/hl:/tmp/helion timeout "${LIMIT:-200}" python3 lab/scripts/one_launch_bench.py \
        --block-n 64 --producers quant --split-ks 1 --decompose 2>&1 | tee "${OUT:-/tmp}/OLd/bn64.log" | tail -9
    exit 0
fi
if [ "$phase" = FR ]; then
    install_no_bundle
    mkdir -p "${OUT:-/tmp}/FR"
    for mode in fixed late-ptxas before; do
        case $mode in fixed) flags="" ;; late-ptxas) flags="--late-ptxas" ;; before) flags="--late-ptxas --no-scope" ;; esac
        HL_COMMIT=$(cat dist/COMMIT) PYTHONPATH=/tmp/hl:/tmp/helion timeout 150 python3 \
            lab/scripts/first_run_probe.py --dir /tmp/frp-$mode $flags 2>&1 | tee "${OUT:-/tmp}/FR/$mode.log" | tail -15
    done
    exit 0
fi
case $phase in EFc|EGc|EGr) ;; *) exec bash "$here/2026-12-15.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
unset HL_DISPATCH_AT HL_PRECOMPILE_PROCESSES  # the defaults
case $phase in
EFc) e2e e2e-8b-fp8-cold qwen3-8b fp8_dynamic 1 --plugins off,on --repeats 1 --concurrency 1,8 --timeout 240 ;;
EGc) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit  # as EG0-EG2: DeepGEMM prewarmed
    run deepgemm-prewarm 250 python3 lab/scripts/deepgemm_prewarm.py --model llama-3.1-8b
    e2e e2e-llama-block-cold llama-3.1-8b block_fp8 1 --plugins off,on --repeats 1 --concurrency 1,8 --timeout 240
    grep -rhoE "speed guard, block_fp8.*" "$O" --include='*.log' | cut -c1-300 ;;
EGr) export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit  # EGc again on its machine, on first
    e2e e2e-llama-block-cold2 llama-3.1-8b block_fp8 1 --plugins on,off --repeats 1 --concurrency 1 --timeout 240 ;;
esac
grep -rhoE "Helion kernels at CUDA-graph capture.*|init engine.*" "$O" --include='*.log' | cut -c1-480
phase_end
