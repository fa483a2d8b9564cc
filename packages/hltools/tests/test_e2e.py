"""hltools.e2e without a GPU: engine config, worker commands and environments, the throughput
arithmetic with a fake engine and clock, aggregation, and a whole run with a fake launcher."""

import json
import sys
from pathlib import Path

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
    specs = e2e.plan_runs(tmp_path, ["off", "on"], rounds=3)
    assert [(s.name, s.cold) for s in specs] == [  # the order reversed every other round
        ("off-r0", True),
        ("on-r0", True),
        ("on-r1", False),
        ("off-r1", False),
        ("off-r2", False),
        ("on-r2", False),
    ]
    assert (
        specs[0].cache == specs[3].cache == tmp_path / "cache-off" and specs[1].cache == tmp_path / "cache-on"
    )
    assert specs[2].out == tmp_path / "runs" / "on-r1.json"
    assert [s.name for s in e2e.plan_runs(tmp_path, ["control", "off", "on"], rounds=2)] == [
        "control-r0",
        "off-r0",
        "on-r0",
        "on-r1",
        "off-r1",
    ]
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
    assert bare["HL_KERNEL_CACHE_DIR"] == ""  # off: unset would be hlvllm's default directory
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

    with unittest.mock.patch.object(e2e.worker, "worker_main", fake_main):
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

    monkeypatch.setattr(e2e.worker, "worker_main", fake_main)
    assert (
        e2e.main(["worker", "--plugin", "off", "--model-dir", "m", "--out", "o.json", "--concurrency", "1,2"])
        == 0
    )
    assert seen["plugin"] == "off" and seen["concurrency"] == "1,2" and seen["output_len"] == 128
    assert seen["tensor_parallel_size"] == 1
    env = {"VLLM_PLUGINS": "", "X": "1"}
    e2e.set_plugin(env, "on")
    assert env == {"X": "1", "HL_LINEAR_BACKEND": "helion"}
    assert e2e.main(["worker", "--plugin", "gemm", "--model-dir", "m", "--out", "o.json"]) == 0
    assert seen["plugin"] == "gemm"


