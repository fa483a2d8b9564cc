"""The numerics check of ``bench e2e`` without a GPU: |Δlogprob| against the no-plugin run by hand,
the 2x rule against the control (failing and passing), the wording without a usable control, the
exit code of ``bench e2e`` / ``bench merge-e2e`` on FAIL, and merges and reports keeping the logprobs."""

import json

import pytest
from typer.testing import CliRunner

from hltools import e2e, options
from hltools.cli import app

runner = CliRunner()
STEM = "e2e-qwen3-1.7b-fp8_dynamic"
OFF = [[-1.0, -2.0], [-3.0, -4.0]]  # 2 prompts x 2 scored tokens
KERNELS = {
    "off": "CutlassFP8ScaledMMLinearKernel",
    "control": "ChannelWiseTorchFP8ScaledMMLinearKernel",
    "on": "HelionFP8ScaledMMLinearKernel",
}


def _run(plugin, rnd, logprobs, seed=3, kernel=None):
    kernel = kernel or KERNELS.get(plugin, "HelionFP8ScaledMMLinearKernel")
    return {
        "plugin": plugin, "round": rnd, "startup_s": 1.0, "throughput": {}, "kernels": {"qkv_proj": kernel},
        "numerics": {"prompts": len(logprobs), "tokens": len(logprobs[0]), "seed": seed, "logprobs": logprobs},
    }  # fmt: skip


def _flat(text):
    return " ".join(text.split())


def test_abs_deltas_max_and_mean_by_hand():
    runs = [
        _run("off", 0, OFF),
        _run("off", 1, [[-9.0, -9.0], [-9.0, -9.0]]),  # not the reference, not scored: off is the yardstick
        _run("on", 0, [[-1.1, -2.0], [-3.0, -3.7]]),  # |Δ| 0.1, 0, 0, 0.3
        _run("on", 1, [[-1.0, -2.2], [-3.0, -4.0]]),  # |Δ| 0, 0.2, 0, 0
        _run("on", 2, [[-5.0, -5.0], [-5.0, -5.0]], seed=4),  # other sequences: left out
        _run("control", 0, [[-1.05, -2.0], [-3.0, -4.1]]),  # |Δ| 0.05, 0, 0, 0.1
    ]
    assert e2e.abs_deltas([[1.0, 2.0]], [[1.5, 1.0]]) == [0.5, 1.0]
    with pytest.raises(ValueError, match="different numbers"):
        e2e.abs_deltas([[1.0, 2.0]], [[1.0]])
    n = e2e.summarize(runs)["numerics"]
    assert n["reference"] == "off-r0" and list(n["settings"]) == ["on", "control"]
    on, control = n["settings"]["on"], n["settings"]["control"]
    assert on["max"] == pytest.approx(0.3) and on["mean"] == pytest.approx((0.1 + 0.3 + 0.2) / 8)
    assert on["positions"] == 8 and on["runs"] == 2
    assert control["max"] == pytest.approx(0.1) and control["mean"] == pytest.approx(0.15 / 4)
    assert n["ratios"]["on"]["max"] == pytest.approx(3.0) and n["ratios"]["on"]["mean"] == pytest.approx(2.0)
    assert n["ok"] is False and n["control_problem"] is None  # max 3x > 2x: fails on max alone
    assert n["off_kernels"] == ["CutlassFP8ScaledMMLinearKernel"]
    assert n["control_kernels"] == ["ChannelWiseTorchFP8ScaledMMLinearKernel"]


@pytest.mark.parametrize(
    "on, ok",
    [
        ([[-1.2, -2.0], [-3.0, -4.0]], True),  # max 0.2 = 2x (the limit itself passes), mean 0.05 = 1.33x
        ([[-1.1, -2.1], [-3.1, -4.1]], False),  # max 0.1 = 1x but mean 0.1 = 2.67x: fails on mean
        ([[-1.21, -2.0], [-3.0, -4.0]], False),  # max 0.21 = 2.1x
        ([[-1.0, -2.0], [-3.0, -4.0001]], True),  # 0.001x
    ],
)
def test_the_2x_rule_on_max_and_mean(on, ok):
    control = [[-1.1, -2.0], [-3.0, -4.05]]  # max 0.1, mean 0.0375
    n = e2e.summarize([_run("off", 0, OFF), _run("on", 0, on), _run("control", 0, control)])["numerics"]
    assert n["ok"] is ok
    line = e2e.numerics_line(n)
    assert line.endswith("(limit 2x): ok." if ok else "(limit 2x): **FAIL**.")


