#!/usr/bin/env bash
# The GPU runs planned after 2026-12-04's seventh session, which measured (wheels of 2e5af85, one H200):
# TTFT with three pinned engines for W8A8_INT8 (TI) and Block_FP8 (TK): on/off medians 1.001 / 1.073
# and 1.035 / 1.062 at 128 / 1,024 tokens, but the plugin-free control (ctl/off, same compiled code)
# read 0.944 / 1.063 and 0.863 / 0.928: the engines differ by the CPU set they are pinned to by as much
# as the +1 % the issue asks is 7-14 times smaller than. Block_FP8's warm start-up on -1.2 s (A/A
# -0.7 s); Qwen2.5-7B FP8_Dynamic tuned vs nearest-config dispatch 0.993-1.085x per decode step (TU).
#   TR   FMT=<format>: three engines off / ctl / on pinned to 4 CPUs each, ctl on off's caches, the
#        CPU sets rotated by one after every cycle of the six round orders (--rotate-lanes: each
#        engine runs equally long on each set), 72 rounds 0.5 s apart (four cycles per rotation
#        state). Reads the lane-balanced on/off ratio next to the A/A's, and each set's median; with
#        --engine-times also each request's prefill inside the engine core (vLLM's stats:
#        first_token_ts - scheduled_ts, without the client and the IPC), the same ratios
#   TU2  issue 23's second model outside the shipped file: 2026-12-12.sh's TU for Qwen2.5-14B
#        (TU_MODEL, TU_CONFIG): FP8_Dynamic grid-tuned (28 keys; its qkv and o shapes are Qwen3-14B's,
#        so exact keys there), bench kernels without and with the tuned file, `hltools bench compare`,
#        then two more tuned bench runs and `configs from-bench` over the three: the tuned file's
#        marks by the shipped rule (docs/tuning.md; ~80 s, skipped when the limit is reached); its
#        files land in $RES/TU (TU.tgz)
#   other phases: as in 2026-12-18.sh (TI, TK, T2) and through it 2026-12-17.sh (SB0, SB1, ...),
#        2026-12-16.sh, 2026-12-15.sh, 2026-12-12.sh (TU)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   FMT=fp8_dynamic LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-19.sh TR | TU2 | <an older phase>
# Order (1,800 s): the bundle's last part with TR FMT=fp8_dynamic (LIMIT=360), TR FMT=w8a8_int8
# (LIMIT=360), SB0 (LIMIT=300; DeepGEMM's JIT cache, which Block_FP8's engines need on this machine),
# TR FMT=block_fp8 (LIMIT=380), then TU2 with what is left (~360 s in all, ~280 s without the re-mark).
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends
# (and /tmp/dg-jit with it: TR for block_fp8 needs SB0 on the same machine).
set -u
phase=$1
here=$(dirname "$0")
case $phase in
TR) ;;
TU2) # Qwen/Qwen2.5-14B-Instruct's config.json, the fields hltools reads; runs in $RES/TU
    export TU_MODEL=qwen2.5-14b TU_CONFIG='{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
"hidden_size": 5120, "intermediate_size": 13824, "num_attention_heads": 40, "num_key_value_heads": 8,
"num_hidden_layers": 48, "vocab_size": 152064, "torch_dtype": "bfloat16"}'
    exec bash "$here/2026-12-18.sh" TU ;;
*) exec bash "$here/2026-12-18.sh" "$phase" ;;
esac
phase=TR${TR_TAG:-}-${FMT:?FMT=fp8_dynamic, w8a8_int8 or block_fp8} # TR_TAG, TR_ARGS: 2026-12-20.sh TW
source "$here/phase-lib.sh"
phase_begin
unset HL_DISPATCH_AT HL_PRECOMPILE_PROCESSES # the defaults
export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
ttft3 startup-ttft-rot "$FMT" --repeats 72 --rotate-lanes --engine-times ${TR_ARGS:-}
grep -rhoE "HL_PRECOMPILE_PROCESSES=auto: .*|Helion kernels at CUDA-graph capture: .*|init engine.*|engine ready in [0-9.]+ s.*" \
    "$O" --include='*.log' | cut -c1-480
phase_end
