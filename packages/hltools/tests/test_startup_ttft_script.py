"""lab/scripts/startup_ttft.py on the CPU with fake engines (``_start`` replaced): the TTFT pairs
run in ABBA order, the prompt lengths interleave, ``--gap`` sleeps between pairs, and the written
JSON holds each length's samples with their times and the pair ratios computed from them."""

import itertools
import json
import os

import pytest


@pytest.fixture(scope="module")
def script(lab_script):
    return lab_script("startup_ttft")


@pytest.fixture
def restored_environ():
    """main() sets the engine's environment variables in os.environ: put it back afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


class FakeEngine:
    """``generate`` records (engine, prompt length); its latency is what ``times`` says per length."""

    def __init__(self, name, calls, clock, times):
        self.name, self.calls, self.clock, self.times = name, calls, clock, times

    def generate(self, prompts, sp, use_tqdm=False):
        n = len(prompts[0]["prompt_token_ids"])
        self.calls.append((self.name, n))
        self.clock[0] += self.times[self.name][n]


def test_pairs_interleave_lengths_in_abba_order_with_gaps(script, monkeypatch, tmp_path, restored_environ):
    calls, clock, sleeps = [], [0.0], []
    times = {"off": {8: 0.010, 16: 0.020}, "on": {8: 0.011, 16: 0.018}}  # on/off 1.1 and 0.9
    monkeypatch.setattr(script, "_start", lambda s, *a: (FakeEngine(s, calls, clock, times), 1.0))
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])

    def fake_sleep(s):
        sleeps.append(s)
        clock[0] += s

    monkeypatch.setattr(script.time, "sleep", fake_sleep)
    argv = ["startup_ttft.py", "--model", "qwen3-1.7b", "--out", str(tmp_path), "--repeats", "3"]
    monkeypatch.setattr(script.sys, "argv", argv + ["--lens", "8,16", "--settle", "5", "--gap", "2"])
    assert script.main() == 0

    warmup = [("off", 8), ("on", 8)] * 2 + [("off", 16), ("on", 16)] * 2
    timed = [("off", 8), ("on", 8), ("off", 16), ("on", 16)]  # pair 0
    timed += [("on", 8), ("off", 8), ("on", 16), ("off", 16)]  # pair 1: the other engine first
    timed += [("off", 8), ("on", 8), ("off", 16), ("on", 16)]
    assert calls == warmup + timed
    assert sleeps == [5, 2, 2, 2]  # settle, then one gap after each pair

    res = json.loads((tmp_path / "startup_ttft.json").read_text())
    assert res["gap_s"] == 2
    t8, t16 = res["ttft"]["8"], res["ttft"]["16"]
    assert t8["samples_ms"]["off"] == pytest.approx([10.0] * 3)
    assert t8["samples_ms"]["on"] == pytest.approx([11.0] * 3)
    assert t8["pair_ratio_median"] == pytest.approx(1.1)
    assert t16["pair_ratio_median"] == pytest.approx(0.9)
    # times from the settle's end: the warm-up (0.118 s of generates), pair 0 (0.059 s), one 2 s gap,
    # then pair 1, where "on" goes first
    assert t8["t_s"]["off"][0] == pytest.approx(0.118)
    assert t8["t_s"]["on"][1] == pytest.approx(2.177)
    assert t8["t_s"]["off"][1] == pytest.approx(2.188)


def test_pin_sets_give_engines_equal_disjoint_whole_cores(script):
    smt = [[i, i + 8] for i in range(8)]  # SMT siblings numbered i and i + 8
    sets = script.pin_sets(list(range(16)), ["off", "on"], cores=smt)
    assert sets["driver"] == {0, 8}
    assert sets["off"] == {1, 2, 3, 9, 10, 11} and sets["on"] == {4, 5, 6, 12, 13, 14}  # core 7 spare
    single = script.pin_sets(list(range(17)), ["off", "on"], cores=[[i] for i in range(17)])
    assert len(single["off"]) == len(single["on"]) == 7
    assert not single["off"] & single["on"] and not (single["off"] | single["on"]) & single["driver"]
    with pytest.raises(ValueError, match=r"two CPUs per engine.*\[0, 1, 2, 3, 4\]"):
        script.pin_sets(list(range(5)), ["off", "on"], cores=[[i] for i in range(5)])


def test_pin_starts_each_engine_on_its_set_and_moves_driver_threads_back(
    script, monkeypatch, tmp_path, restored_environ
):
    calls, clock, events = [], [0.0], []
    times = {"off": {8: 0.010}, "on": {8: 0.011}}
    affinity = {0: set(range(16))}  # what the main thread (pid 0) has now

    def fake_setaffinity(pid, cpus):
        events.append((pid, frozenset(cpus)))
        if pid == 0:
            affinity[0] = set(cpus)

    def fake_start(s, *a):
        events.append(("start", s, frozenset(affinity[0])))
        return FakeEngine(s, calls, clock, times), 1.0

    monkeypatch.setattr(script.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(script.os, "sched_setaffinity", fake_setaffinity)
    listdir = os.listdir  # the driver's threads: 101 and 102

    monkeypatch.setattr(
        script.os, "listdir", lambda p: ["101", "102"] if p == "/proc/self/task" else listdir(p)
    )
    monkeypatch.setattr(script, "_cores", lambda cpus: [[c] for c in sorted(cpus)])
    monkeypatch.setattr(script, "_start", fake_start)
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(script.time, "sleep", lambda s: None)
    argv = ["startup_ttft.py", "--model", "qwen3-1.7b", "--out", str(tmp_path), "--repeats", "1"]
    monkeypatch.setattr(script.sys, "argv", argv + ["--lens", "8", "--settle", "0", "--pin"])
    assert script.main() == 0

    driver, off, on = frozenset({0, 1}), frozenset(range(2, 9)), frozenset(range(9, 16))
    assert events == [
        (0, off), ("start", "off", off), (101, driver), (102, driver),
        (0, on), ("start", "on", on), (101, driver), (102, driver),
    ]  # fmt: skip
    res = json.loads((tmp_path / "startup_ttft.json").read_text())
    assert res["pin"] == {"driver": [0, 1], "off": list(range(2, 9)), "on": list(range(9, 16))}


def test_three_engines_take_every_place_and_compare_with_the_first(
    script, monkeypatch, tmp_path, restored_environ
):
    """--order off,ctl,on: the A/A control and the measurement in one run. Each round runs the
    engines in the next of their six orders; ctl and on are each compared with off per round;
    only ``on*`` loads the plugin; the memory is split three ways."""
    calls, clock = [], [0.0]
    times = {"off": {8: 0.010}, "ctl": {8: 0.0105}, "on": {8: 0.012}}  # ctl/off 1.05, on/off 1.2
    started = {}

    def fake_start(s, model_dir, cache, on_env, args):
        started[s] = args.memory
        return FakeEngine(s, calls, clock, times), {"off": 50.0, "ctl": 51.0, "on": 53.5}[s]

    monkeypatch.setattr(script, "_start", fake_start)
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(script.time, "sleep", lambda s: None)
    argv = ["startup_ttft.py", "--model", "qwen3-1.7b", "--out", str(tmp_path), "--repeats", "6"]
    monkeypatch.setattr(script.sys, "argv", argv + ["--lens", "8", "--settle", "0", "--order", "off,ctl,on"])
    assert script.main() == 0

    timed = calls[6:]  # after two warm-up rounds of three
    rounds = [tuple(s for s, _ in timed[3 * i : 3 * i + 3]) for i in range(6)]
    assert sorted(rounds) == sorted(itertools.permutations(["off", "ctl", "on"]))
    for s in ("off", "ctl", "on"):  # every engine in every place, twice in six rounds
        assert sorted(r.index(s) for r in rounds) == [0, 0, 1, 1, 2, 2]
    assert started == {"off": 0.28, "ctl": 0.28, "on": 0.28}
    res = json.loads((tmp_path / "startup_ttft.json").read_text())
    t8 = res["ttft"]["8"]
    assert t8["vs"]["ctl"]["pair_ratio_median"] == pytest.approx(1.05)
    assert t8["vs"]["on"]["pair_ratio_median"] == pytest.approx(1.2)
    assert t8["pair_ratio_median"] == pytest.approx(1.2)  # the last against the first
    assert res["cold_s"] == {"off": 50.0, "ctl": 51.0, "on": 53.5}


def test_order_needs_distinct_names(script, monkeypatch, tmp_path, restored_environ):
    argv = ["startup_ttft.py", "--out", str(tmp_path), "--order", "off,off"]
    monkeypatch.setattr(script.sys, "argv", argv)
    with pytest.raises(SystemExit):
        script.main()


def test_round_orders(script):
    assert script.round_orders(["off", "on"]) == [["off", "on"], ["on", "off"]]
    assert len(script.round_orders(["a", "b", "c"])) == 6


@pytest.mark.parametrize("aa", [False, True])
def test_only_engines_named_on_load_the_plugin(script, monkeypatch, tmp_path, restored_environ, aa):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=lambda **kw: object()))
    args = types.SimpleNamespace(aa=aa, lens=[8], memory=0.28)
    env = {}
    for s in ("off", "ctl", "on", "on2"):
        script._start(s, tmp_path, tmp_path / s, {"HL_X": "1"}, args)
        env[s] = (os.environ.get("VLLM_PLUGINS"), os.environ.get("HL_LINEAR_BACKEND"), os.environ.get("HL_X"))
    plugin_free = ("", None, None)
    assert env["off"] == env["ctl"] == plugin_free
    assert env["on"] == env["on2"] == (plugin_free if aa else (None, "helion", "1"))


def test_cache_of_starts_an_engine_on_an_earlier_engines_caches(
    script, monkeypatch, tmp_path, restored_environ
):
    calls, clock, caches = [], [0.0], {}
    times = {"off": {8: 0.010}, "ctl": {8: 0.010}, "on": {8: 0.011}}

    def fake_start(s, model_dir, cache, on_env, args):
        caches[s] = cache
        return FakeEngine(s, calls, clock, times), 1.0

    monkeypatch.setattr(script, "_start", fake_start)
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(script.time, "sleep", lambda s: None)
    (tmp_path / "cache-off").mkdir()
    (tmp_path / "cache-off" / "stale").write_text("x")  # an earlier run's: emptied once, for off
    argv = ["startup_ttft.py", "--out", str(tmp_path), "--repeats", "1", "--lens", "8", "--settle", "0"]
    monkeypatch.setattr(script.sys, "argv", argv + ["--order", "off,ctl,on", "--cache-of", "ctl=off"])
    assert script.main() == 0
    assert caches["ctl"] == caches["off"] == tmp_path / "cache-off" != caches["on"]
    assert not (tmp_path / "cache-off" / "stale").exists()
    assert json.loads((tmp_path / "startup_ttft.json").read_text())["cache_of"] == {"ctl": "off"}


@pytest.mark.parametrize("pair", ["off=ctl", "on=off", "ctl=nope"])
def test_cache_of_needs_an_earlier_engine_of_the_same_kind(
    script, monkeypatch, tmp_path, restored_environ, pair
):
    argv = ["startup_ttft.py", "--out", str(tmp_path), "--order", "off,ctl,on", "--cache-of", pair]
    monkeypatch.setattr(script.sys, "argv", argv)
    with pytest.raises(SystemExit):
        script.main()