def test_numerics_line_reads_plugin_and_control_side_by_side():
    runs = [
        _run("off", 0, OFF),
        _run("on", 0, [[-1.12, -2.0], [-3.0, -4.0]]),
        _run("aux", 0, [[-1.0, -2.0], [-3.0, -4.5]]),
        _run("control", 0, [[-1.1, -2.0], [-3.0, -4.0]]),
    ]
    line = e2e.numerics_line(e2e.summarize(runs)["numerics"])
    assert line == (
        "Numerics vs vLLM (2 prompts x 2 tokens, teacher-forced logprobs, |Δlogprob| against off-r0): "
        "plugin max 0.12 mean 0.03; GEMM+aux max 0.5 mean 0.125; control (torch._scaled_mm) max 0.1 "
        "mean 0.025; plugin/control 1.2x max, 1.2x mean; GEMM+aux/control 5x max, 5x mean "
        "(limit 2x): **FAIL**."
    )


def test_without_a_usable_control_there_is_no_verdict():
    on = _run("on", 0, [[-1.1, -2.0], [-3.0, -4.0]])
    n = e2e.summarize([_run("off", 0, OFF), on])["numerics"]
    assert n["ok"] is None and n["ratios"] == {} and n["control_problem"] == "no control ran"
    assert e2e.numerics_line(n) == (
        "Numerics vs vLLM (2 prompts x 2 tokens, teacher-forced logprobs, |Δlogprob| against off-r0): "
        "plugin max 0.1 mean 0.025; no control ran: no pass/fail."
    )
    same = _run(
        "control", 0, [[-1.01, -2.0], [-3.0, -4.0]], kernel=KERNELS["off"]
    )  # VLLM_DISABLED_KERNELS ignored
    n = e2e.summarize([_run("off", 0, OFF), on, same])["numerics"]
    assert n[
        "ok"
    ] is None and "the control ran vLLM's own first-choice kernels: no pass/fail." in e2e.numerics_line(n)
    bitwise = _run("control", 0, OFF)
    n = e2e.summarize([_run("off", 0, OFF), on, bitwise])["numerics"]
    assert n[
        "ok"
    ] is None and "the control's logprobs equal vLLM's bitwise: no pass/fail." in e2e.numerics_line(n)
    only_control = e2e.summarize([_run("off", 0, OFF), _run("control", 0, OFF[::-1])])["numerics"]
    assert only_control["ok"] is None and "no plugin setting ran: no pass/fail." in e2e.numerics_line(
        only_control
    )
    assert e2e.summarize([on, _run("control", 0, OFF)])["numerics"] is None  # no off run: nothing to compare


def test_a_plugin_bitwise_equal_to_vllm_gets_no_verdict():
    """Logprobs equal to vLLM's bitwise mean that no scored token ran a Helion kernel (the 2026-12-02
    H200 run scored one 264-token batch, above max_helion_size): nothing was judged, so no pass."""
    control = _run("control", 0, [[-1.1, -2.0], [-3.0, -4.05]])
    n = e2e.summarize([_run("off", 0, OFF), _run("on", 0, OFF), control])["numerics"]
    assert n["ok"] is None and n["ratios"] == {} and n["control_problem"] is None
    assert n["plugin_problem"] == "plugin equal vLLM's logprobs bitwise: no scored token ran a Helion kernel"
    assert e2e.numerics_line(n).endswith(
        "; plugin equal vLLM's logprobs bitwise: no scored token ran a Helion kernel: no pass/fail."
    )
    moved = _run("on", 0, [[-1.0, -2.0], [-3.0, -4.0001]])
    assert e2e.summarize([_run("off", 0, OFF), moved, control])["numerics"]["plugin_problem"] is None


def test_the_line_names_the_scored_lengths_and_other_lengths_are_not_compared():
    def run(plugin, logprobs, lengths):
        r = _run(plugin, 0, logprobs)
        r["numerics"].update(lengths=lengths, prompts=2, tokens=sum(n - 1 for n in lengths))
        return r

    off, on = run("off", [[-1.0], [-3.0, -4.0]], [2, 3]), run("on", [[-1.1], [-3.0, -4.0]], [2, 3])
    control = run("control", [[-1.2], [-3.0, -4.0]], [2, 3])
    n = e2e.summarize([off, on, control, run("on", [[-9.0, -9.0], [-9.0]], [3, 2])])["numerics"]
    assert n["settings"]["on"]["runs"] == 1 and n["settings"]["on"]["positions"] == 3  # [3, 2]: left out
    assert n["lengths"] == [2, 3] and n["ok"] is True
    assert e2e.numerics_line(n).startswith(
        "Numerics vs vLLM (2 prompts of 2-3 tokens alone, 3 scored, teacher-forced logprobs, "
    )


