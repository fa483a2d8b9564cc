#!/usr/bin/env bash
# The GPU runs planned after 2026-12-02, in phases of < 600 s (one device call each):
#   N   N1 and N2 in one call (off, on, control; the FP8 night run took 324 s for off and on)
#   N1, N2  issue 24's numerics line on Qwen3-8B FP8_Dynamic at full depth: plugin off and the
#       control (vLLM's next kernel: torch._scaled_mm) in N1, plugin on in N2, concurrency 1..32,
#       3 repeats; join with `hltools bench merge-e2e` (which judges plugin vs control), and it is
#       issue 20's FP8_Dynamic end to end on this commit.
#   S1  issue 20's start-up with hlvllm.startup's per-phase line: FP8_Dynamic, two engines side by
#       side, cold then warm, and a third FP8 TTFT pair in ABBA order (lab/scripts/startup_ttft.py).
#   P   DeepGEMM's JIT cache for Qwen3-8B (all four shapes: ~4 min), then S2 in the same machine:
#   S2  Block_FP8 TTFT in ABBA order (both engines on the warm DeepGEMM cache).
#   K1, K2, K3  the shipped marks from three processes (Helion vs vLLM's kernel only), then the report
#       of the third; `hltools configs from-bench` re-derives the marks from the three.
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-08.sh N|N1|N2|S1|P|S2|K1|K2|K3
set -u
phase=$1
source "$(dirname "$0")/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
N) e2e e2e-8b-fp8 qwen3-8b fp8_dynamic 1 --repeats 3 --timeout 250 ;;  # off,on,control in one call
N1) e2e e2e-8b-fp8-off qwen3-8b fp8_dynamic 1 --plugins off,control --repeats 3 --timeout 260 ;;
N2) e2e e2e-8b-fp8-on qwen3-8b fp8_dynamic 1 --plugins on --repeats 3 --timeout 260 ;;
S1)
    # what importing the kernels costs a process that already has torch and vLLM (helion, sklearn)
    run importtime 60 python3 -X importtime -c "import torch, vllm.model_executor.layers.linear; import hlcore.scaled_mm"
    grep -E "\| +(helion|sklearn|scipy|hlcore.scaled_mm|helion.autotuner|helion._compat)$" "$O/importtime.log"
    run startup-ttft-fp8 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --repeats 30 --warm
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-fp8.log"
    grep -h "start-up seconds in hlvllm" "$O/startup-ttft-fp8.log" | cut -c1-400
    grep -hE "engine ready|Loading weights took|Model loading took|Dynamo bytecode transform|Compiling a graph|torch.compile takes|Graph capturing finished|init engine|hlvllm" \
        "$O/startup-ttft-fp8.log" | cut -c1-260 | head -60
    ;;
P)
    run deepgemm-prewarm 540 python3 lab/scripts/deepgemm_prewarm.py --model qwen3-8b
    tail -6 "$O/deepgemm-prewarm.log"
    ;;
S2)
    VLLM_DEEP_GEMM_WARMUP=skip run startup-ttft-block 540 python3 lab/scripts/startup_ttft.py --model qwen3-8b \
        --format block_fp8 --out "$O/block_fp8" --repeats 30
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-block.log"
    ;;
K1 | K2 | K3)
    # Helion vs vLLM's kernel only (--baselines vllm: the marks need no torch._scaled_mm column, a
    # third of the timing); K2 and K3 on the same machine find K1's kernels in the caches
    run marks-${phase#K} python3 -m hltools bench kernels --model \
        qwen3-1.7b,qwen3-4b,qwen3-8b,qwen3-14b,qwen3-32b,llama-3.1-8b --formats all --baselines vllm \
        --no-plots --jobs 16 --output "$O/marks-${phase#K}"
    if [ "$phase" = K3 ]; then
        run report-3 60 python3 -m hltools bench report "$O/marks-3"
        tail -20 "$O/report-3.log"
    fi
    ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
phase_end