def test_gemm_setting_is_helion_gemms_without_aux_kernels(tmp_path):
    """``gemm``: the plugin with HL_LINEAR_BACKEND=helion and HL_AUX_KERNELS=none; ``on`` keeps a
    HL_AUX_KERNELS the user set, ``gemm`` overrides it; ``off`` is unchanged."""
    assert e2e.PLUGINS == ("off", "on", "gemm", "aux", "fused", "control")
    assert e2e.DEFAULT_PLUGINS == ("off", "on", "control")
    env = {"VLLM_PLUGINS": "", "HL_AUX_KERNELS": "rms_norm", "X": "1"}
    e2e.set_plugin(env, "gemm")
    assert env == {"X": "1", "HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "none"}
    env = {"HL_AUX_KERNELS": "rms_norm"}
    e2e.set_plugin(env, "on")
    assert env == {"HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "rms_norm"}
    env = {"HL_LINEAR_BACKEND": "helion"}
    e2e.set_plugin(env, "off")
    assert env == {"VLLM_PLUGINS": ""}
    with pytest.raises(ValueError, match=r"\['off', 'on', 'gemm', 'aux', 'fused', 'control'\]"):
        e2e.set_plugin({}, "maybe")

    gemm = e2e.worker_env("gemm", tmp_path / "cache-gemm", {"PATH": "/bin", "VLLM_PLUGINS": ""})
    assert gemm["HL_LINEAR_BACKEND"] == "helion" and gemm["HL_AUX_KERNELS"] == "none"
    assert "VLLM_PLUGINS" not in gemm and gemm["PATH"] == "/bin"
    assert gemm["VLLM_CACHE_ROOT"] == str(tmp_path / "cache-gemm" / "vllm")
    assert gemm["HL_KERNEL_CACHE_DIR"] == str(tmp_path / "cache-gemm" / "hl-kernels")
    on = e2e.worker_env("on", tmp_path / "cache-on", {"PATH": "/bin"})
    assert on["HL_LINEAR_BACKEND"] == "helion" and "HL_AUX_KERNELS" not in on
    line = e2e.shell_line(e2e.worker_command("/py", tmp_path, "gemm", e2e.E2EOptions(), tmp_path / "o"), gemm)
    assert "HL_AUX_KERNELS=none" in line and "--plugin gemm" in line


def test_aux_setting_sets_hl_aux_kernels_all_and_on_leaves_it_unset(tmp_path):
    """``on`` is the plugin's defaults (Helion GEMMs only since HL_AUX_KERNELS defaults to none): it
    sets no HL_AUX_KERNELS; ``aux`` sets HL_AUX_KERNELS=all (Helion GEMMs and aux kernels, what
    ``on`` measured before), over a value the user set; the settings run in the order off, on, gemm,
    aux, fused."""
    assert list(e2e.EXTRA_SETTINGS) == ["gemm", "aux", "fused"]
    aux = e2e.EXTRA_SETTINGS["aux"]
    assert (aux.label, aux.suffix, aux.env_text, aux.exclusive) == (
        "GEMM+aux",
        "_aux",
        "HL_AUX_KERNELS=all",
        False,
    )
    env = {"VLLM_PLUGINS": "", "X": "1"}
    e2e.set_plugin(env, "on")
    assert env == {"X": "1", "HL_LINEAR_BACKEND": "helion"}
    env = {"VLLM_PLUGINS": "", "X": "1"}
    e2e.set_plugin(env, "aux")
    assert env == {"X": "1", "HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "all"}
    env = {"HL_AUX_KERNELS": "rms_norm", "HL_AUX_FUSION": "1"}
    e2e.set_plugin(env, "aux")
    assert env == {"HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "all"}

    base = {"PATH": "/bin", "VLLM_PLUGINS": ""}
    on = e2e.worker_env("on", tmp_path / "cache-on", base)
    assert on["HL_LINEAR_BACKEND"] == "helion" and "HL_AUX_KERNELS" not in on and "HL_AUX_FUSION" not in on
    env = e2e.worker_env("aux", tmp_path / "cache-aux", base)
    assert env["HL_LINEAR_BACKEND"] == "helion" and env["HL_AUX_KERNELS"] == "all"
    assert "VLLM_PLUGINS" not in env and "HL_AUX_FUSION" not in env
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "cache-aux" / "vllm")
    line = e2e.shell_line(e2e.worker_command("/py", tmp_path, "aux", e2e.E2EOptions(), tmp_path / "o"), env)
    assert "HL_AUX_KERNELS=all" in line and "--plugin aux" in line
    line = e2e.shell_line(e2e.worker_command("/py", tmp_path, "on", e2e.E2EOptions(), tmp_path / "o"), on)
    assert "HL_AUX_KERNELS" not in line and "--plugin on" in line
    specs = e2e.plan_runs(tmp_path, ["fused", "aux", "off", "gemm", "on"], rounds=1)
    assert [s.plugin for s in specs] == ["fused", "aux", "off", "gemm", "on"]  # run in the order given
    s = e2e.summarize([_run(p, 0, {1: 100.0}, 50.0) for p in ("fused", "aux", "off", "gemm", "on")])
    assert s["plugins"] == ["off", "on", "gemm", "aux", "fused"]  # summaries in PLUGINS order
    assert [x.name for x in e2e.extra_settings(s)] == ["gemm", "aux", "fused"]
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    head = next(ln for ln in md.splitlines() if ln.startswith("| concurrency"))
    assert (
        head.index("tok/s hlvllm")
        < head.index("GEMM only")
        < head.index("GEMM+aux")
        < head.index("fused aux")
    )
    legend = next(ln for ln in md.splitlines() if ln.startswith("vLLM: no plugin"))
    assert "hlvllm: the plugin's defaults (Helion GEMMs;" in legend
    assert "GEMM+aux: Helion GEMMs and aux kernels, `HL_AUX_KERNELS=all`" in legend


def test_fused_setting_is_on_with_aux_fusion(tmp_path):
    """``fused``: ``on`` plus HL_AUX_FUSION=1 (a user's HL_AUX_KERNELS kept); every other setting
    removes an inherited HL_AUX_FUSION, so only ``fused`` has it."""
    assert e2e.HELION_PLUGINS == ("on", "gemm", "aux", "fused") and e2e.EXCLUSIVE_ENV == ("HL_AUX_FUSION",)
    assert list(e2e.EXTRA_SETTINGS) == ["gemm", "aux", "fused"]
    fused = e2e.EXTRA_SETTINGS["fused"]
    assert (fused.label, fused.suffix, fused.env_text) == ("fused aux", "_fused", "HL_AUX_FUSION=1")
    assert e2e.EXTRA_SETTINGS["gemm"].label == "GEMM only"
    env = {"VLLM_PLUGINS": "", "HL_AUX_KERNELS": "rms_norm,quant_fp8", "X": "1"}
    e2e.set_plugin(env, "fused")
    assert env == {
        "X": "1",
        "HL_LINEAR_BACKEND": "helion",
        "HL_AUX_KERNELS": "rms_norm,quant_fp8",
        "HL_AUX_FUSION": "1",
    }
    env = {"HL_AUX_FUSION": "0"}
    e2e.set_plugin(env, "fused")
    assert env == {"HL_LINEAR_BACKEND": "helion", "HL_AUX_FUSION": "1"}
    for plugin, expected in (
        ("on", {"HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "all"}),
        ("gemm", {"HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "none"}),
        ("aux", {"HL_LINEAR_BACKEND": "helion", "HL_AUX_KERNELS": "all"}),
        ("off", {"VLLM_PLUGINS": "", "HL_AUX_KERNELS": "all"}),
    ):
        env = {"HL_AUX_FUSION": "1", "HL_AUX_KERNELS": "all", "HL_LINEAR_BACKEND": "helion"}
        e2e.set_plugin(env, plugin)
        assert env == expected, plugin

    base = {"PATH": "/bin", "VLLM_PLUGINS": "", "HL_AUX_FUSION": "1"}
    envs = {p: e2e.worker_env(p, tmp_path / f"cache-{p}", base) for p in e2e.PLUGINS}
    assert envs["fused"]["HL_LINEAR_BACKEND"] == "helion" and envs["fused"]["HL_AUX_FUSION"] == "1"
    assert "VLLM_PLUGINS" not in envs["fused"] and "HL_AUX_KERNELS" not in envs["fused"]
    assert envs["fused"]["VLLM_CACHE_ROOT"] == str(tmp_path / "cache-fused" / "vllm")
    assert envs["fused"]["HL_KERNEL_CACHE_DIR"] == str(tmp_path / "cache-fused" / "hl-kernels")
    assert [p for p, env in envs.items() if "HL_AUX_FUSION" in env] == ["fused"]
    assert base["HL_AUX_FUSION"] == "1"  # the base is not changed
    cmd = e2e.worker_command("/py", tmp_path, "fused", e2e.E2EOptions(), tmp_path / "o")
    line = e2e.shell_line(cmd, envs["fused"], {"PATH": "/bin"})
    assert "HL_AUX_FUSION=1" in line and "HL_LINEAR_BACKEND=helion" in line and "--plugin fused" in line
    assert "HL_AUX_KERNELS" not in line


def test_plan_runs_alternates_three_settings(tmp_path):
    specs = e2e.plan_runs(tmp_path, ["off", "on", "gemm"], rounds=2)
    assert [(s.name, s.cold) for s in specs] == [
        ("off-r0", True),
        ("on-r0", True),
        ("gemm-r0", True),
        ("gemm-r1", False),  # reversed in round 1
        ("on-r1", False),
        ("off-r1", False),
    ]
    assert {s.plugin: s.cache for s in specs} == {
        "off": tmp_path / "cache-off",
        "on": tmp_path / "cache-on",
        "gemm": tmp_path / "cache-gemm",
    }
    assert specs[3].out == tmp_path / "runs" / "gemm-r1.json" and specs[3].log.name == "gemm-r1.log"
    assert [s.name for s in e2e.plan_runs(tmp_path, ["gemm", "off"], rounds=1)] == ["gemm-r0", "off-r0"]
    # default: off, on, control; the untimed control in round 0 only
    assert [s.plugin for s in e2e.plan_runs(tmp_path)] == ["off", "on", "control", "on", "off"]


def test_plan_runs_alternates_four_settings(tmp_path):
    specs = e2e.plan_runs(tmp_path, ["off", "on", "gemm", "fused"], rounds=3)
    names = [s.name for s in specs]
    four = ("off", "on", "gemm", "fused")
    assert names == [f"{p}-r{r}" for r in range(3) for p in (four if r % 2 == 0 else four[::-1])]
    assert [s.cold for s in specs] == [True] * 4 + [False] * 8
    assert {s.plugin: s.cache for s in specs}["fused"] == tmp_path / "cache-fused"
    assert specs[-1].out == tmp_path / "runs" / "fused-r2.json" and specs[-1].log.name == "fused-r2.log"
    order = ["fused", "off", "gemm", "on"]  # the order given, duplicates once
    assert [s.plugin for s in e2e.plan_runs(tmp_path, [*order, "off"], rounds=1)] == order
    with pytest.raises(ValueError, match="plugins must be among"):
        e2e.plan_runs(tmp_path, ["off", "fusion"])


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
    lines = []
    out = e2e.measure_throughput(
        generate, lambda c: [{"prompt_token_ids": [5]}] * c, opts, clock=clock, progress=lines.append
    )
    assert lines == [
        "concurrency 1: untimed warm-up 0.2 s",
        "concurrency 1: 2 repeats, median 0.150 s per generate",
        "concurrency 4: untimed warm-up 0.2 s",
        "concurrency 4: 2 repeats, median 0.150 s per generate",
    ]
    assert calls == [(1, 11), (1, 1), (1, 11), (1, 1), (1, 11), (4, 11), (4, 1), (4, 11), (4, 1), (4, 11)]
    assert out["1"]["tokens_per_s"] == pytest.approx(11 / 0.15)
    assert out["4"]["tokens_per_s"] == pytest.approx(44 / 0.15)
    assert out["4"]["tpot_ms"] == pytest.approx(10.0) and out["4"]["ttft_ms"] == pytest.approx(50.0)
    with pytest.raises(RuntimeError, match="expected"):
        e2e.measure_throughput(lambda p, n: 1, lambda c: [None] * c, e2e.E2EOptions(concurrency=(2,)))


def test_a_stalled_one_token_generate_gives_no_tpot():
    # H200, 2026-12-01 evening: one-token generates stalled for seconds (DeepGEMM JIT) while the
    # full ones did not; TPOT (full - one) was printed as 0.00 ms
    t = [0.0]
    stalls = iter([0.0, 10.0, 12.0])  # the repeats' one-token calls (the warm-up has none)

    def generate(prompts, max_tokens):
        t[0] += 0.05 + 0.01 * (max_tokens - 1) + (next(stalls) if max_tokens == 1 else 0.0)
        return len(prompts) * max_tokens

    out = e2e.measure_throughput(
        generate,
        lambda c: [None] * c,
        e2e.E2EOptions(concurrency=(1,), output_len=11, repeats=3),
        clock=lambda: t[0],
    )
    assert out["1"]["tpot_ms"] is None and out["1"]["ttft_ms"] == pytest.approx(10_050.0)
    assert out["1"]["tokens_per_s"] == pytest.approx(11 / 0.15)
    row = e2e.summarize([{"plugin": "off", "round": 0, "startup_s": 1.0, "throughput": out}])["rows"][0]
    assert row["tpot_ms_off"] is None and row["ttft_spread_pct_off"] == pytest.approx(
        100 * (12.05 / 0.05 - 1)
    )


def test_measure_ttft_times_one_sequence_alone_per_length():
    """One untimed one-token generate per length, then ttft_repeats timed ones of ONE prompt."""
    t = [0.0]
    calls = []

    def generate(prompts, max_tokens):  # prefill: 1 ms + 0.01 ms per prompt token
        calls.append((len(prompts), len(prompts[0]["prompt_token_ids"]), max_tokens))
        t[0] += 1e-3 + 1e-5 * len(prompts[0]["prompt_token_ids"])
        return len(prompts)

    opts = e2e.E2EOptions(concurrency=(1,), ttft_lens=(128, 1024), ttft_repeats=3)
    out = e2e.measure_ttft(generate, lambda n: [{"prompt_token_ids": [5] * n}], opts, clock=lambda: t[0])
    assert calls == [(1, 128, 1)] * 4 + [(1, 1024, 1)] * 4
    assert out["128"]["ttft_ms"] == pytest.approx(2.28) and len(out["128"]["samples_ms"]) == 3
    assert out["1024"]["ttft_ms"] == pytest.approx(11.24)
    assert e2e.measure_ttft(generate, None, e2e.E2EOptions(concurrency=(1,))) == {}
    assert opts.max_model_len == 1024 + 1 + 16  # room for the longest TTFT prompt
    cmd = e2e.worker_command("python", Path("m"), "on", opts, Path("o.json"))
    assert cmd[cmd.index("--ttft-lens") + 1] == "128,1024" and cmd[cmd.index("--ttft-repeats") + 1] == "3"
    with pytest.raises(ValueError, match="ttft"):
        e2e.E2EOptions(ttft_lens=(0,))


def test_summarize_ttft_alone():
    runs = [
        {**_run("off", 0, {1: 100.0}, 60.0), "ttft": {"128": {"samples_ms": [10.0, 10.2, 9.8, 10.1, 10.0]}}},
        {**_run("on", 0, {1: 100.0}, 60.0), "ttft": {"128": {"samples_ms": [10.1, 10.3, 9.9, 10.2, 10.1]}}},
    ]
    (row,) = e2e.summarize(runs)["ttft"]
    assert row["input_len"] == 128 and row["ttft_ms_off"] == 10.0 and row["ttft_ms_on"] == 10.1
    assert row["ratio"] == pytest.approx(1.01) and row["samples_on"] == 5
    assert row["ttft_p20_ms_off"] < 10.0 < row["ttft_p80_ms_off"]
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, e2e.summarize(runs))
    assert "TTFT of one sequence alone" in md and "| 128 | 10.00 (" in md and "| 1.010 |" in md
    assert e2e.summarize([_run("off", 0, {1: 1.0}, 1.0)])["ttft"] == []


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
    assert s["restart_agreement"] == {"off-r1": "2/2", "on-r1": "1/2"}
    only_on = e2e.summarize([_run("on", 0, {1: 1.0}, 5.0)])
    assert only_on["rows"][0]["speedup"] is None and only_on["startup"]["delta_cold_s"] is None
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4, "gpu": "H200"}, s)
    assert "| 1 | 105 | 125 | 1.190 |" in md and "| cold caches | 60.0 | 70.0 | +10.0 |" in md
    assert "on-r0: 1/2" in md
    assert "warm restart with its setting's cold run: off-r1: 2/2, on-r1: 1/2." in md
    assert only_on["restart_agreement"] is None
    # no gemm runs: no gemm columns (empty ones in the rows / CSV), no gemm start-up deltas
    assert s["plugins"] == ["off", "on"] and not e2e.has_gemm(s)
    assert r1["tokens_per_s_gemm"] is None and r1["speedup_gemm"] is None and r1["tpot_speedup_gemm"] is None
    assert "delta_gemm_cold_s" not in s["startup"] and "gemm" not in s["startup"]
    assert "GEMM only" not in md and "HL_AUX_KERNELS" not in md
    assert "| --- | --- | --- | --- | --- | --- | --- | --- |\n" in md


def test_summarize_with_gemm_runs():
    """off, on and gemm (Helion GEMMs only): each setting's medians, gemm / off next to on / off."""
    runs = [
        _run("off", 0, {1: 100.0, 8: 800.0}, 60.0),
        _run("on", 0, {1: 120.0, 8: 760.0}, 70.0, greedy=((1, 2), (3, 5))),
        _run("gemm", 0, {1: 110.0, 8: 880.0}, 65.0, greedy=((1, 2), (9, 9))),
        _run("off", 1, {1: 110.0, 8: 800.0}, 30.0),
        _run("on", 1, {1: 130.0, 8: 760.0}, 33.0),
        _run("gemm", 1, {1: 120.0, 8: 900.0}, 31.0),
    ]
    s = e2e.summarize(runs)
    assert s["plugins"] == ["off", "on", "gemm"] and e2e.has_gemm(s)
    r1, r8 = s["rows"]
    # off / on unchanged by the gemm runs
    assert r1["tokens_per_s_off"] == 105.0 and r1["tokens_per_s_on"] == 125.0
    assert r1["speedup"] == pytest.approx(125 / 105) and r8["speedup"] == pytest.approx(0.95)
    assert r1["tokens_per_s_gemm"] == 115.0 and r8["tokens_per_s_gemm"] == 890.0
    assert r1["speedup_gemm"] == pytest.approx(115 / 105) and r8["speedup_gemm"] == pytest.approx(1.1125)
    assert r8["tpot_ms_gemm"] == pytest.approx((1000 / 880 + 1000 / 900) / 2)
    assert r8["tpot_speedup_gemm"] == pytest.approx((1000 / 800) / ((1000 / 880 + 1000 / 900) / 2))
    assert r1["ttft_ms_gemm"] == 20.0
    st = s["startup"]
    assert st["gemm"] == {"cold_s": 65.0, "warm_s": 31.0} and st["on"] == {"cold_s": 70.0, "warm_s": 33.0}
    assert st["delta_cold_s"] == 10.0 and st["delta_warm_s"] == pytest.approx(3.0)
    assert st["delta_gemm_cold_s"] == 5.0 and st["delta_gemm_warm_s"] == pytest.approx(1.0)
    assert s["greedy_agreement"] == {"on-r0": "1/2", "on-r1": "2/2", "gemm-r0": "1/2", "gemm-r1": "2/2"}

    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    assert "| speedup GEMM only |" in md and "HL_AUX_KERNELS=none" in md
    assert "| 1 | 105 | 125 | 1.190 | 9.55 | 8.01 | 20.0 | 20.0 | 115 | 1.095 | 8.71 | 20.0 |" in md
    assert "| 8 | 800 | 760 | 0.950 |" in md and "| 890 | 1.113 |" in md
    assert "| cold caches | 60.0 | 70.0 | +10.0 | 65.0 | +5.0 |" in md
    assert "| warm caches | 30.0 | 33.0 | +3.0 | 31.0 | +1.0 |" in md
    assert "gemm-r0: 1/2, gemm-r1: 2/2" in md
    for table in md.split("\n\n"):  # every line of a table has as many cells as its header
        rows = [ln for ln in table.splitlines() if ln.startswith("|")]
        assert len({ln.count("|") for ln in rows}) <= 1, rows
    # an older summary (no "plugins" list) is judged by its rows
    assert e2e.has_gemm({"rows": [{"tokens_per_s_gemm": 1.0}]})
    assert not e2e.has_gemm({"rows": [{"tokens_per_s_on": 1.0}]})
    # no fused runs: its keys are empty, no fused columns or start-up deltas
    assert [x.name for x in e2e.extra_settings(s)] == ["gemm"]
    assert r1["tokens_per_s_fused"] is None and r1["speedup_fused"] is None
    assert "delta_fused_cold_s" not in st and "fused" not in st and "fused aux" not in md


def test_summarize_with_gemm_and_fused_runs():
    """off, on, gemm and fused: each setting's medians and ratios to off, start-up deltas, agreement
    and Helion ranks for gemm and fused alike; the markdown has both settings' columns in order."""
    runs = [
        _run("off", 0, {1: 100.0, 8: 800.0}, 60.0),
        _run("on", 0, {1: 120.0, 8: 760.0}, 70.0, greedy=((1, 2), (3, 5))),
        _run("gemm", 0, {1: 110.0, 8: 880.0}, 65.0, greedy=((1, 2), (9, 9))),
        _run("fused", 0, {1: 125.0, 8: 960.0}, 75.0, greedy=((1, 2), (3, 4))),
        _run("off", 1, {1: 100.0, 8: 800.0}, 30.0),
        _run("on", 1, {1: 130.0, 8: 760.0}, 33.0),
        _run("gemm", 1, {1: 120.0, 8: 900.0}, 31.0),
        _run("fused", 1, {1: 135.0, 8: 1040.0}, 34.0, greedy=((7, 7), (3, 4))),
    ]
    s = e2e.summarize(runs)
    assert s["plugins"] == ["off", "on", "gemm", "fused"]
    assert e2e.has_gemm(s) and e2e.has_setting(s, "fused")
    assert [x.name for x in e2e.extra_settings(s)] == ["gemm", "fused"]
    r1, r8 = s["rows"]
    # off, on and gemm as without fused runs
    assert r1["tokens_per_s_off"] == 100.0 and r1["tokens_per_s_on"] == 125.0 and r1["speedup"] == 1.25
    assert r1["tokens_per_s_gemm"] == 115.0 and r1["speedup_gemm"] == 1.15
    assert r8["speedup"] == 0.95 and r8["speedup_gemm"] == 1.1125
    # fused: medians 130 and 1000 tokens/s
    assert r1["tokens_per_s_fused"] == 130.0 and r8["tokens_per_s_fused"] == 1000.0
    assert r1["speedup_fused"] == 1.3 and r8["speedup_fused"] == 1.25
    assert r8["tpot_ms_fused"] == (1000 / 960 + 1000 / 1040) / 2
    assert r8["tpot_speedup_fused"] == (1000 / 800) / ((1000 / 960 + 1000 / 1040) / 2)
    assert r1["ttft_ms_fused"] == 20.0
    st = s["startup"]
    assert st["fused"] == {"cold_s": 75.0, "warm_s": 34.0}
    assert st["delta_cold_s"] == 10.0 and st["delta_gemm_cold_s"] == 5.0 and st["delta_fused_cold_s"] == 15.0
    assert st["delta_fused_warm_s"] == 4.0 and st["delta_gemm_warm_s"] == 1.0
    assert s["greedy_agreement"] == {
        "on-r0": "1/2",
        "on-r1": "2/2",
        "gemm-r0": "1/2",
        "gemm-r1": "2/2",
        "fused-r0": "2/2",
        "fused-r1": "1/2",
    }

    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    legend = next(ln for ln in md.splitlines() if ln.startswith("vLLM: no plugin"))
    assert legend.index("GEMM only: Helion GEMMs, `HL_AUX_KERNELS=none`") < legend.index("fused aux: ")
    assert "`HL_AUX_FUSION=1`" in legend and legend.endswith("Speedups are tokens/s over vLLM's.")
    head = next(ln for ln in md.splitlines() if ln.startswith("| concurrency"))
    assert head.endswith(
        " TTFT ms GEMM only | tok/s fused aux | speedup fused aux | TPOT ms fused aux | TTFT ms fused aux |"
    )
    assert (
        "| 1 | 100 | 125 | 1.250 | 10.00 | 8.01 | 20.0 | 20.0 | 115 | 1.150 | 8.71 | 20.0 "
        "| 130 | 1.300 | 7.70 | 20.0 |"
    ) in md
    assert "| 8 | 800 | 760 | 0.950 |" in md and "| 890 | 1.113 |" in md and "| 1000 | 1.250 |" in md
    assert (
        "| start-up | vLLM s | hlvllm s | delta s | GEMM only s | delta GEMM only s | fused aux s | delta fused aux s |"
        in md
    )
    assert "| cold caches | 60.0 | 70.0 | +10.0 | 65.0 | +5.0 | 75.0 | +15.0 |" in md
    assert "| warm caches | 30.0 | 33.0 | +3.0 | 31.0 | +1.0 | 34.0 | +4.0 |" in md
    assert "gemm-r1: 2/2, fused-r0: 2/2, fused-r1: 1/2" in md
    for table in md.split("\n\n"):  # every line of a table has as many cells as its header
        rows = [ln for ln in table.splitlines() if ln.startswith("|")]
        assert len({ln.count("|") for ln in rows}) <= 1, rows

    # fused without gemm: fused's columns alone follow off/on, gemm's keys stay empty
    s = e2e.summarize([r for r in runs if r["plugin"] != "gemm"])
    assert s["plugins"] == ["off", "on", "fused"] and not e2e.has_gemm(s)
    assert [x.name for x in e2e.extra_settings(s)] == ["fused"]
    assert s["rows"][0]["speedup_gemm"] is None and s["rows"][0]["speedup_fused"] == 1.3
    assert "delta_gemm_cold_s" not in s["startup"] and s["startup"]["delta_fused_cold_s"] == 15.0
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    assert "GEMM only" not in md and "HL_AUX_KERNELS" not in md and "HL_AUX_FUSION=1" in md
    assert "| 20.0 | 20.0 | 130 | 1.300 | 7.70 | 20.0 |" in md
    assert "| cold caches | 60.0 | 70.0 | +10.0 | 75.0 | +15.0 |" in md
    # an older summary (no "plugins" list) is judged by its rows
    assert e2e.has_setting({"rows": [{"tokens_per_s_fused": 1.0}]}, "fused")
    assert not e2e.has_setting({"rows": [{"tokens_per_s_fused": None}]}, "fused")


def test_summary_fields_add_gemm_aux_fused_in_order():
    fields = e2e.SUMMARY_FIELDS
    assert fields[:9] == (
        "concurrency", "tokens_per_s_off", "tokens_per_s_on", "speedup", "tpot_ms_off", "tpot_ms_on",
        "tpot_speedup", "ttft_ms_off", "ttft_ms_on",
    )  # fmt: skip
    assert fields[9:] == (
        "tokens_per_s_gemm", "speedup_gemm", "tpot_ms_gemm", "tpot_speedup_gemm", "ttft_ms_gemm",
        "tokens_per_s_aux", "speedup_aux", "tpot_ms_aux", "tpot_speedup_aux", "ttft_ms_aux",
        "tokens_per_s_fused", "speedup_fused", "tpot_ms_fused", "tpot_speedup_fused", "ttft_ms_fused",
        "spread_pct_off", "spread_pct_on", "ttft_spread_pct_off", "ttft_spread_pct_on",
    )  # fmt: skip


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
    # gemm runs are plugin runs too: counted under gemm-r<round>
    s = e2e.summarize([*runs, _tp_run("gemm", 0, [helion, cutlass], [cap, cap])])
    assert list(s["helion_ranks"]) == ["on-r0", "on-r1", "gemm-r0"]
    assert s["helion_ranks"]["gemm-r0"]["active"] == 1
    assert s["helion_ranks"]["gemm-r0"]["inactive"] == {"1": "no Helion kernel"}
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    assert "gemm-r0: Helion active in 1/2 ranks (rank 1: no Helion kernel)" in md
    # and fused runs, under fused-r<round>
    s = e2e.summarize(
        [
            *runs,
            _tp_run("gemm", 0, [helion, cutlass], [cap, cap]),
            _tp_run("fused", 0, [helion, helion], [cap, {}]),
        ]
    )
    assert list(s["helion_ranks"]) == ["on-r0", "on-r1", "gemm-r0", "fused-r0"]
    assert s["helion_ranks"]["fused-r0"]["active"] == 1
    assert s["helion_ranks"]["fused-r0"]["inactive"] == {"1": "no size captured with Helion"}
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic", "layers": 4}, s)
    assert "fused-r0: Helion active in 1/2 ranks (rank 1: no size captured with Helion)" in md


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
        if args["--plugin"] == "on" and len(launched) == 3:  # on-r1: round 1 runs on, then off
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
        plugins=("off", "on"),
        launcher=launcher,
        timeout=600,
        metadata={"commit": "abc"},
        on_run=lambda spec, ev: events.append((spec.name, ev)),
    )
    assert launched == [
        ("off", None, "", 600),
        ("on", "helion", None, 600),
        ("on", "helion", None, 600),
        ("off", None, "", 600),
    ]
    assert events[-4:-2] == [("on-r1", "start"), ("on-r1", "failed")] and events[-2][0] == "off-r1"
    assert list(report.failed) == ["on-r1"] and "out of memory" in report.failed["on-r1"]
    assert [r["round"] for r in report.runs] == [0, 0, 1]  # the parent's round, not the worker's
    out = tmp_path / "res"
    payload = json.loads((out / "e2e-qwen3-1.7b-block_fp8.json").read_text())
    assert payload["metadata"]["layers"] == 2 and payload["metadata"]["model_layers"] == 28
    assert payload["metadata"]["gpu"] == "H200" and payload["metadata"]["commit"] == "abc"
    assert payload["summary"]["rows"][1]["speedup"] == pytest.approx(1.2)
    csv_lines = (out / "e2e-qwen3-1.7b-block_fp8.csv").read_text().splitlines()
    assert csv_lines[0].split(",") == list(e2e.SUMMARY_FIELDS) and len(csv_lines) == 3
    assert e2e.SUMMARY_FIELDS[:9] == (
        "concurrency", "tokens_per_s_off", "tokens_per_s_on", "speedup", "tpot_ms_off", "tpot_ms_on",
        "tpot_speedup", "ttft_ms_off", "ttft_ms_on",
    )  # fmt: skip
    assert csv_lines[1].split(",")[-15:] == [""] * 15  # the gemm, aux and fused columns, at the end, empty
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
    __main__.fill_weights"); they must come from ``hltools.e2e.worker``."""
    import inspect
    import pickle

    import hltools.e2e as m

    for f in (m.fill_weights, m.linear_kernels, m.dispatch_counts, m.aux_capture_counts):
        assert f.__module__ == "hltools.e2e.worker" and pickle.loads(pickle.dumps(f)) is f
    body = inspect.getsource(m.worker_main)
    assert body.count("llm.apply_model(rank_fns.") == 4 and "apply_model(fill_weights" not in body


def test_run_e2e_with_gemm_runs(tmp_path, monkeypatch):
    """``plugins=off,on,gemm``: three workers per round, gemm with HL_AUX_KERNELS=none in its own
    cache dir; the files carry gemm's tokens/s and its speedup over off."""
    monkeypatch.delenv("HL_AUX_KERNELS", raising=False)
    launched = []
    factor = {"off": 1.0, "on": 1.1, "gemm": 1.25}

    def launcher(cmd, env, log, timeout):
        args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
        p = args["--plugin"]
        launched.append((p, env.get("HL_LINEAR_BACKEND"), env.get("HL_AUX_KERNELS"), env["VLLM_CACHE_ROOT"]))
        tps = {int(c): 100.0 * int(c) * factor[p] for c in args["--concurrency"].split(",")}
        with open(args["--out"], "w") as f:
            json.dump(_run(p, -1, tps, {"off": 40.0, "on": 50.0, "gemm": 44.0}[p]), f)
        return 0

    report = e2e.run_e2e(
        model="qwen3-1.7b",
        model_config=load_model_config("qwen3-1.7b"),
        fmt="fp8_dynamic",
        layers=2,
        options=e2e.E2EOptions(concurrency=(1, 4)),
        output=tmp_path,
        plugins=["off", "on", "gemm"],
        launcher=launcher,
    )
    work = tmp_path / "e2e-qwen3-1.7b-fp8_dynamic"
    first = [
        ("off", None, None, str(work / "cache-off" / "vllm")),
        ("on", "helion", None, str(work / "cache-on" / "vllm")),
        ("gemm", "helion", "none", str(work / "cache-gemm" / "vllm")),
    ]
    assert launched == first + first[::-1]  # round 1 in reverse
    assert not report.failed and [r["plugin"] for r in report.runs] == [
        "off",
        "on",
        "gemm",
        "gemm",
        "on",
        "off",
    ]
    payload = json.loads((tmp_path / "e2e-qwen3-1.7b-fp8_dynamic.json").read_text())
    assert payload["metadata"]["plugins"] == ["off", "on", "gemm"]
    row = payload["summary"]["rows"][1]
    assert row["concurrency"] == 4 and row["tokens_per_s_gemm"] == pytest.approx(500.0)
    assert row["speedup"] == pytest.approx(1.1) and row["speedup_gemm"] == pytest.approx(1.25)
    assert payload["summary"]["startup"]["delta_gemm_cold_s"] == pytest.approx(4.0)
    lines = (tmp_path / "e2e-qwen3-1.7b-fp8_dynamic.csv").read_text().splitlines()
    cells = dict(zip(lines[0].split(","), lines[2].split(","), strict=True))
    assert float(cells["tokens_per_s_gemm"]) == pytest.approx(500.0)
    assert float(cells["speedup_gemm"]) == pytest.approx(1.25) and float(cells["speedup"]) == pytest.approx(
        1.1
    )
    md = (tmp_path / "e2e-qwen3-1.7b-fp8_dynamic.md").read_text()
    assert "| 4 | 400 | 440 | 1.100 |" in md and "| 500 | 1.250 |" in md


def _scored(ids, out):
    """A fake ``RequestOutput`` of a ``prompt_logprobs=0`` request: token t scores -t/64 (vLLM's shape:
    position 0 None, then a dict holding the prompt token's ``Logprob`` and a top-1 token)."""
    import types

    lps = [None] + [
        {t: types.SimpleNamespace(logprob=-t / 64), 0: types.SimpleNamespace(logprob=-0.001)} for t in ids[1:]
    ]
    return types.SimpleNamespace(outputs=[out], prompt_token_ids=list(ids), prompt_logprobs=lps)


@pytest.mark.parametrize("plugin", ["off", "on", "gemm", "aux", "fused", "control"])
def test_worker_main_records_helion_for_on_and_gemm(tmp_path, monkeypatch, plugin):
    """worker_main with a fake vllm.LLM: ``on``, ``gemm``, ``aux`` and ``fused`` collect the captured
    sizes (GEMM and aux) from every rank, ``off`` and ``control`` do not; the environment it records
    holds the plugin switch; every run records the teacher-forced logprobs of the fixed sequences,
    ``control`` nothing timed."""
    import os
    import types

    import torch

    calls, scored_batches = [], []
    canned = {
        "fill_weights": 7,
        "linear_kernels": {"qkv_proj": "HelionFP8ScaledMMLinearKernel"},
        "dispatch_counts": {"helion": {"1": [[4096, 4096, 2]]}},
        "aux_capture_counts": {"rms_norm/vllm": {"1": [[4096, 1]]}},
    }

    class FakeLLM:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def apply_model(self, fn):
            calls.append(fn.__name__)
            return [canned[fn.__name__]]

        def generate(self, prompts, sp, use_tqdm=True):
            out = types.SimpleNamespace(token_ids=list(range(sp.max_tokens)))
            if getattr(sp, "prompt_logprobs", None) is None:
                return [types.SimpleNamespace(outputs=[out]) for _ in prompts]
            assert sp.prompt_logprobs == 0 and sp.max_tokens == 1
            scored_batches.append(prompts)
            return [_scored(p["prompt_token_ids"], out) for p in prompts]

    fake_vllm = types.ModuleType("vllm")
    fake_vllm.LLM = FakeLLM
    fake_vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "FakeGPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(
        os,
        "environ",
        {"PATH": os.environ.get("PATH", ""), "VLLM_PLUGINS": "", "VLLM_DEEP_GEMM_WARMUP": "skip"},
    )
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "vocab_size": 100}))
    out = tmp_path / "o.json"
    argv = ["worker", "--plugin", plugin, "--model-dir", str(tmp_path), "--out", str(out)]
    assert e2e.main([*argv, "--concurrency", "1,2", "--output-len", "3", "--repeats", "1"]) == 0
    result = json.loads(out.read_text())
    helion = plugin not in ("off", "control")
    assert result["plugin"] == plugin and result["gpu"] == "FakeGPU" and result["filled"] == 7
    assert calls == ["fill_weights", "linear_kernels"] + (
        ["dispatch_counts", "aux_capture_counts"] if helion else []
    )
    assert result["captured"] == (canned["dispatch_counts"] if helion else {})
    assert result["captured_by_rank"] == ([canned["dispatch_counts"]] if helion else [])
    assert result["aux_captured_by_rank"] == ([canned["aux_capture_counts"]] if helion else [])
    assert result["env"]["HL_LINEAR_BACKEND"] == ("helion" if helion else None)
    assert result["env"]["HL_AUX_KERNELS"] == {"gemm": "none", "aux": "all"}.get(plugin)
    assert result["env"]["HL_AUX_FUSION"] == ("1" if plugin == "fused" else None)
    assert result["env"]["VLLM_PLUGINS"] == ("" if not helion else None)
    assert result["env"]["VLLM_DISABLED_KERNELS"] == (
        e2e.CONTROL_ENV["VLLM_DISABLED_KERNELS"] if plugin == "control" else None
    )
    assert result["env"]["VLLM_DEEP_GEMM_WARMUP"] == "skip" and result["env"]["HL_DETERMINISTIC"] is None
    assert result["greedy"] == [[*range(16)]] * 4
    assert set(result["throughput"]) == (set() if plugin == "control" else {"1", "2"})
    numerics = result["numerics"]
    seqs = [p["prompt_token_ids"] for p in e2e.numerics_prompts(100, 3)]  # seed 0 + 3, the config's vocab
    assert len(seqs) == numerics["prompts"] == 8 and [len(q) for q in seqs] == [32, 24, 16, 8, 4, 2, 32, 16]
    assert numerics["lengths"] == [32, 24, 16, 8, 4, 2, 32, 16] and seqs[0] != seqs[6]
    assert numerics["tokens"] == 126 and numerics["seed"] == 3
    assert numerics["logprobs"] == [[-t / 64 for t in q[1:]] for q in seqs]  # position 0 has no logprob
    # each scored sequence was its own request (a prefill of its own length, within max_helion_size)
    assert [len(batch) for batch in scored_batches] == [1] * 8
    if helion:
        assert e2e.helion_ranks(result)["active"] == 1