def test_numerics_replace_the_greedy_agreement_line_but_not_in_older_results():
    def greedy(run, tokens):
        return {**run, "greedy": tokens}

    runs = [
        greedy(_run("off", 0, OFF), [[1, 2]]),
        greedy(_run("on", 0, [[-1.1, -2.0], [-3.0, -4.0]]), [[1, 3]]),
        greedy(_run("on", 1, OFF), [[1, 3]]),
    ]
    lines = e2e.numerics_lines(e2e.summarize(runs))
    assert len(lines) == 2 and lines[0].startswith("Numerics vs vLLM") and "no control ran" in lines[0]
    assert lines[1] == "Greedy agreement of each warm restart with its setting's cold run: on-r1: 1/1."
    old = [{k: v for k, v in r.items() if k != "numerics"} for r in runs]  # a result from before the check
    s = e2e.summarize(old)
    assert s["numerics"] is None
    assert (
        e2e.numerics_lines(s)[0]
        == "Greedy agreement with the no-plugin run (4 prompts x 16 tokens): on-r0: 0/1, on-r1: 0/1."
    )


def test_control_is_no_plugin_with_vllms_next_kernel_and_untimed(tmp_path):
    env = e2e.worker_env(
        "control", tmp_path / "c", {"HL_LINEAR_BACKEND": "helion", "VLLM_DISABLED_KERNELS": "X"}
    )
    assert env["VLLM_PLUGINS"] == "" and "HL_LINEAR_BACKEND" not in env
    assert env["VLLM_DISABLED_KERNELS"].split(",") == [
        "CutlassFP8ScaledMMLinearKernel", "CutlassInt8ScaledMMLinearKernel", "DeepGemmFp8BlockScaledMMKernel",
    ]  # fmt: skip
    assert "control" not in e2e.HELION_PLUGINS and "control" not in e2e.TIMED_PLUGINS
    specs = e2e.plan_runs(tmp_path, ["control", "off", "on"], rounds=3)
    assert [s.name for s in specs] == ["control-r0", "off-r0", "on-r0", "on-r1", "off-r1", "off-r2", "on-r2"]
    # an untimed control adds no row and no table column, only the numerics
    s = e2e.summarize(
        [
            {
                **_run("off", 0, OFF),
                "throughput": {"1": {"tokens_per_s": 1.0, "tpot_ms": 1.0, "ttft_ms": 1.0}},
            },
            _run("control", 0, OFF),
        ]
    )
    assert [r["concurrency"] for r in s["rows"]] == [1] and "tokens_per_s_control" not in s["rows"][0]
    assert s["plugins"] == ["off", "control"]


# --- the commands, with fake engines ---------------------------------------------------------------


def _worker_result(plugin, concurrency, shift):
    """One engine: tokens/s, and logprobs of 8 prompts x 32 tokens, ``shift[plugin]`` away from off's
    at every position (so max = mean = the shift)."""
    throughput = {
        str(c): {"tokens_per_s": 100.0 * c, "tpot_ms": 10.0, "ttft_ms": 20.0, "samples_full_s": [1.0, 1.01],
                 "samples_one_s": [0.02, 0.02]}
        for c in concurrency
    }  # fmt: skip
    base = [[-0.5 - 0.01 * (i + j) for j in range(32)] for i in range(8)]
    return {
        "plugin": plugin, "startup_s": 60.0, "gpu": "H200", "kernels": {"qkv_proj": KERNELS[plugin]},
        "throughput": {} if plugin == "control" else throughput, "ttft": {}, "greedy": [[1, 2]],
        "numerics": {"prompts": 8, "tokens": 32, "seed": 3,
                     "logprobs": [[x - shift[plugin] for x in row] for row in base]},
    }  # fmt: skip


