"""lab/scripts/startup_ttft.py on the CPU with fake engines (``_start`` replaced): the TTFT pairs
run in ABBA order, the prompt lengths interleave, ``--gap`` sleeps between pairs, and the written
JSON holds each length's samples with their times and the pair ratios computed from them."""

import contextlib
import itertools
import json
import os
import signal

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
    args = types.SimpleNamespace(aa=aa, lens=[8], memory=0.28, engine_times=False)
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


def test_rotate_lanes_cancels_a_cpu_sets_bias(script, monkeypatch, tmp_path, restored_environ):
    """--pin --rotate-lanes with three engines, 18 rounds: after each cycle of six orders the sets
    rotate by one, so each engine runs six rounds on each set. The fake TTFT is the set's time (lane
    bias: 10 / 11 / 12 ms) times the engine's own factor (on 1.05, ctl 1.0): the lane-balanced
    ratio recovers 1.05 and 1.0, while the engines' plain medians carry the bias of where they
    started; each lane's median is its own time."""
    lane_ms = {}  # CPU set -> ms
    factor = {"off": 1.0, "ctl": 1.0, "on": 1.05}
    where = {}  # pid -> CPU set now
    moves = []

    class LaneEngine:
        def __init__(self, name, pid):
            self.name, self.pid = name, pid

        def generate(self, prompts, sp, use_tqdm=False):
            clock[0] += lane_ms[where[self.pid]] * factor[self.name] / 1e3

    clock, pid_of = [0.0], {"off": 11, "ctl": 12, "on": 13}
    affinity = {0: set(range(16))}

    def fake_setaffinity(pid, cpus):
        if pid == 0:
            affinity[0] = set(cpus)

    def fake_start(s, *a):
        where[pid_of[s]] = frozenset(affinity[0])
        return LaneEngine(s, pid_of[s]), 1.0

    def fake_move(pid, cpus):
        where[pid] = frozenset(cpus)
        moves.append((pid, frozenset(cpus)))
        return 3

    monkeypatch.setattr(script.os, "sched_getaffinity", lambda pid: set(range(14)))
    monkeypatch.setattr(script.os, "sched_setaffinity", fake_setaffinity)
    monkeypatch.setattr(script, "_all_threads_to", lambda cpus: None)
    monkeypatch.setattr(script, "_cores", lambda cpus: [[c] for c in sorted(cpus)])
    monkeypatch.setattr(script, "_start", fake_start)
    monkeypatch.setattr(script, "engine_pids", lambda llm: [llm.pid])
    monkeypatch.setattr(script, "move_process_tree", fake_move)
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(script.time, "sleep", lambda s: None)
    sets = script.pin_sets(list(range(14)), ["off", "ctl", "on"], [[c] for c in range(14)])
    for name, ms in zip(["off", "ctl", "on"], [10.0, 11.0, 12.0], strict=True):
        lane_ms[frozenset(sets[name])] = ms
    argv = [
        "startup_ttft.py",
        "--model",
        "qwen3-1.7b",
        "--out",
        str(tmp_path),
        "--repeats",
        "18",
        "--lens",
        "8",
    ]
    argv += ["--settle", "0", "--pin", "--rotate-lanes", "--order", "off,ctl,on"]
    monkeypatch.setattr(script.sys, "argv", argv)
    assert script.main() == 0

    res = json.loads((tmp_path / "startup_ttft.json").read_text())
    assert res["rotation"]["steps"] == [0] * 6 + [1] * 6 + [2] * 6
    assert [m["round"] for m in res["rotation"]["moves"]] == [6, 12]
    assert moves[:3] == [
        (11, frozenset(sets["ctl"])),
        (12, frozenset(sets["on"])),
        (13, frozenset(sets["off"])),
    ]
    t8 = res["ttft"]["8"]
    assert t8["lane_balanced"]["on"] == pytest.approx(1.05)
    assert t8["lane_balanced"]["ctl"] == pytest.approx(1.0)
    assert t8["lane_median_ms"]["ctl"] == pytest.approx(11.0)
    assert t8["lane_median_ms"]["off"] == pytest.approx(10.0)  # 12 samples of 10 ms, 6 of 10.5
    # each engine ran six rounds on each lane
    for s in ("off", "ctl", "on"):
        lanes = [script.lane_of(["off", "ctl", "on"], s, k) for k in res["rotation"]["steps"]]
        assert sorted(lanes.count(lane) for lane in ("off", "ctl", "on")) == [6, 6, 6]