def test_run_e2e_with_gemm_aux_and_fused_runs(tmp_path, monkeypatch):
    """``plugins=off,on,gemm,aux,fused`` with HL_AUX_FUSION=1 in the caller's environment: five
    workers per round, aux's with HL_AUX_KERNELS=all, only fused's with HL_AUX_FUSION=1, each in its
    own cache dir; the files carry gemm's, aux's and fused's tokens/s and speedups in that order."""
    monkeypatch.delenv("HL_AUX_KERNELS", raising=False)
    monkeypatch.setenv("HL_AUX_FUSION", "1")
    launched = []
    factor = {"off": 1.0, "on": 1.1, "gemm": 1.25, "aux": 1.05, "fused": 1.5}

    def launcher(cmd, env, log, timeout):
        args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
        p = args["--plugin"]
        launched.append(
            (p, env.get("HL_LINEAR_BACKEND"), env.get("HL_AUX_KERNELS"), env.get("HL_AUX_FUSION"))
        )
        assert env["VLLM_CACHE_ROOT"].endswith(f"cache-{p}/vllm")
        tps = {int(c): 100.0 * int(c) * factor[p] for c in args["--concurrency"].split(",")}
        with open(args["--out"], "w") as f:
            startup = {"off": 40.0, "on": 50.0, "gemm": 44.0, "aux": 48.0, "fused": 52.0}[p]
            json.dump(_run(p, -1, tps, startup), f)
        return 0

    plugins = ["off", "on", "gemm", "aux", "fused"]
    report = e2e.run_e2e(
        model="qwen3-1.7b",
        model_config=load_model_config("qwen3-1.7b"),
        fmt="fp8_dynamic",
        layers=2,
        options=e2e.E2EOptions(concurrency=(1, 4)),
        output=tmp_path,
        plugins=plugins,
        launcher=launcher,
    )
    first = [
        ("off", None, None, None),
        ("on", "helion", None, None),
        ("gemm", "helion", "none", None),
        ("aux", "helion", "all", None),
        ("fused", "helion", None, "1"),
    ]
    assert launched == first + first[::-1]  # round 1 in reverse
    assert not report.failed and [r["plugin"] for r in report.runs] == plugins + plugins[::-1]
    payload = json.loads((tmp_path / "e2e-qwen3-1.7b-fp8_dynamic.json").read_text())
    assert payload["metadata"]["plugins"] == plugins
    row = payload["summary"]["rows"][1]
    assert row["concurrency"] == 4 and row["tokens_per_s_fused"] == 600.0 and row["speedup_fused"] == 1.5
    assert row["speedup_gemm"] == 1.25 and row["speedup"] == pytest.approx(1.1)
    assert row["tokens_per_s_aux"] == pytest.approx(420.0) and row["speedup_aux"] == pytest.approx(1.05)
    assert payload["summary"]["startup"]["delta_aux_cold_s"] == 8.0
    assert payload["summary"]["startup"]["delta_fused_cold_s"] == 12.0
    lines = (tmp_path / "e2e-qwen3-1.7b-fp8_dynamic.csv").read_text().splitlines()
    assert lines[0].split(",") == list(e2e.SUMMARY_FIELDS)
    cells = dict(zip(lines[0].split(","), lines[2].split(","), strict=True))
    assert float(cells["tokens_per_s_fused"]) == 600.0 and float(cells["speedup_fused"]) == 1.5
    md = (tmp_path / "e2e-qwen3-1.7b-fp8_dynamic.md").read_text()
    assert "| 4 | 400 | 440 | 1.100 |" in md and "| 500 | 1.250 |" in md and "| 600 | 1.500 |" in md
    assert md.index("| 500 | 1.250 |") < md.index("| 420 | 1.050 |") < md.index("| 600 | 1.500 |")