def _fake_engines(monkeypatch, shift):
    real = e2e.run_e2e

    def launcher(cmd, env, log, timeout):
        args = dict(zip(cmd[4::2], cmd[5::2], strict=True))
        concurrency = [int(c) for c in args["--concurrency"].split(",")]
        with open(args["--out"], "w") as f:
            json.dump(_worker_result(args["--plugin"], concurrency, shift), f)
        return 0

    monkeypatch.setattr(e2e, "run_e2e", lambda **kw: real(**kw, launcher=launcher))
    monkeypatch.setattr(options, "cuda_available", lambda: True)
    monkeypatch.setattr(options, "cuda_device_count", lambda: 1)


def _bench(tmp_path, *extra):
    args = ["bench", "e2e", "--model", "qwen3-1.7b", "--layers", "2", "--concurrency", "1", "--rounds", "1"]
    return runner.invoke(app, [*args, *extra, "--output", str(tmp_path)], env={"COLUMNS": "300"})


@pytest.mark.parametrize("on_shift, code", [(0.015, 0), (0.025, 1)])
def test_bench_e2e_exits_1_on_a_failed_numerics_check_after_writing(monkeypatch, tmp_path, on_shift, code):
    _fake_engines(monkeypatch, {"off": 0.0, "on": on_shift, "control": 0.01})
    result = _bench(tmp_path)  # the default plugins: off, on, control
    assert result.exit_code == code, result.output
    md = (tmp_path / f"{STEM}.md").read_text()
    payload = json.loads((tmp_path / f"{STEM}.json").read_text())
    assert [r["plugin"] for r in payload["runs"]] == ["off", "on", "control"]
    assert payload["summary"]["numerics"]["ok"] is (code == 0)
    (line,) = [ln for ln in md.split("\n\n") if ln.startswith("Numerics vs vLLM")]
    verdict = "ok." if code == 0 else "**FAIL**."
    assert (
        f"plugin/control {on_shift / 0.01:.3g}x max, {on_shift / 0.01:.3g}x mean (limit 2x): {verdict}"
        in line
    )
    assert "control (torch._scaled_mm) max 0.01 mean 0.01" in line and "Greedy agreement with" not in md
    assert _flat(line.replace("**", "")) in _flat(result.output)  # the terminal shows the markdown's line
    assert ("numerics check FAILED" in result.output) is (code == 1)
    report = runner.invoke(app, ["bench", "report", str(tmp_path), "--no-plots"], env={"COLUMNS": "300"})
    assert report.exit_code == 0 and (tmp_path / "report" / f"{STEM}.md").read_text() == md


def test_bench_e2e_without_control_reports_the_plugin_alone(monkeypatch, tmp_path):
    _fake_engines(monkeypatch, {"off": 0.0, "on": 0.5, "control": 0.01})
    result = _bench(tmp_path, "--plugins", "off,on")
    assert result.exit_code == 0, result.output  # no control: no verdict, no failure
    assert "plugin max 0.5 mean 0.5; no control ran: no pass/fail." in _flat(result.output)


@pytest.mark.parametrize("on_shift, code", [(0.015, 0), (0.025, 1)])
def test_merge_e2e_keeps_the_logprobs_and_judges_the_joined_runs(monkeypatch, tmp_path, on_shift, code):
    _fake_engines(monkeypatch, {"off": 0.0, "on": on_shift, "control": 0.01})
    parts = []
    for plugins in ("off,on", "control"):  # e.g. two device calls
        out = tmp_path / plugins.replace(",", "-")
        assert _bench(out, "--plugins", plugins).exit_code == 0  # neither part alone can fail
        parts.append(str(out / f"{STEM}.json"))
    merged = tmp_path / "merged"
    result = runner.invoke(app, ["bench", "merge-e2e", *parts, "--output", str(merged), "--no-plots"])
    assert result.exit_code == code, result.output
    payload = json.loads((merged / f"{STEM}.json").read_text())
    by = {r["plugin"]: r for r in payload["runs"]}
    assert set(by) == {"off", "on", "control"} and len(by["on"]["numerics"]["logprobs"]) == 8
    first = json.loads((tmp_path / "off-on" / f"{STEM}.json").read_text())["runs"]
    assert by["on"]["numerics"] == first[1]["numerics"]  # carried unchanged
    n = payload["summary"]["numerics"]
    assert n["settings"]["on"]["max"] == pytest.approx(on_shift) and n["ok"] is (code == 0)
    assert ("**FAIL**." in (merged / f"{STEM}.md").read_text()) is (code == 1)