def test_rotate_lanes_needs_pin(script, monkeypatch, tmp_path, restored_environ):
    argv = ["startup_ttft.py", "--model", "qwen3-1.7b", "--out", str(tmp_path), "--rotate-lanes"]
    monkeypatch.setattr(script.sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        script.main()
    assert exc.value.code == 2


def test_lane_balanced_ratio_and_rotated_sets(script):
    names = ["a", "b"]
    sets = {"a": {0}, "b": {1}}
    assert script.rotated_sets(sets, names, 1) == {"a": {1}, "b": {0}}
    assert script.rotated_sets(sets, names, 2) == sets
    # state 0: b/a = 2, state 1: b/a = 0.5 -> geometric mean 1
    samples = {"a": [1.0, 1.0, 4.0, 4.0], "b": [2.0, 2.0, 2.0, 2.0]}
    assert script.lane_balanced_ratio(samples, [0, 0, 1, 1], "a", "b") == pytest.approx(1.0)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity calls")
def test_move_process_tree_moves_every_thread_of_a_child_and_grandchild(script, tmp_path):
    """A real child (two threads) with a grandchild: every thread of both ends on one CPU."""
    import subprocess
    import sys
    import time

    cpu = min(os.sched_getaffinity(0))
    code = (
        "import subprocess, threading, time, sys\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())
        time.sleep(0.2)
        moved = script.move_process_tree(child.pid, {cpu})
        tids = [(p, t) for p in (child.pid, grandchild) for t in os.listdir(f"/proc/{p}/task")]
        assert moved == len(tids) and len(tids) >= 3
        for _, tid in tids:
            assert os.sched_getaffinity(int(tid)) == {cpu}
    finally:
        if grandchild is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()


def test_engine_pids_follow_vllm_026s_attribute_chain(script):
    """LLM.llm_engine.engine_core.resources.engine_manager.processes (vLLM 0.26's V1 multiprocess
    client, CoreEngineProcManager); an in-process engine has none."""
    from types import SimpleNamespace as NS

    manager = NS(processes=[NS(pid=41), NS(pid=None), NS(pid=42)])
    llm = NS(llm_engine=NS(engine_core=NS(resources=NS(engine_manager=manager))))
    assert script.engine_pids(llm) == [41, 42]
    assert script.engine_pids(NS(llm_engine=NS(engine_core=NS()))) == []


def test_engine_times_read_the_prefill_inside_the_engine_core(
    script, monkeypatch, tmp_path, restored_environ
):
    """--engine-times: each generate's RequestOutput.metrics gives first_token_ts - scheduled_ts.
    The fake engines' wall time carries a client part that differs by engine (on +30 %), their
    engine-core prefill does not differ (4.0 ms both): the prefill table reads 1.0 where the TTFT
    table reads the client's difference."""
    from types import SimpleNamespace as NS

    clock = [0.0]

    class StatsEngine:
        def __init__(self, name):
            self.name = name

        def generate(self, prompts, sp, use_tqdm=False):
            n = len(prompts[0]["prompt_token_ids"])
            scheduled = clock[0] + 0.001
            clock[0] += {"off": 0.010, "on": 0.013}[self.name]
            return [NS(metrics=NS(scheduled_ts=scheduled, first_token_ts=scheduled + 0.004 * n / 8))]

    monkeypatch.setattr(script, "_start", lambda s, *a: (StatsEngine(s), 1.0))
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(script.time, "sleep", lambda s: None)
    argv = ["startup_ttft.py", "--model", "qwen3-1.7b", "--out", str(tmp_path), "--repeats", "4"]
    monkeypatch.setattr(script.sys, "argv", argv + ["--lens", "8,16", "--settle", "0", "--engine-times"])
    assert script.main() == 0
    res = json.loads((tmp_path / "startup_ttft.json").read_text())
    for n, ms in (("8", 4.0), ("16", 8.0)):
        e = res["ttft"][n]["engine_prefill"]
        assert e["median_ms"] == pytest.approx({"off": ms, "on": ms})
        assert e["vs"]["on"]["pair_ratio_median"] == pytest.approx(1.0)
        assert res["ttft"][n]["pair_ratio_median"] == pytest.approx(1.3)
        assert len(e["samples_ms"]["on"]) == 4


def test_engine_prefill_ms_needs_the_stats(script):
    from types import SimpleNamespace as NS

    assert script.engine_prefill_ms(
        [NS(metrics=NS(scheduled_ts=2.0, first_token_ts=2.005))]
    ) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="no engine-core timestamps"):
        script.engine_prefill_ms([NS(metrics=None)])


def test_ttft_warm_times_engines_started_again_on_their_caches(
    script, monkeypatch, tmp_path, restored_environ
):
    """--ttft-warm: every engine is stopped after its cold start, all before the first restarts, then
    each starts again on the same caches; the TTFT rounds run on the restarted engines only, and
    the start-up table gets their warm seconds (no second restart for --warm)."""
    calls, clock, events, caches = [], [0.0], [], {}
    times = {"off": {8: 0.010}, "ctl": {8: 0.010}, "on": {8: 0.011}}
    started = {}

    def fake_start(s, model_dir, cache, on_env, args):
        started[s] = started.get(s, 0) + 1
        caches.setdefault(s, []).append(cache)
        events.append(("start", s, started[s]))
        engine = FakeEngine(f"{s}#{started[s]}", calls, clock, {f"{s}#{started[s]}": times[s]})
        return engine, 10.0 * started[s]

    monkeypatch.setattr(script, "_start", fake_start)
    monkeypatch.setattr(script, "_stop", lambda llm: events.append(("stop", llm.name)))
    monkeypatch.setattr(script.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(script.time, "sleep", lambda s: None)
    argv = ["startup_ttft.py", "--out", str(tmp_path), "--repeats", "6", "--lens", "8", "--settle", "0"]
    argv += ["--order", "off,ctl,on", "--cache-of", "ctl=off", "--ttft-warm", "--warm"]
    monkeypatch.setattr(script.sys, "argv", argv)
    assert script.main() == 0

    cold = [("start", s, 1) for s in ("off", "ctl", "on")]
    stops = [("stop", f"{s}#1") for s in ("off", "ctl", "on")]
    warm = [("start", s, 2) for s in ("off", "ctl", "on")]
    assert events == cold + stops + warm  # --warm adds no restart after the rounds
    assert {name for name, _ in calls} == {"off#2", "ctl#2", "on#2"}
    assert all(c[0] == c[1] for c in caches.values())  # the same caches both times
    assert caches["ctl"][1] == caches["off"][1] != caches["on"][1]
    res = json.loads((tmp_path / "startup_ttft.json").read_text())
    assert res["cold_s"] == {"off": 10.0, "ctl": 10.0, "on": 10.0}
    assert res["warm_s"] == {"off": 20.0, "ctl": 20.0, "on": 20.0}
    assert res["ttft"]["8"]["vs"]["on"]["pair_ratio_median"] == pytest.approx(1.1)
