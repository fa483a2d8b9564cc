"""hlcore.timing.time_graph on the CPU, its CUDA calls replaced by fakes: an idle GPU (the first timing
of a process, or one more than IDLE_S after the last) gets SPIN_UP_S of extra replays before the timed
ones, a timing right after another gets only ``warmup``; the result is the median per call of the
timed replays."""

import contextlib

import pytest
import torch

from hlcore import timing


class FakeGraph:
    def __init__(self, log):
        self.log = log

    def replay(self):
        self.log.append("replay")


class FakeStream:
    def wait_stream(self, other):
        pass


class FakeEvent:
    """elapsed_time: 1 ms more for each timed replay (the n-th pair reads n ms)."""

    count = 0

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        FakeEvent.count += 1
        return float(FakeEvent.count)


@pytest.fixture
def fake_cuda(monkeypatch):
    log, clock = [], [100.0]
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: FakeGraph(log))
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph", lambda g, stream=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    FakeEvent.count = 0

    def monotonic():  # every read advances 1 ms: a spin of 0.2 s ends after ~200 reads
        clock[0] += 0.001
        return clock[0]

    monkeypatch.setattr(timing.time, "monotonic", monotonic)
    monkeypatch.setattr(timing, "_last_end", None)
    return log, clock


def test_spin_up_seconds():
    assert timing.spin_up_seconds(5.0, None) == timing.SPIN_UP_S  # the first timing of a process
    assert timing.spin_up_seconds(5.0, 4.5) == 0.0  # right after another
    assert timing.spin_up_seconds(5.0, 5.0 - timing.IDLE_S - 0.01) == timing.SPIN_UP_S
    assert timing.spin_up_seconds(5.0, 3.0, idle_s=3.0, spin_s=0.5) == 0.0
    assert timing.spin_up_seconds(5.0, 1.0, idle_s=3.0, spin_s=0.5) == 0.5


def test_time_graph_spins_up_an_idle_gpu_only(fake_cuda):
    log, clock = fake_cuda
    calls = [lambda: None, lambda: None]

    first = timing.time_graph(calls, repeats=5, warmup=3)
    replays_first = log.count("replay")
    # 3 warm-up, 0.2 s of spin in batches of 8 (one clock read per batch, 1 ms each), 5 timed
    assert replays_first >= 3 + 8 * 100 + 5
    # the timed replays read 1..5 ms for 2 calls: median 3 ms / 2 = 1500 us
    assert first.median_us == pytest.approx(1500.0)

    log.clear()
    FakeEvent.count = 0
    second = timing.time_graph(calls, repeats=5, warmup=3)  # right after: no spin
    assert log.count("replay") == 3 + 5
    assert second.median_us == pytest.approx(1500.0)

    log.clear()
    clock[0] += timing.IDLE_S + 1.0  # the GPU left idle (a precompile) before the next timing
    timing.time_graph(calls, repeats=5, warmup=3)
    assert log.count("replay") >= 3 + 8 * 100 + 5


def test_steadiest_takes_a_disturbed_timing_again_and_keeps_the_narrowest():
    def timer_of(*timings):
        it = iter(timings)
        seen = []

        def timer(calls):
            seen.append(calls)
            return next(it)

        return timer, seen

    steady = timing.Timing(10.0, 9.95, 10.1)
    timer, seen = timer_of(steady)
    assert timing.steadiest(timer, ["c"]) == (steady, 1) and seen == [["c"]]
    # disturbed (spread 1.097), then steady: the second is kept
    disturbed, calm = timing.Timing(45.8, 43.5, 47.7), timing.Timing(34.7, 34.6, 35.1)
    timer, seen = timer_of(disturbed, calm)
    assert timing.steadiest(timer, ["c"]) == (calm, 2) and len(seen) == 2
    # disturbed every time: 1 + RETIME_TRIES timings, the narrowest kept
    wide = [timing.Timing(50.0, 40.0, 60.0), timing.Timing(40.0, 38.0, 44.0), timing.Timing(55.0, 40.0, 70.0)]
    assert timing.RETIME_TRIES == 2
    timer, seen = timer_of(*wide)
    assert timing.steadiest(timer, ["c"]) == (wide[1], 3) and len(seen) == 3
    # the threshold is a parameter; p20 of 0 counts as disturbed
    assert timing.steadiest(timer_of(disturbed)[0], [], max_spread=1.2) == (disturbed, 1)
    assert timing.spread(timing.Timing(1.0, 0.0, 2.0)) == float("inf")
    assert timing.spread(calm) == pytest.approx(35.1 / 34.6)
