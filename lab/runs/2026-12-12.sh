#!/usr/bin/env bash
# The GPU runs planned after 2026-12-02 evening, in phases of < 600 s (one device call each), in
# order of priority (a session of 1,800 s holds about three after the bundle's three part calls):
#   NLa  issue 22's first candidate again, its block sizes fixed (8164901; every launch ran out of
#        shared memory on 2026-12-02 evening): lab/scripts/norm_linear_bench.py on the norm-fed
#        layers (qkv, gate_up): vLLM's two kernels, hlcore's two, the fused FP8 kernel with a 512 /
#        1,024 statistics tile, W8A16 (a whole phase: the evening's 300 s lane ended after two layers)
#   T    issue 23's grid search again (Qwen3-8B FP8_Dynamic, 28 keys): the wall time with the compile
#        fix (9d0e035; the evening took 406 s, ~200 s of it that bug) against the 5 minutes
#   SC2  issue 20's cold start with the worker-process precompile, a second pair, TTFT sampled only
#        after both engines idled 15 s (the evening sampled the on engine within a second of its
#        start), 600 pairs per prompt length (~1 min: the median pair ratio's 95 % bootstrap
#        interval, what "TTFT within +1 %" needs, was +-3 % wide at 400 pairs of 30 % spread),
#        then both restarted warm
#   NLb  the same bench on o and down (W8A16 against vLLM's quant + CUTLASS)
#   TU   issue 23's model outside the shipped file: Qwen2.5-7B FP8_Dynamic grid-tuned (28 keys), then
#        bench kernels side by side with vLLM's kernel twice: the shipped file's nearest configs (what
#        an untuned user gets) and the tuned file (HL_CONFIG_DIR); the time-weighted comparison on
#        the CPU afterwards from the two kernels.json
#   N, P, S2   as in 2026-12-09.sh (FP8 end to end on the nine-process marks; DeepGEMM prewarm and a
#        Block_FP8 TTFT pair)
# Before sending: `python lab/scripts/smem_probe.py` on the CPU (every fused config must fit the
# H200's shared memory; 28-86 KB at 8164901).
# Usage there (after the bundle's env.sh and lab/scripts/setup.sh):
#   LIMIT=s RES=/tmp/gpu-runs bash lab/runs/2026-12-12.sh NLa|T|SC2|NLb|TU|N|P|S2
set -u
phase=$1
here=$(dirname "$0")
case $phase in NL? | SC2 | TU) ;; T) exec bash "$here/2026-12-11.sh" T ;; *) exec bash "$here/2026-12-09.sh" "$phase" ;; esac
source "$here/phase-lib.sh"
phase_begin
export HL_KERNEL_CACHE_DIR=/tmp/hl-kernels
case $phase in
NLa | NLb)
    layers=qkv,gate_up
    [ "$phase" = NLb ] && layers=o,down
    OUT=$O run norm-linear-bench python3 lab/scripts/norm_linear_bench.py --layers $layers
    tail -9 "$O/norm-linear-bench.log"
    ;;
SC2)
    run startup-cold-SC2 python3 lab/scripts/startup_ttft.py --model qwen3-8b --format fp8_dynamic \
        --out "$O/fp8_dynamic" --repeats 600 --settle 15 --warm --on-env HL_PRECOMPILE_PROCESSES=8
    sed -n '/^qwen3-8b/,$p' "$O/startup-cold-SC2.log" | head -12
    grep -ho "Helion kernels at CUDA-graph capture.*" "$O/startup-cold-SC2.log" | cut -c1-300
    grep -hE "Dynamo bytecode|Compiling a graph|Graph capturing finished|init engine|precompile" \
        "$O/startup-cold-SC2.log" | cut -c1-160
    ;;
TU)
    # TU_MODEL / TU_CONFIG (a name and its config.json's fields) tune another model
    # (2026-12-19.sh TU2), TU_FORMAT another format (2026-12-20.sh TU3); the defaults are what ran
    # here, Qwen/Qwen2.5-7B-Instruct in FP8_Dynamic
    m=${TU_MODEL:-qwen2.5-7b} f=${TU_FORMAT:-fp8_dynamic}
    cfg='{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
"intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
"num_hidden_layers": 28, "vocab_size": 152064, "torch_dtype": "bfloat16"}'
    mkdir -p "$O/$m"
    echo "${TU_CONFIG:-$cfg}" >"$O/$m/config.json"
    run "grid-$m" 330 python3 -m hltools autotune --model "$O/$m/config.json" \
        --formats "$f" --effort grid --output "$O/grid"
    tail -14 "$O/grid-$m.log"
    kbm() { # NAME [config dir]: the model's kernels in format $f against vLLM's (HL_CONFIG_DIR set when given)
        run "$1" 100 env ${2:+HL_CONFIG_DIR="$2"} python3 -m hltools bench kernels \
            --model "$O/$m/config.json" --formats "$f" --baselines vllm --no-plots --jobs 16 \
            --output "$O/$1"
    }
    kbm kb-nearest
    kbm kb-tuned "$O/grid"
    tail -n 2 "$O/kb-nearest.log" "$O/kb-tuned.log"
    # added after the 2026-12-04 seventh session's run (which compared on the CPU afterwards)
    run compare 60 python3 -m hltools bench compare "$O/kb-nearest" "$O/kb-tuned" --names nearest,tuned \
        --markdown "$O/compare.md"
    tail -n 12 "$O/compare.log"
    # the tuned file's marks by the shipped rule (docs/tuning.md): two more bench runs, from-bench
    kbm kb-tuned2 "$O/grid"
    kbm kb-tuned3 "$O/grid"
    cp -r "$O/grid" "$O/grid-remarked"
    run remark 60 python3 -m hltools configs from-bench "$O/kb-tuned" "$O/kb-tuned2" "$O/kb-tuned3" \
        --output "$O/grid-remarked" --stats-output "$O/grid-remarked-stats"
    tail -n 6 "$O/remark.log"
    ;;
esac
phase_end