def test_repeat_spread_flags_noisy_rows():
    """Spread = slowest / fastest timed generate - 1 over all rounds of a setting; above 10 % the
    markdown says that row's speedup is noise."""

    def run(plugin, rnd, full):
        t = {"tokens_per_s": 128 / sorted(full)[len(full) // 2], "tpot_ms": 3.0, "ttft_ms": 20.0}
        return {"plugin": plugin, "round": rnd, "startup_s": 60.0, "throughput": {"1": {**t, "samples_full_s": full}, "8": {**t, "samples_full_s": [0.5, 0.505]}}}  # fmt: skip

    runs = [run("off", 0, [0.30, 0.40, 0.41]), run("on", 0, [0.30, 0.31]), run("on", 1, [0.32, 0.30])]
    s = e2e.summarize(runs)
    r1, r8 = s["rows"]
    assert r1["spread_pct_off"] == pytest.approx(100 * (0.41 / 0.30 - 1))
    assert r1["spread_pct_on"] == pytest.approx(100 * (0.32 / 0.30 - 1))  # both rounds' samples
    assert r8["spread_pct_off"] == pytest.approx(1.0)
    md = e2e.summary_markdown({"model": "m", "format": "fp8_dynamic"}, s)
    assert "vLLM 37 / 1; hlvllm 7 / 1." in md
    assert "**Noisy (> 10 %): vLLM at concurrency 1: a speedup there is noise**" in md
    quiet = e2e.summary_markdown({}, e2e.summarize(runs[1:2]))
    assert "Noisy" not in quiet and e2e.summary._spread_pct([0.3]) is None
    # the one-token generates (TTFT) get their own spread; a stall there is called out
    runs[0]["throughput"]["8"]["samples_one_s"] = [0.04, 10.4, 0.05]
    runs[0]["throughput"]["1"]["samples_one_s"] = [0.02, 0.03]
    s = e2e.summarize(runs)
    r1, r8 = s["rows"]
    assert r8["ttft_spread_pct_off"] == pytest.approx(100 * (10.4 / 0.04 - 1))
    assert r1["ttft_spread_pct_off"] == pytest.approx(50.0) and r8["spread_pct_off"] == pytest.approx(1.0)
    md = e2e.summary_markdown({}, s)
    assert "Of the one-token generates (TTFT): vLLM 50 / 25900. A TTFT spread over 200 % is a stall" in md
    runs[0]["throughput"]["8"]["samples_one_s"] = [0.04, 0.05]
    assert "is a stall" not in e2e.summary_markdown({}, e2e.summarize(runs))
