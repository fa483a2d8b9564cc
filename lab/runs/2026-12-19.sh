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
#   TU2  issue 23's second model outside the shipped file: Qwen2.5-14B FP8_Dynamic grid-tuned (28
#        keys; its qkv and o shapes are Qwen3-14B's, so exact keys there), then bench kernels
#        without and with the tuned file; `hltools bench compare` afterwards on the CPU
#   other phases: as in 2026-12-18.sh (TI, TK, T2) and through it 2026-12-17.sh (SB0, SB1, ...),
#        2026-12-16.sh, 2026-12-15.sh, 2026-12-12.sh (TU)
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   FMT=fp8_dynamic LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-19.sh TR | TU2 | <an older phase>
# Order (1,800 s): the bundle's last part with TR FMT=fp8_dynamic (LIMIT=360), TR FMT=w8a8_int8
# (LIMIT=360), SB0 (LIMIT=300; DeepGEMM's JIT cache, which Block_FP8's engines need on this machine),
# TR FMT=block_fp8 (LIMIT=380), then TU2 with what is left (~300 s).
# Send each call within seconds of the last reply: the machine is reset ~30 s after a call ends
# (and /tmp/dg-jit with it: TR for block_fp8 needs SB0 on the same machine).
set -u
phase=$1
here=$(dirname "$0")
case $phase in TR | TU2) ;; *) exec bash "$here/2026-12-18.sh" "$phase" ;; esac
[ "$phase" = TR ] && phase=TR-${FMT:?FMT=fp8_dynamic, w8a8_int8 or block_fp8}
source "$here/phase-lib.sh"
phase_begin
unset HL_DISPATCH_AT HL_PRECOMPILE_PROCESSES # the defaults
export VLLM_DEEP_GEMM_WARMUP=skip DG_JIT_CACHE_DIR=/tmp/dg-jit
case $phase in
TR-*)
    [ "$FMT" = block_fp8 ] && { ls /tmp/dg-jit >/dev/null || echo "no DeepGEMM cache: run SB0 first on this machine"; }
    run startup-ttft-rot python3 lab/scripts/startup_ttft.py --model qwen3-8b --format "$FMT" \
        --out "$O/$FMT" --settle 30 --repeats 72 --gap 0.5 --pin --rotate-lanes --engine-times \
        --order off,ctl,on --cache-of ctl=off
    grep -h "CPU sets\|not a multiple\|no engine-core" "$O/startup-ttft-rot.log"
    sed -n '/^qwen3-8b/,$p' "$O/startup-ttft-rot.log" | head -34
    grep -q '^qwen3-8b' "$O/startup-ttft-rot.log" || grep -A12 "TTFT so far" "$O/startup-ttft-rot.log"
    ;;
TU2)
    mkdir -p "$O/qwen2.5-14b" # Qwen/Qwen2.5-14B-Instruct's config.json, the fields hltools reads
    echo '{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120,
"intermediate_size": 13824, "num_attention_heads": 40, "num_key_value_heads": 8,
"num_hidden_layers": 48, "vocab_size": 152064, "torch_dtype": "bfloat16"}' >"$O/qwen2.5-14b/config.json"
    run grid-q25-14b 330 python3 -m hltools autotune --model "$O/qwen2.5-14b/config.json" \
        --formats fp8_dynamic --effort grid --output "$O/grid"
    tail -14 "$O/grid-q25-14b.log"
    run kb-nearest 100 python3 -m hltools bench kernels --model "$O/qwen2.5-14b/config.json" \
        --formats fp8_dynamic --baselines vllm --no-plots --jobs 16 --output "$O/kb-nearest"
    HL_CONFIG_DIR="$O/grid" run kb-tuned 100 python3 -m hltools bench kernels \
        --model "$O/qwen2.5-14b/config.json" --formats fp8_dynamic --baselines vllm --no-plots --jobs 16 \
        --output "$O/kb-tuned"
    run compare 60 python3 -m hltools bench compare "$O/kb-nearest" "$O/kb-tuned" --names nearest,tuned \
        --markdown "$O/compare.md"
    tail -n 12 "$O/compare.log"
    ;;
esac
grep -rhoE "HL_PRECOMPILE_PROCESSES=auto: .*|Helion kernels at CUDA-graph capture: .*|init engine.*|engine ready in [0-9.]+ s.*" \
    "$O" --include='*.log' | cut -c1-480
phase_end
