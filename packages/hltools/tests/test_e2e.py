"""hltools.e2e without a GPU: engine config, worker commands and environments, the throughput
arithmetic with a fake engine and clock, aggregation, and a whole run with a fake launcher."""

import json
import sys

import pytest

from hltools import e2e
from hltools.shapes import load_model_config


def test_engine_model_config():
    base = load_model_config("qwen3-8b")
    cfg = e2e.engine_model_config(base, "fp8_dynamic", layers=4)
    assert cfg["num_hidden_layers"] == 4 and base["num_hidden_layers"] == 36  # input untouched
    assert cfg["hidden_size"] == 4096 and cfg["vocab_size"] == base["vocab_size"]
    q = cfg["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "float-quantized"
    group = q["config_groups"]["group_0"]
    assert group["weights"]["strategy"] == "channel" and group["input_activations"]["strategy"] == "token"
    assert group["input_activations"]["dynamic"] is True and q["ignore"] == ["lm_head"]
    assert cfg["rope_parameters"] == {"rope_type": "default", "rope_theta": base["rope_theta"]}
    assert cfg["dtype"] == "bfloat16" and cfg["eos_token_id"] == 2
    int8 = e2e.engine_model_config(base, "w8a8_int8")["quantization_config"]
    assert int8["format"] == "int-quantized" and int8["config_groups"]["group_0"]["weights"]["type"] == "int"
    block = e2e.engine_model_config(base, "block_fp8", layers=36)["quantization_config"]
    assert block == {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    e2e.quant_config("fp8_dynamic")["ignore"].append("x")  # copies: the table stays intact
    assert e2e.QUANT_CONFIGS["fp8_dynamic"]["ignore"] == ["lm_head"]
    with pytest.raises(ValueError, match="unknown format"):
        e2e.engine_model_config(base, "nvfp4")
    with pytest.raises(ValueError, match="1..36"):
        e2e.engine_model_config(base, "fp8_dynamic", layers=37)


def test_options_validation():
    assert e2e.E2EOptions().max_model_len == 128 + 128 + 16
    with pytest.raises(ValueError, match="exceeds max_num_seqs"):
        e2e.E2EOptions(concurrency=(1, 64))
    with pytest.raises(ValueError, match="positive"):
        e2e.E2EOptions(concurrency=(0,))
    with pytest.raises(ValueError, match="output_len >= 2"):
        e2e.E2EOptions(output_len=1)


def test_plan_commands_and_environments(tmp_path):
    specs = e2e.plan_runs(tmp_path, ["off", "on"], rounds=2)
    assert [(s.name, s.cold) for s in specs] == [
        ("off-r0", True),
        ("on-r0", True),
        ("off-r1", False),
        ("on-r1", False),
    ]
    assert (
        specs[0].cache == specs[2].cache == tmp_path / "cache-off" and specs[1].cache == tmp_path / "cache-on"
    )
    assert specs[3].out == tmp_path / "runs" / "on-r1.json"
    with pytest.raises(ValueError, match="plugins"):
        e2e.plan_runs(tmp_path, ["maybe"])
    with pytest.raises(ValueError, match="rounds"):
        e2e.plan_runs(tmp_path, rounds=0)

    opts = e2e.E2EOptions(concurrency=(1, 8), input_len=64, output_len=32, repeats=2)
    cmd = e2e.worker_command("/py", tmp_path / "model", "on", opts, tmp_path / "o.json")
    assert cmd[:4] == ["/py", "-m", "hltools.e2e", "worker"]
    args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
    assert args == {
        "--plugin": "on",
        "--model-dir": str(tmp_path / "model"),
        "--concurrency": "1,8",
        "--input-len": "64",
        "--output-len": "32",
        "--repeats": "2",
        "--max-num-seqs": "32",
        "--gpu-memory-utilization": "0.6",
        "--seed": "0",
        "--tensor-parallel-size": "1",
        "--out": str(tmp_path / "o.json"),
    }

    base = {"PATH": "/bin", "HL_LINEAR_BACKEND": "helion", "VLLM_NO_USAGE_STATS": "0"}
    off = e2e.worker_env("off", tmp_path / "c", base)
    assert off["VLLM_PLUGINS"] == "" and "HL_LINEAR_BACKEND" not in off and off["PATH"] == "/bin"
    assert off["VLLM_CACHE_ROOT"] == str(tmp_path / "c" / "vllm") and off["TRITON_CACHE_DIR"].endswith(
        "triton"
    )
    assert off["VLLM_NO_USAGE_STATS"] == "0" and off["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    on = e2e.worker_env("on", tmp_path / "c", {"VLLM_PLUGINS": ""})
    assert on["HL_LINEAR_BACKEND"] == "helion" and "VLLM_PLUGINS" not in on
    assert on["HL_KERNEL_CACHE_DIR"] == str(tmp_path / "c" / "hl-kernels")  # emptied with the others
    bare = e2e.worker_env("on", tmp_path / "c", {"HL_KERNEL_CACHE_DIR": "/elsewhere"}, kernel_cache=False)
    assert "HL_KERNEL_CACHE_DIR" not in bare
    with pytest.raises(ValueError, match="plugin"):
        e2e.worker_env("maybe", tmp_path)
    line = e2e.shell_line(["python", "-m", "x"], {"A": "1", "B": "", "PATH": "/bin"}, base={"PATH": "/bin"})
    assert line == "A=1 B='' python -m x"


def test_tensor_parallel_size_reaches_the_worker_and_the_engine(tmp_path):
    opts = e2e.E2EOptions(concurrency=(1, 8), tensor_parallel_size=2)
    cmd = e2e.worker_command("/py", tmp_path / "model", "on", opts, tmp_path / "o.json")
    args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
    assert args["--tensor-parallel-size"] == "2"
    seen = {}

    def fake_main(ns):
        seen["options"] = ns
        return 0

    import unittest.mock

    with unittest.mock.patch.object(e2e, "worker_main", fake_main):
        assert e2e.main(cmd[3:]) == 0
    assert seen["options"].tensor_parallel_size == 2
    kw = e2e.llm_kwargs(tmp_path / "model", opts)
    assert kw["tensor_parallel_size"] == 2 and kw["model"] == str(tmp_path / "model")
    assert kw["load_format"] == "dummy" and kw["max_num_seqs"] == 32 and kw["enable_prefix_caching"] is False
    assert e2e.llm_kwargs("m", e2e.E2EOptions())["tensor_parallel_size"] == 1
    assert e2e.e2e_stem("Qwen/Qwen3-8B", "fp8_dynamic") == "e2e-qwen3-8b-fp8_dynamic"
    assert e2e.e2e_stem("Qwen/Qwen3-8B", "fp8_dynamic", 2) == "e2e-qwen3-8b-fp8_dynamic-tp2"


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_tensor_parallel_size_is_rejected(bad):
    with pytest.raises(ValueError, match="tensor_parallel_size must be a positive integer"):
        e2e.E2EOptions(tensor_parallel_size=bad)


def test_multicast_off_only_for_tensor_parallel(tmp_path):
    one = e2e.worker_env("on", tmp_path, {"PATH": "/bin"})
    assert not set(e2e.TP_ENV) & set(one)
    two = e2e.worker_env("on", tmp_path, {"PATH": "/bin"}, tensor_parallel_size=2)
    assert {k: two[k] for k in e2e.TP_ENV} == {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    assert two["HL_LINEAR_BACKEND"] == "helion" and two["PATH"] == "/bin"
    user = e2e.worker_env("off", tmp_path, {"NCCL_NVLS_ENABLE": "1"}, tensor_parallel_size=4)
    assert user["NCCL_NVLS_ENABLE"] == "1" and user["NVSHMEM_DISABLE_NVLS"] == "1"  # the user's value wins
    env = {}
    e2e.default_env(env, 2)
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"


def test_worker_cli_parses_and_sets_the_plugin_switch(monkeypatch):
    seen = {}

    def fake_main(args):

        seen.update(vars(args))
        return 0

    monkeypatch.setattr(e2e, "worker_main", fake_main)
    assert (
        e2e.main(["worker", "--plugin", "off", "--model-dir", "m", "--out", "o.json", "--concurrency", "1,2"])
        == 0
    )
    assert seen["plugin"] == "off" and seen["concurrency"] == "1,2" and seen["output_len"] == 128
    assert seen["tensor_parallel_size"] == 1
    env = {"VLLM_PLUGINS": "", "X": "1"}
    e2e.set_plugin(env, "on")
    assert env == {"X": "1", "HL_LINEAR_BACKEND": "helion"}


def test_measure_throughput_with_a_fake_engine():
    t = [0.0]
    calls = []

    def clock():
        return t[0]

    def generate(prompts, max_tokens):  # prefill 50 ms + 10 ms per output token after the first
        calls.append((len(prompts), max_tokens))
        t[0] += 0.05 + 0.01 * (max_tokens - 1)
        return len(prompts) * max_tokens

    opts = e2e.E2EOptions(concurrency=(1, 4), output_len=11, repeats=2)
    out = e2e.measure_throughput(generate, lambda c: [{"prompt_token_ids": [5]}] * c, opts, clock=clock)
    assert calls == [(1, 11), (1, 1), (1, 11), (1, 1), (1, 11), (4, 11), (4, 1), (4, 11), (4, 1), (4, 11)]
    assert out["1"]["tokens_per_s"] == pytest.approx(11 / 0.15)
    assert out["4"]["tokens_per_s"] == pytest.approx(44 / 0.15)
    assert out["4"]["tpot_ms"] == pytest.approx(10.0) and out["4"]["ttft_ms"] == pytest.approx(50.0)
    with pytest.raises(RuntimeError, match="expected"):
        e2e.measure_throughput(lambda p, n: 1, lambda c: [None] * c, e2e.E2EOptions(concurrency=(2,)))


def _run(plugin, rnd, tps, startup, greedy=((1, 2), (3, 4))):
    return {
        "plugin": plugin,
        "round": rnd,
        "startup_s": startup,
        "greedy": [list(g) for g in greedy],
        "gpu": "H200",
        "torch": "2.11",
        "throughput": {
            str(c): {"tokens_per_s": v, "tpot_ms": 1000.0 / v, "ttft_ms": 20.0} for c, v in tps.items()
        },
    }


def test_summarize():
    runs = [
        _run("off", 0, {1: 100.0, 8: 800.0}, 60.0),
        _run("on", 0, {1: 120.0, 8: 760.0}, 70.0, greedy=((1, 2), (3, 5))),
        _run("off", 1, {1: 110.0, 8: 800.0}, 30.0),
        _run("on", 1, {1: 130.0, 8: 760.0}, 33.0),
    ]
    s = e2e.summarize(runs)
    r1, r8 = s["rows"]
    assert r1["concurrency"] == 1 and r1["tokens_per_s_off"] == 105.0 and r1["tokens_per_s_on"] == 125.0
    assert r1["speedup"] == pytest.approx(125 / 105) and r8["speedup"] == pytest.approx(0.95)
    assert r8["tpot_speedup"] == pytest.approx((1000 / 800) / (1000 / 760)) and r1["ttft_ms_on"] == 20.0
    assert s["startup"]["on"] == {"cold_s": 70.0, "warm_s": 33.0} and s["startup"]["off"]["warm_s"] == 30.0
    assert s["startup"]["delta_cold_s"] == 10.0 and s["startup"]["delta_warm_s"] == pytest.approx(3.0)
    assert s["greedy_agreement"] == {"on-r0": "1/2", "on-r1": "2/2"}
    only_on = e2e.summarize([_run("on", 0, {1: 1.0}, 5.0)])
    assert only_on["rows"][0]["speedup"] is None and only_on["startup"]["delta_cold_s"] is None
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4, "gpu": "H200"}, s)
    assert "| 1 | 105 | 125 | 1.190 |" in md and "| cold caches | 60.0 | 70.0 | +10.0 |" in md
    assert "on-r0: 1/2" in md


def _tp_run(plugin, rnd, kernels_by_rank, captured_by_rank):
    run = _run(plugin, rnd, {1: 100.0}, 50.0)
    run.update(
        tensor_parallel_size=len(kernels_by_rank),
        kernels=kernels_by_rank[0],
        kernels_by_rank=kernels_by_rank,
        captured=captured_by_rank[0] if captured_by_rank else {},
        captured_by_rank=captured_by_rank,
        filled=10,
        filled_by_rank=[10] * len(kernels_by_rank),
    )
    return run


def test_summarize_reports_helion_per_rank():
    helion = {"qkv_proj": "HelionFP8ScaledMMLinearKernel", "o_proj": "HelionFP8ScaledMMLinearKernel"}
    cutlass = {"qkv_proj": "CutlassFP8ScaledMMLinearKernel", "o_proj": "CutlassFP8ScaledMMLinearKernel"}
    cap = {"helion": {"1": [[4096, 4096, 2]]}, "fallback": {"64": [[4096, 4096, 1]]}}
    runs = [
        _tp_run("off", 0, [cutlass, cutlass], []),
        _tp_run("on", 0, [helion, helion], [cap, cap]),
        _tp_run("on", 1, [helion, cutlass], [cap, {"fallback": cap["fallback"]}]),
    ]
    s = e2e.summarize(runs)
    assert s["tensor_parallel_size"] == 2
    assert s["helion_ranks"]["on-r0"] == {
        "ranks": 2,
        "kernels": 2,
        "captured": 2,
        "active": 2,
        "inactive": {},
    }
    r1 = s["helion_ranks"]["on-r1"]
    assert (r1["ranks"], r1["kernels"], r1["captured"], r1["active"]) == (2, 1, 1, 1)
    assert r1["inactive"] == {"1": "no Helion kernel, no size captured with Helion"}
    assert "off-r0" not in s["helion_ranks"] and s["rows"][0]["speedup"] == 1.0
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    assert md.startswith("# vLLM end to end: m fp8_dynamic, 4 layers, TP 2")
    assert "on-r0: Helion active in 2/2 ranks;" in md
    assert "on-r1: Helion active in 1/2 ranks (rank 1: no Helion kernel, no size captured with Helion)" in md
    # results without per-rank records (older files): rank 0 alone; none when no kernels were recorded
    old = _run("on", 0, {1: 1.0}, 5.0)
    assert "helion_ranks" in e2e.summarize([old]) and e2e.summarize([old])["helion_ranks"] == {}
    old["kernels"], old["captured"] = helion, cap
    assert e2e.summarize([old])["helion_ranks"]["on-r0"]["active"] == 1
    assert e2e.summarize([old])["tensor_parallel_size"] == 1


def test_run_e2e_with_a_fake_launcher(tmp_path):
    """The whole parent side: model dir, one worker per run with its env, results aggregated, files
    written; a failing worker is recorded with its log and the others still run."""
    launched = []

    def launcher(cmd, env, log, timeout):
        args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
        launched.append((args["--plugin"], env.get("HL_LINEAR_BACKEND"), env.get("VLLM_PLUGINS"), timeout))
        cfg = json.loads(
            (tmp_path / "res" / "e2e-qwen3-1.7b-block_fp8" / "model" / "config.json").read_text()
        )
        assert cfg["num_hidden_layers"] == 2 and cfg["quantization_config"]["quant_method"] == "fp8"
        log.parent.mkdir(parents=True, exist_ok=True)
        if args["--plugin"] == "on" and len(launched) == 4:
            log.write_text("Traceback...\nCUDA error: out of memory\n")
            return 1
        tps = {
            int(c): 100.0 * int(c) * (1.2 if args["--plugin"] == "on" else 1.0)
            for c in args["--concurrency"].split(",")
        }
        with open(args["--out"], "w") as f:
            json.dump(_run(args["--plugin"], -1, tps, 50.0), f)
        return 0

    events = []
    report = e2e.run_e2e(
        model="Qwen/Qwen3-1.7B",
        model_config=load_model_config("qwen3-1.7b"),
        fmt="block_fp8",
        layers=2,
        options=e2e.E2EOptions(concurrency=(1, 2)),
        output=tmp_path / "res",
        launcher=launcher,
        timeout=600,
        metadata={"commit": "abc"},
        on_run=lambda spec, ev: events.append((spec.name, ev)),
    )
    assert launched == [("off", None, "", 600), ("on", "helion", None, 600)] * 2
    assert events[-2:] == [("on-r1", "start"), ("on-r1", "failed")]
    assert list(report.failed) == ["on-r1"] and "out of memory" in report.failed["on-r1"]
    assert [r["round"] for r in report.runs] == [0, 0, 1]  # the parent's round, not the worker's
    out = tmp_path / "res"
    payload = json.loads((out / "e2e-qwen3-1.7b-block_fp8.json").read_text())
    assert payload["metadata"]["layers"] == 2 and payload["metadata"]["model_layers"] == 28
    assert payload["metadata"]["gpu"] == "H200" and payload["metadata"]["commit"] == "abc"
    assert payload["summary"]["rows"][1]["speedup"] == pytest.approx(1.2)
    csv_lines = (out / "e2e-qwen3-1.7b-block_fp8.csv").read_text().splitlines()
    assert csv_lines[0].split(",") == list(e2e.SUMMARY_FIELDS) and len(csv_lines) == 3
    assert (out / "e2e-qwen3-1.7b-block_fp8.md").read_text().startswith("# vLLM end to end: Qwen/Qwen3-1.7B")
    assert report.files["stem"] == "e2e-qwen3-1.7b-block_fp8"


def test_slug():
    assert e2e.slug("Qwen/Qwen3-8B") == "qwen3-8b"
    assert e2e.slug("/models/My Model/config.json") == "my-model"
    assert e2e.slug("qwen3-8b") == "qwen3-8b" and e2e.slug("/tmp/x/tiny.json") == "tiny"


def test_module_help_runs_without_a_gpu():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "hltools.e2e", "worker", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--plugin" in out.stdout


def test_run_e2e_tensor_parallel_files_and_env(tmp_path):
    seen = []

    def launcher(cmd, env, log, timeout):
        args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
        seen.append((args["--tensor-parallel-size"], env.get("NCCL_NVLS_ENABLE")))
        run = _tp_run(args["--plugin"], -1, [{"o_proj": "HelionX"}] * 2, [{"helion": {"1": [[1, 1, 1]]}}] * 2)
        with open(args["--out"], "w") as f:
            json.dump(run, f)
        return 0

    report = e2e.run_e2e(
        model="qwen3-1.7b",
        model_config=load_model_config("qwen3-1.7b"),
        fmt="fp8_dynamic",
        layers=2,
        options=e2e.E2EOptions(concurrency=(1,), tensor_parallel_size=2),
        output=tmp_path,
        plugins=["on"],
        rounds=1,
        launcher=launcher,
    )
    assert seen == [("2", "0")] and not report.failed
    assert report.files["stem"] == "e2e-qwen3-1.7b-fp8_dynamic-tp2"
    payload = json.loads((tmp_path / "e2e-qwen3-1.7b-fp8_dynamic-tp2.json").read_text())
    assert payload["metadata"]["tensor_parallel_size"] == 2
    assert payload["metadata"]["options"]["tensor_parallel_size"] == 2
    assert payload["runs"][0]["kernels_by_rank"] == [{"o_proj": "HelionX"}] * 2
    assert payload["summary"]["helion_ranks"]["on-r0"]["active"] == 2
    assert "TP 2" in (tmp_path / "e2e-qwen3-1.7b-fp8_dynamic-tp2.md").read_text()


def test_aux_capture_counts_groups_by_op_and_tokens(monkeypatch):
    from hltools.e2e import aux_capture_counts
    from hlvllm import aux_ops

    monkeypatch.setattr(aux_ops, "AUX_CAPTURE_COUNTS", aux_ops.Counter())
    aux_ops.AUX_CAPTURE_COUNTS[("rms_norm", "helion", 8, 4096)] += 3
    aux_ops.AUX_CAPTURE_COUNTS[("rms_norm", "helion", 1, 4096)] += 1
    aux_ops.AUX_CAPTURE_COUNTS[("silu_and_mul", "vllm", 8, 12288)] += 2
    assert aux_capture_counts(None) == {
        "rms_norm/helion": {"1": [[4096, 1]], "8": [[4096, 3]]},
        "silu_and_mul/vllm": {"8": [[12288, 2]]},
    }


def test_subprocess_launcher_timeout_kills_the_whole_process_group(tmp_path):
    """An engine's child processes (vLLM's engine core, TP workers) die with a timed-out worker."""
    import os
    import sys
    import time

    from hltools.e2e import subprocess_launcher

    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)"
    )
    rc = subprocess_launcher([sys.executable, "-c", script], dict(os.environ), tmp_path / "w.log", 3.0)
    assert rc == 124
    assert "worker killed after 3.0 s" in (tmp_path / "w.log").read_text()
    child = int(pid_file.read_text())
    for _ in range(50):  # SIGKILL is asynchronous; the child is reaped by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"grandchild {child} outlived the timed-out worker")


def test_rank_functions_are_sent_from_the_importable_module():
    """``python -m hltools.e2e worker`` sends fill_weights & co. to vLLM's ranks by pickle (by
    reference). Taken from ``__main__`` they failed at TP=2 on the H200 ("not the same object as
    __main__.fill_weights"); they must come from ``hltools.e2e``."""
    import inspect
    import pickle

    import hltools.e2e as m

    for f in (m.fill_weights, m.linear_kernels, m.dispatch_counts, m.aux_capture_counts):
        assert f.__module__ == "hltools.e2e" and pickle.loads(pickle.dumps(f)) is f
    body = inspect.getsource(m.worker_main)
    assert body.count("llm.apply_model(rank_fns.") == 4 and "apply_model(fill_weights" not in body
