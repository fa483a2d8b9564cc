"""hltools.grid_search (``hltools autotune --effort grid``) without a GPU: the search space, one
compile of every candidate before any timing, one search per (format, N, K, M bucket), every M
re-checked with its heuristic config, with a fake timer (a cost model) and a recording compiler."""

import json
import math

import pytest
from typer.testing import CliRunner

from hlcore import config_store as cs
from hlcore import scaled_mm_config as smc
from hlcore.scaled_mm_config import check_scaled_mm_config, default_scaled_mm_config
from hltools import autotune as at
from hltools import bench_compile as bc
from hltools import grid_search as gs
from hltools.cli import app

runner = CliRunner()


def _key(c):
    return json.dumps(c, sort_keys=True)


@pytest.mark.parametrize("fmt", ["fp8_dynamic", "w8a8_int8", "block_fp8"])
@pytest.mark.parametrize("m", [8, 16, 32, 64])
def test_space_starts_with_the_heuristic_and_holds_only_valid_distinct_configs(fmt, m):
    n, k = 6144, 4096
    space = gs.search_space(fmt, m, n, k)
    heuristic = default_scaled_mm_config(m, n, k)
    assert space[0] == heuristic
    assert len({_key(c) for c in space}) == len(space)
    assert all(check_scaled_mm_config(c) is None for c in space)
    block_ks = {128} if fmt == "block_fp8" else {128, 256}
    # decode M: block_n 32 and swap_ab off left out (neighbours of the best instead); above, all
    block_ns = set(gs.BLOCK_N) | (set() if m <= gs.PRUNE_MAX_M else set(gs.PRUNED_BLOCK_N))
    assert {c["block_sizes"][0] for c in space} == {min(64, max(16, m))}
    assert {c["block_sizes"][1] for c in space} == block_ns and 32 not in gs.BLOCK_N
    assert {c["block_sizes"][2] for c in space} == block_ks
    assert {c["swap_ab"] for c in space} == ({True} if m <= 32 else {True, False})
    # every K chunk holds whole K tiles; the largest split the grid allows is there
    assert all(k // c["split_k"] >= c["block_sizes"][2] for c in space)
    assert max(c["split_k"] for c in space) == 32
    splits = sum(1 for bk in block_ks for sk in gs.SPLIT_K if sk == 1 or k // sk >= bk)
    grid = len(block_ns) * splits * (1 if m <= 32 else 2)
    heuristic_on_grid = (
        heuristic["split_k"] in gs.SPLIT_K
        and heuristic["block_sizes"][1] in block_ns
        and (heuristic["swap_ab"] or m > 32)
    )
    assert len(space) == grid + (0 if heuristic_on_grid else 1)


def test_neighbors_are_the_left_out_values_next_to_a_config():
    best = {"block_sizes": [32, 64, 128], "num_warps": 4, "num_stages": 4, "split_k": 8, "swap_ab": True}
    assert gs.neighbors(best, 32) == [
        {**best, "block_sizes": [32, 32, 128]},
        {**best, "swap_ab": False},
    ]
    assert gs.neighbors(best, 8) == [{**best, "block_sizes": [32, 32, 128]}]  # swap off only above 16
    wide = {**best, "block_sizes": [32, 128, 128]}  # its half (64) is in the grid
    assert gs.neighbors(wide, 32) == [{**wide, "swap_ab": False}]
    assert gs.neighbors(best, 32, {_key({**best, "swap_ab": False})}) == [
        {**best, "block_sizes": [32, 32, 128]}
    ]
    assert gs.neighbors(best, 64) == []  # the space holds both above PRUNE_MAX_M
    assert gs.neighbors({**best, "swap_ab": False}, 32) == [
        {**best, "swap_ab": False, "block_sizes": [32, 32, 128]}
    ]


def test_an_unsplit_block_k_256_config_gets_block_k_512_at_3_and_4_stages():
    unsplit = {"block_sizes": [16, 64, 256], "num_warps": 4, "num_stages": 4, "split_k": 1, "swap_ab": True}
    assert gs.neighbors(unsplit, 8) == [
        {**unsplit, "block_sizes": [16, 32, 256]},
        {**unsplit, "block_sizes": [16, 64, 512], "num_stages": 3},
        {**unsplit, "block_sizes": [16, 64, 512], "num_stages": 4},
    ]
    assert all(c["block_sizes"][2] != 512 for c in gs.neighbors({**unsplit, "split_k": 2}, 8))
    assert all(c["block_sizes"][2] != 512 for c in gs.neighbors({**unsplit, "block_sizes": [16, 64, 128]}, 8))
    assert gs.neighbors(unsplit, 64) == []
    assert all(c["block_sizes"][2] != 512 for c in gs.search_space("fp8_dynamic", 8, 6144, 4096))


def test_small_k_gets_no_split_beyond_its_tiles():
    space = gs.search_space("fp8_dynamic", 1, 256, 512)
    assert max(c["split_k"] for c in space if c["block_sizes"][2] == 256) == 2
    assert max(c["split_k"] for c in space if c["block_sizes"][2] == 128) == 4


class CostModel:
    """Fake GPU: a config's time is a smooth function of its knobs and M; ``broken`` configs fail
    (inf). Records every call."""

    def __init__(self, broken=(), heuristic_bonus=0.0, knob_bonus=None):
        self.calls, self.broken, self.heuristic_bonus = [], {_key(c) for c in broken}, heuristic_bonus
        self.knob_bonus = knob_bonus or {}  # {(knob, value): µs less}

    def cost(self, m, n, k, c):
        bm, bn, bk = c["block_sizes"]
        t = 10.0 + abs(math.log2(bn / (128 if m > 16 else 64))) + abs(math.log2(c["split_k"] / 8)) * 0.5
        t += 0.3 * (bk == 256) + 0.2 * (not c["swap_ab"]) + 0.01 * m
        if _key(c) == _key(default_scaled_mm_config(m, n, k)):
            t -= self.heuristic_bonus
        return t - sum(bonus for (knob, value), bonus in self.knob_bonus.items() if c.get(knob) == value)

    def __call__(self, fmt, m, n, k, configs):
        self.calls.append((fmt, m, n, k, [_key(c) for c in configs]))
        return [math.inf if _key(c) in self.broken else self.cost(m, n, k, c) for c in configs]


class Recorder:
    def __init__(self):
        self.jobs = []

    def __call__(self, jobs):
        self.jobs.append(list(jobs))


KEYS = [("fp8_dynamic", 6144, 4096, m) for m in (1, 2, 4, 8, 16, 24, 32)]


def test_every_candidate_is_compiled_once_before_anything_is_timed():
    timer, compiler = CostModel(), Recorder()
    search = gs.GridSearch(KEYS, time=timer, compile=compiler)
    assert compiler.jobs == [] and timer.calls == []  # nothing before the first pick
    search.pick("fp8_dynamic", 6144, 4096, 1)
    assert len(compiler.jobs) == 2  # two compile calls for the whole run: the grids, the refinements
    jobs = compiler.jobs[0]
    compiled = {_key(c) for _, _, _, _, c in jobs}
    assert len(compiled) == len(jobs)  # each config once per (format, N, K)
    for bucket in gs.M_BUCKETS:
        assert {_key(c) for c in gs.search_space("fp8_dynamic", max(bucket), 6144, 4096)} <= compiled
    for m in (1, 2, 4, 8, 16, 24, 32):
        assert _key(default_scaled_mm_config(m, 6144, 4096)) in compiled
    for _ in KEYS:
        search.pick(*_[:3], _[3])
    assert len(compiler.jobs) == 2
    refined = compiler.jobs[1]  # new configs only, each the variant of some config of the grid
    assert refined and not {_key(c) for *_, c in refined} & compiled
    assert len({_key(c) for *_, c in refined}) == len(refined)
    # every (config, M) timed was compiled at that M: a config shared by two buckets (same tiles at
    # M <= 8 and at 16) gets the Ms of both, or its first timing at the other compiles it uncounted
    compiled_ms = {_key(c): set(ms) for _, _, _, ms, c in [*jobs, *refined]}
    timed = {(key, m) for _, m, _, _, keys in timer.calls for key in keys}
    assert all(m in compiled_ms[key] for key, m in timed), sorted(
        (m, key) for key, m in timed if m not in compiled_ms[key]
    )[:3]


def test_one_search_per_bucket_then_each_m_with_the_top_and_its_heuristic():
    timer = CostModel()
    search = gs.GridSearch(KEYS, time=timer, compile=Recorder())
    picks = {m: search.pick("fp8_dynamic", 6144, 4096, m) for _, _, _, m in KEYS}
    searches = [c for c in timer.calls if len(c[4]) > len(gs.REFINEMENTS) + 4]  # + up to 4 neighbours
    assert sorted(c[1] for c in searches) == [8, 16, 32]  # at each bucket's largest M
    for m, pick in picks.items():  # each M's check starts with its heuristic (a refinement call not)
        heuristic = _key(default_scaled_mm_config(m, 6144, 4096))
        checks = [c for c in timer.calls if c[1] == m and c[4][0] == heuristic and len(c[4]) <= gs.TOP + 1]
        assert len(checks) == 1
        assert checks[0][4][0] == _key(default_scaled_mm_config(m, 6144, 4096))
        expected = min(timer.cost(m, 6144, 4096, json.loads(c)) for c in checks[0][4])
        assert pick.us == expected and pick.us <= pick.heuristic_us
    # the cost model's optimum: block_n 64, split_k 8, swap_ab, block_k 128 at M <= 16
    assert picks[1].config["block_sizes"][1:] == [64, 128] and picks[1].config["split_k"] == 8
    assert picks[32].config["block_sizes"] == [32, 128, 128] and picks[32].config["swap_ab"] is True
    assert search.stages["check each M"].count == sum(  # every M's check, its heuristic and the top
        len(c[4]) for c in timer.calls if len(c[4]) <= gs.TOP + 1
    )


def test_never_worse_than_the_heuristic_and_never_a_failing_config():
    best_grid = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 4, "split_k": 8, "swap_ab": True}
    timer = CostModel(broken=[best_grid], heuristic_bonus=5.0)
    search = gs.GridSearch(KEYS, time=timer, compile=Recorder())
    for _, n, k, m in KEYS:
        pick = search.pick("fp8_dynamic", n, k, m)
        assert _key(pick.config) != _key(best_grid)
        assert pick.config == default_scaled_mm_config(m, n, k)  # the heuristic wins by the bonus
        assert pick.us == pick.heuristic_us


def test_unknown_key_is_an_error():
    search = gs.GridSearch(KEYS, time=CostModel(), compile=Recorder())
    with pytest.raises(KeyError, match="not a key of this search"):
        search.pick("fp8_dynamic", 4096, 4096, 1)


def test_grid_tuner_saves_the_searchs_picks_through_run_autotune(tmp_path):
    keys = [at.TuneKey(*k) for k in KEYS[:3]]
    search = gs.GridSearch([(k.fmt, k.n, k.k, k.m) for k in keys], time=CostModel(), compile=Recorder())

    def check(key, config, options):
        return at.CheckResult(True, config, rel_err=1e-3, helion_us=9.0, default_us=10.0, fallback_us=11.0)

    path = tmp_path / "nvidia_h200.json"
    meta = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 0}
    summary = at.run_autotune(keys, path, tune=gs.grid_tuner(search), check=check, metadata=meta)
    assert summary.count("tuned") == 3
    from hlcore import config_store as cs

    saved = {e.key["m"]: e.config for e in cs.read_config_file(path).entries.values()}
    assert saved == {k.m: search.pick(k.fmt, k.n, k.k, k.m).config for k in keys}


def test_cli_grid_searches_only_the_keys_still_to_tune(tmp_path, monkeypatch):
    """``hltools autotune --effort grid`` with a fake GPU: the search (and its two compiles) covers the
    keys the output file does not hold yet; a rerun searches nothing."""
    tiny = {"hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 4}
    model = tmp_path / "config.json"
    model.write_text(json.dumps({**tiny, "head_dim": 64}))
    out = tmp_path / "out"
    timer, compiler, searches = CostModel(), Recorder(), []
    real = gs.GridSearch

    def recording_search(keys, **kw):
        searches.append(sorted(keys))
        return real(keys, **kw)

    def check(key, config, options):
        return at.CheckResult(True, config, rel_err=1e-3, helion_us=9.0, default_us=10.0, fallback_us=11.0)

    monkeypatch.setattr(at, "gpu_backend", lambda: ("NVIDIA H200", None, check))
    monkeypatch.setattr(gs, "gpu_timer", lambda max_m, seed=0, block_scale_a="row": timer)
    monkeypatch.setattr(
        gs, "parallel_compiler", lambda workers=None, on_done=None, block_scale_a="row": compiler
    )
    monkeypatch.setattr(gs, "GridSearch", recording_search)
    monkeypatch.setattr(gs.os, "cpu_count", lambda: 16)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # no cap on a GPU machine either
    monkeypatch.setenv("HELION_BENCHMARK_CUDAGRAPH", "0")

    def run(num_tokens):
        args = ["autotune", "--model", str(model), "--formats", "fp8_dynamic", "--effort", "grid"]
        args += ["--compile-first"]  # the default compiles alongside (the next tests)
        return runner.invoke(app, [*args, "--num-tokens", num_tokens, "--output", str(out)])

    result = run("1")
    assert result.exit_code == 0, result.output
    assert "3 tuned, 0 skipped" in result.output  # qkv = gate_up (768, 256), o (256, 256), down (256, 384)
    flat = " ".join(result.output.split())  # the console wraps the long line
    assert (
        "grid search: compile the grid (" in flat
        and "; 16 compile workers; 0.0 s in all, of the run's" in flat
    )
    assert len(searches) == 1 and len(searches[0]) == 3 and len(compiler.jobs) == 2
    result = run("1,4")
    assert result.exit_code == 0, result.output
    assert "3 tuned, 3 skipped" in result.output
    assert [m for *_, m in searches[1]] == [4, 4, 4]  # only the new M was searched


def test_a_faster_refinement_of_the_best_grid_config_is_picked():
    """Each group's fastest grid config is tried with each knob of REFINEMENTS alone; a variant that
    is faster ends as the key's config, and a variant that fails is never picked."""
    best = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 4, "split_k": 8, "swap_ab": True}
    assert gs.refinements(best) == [{**best, **r} for r in gs.REFINEMENTS]  # one knob changed each
    assert gs.refinements(best, {_key({**best, "num_warps": 2})}) == [
        {**best, **r} for r in gs.REFINEMENTS if r != {"num_warps": 2}
    ]
    timer = CostModel(
        broken=[{**best, "indexing": "tensor_descriptor"}],
        knob_bonus={("num_warps", 8): 0.5, ("indexing", "tensor_descriptor"): 5.0},
    )
    search = gs.GridSearch(KEYS[:4], time=timer, compile=Recorder())  # M 1-8: one group
    for m in (1, 2, 4, 8):
        pick = search.pick("fp8_dynamic", 6144, 4096, m)
        assert pick.config == {**best, "num_warps": 8}, pick.config
        assert pick.candidates == len(gs.search_space("fp8_dynamic", 8, 6144, 4096)) + len(
            gs.REFINEMENTS
        ) + len(gs.neighbors(best, 8))


class PrunedWins(CostModel):
    """The cost model with a pruned value as the optimum: block_n 32 at M <= 8, swap_ab off at 24-32."""

    def cost(self, m, n, k, c):
        t = super().cost(m, n, k, c)
        if m <= 8 and c["block_sizes"][1] == 32:
            t -= 3.0
        if m > 16 and not c["swap_ab"]:
            t -= 3.0
        return t


def test_a_left_out_value_that_wins_is_found_as_a_neighbour_of_the_best():
    """block_n 32 and swap_ab off are not in the decode grid; where one is faster, the neighbour of
    the group's fastest grid config brings it in and it ends as the key's config."""
    timer = PrunedWins()
    search = gs.GridSearch(KEYS, time=timer, compile=Recorder())
    for m in (1, 8):
        assert search.pick("fp8_dynamic", 6144, 4096, m).config["block_sizes"][1] == 32
    for m in (24, 32):
        assert search.pick("fp8_dynamic", 6144, 4096, m).config["swap_ab"] is False
    assert search.pick("fp8_dynamic", 6144, 4096, 16).config["block_sizes"][1] != 32  # no bonus at 16
    grid_timed = [c for c in timer.calls if len(c[4]) > len(gs.REFINEMENTS) + 4]
    assert all(
        '"swap_ab": false' not in key and ", 32, " not in key for *_, keys in grid_timed for key in keys
    )


def test_stage_report_gives_each_stage_its_count_and_wall_seconds():
    ticks = iter(range(100))
    compiler = Recorder()
    search = gs.GridSearch(KEYS, time=CostModel(), compile=compiler, clock=lambda: float(next(ticks)))
    assert search.stages == {} and search.stage_report() == "grid search: ; 0.0 s in all"
    for *_, m in KEYS:
        search.pick("fp8_dynamic", 6144, 4096, m)
    names = list(search.stages)
    assert names == [
        "compile the grid",
        "time the grid",
        "compile the refinements",
        "time the refinements",
        "check each M",
    ]
    assert search.stages["compile the grid"].count == len(compiler.jobs[0])
    assert search.stages["compile the refinements"].count == len(compiler.jobs[1])
    spaces = sum(len(gs.search_space("fp8_dynamic", max(b), 6144, 4096)) for b in gs.M_BUCKETS)
    assert search.stages["time the grid"].count == spaces
    # one tick per compile batch, per group timed (3 buckets) and per M checked
    assert [s.seconds for s in search.stages.values()] == [1.0, 3.0, 1.0, 3.0, 7.0]
    report = search.stage_report()
    assert report.startswith(f"grid search: compile the grid ({len(compiler.jobs[0])}) 1.0 s; time the grid")
    assert report.endswith(f"check each M ({search.stages['check each M'].count}) 7.0 s; 15.0 s in all")


def test_block_formats_also_try_the_scales_one_step_ahead():
    """Block formats' refinements add prefetch_scales (per-token formats have no scale loads in the
    K loop: not tried there); a faster prefetch variant becomes the key's config."""
    best = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 4, "split_k": 8, "swap_ab": True}
    assert gs.refinements(best, blocked=True) == [
        {**best, **r} for r in gs.REFINEMENTS + gs.BLOCK_REFINEMENTS
    ]
    timer = CostModel(knob_bonus={("prefetch_scales", True): 0.7})
    keys = [(fmt, 6144, 4096, 8) for fmt in ("fp8_dynamic", "block_fp8")]
    search = gs.GridSearch(keys, time=timer, compile=Recorder())
    assert search.pick("block_fp8", 6144, 4096, 8).config.get("prefetch_scales") is True
    assert "prefetch_scales" not in search.pick("fp8_dynamic", 6144, 4096, 8).config
    timed = {(fmt, c) for fmt, _, _, _, cs in timer.calls for c in cs}
    assert not any('"prefetch_scales"' in c for fmt, c in timed if fmt == "fp8_dynamic")


def test_autotune_block_scale_a_option_is_checked():
    def flat(output):
        return " ".join("".join(c for c in output if c not in "\u2502\u256d\u256e\u2570\u256f\u2500").split())

    result = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--block-scale-a", "column"])
    assert result.exit_code == 2, result.output
    assert "must be auto or one of ['row', 'tma']; got 'column'" in flat(result.output), result.output
    result = runner.invoke(
        app, ["autotune", "--model", "qwen3-8b", "--block-scale-a", "tma", "--ray", "auto"]
    )
    assert result.exit_code == 2 and "not with --ray" in flat(result.output), result.output


def _units(part):
    return {(k.fmt, k.n, k.k) for k in part}


def test_shard_groups_keeps_each_shape_on_one_shard_and_balances_the_replay_bytes():
    """Whole (format, N, K) units, none on two shards, each shard in the keys' order, the larger
    shapes (more bytes a timing replay reads) spread first; never an empty shard."""
    from hlcore.timing import ROTATE_BYTES

    big = 3 * ROTATE_BYTES  # one key of this shape costs three small keys (the replay's floor)
    shapes = [(1024, 1024), (big, 1), (2048, 1024), (4096, 1024)]
    keys = [at.TuneKey("fp8_dynamic", n, k, m) for n, k in shapes for m in (1, 2, 4)]
    parts = gs.shard_groups(keys, 2)
    assert len(parts) == 2 and [len(p) for p in parts] == [3, 9]
    assert _units(parts[0]) == {("fp8_dynamic", big, 1)}  # 9 of cost against 3 x 3
    for part in parts:
        assert part == [k for k in keys if k in part]  # the keys' order
    assert not _units(parts[0]) & _units(parts[1])
    assert gs.shard_groups(keys, 1) == [keys]
    assert gs.shard_groups(keys[:3], 4) == [keys[:3]]  # one bucket of one shape: one shard
    with pytest.raises(ValueError, match="at least 1"):
        gs.shard_groups(keys, 0)


def test_shard_groups_splits_shapes_into_m_buckets_when_gpus_outnumber_them():
    """Fewer shapes than shards: a shape's M buckets go to different shards (each a search group:
    the bucket's Ms stay together), up to one shard per group."""
    keys = [
        at.TuneKey(fmt, 4096, 4096, m) for fmt in ("fp8_dynamic", "w8a8_int8") for m in (1, 2, 16, 24, 32)
    ]
    parts = gs.shard_groups(keys, 4)
    assert len(parts) == 4
    groups = [{(k.fmt, gs.bucket_of(k.m)) for k in part} for part in parts]
    for part in parts:  # a bucket is never split
        for fmt, bucket in {(k.fmt, gs.bucket_of(k.m)) for k in part}:
            assert {k.m for k in keys if k.fmt == fmt and gs.bucket_of(k.m) == bucket} <= {
                k.m for k in part if k.fmt == fmt
            }
    # both shapes cost more than a shard's share (10 keys / 4): split into their 6 groups
    assert sum(len(g) for g in groups) == 6 and sorted(map(len, parts)) == [2, 2, 3, 3]
    assert len(gs.shard_groups(keys, 8)) == 6  # one shard per (format, N, K, bucket)
    assert [len(p) for p in gs.shard_groups(keys, 2)] == [5, 5]  # a shape is a shard's share: whole


# --------------------------------------------------------------------------------------------
# Compiles alongside the timing (GridSearch(compile_pool=..., compile_one=...))
# --------------------------------------------------------------------------------------------
class FakePool:
    """A one-thread pool: jobs run in the order submitted, as a process pool's queue feeds them.
    ``compiled`` holds (config key, M) for every job done; ``gate`` (job index -> Event) holds a
    job back until the event is set (and raises after 10 s)."""

    def __init__(self, gate=None):
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.pool, self.jobs, self.compiled = ThreadPoolExecutor(1), [], set()
        self.gate, self.lock, self.shut = gate or {}, threading.Lock(), False

    def __call__(self):  # the factory
        return self

    def submit(self, fn, job):
        self.jobs.append(job)
        return self.pool.submit(fn, job, len(self.jobs) - 1)

    def compile_one(self, job, index):
        if index in self.gate and not self.gate[index].wait(10):
            raise AssertionError(f"job {index} held back 10 s: nothing was timed while it waited")
        with self.lock:
            self.compiled |= {(_key(job[4]), m) for m in job[3]}
        return None

    def shutdown(self, wait=True, cancel_futures=False):
        self.shut = True
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)


class CheckedTimer(CostModel):
    """The cost model, failing a timing of a (config, M) not yet compiled."""

    def __init__(self, pool, **kw):
        super().__init__(**kw)
        self.pool, self.uncompiled = pool, []

    def __call__(self, fmt, m, n, k, configs):
        with self.pool.lock:
            self.uncompiled += [(m, c) for c in configs if (_key(c), m) not in self.pool.compiled]
        return super().__call__(fmt, m, n, k, configs)


def _alongside(pool, timer, keys=KEYS):
    return gs.GridSearch(
        keys, time=timer, compile_pool=pool, compile_one=lambda job, i: pool.compile_one(job, i)
    )


def test_compiles_alongside_pick_what_compiling_first_picks_and_time_only_what_is_built():
    keys = KEYS + [("w8a8_int8", 4096, 12288, m) for m in (1, 8, 16, 32)]
    first = gs.GridSearch(keys, time=CostModel(knob_bonus={("num_warps", 8): 0.6}), compile=Recorder())
    pool = FakePool()
    timer = CheckedTimer(pool, knob_bonus={("num_warps", 8): 0.6})
    along = _alongside(pool, timer, keys)
    for fmt, n, k, m in keys:
        assert along.pick(fmt, n, k, m) == first.pick(fmt, n, k, m)
    assert timer.uncompiled == []  # every timing found its kernels built at its M
    assert pool.shut  # the pool is shut down when the search is done
    assert any(first.pick(*key).config["num_warps"] == 8 for key in keys)  # refinements were timed
    # each (format, N, K, config, M) compiled once, the same set as compiling first
    along_jobs = [(f, n, k, _key(c), m) for f, n, k, ms, c in pool.jobs for m in ms]
    assert len(along_jobs) == len(set(along_jobs))
    stages = along.stages
    assert list(stages) == [
        "compile",
        "wait for the compiles",
        "time the grid",
        "time the refinements",
        "check each M",
    ]
    assert stages["compile"].alongside and stages["compile"].count == len(pool.jobs)
    assert stages["time the grid"].count == sum(len(s) for s in along._spaces.values())
    report = along.stage_report()
    assert report.startswith(f"grid search: compile ({len(pool.jobs)}, alongside) ")
    total = sum(s.seconds for name, s in stages.items() if name != "compile")
    assert report.endswith(f"; {total:.1f} s in all")


def test_compiles_alongside_time_the_first_group_before_the_last_job_is_built():
    import threading

    timed = threading.Event()
    pool = FakePool()
    n_grid = len(gs.GridSearch(KEYS, time=CostModel(), compile=Recorder())._grid_jobs()[0])
    pool.gate = {n_grid - 1: timed}  # the last grid job waits until a group has been timed

    class Timer(CheckedTimer):
        def __call__(self, *args):
            out = super().__call__(*args)
            timed.set()
            return out

    timer = Timer(pool)
    search = _alongside(pool, timer)
    search.pick("fp8_dynamic", 6144, 4096, 1)
    assert timed.is_set() and timer.uncompiled == []
    assert len(pool.jobs) > n_grid  # the refinements were submitted behind the grid
    assert search.stages["wait for the compiles"].count >= 1


def test_compile_alongside_needs_both_pool_and_job_function():
    with pytest.raises(ValueError, match="go together"):
        gs.GridSearch(KEYS, time=CostModel(), compile_pool=FakePool())
    with pytest.raises(ValueError, match="needs compile"):
        gs.GridSearch(KEYS, time=CostModel())


def test_cli_compiles_alongside_by_default_and_says_so_in_the_resume_command(tmp_path, monkeypatch):
    """The grid's default, ``--compile-alongside``: the CLI's grid search compiles through the pool
    (the fake one here), every key tuned as with --compile-first, the stage line says so; the flag
    only with the grid."""
    tiny = {"hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 4, "num_key_value_heads": 4}
    model = tmp_path / "config.json"
    model.write_text(json.dumps({**tiny, "head_dim": 64}))
    pool = FakePool()
    timer = CheckedTimer(pool)

    def check(key, config, options):
        return at.CheckResult(False, config, message="fails the reference")  # so the resume line prints

    monkeypatch.setattr(at, "gpu_backend", lambda: ("NVIDIA H200", None, check))
    monkeypatch.setattr(gs, "gpu_timer", lambda max_m, seed=0, block_scale_a="row": timer)
    workers = []
    monkeypatch.setattr(gs, "compile_pool", lambda n: workers.append(n) or pool)
    monkeypatch.setattr(gs, "compile_job", lambda job, i, block_scale_a="row": pool.compile_one(job, i))
    monkeypatch.setattr(gs.os, "cpu_count", lambda: 16)
    monkeypatch.setenv("HELION_BENCHMARK_CUDAGRAPH", "0")
    args = ["autotune", "--model", str(model), "--formats", "fp8_dynamic", "--num-tokens", "1,16"]
    args += ["--output", str(tmp_path / "out")]
    result = runner.invoke(app, args)  # no flag: alongside
    assert result.exit_code == 1, result.output  # every key fails the (fake) check, after its search
    assert workers == [15]  # one CPU left to the timing process
    assert pool.jobs and pool.shut and timer.calls and timer.uncompiled == []
    assert "grid search: compile (" in result.output and ", alongside)" in result.output
    assert "--compile-alongside" in result.output.split("rerun the same command")[1]
    result = runner.invoke(app, [*args, "--compile-alongside", "--effort", "quick"])
    assert result.exit_code == 2 and "only with --effort grid" in result.output
    result = runner.invoke(app, [*args, "--jobs", "4"])  # 4 CPUs: 3 compile processes, 1 timing
    assert result.exit_code == 1 and workers == [15, 3], result.output
    assert "--jobs 4" in result.output.split("rerun the same command")[1]
    result = runner.invoke(app, [*args, "--jobs", "4", "--effort", "quick"])
    assert result.exit_code == 2 and "only with --effort grid" in result.output


# --------------------------------------------------------------------------------------------
# The checks' configs (each key's untuned pick) compiled with the grid, never timed by the search
# --------------------------------------------------------------------------------------------
#: A config outside the decode space (2 warps, block_n 32): what a shipped or nearest entry may be.
OUTSIDE = {"block_sizes": [16, 32, 128], "num_warps": 2, "num_stages": 3, "split_k": 2, "swap_ab": True}


def test_extra_configs_are_compiled_at_their_m_first_and_never_timed():
    timer, compiler = CostModel(), Recorder()
    extra = {KEYS[0]: [OUTSIDE], KEYS[5]: [OUTSIDE]}  # M = 1 and M = 24
    search = gs.GridSearch(KEYS, time=timer, compile=compiler, extra=extra)
    picks = [search.pick(*key) for key in KEYS]
    first = {_key(c): set(ms) for _, _, _, ms, c in compiler.jobs[0]}
    assert first[_key(OUTSIDE)] == {1, 24}  # in the first batch, at the keys' Ms only
    assert all(_key(OUTSIDE) not in keys for *_, keys in timer.calls)
    plain = gs.GridSearch(KEYS, time=CostModel(), compile=Recorder())
    assert picks == [plain.pick(*key) for key in KEYS]  # the search itself is unchanged


def test_extra_configs_compile_alongside_and_the_search_waits_for_them():
    pool = FakePool()
    extra = {KEYS[2]: [OUTSIDE]}
    search = gs.GridSearch(
        KEYS,
        time=CheckedTimer(pool),
        compile_pool=pool,
        compile_one=lambda job, i: pool.compile_one(job, i),
        extra=extra,
    )
    search.pick(*KEYS[0])
    assert (_key(OUTSIDE), 4) in pool.compiled and pool.shut  # built before the first check
    assert [_key(job[4]) for job in pool.jobs].count(_key(OUTSIDE)) == 1


def test_check_configs_are_each_keys_untuned_pick(tmp_path, monkeypatch):
    """An exact entry of the file in effect is its key's pick; a key without one gets the picker's
    (here the same shape's entry); no CUDA device and no GPU named: none."""
    path = cs.config_file_path("scaled_mm", "nvidia_h200", tmp_path)
    entry = cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1), dict(OUTSIDE))
    cs.save_config_file(path, [entry], {"gpu": "nvidia_h200", "helion": "1.5.0"})
    monkeypatch.setenv("HL_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(cs, "installed_helion_version", lambda: "1.5.0")
    smc.clear_scaled_mm_config_cache()
    try:
        keys = [at.TuneKey("fp8_dynamic", 6144, 4096, m) for m in (1, 32)]
        got = gs.check_configs(keys, gpu="nvidia_h200")
        assert got[("fp8_dynamic", 6144, 4096, 1)] == [OUTSIDE]
        untuned = at.untuned_pick(keys[1], at.TuneOptions(), "nvidia_h200")
        assert got[("fp8_dynamic", 6144, 4096, 32)] == [untuned.config] and len(got) == 2
        monkeypatch.setattr("torch.cuda.is_available", lambda: False)
        assert gs.check_configs(keys) == {}
    finally:
        smc.clear_scaled_mm_config_cache()


def test_gpu_timer_times_a_disturbed_candidate_again_and_keeps_the_steadiest(monkeypatch):
    """The grid's timer goes through :func:`hlcore.timing.steadiest`: a candidate whose first timing
    is disturbed (p80 / p20 above 1.05) reads the steadier one of its re-times, an undisturbed one
    is timed once, and a failing one reads ``inf``; the numbers are the disturbed H100 row of
    ``lab/results/2026-12-05-e`` (Qwen3-14B W8A8_INT8 down at M = 2). Inputs are drawn on the CPU
    (the timing itself is faked, so no kernel runs)."""
    from hlcore.timing import Timing
    from hltools import bench
    from hltools import timing as ht

    real_make_inputs = bench.make_inputs
    monkeypatch.setattr(
        bench, "make_inputs", lambda *a, **kw: real_make_inputs(*a, **{**kw, "device": "cpu"})
    )
    monkeypatch.setattr(ht, "copies_for", lambda nbytes: 2)
    readings = {
        "disturbed": [Timing(45.8, 43.5, 47.7), Timing(34.7, 34.6, 35.1)],
        "steady": [Timing(36.0, 35.9, 36.2)],
        "fails": [],
    }
    taken: list[str] = []

    def fake_time_graph(calls):
        assert len(calls) == 2  # one call per weight copy
        name = calls[0].__defaults__[-1]["name"]  # the config the calls run (their last default)
        taken.append(name)
        if not readings[name]:
            raise RuntimeError("candidate failed")
        return readings[name].pop(0)

    monkeypatch.setattr(ht, "time_graph", fake_time_graph)
    time = gs.gpu_timer(max_m=4)
    got = time("fp8_dynamic", 2, 64, 128, [{"name": "disturbed"}, {"name": "steady"}, {"name": "fails"}])
    assert got == [34.7, 36.0, float("inf")]
    assert taken == ["disturbed", "disturbed", "steady", "fails"]
    assert time.retimed() == 1
    search = gs.GridSearch(KEYS, time=CostModel(), compile=Recorder(), retimed=time.retimed)
    search.pick("fp8_dynamic", 6144, 4096, 1)
    report = search.stage_report()
    assert "; 1 disturbed timings taken again; " in report and report.endswith(" s in all")


class FailingShape(CostModel):
    """The cost model, its timer raising for one (N, K) (as drawing an 80 GiB GPU's last copies did)."""

    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n = n

    def __call__(self, fmt, m, n, k, configs):
        if n == self.n:
            self.calls.append((fmt, m, n, k, "raised"))
            raise MemoryError("CUDA out of memory. Tried to allocate 1000.00 MiB")
        return super().__call__(fmt, m, n, k, configs)


def test_a_timer_that_raises_fails_its_own_groups_keys_only_and_searches_once(tmp_path):
    """2026-12-05-g: one shape's timing ran out of memory and every later key searched all groups
    again (664 grid timings where one search makes ~270; 2 keys failed). Now the failing group's keys fail with
    its error, the other groups' keys get the picks of a search without the failure, and nothing
    is searched twice."""
    bad = [("w8a8_int8", 4096, 12288, m) for m in (1, 2, 4, 8, 16)]
    keys = KEYS + bad
    clean = gs.GridSearch(KEYS, time=CostModel(), compile=Recorder())
    timer = FailingShape(4096)
    search = gs.GridSearch(keys, time=timer, compile=Recorder())
    for fmt, n, k, m in bad:
        with pytest.raises(
            RuntimeError,
            match=rf"the search of w8a8_int8 N=4096 K=12288 M {'1/2/4/8' if m < 16 else '16'} failed: MemoryError: CUDA out of memory",
        ):
            search.pick(fmt, n, k, m)
    for fmt, n, k, m in KEYS:
        assert search.pick(fmt, n, k, m) == clean.pick(fmt, n, k, m)
    assert [c[1] for c in timer.calls if c[4] == "raised"] == [8, 16]  # each failing group's grid once
    grids = [c for c in timer.calls if c[4] != "raised" and len(c[4]) > len(gs.REFINEMENTS) + 4]
    assert sorted(c[1] for c in grids) == [8, 16, 32]  # the other groups searched once each

    # through run_autotune: those keys fail (a rerun retries them), the rest are tuned
    tune_keys = [at.TuneKey(*k) for k in keys]

    def check(key, config, options):
        return at.CheckResult(True, config, rel_err=1e-3, helion_us=9.0, default_us=10.0, fallback_us=11.0)

    search = gs.GridSearch(keys, time=FailingShape(4096), compile=Recorder())
    meta = {"gpu": "nvidia_h200", "helion": "1.5.0", "seed": 0}
    path = tmp_path / "nvidia_h200.json"
    summary = at.run_autotune(tune_keys, path, tune=gs.grid_tuner(search), check=check, metadata=meta)
    assert summary.count("tuned") == len(KEYS) and summary.count("failed") == len(bad)


def test_a_group_whose_refinements_raise_fails_its_keys_and_a_dying_search_is_not_run_again():
    """The timer raising at a group's refinements only (its copies drawn again after the other
    shapes): that group's keys fail with the error too. A compile that raises kills the whole
    search once: every key fails with it, and no later key starts the search again."""

    class FailingRefinements(CostModel):
        def __call__(self, fmt, m, n, k, configs):
            refining = len(configs) <= len(gs.REFINEMENTS) + 4 and m == 8 and n == 4096
            if refining and configs[0] != default_scaled_mm_config(m, n, k):  # not a check
                raise MemoryError("CUDA out of memory")
            return super().__call__(fmt, m, n, k, configs)

    keys = KEYS + [("w8a8_int8", 4096, 12288, m) for m in (1, 8, 16)]
    search = gs.GridSearch(keys, time=FailingRefinements(), compile=Recorder())
    for m in (1, 8):
        with pytest.raises(RuntimeError, match="N=4096 K=12288 M 1/2/4/8 failed: MemoryError"):
            search.pick("w8a8_int8", 4096, 12288, m)
    search.pick("w8a8_int8", 4096, 12288, 16)  # its own bucket: searched and picked
    assert all(search.pick(*key[:3], key[3]) for key in KEYS)

    calls = []

    def broken_compile(jobs):
        calls.append(len(jobs))
        raise RuntimeError("a compile worker died")

    timer = CostModel()
    dying = gs.GridSearch(KEYS, time=timer, compile=broken_compile)
    for fmt, n, k, m in KEYS:
        with pytest.raises(RuntimeError, match="failed: RuntimeError: a compile worker died"):
            dying.pick(fmt, n, k, m)
    assert len(calls) == 1 and timer.calls == []


def test_compile_workers_are_capped_by_the_gpus_free_memory():
    """hltools.bench_compile.workers_for_memory: Each worker is budgeted WORKER_GPU_BYTES plus twice the largest weight, all of them at most
    half the free memory; never fewer than one, never more than asked."""
    gib = 1024**3
    weight = 51200 * 5120  # Qwen3-32B's gate_up, one byte per element
    each = bc.WORKER_GPU_BYTES + 2 * weight
    assert bc.workers_for_memory(15, 79 * gib, weight) == 15  # an 80 GiB GPU: not capped
    assert bc.workers_for_memory(31, 22 * gib, weight) == int(11 * gib // each) == 6
    assert bc.workers_for_memory(8, 1 * gib, weight) == 1
    # nothing timing beside them (bench kernels' precompile): all the free memory
    assert bc.workers_for_memory(31, 22 * gib, weight, share=1.0) == int(22 * gib // each) == 12
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        bc.workers_for_memory(0, 22 * gib, weight)


@pytest.mark.parametrize("alongside", [True, False])
def test_make_grid_tuner_gives_the_search_the_workers_the_gpu_has_room_for(monkeypatch, tmp_path, alongside):
    """make_grid_tuner on a GPU with 22 GiB free and 32 CPUs: the pool (or the compiler) gets the
    capped count, and the stage line says how many and why; with room for all, just how many. The
    timer, the checks' configs and the pools are faked (no GPU here)."""
    gib = 1024**3
    pools, compilers = [], []
    monkeypatch.setenv("HL_KERNEL_CACHE_DIR", str(tmp_path))  # make_grid_tuner sets it when unset
    monkeypatch.setattr(gs, "gpu_timer", lambda *a, **kw: CostModel())
    monkeypatch.setattr(gs, "check_configs", lambda keys, block_scale_a="row": {})
    monkeypatch.setattr(gs, "compile_pool", lambda workers: pools.append(workers) or (lambda: None))
    monkeypatch.setattr(
        gs, "parallel_compiler", lambda workers, block_scale_a="row": compilers.append(workers) or Recorder()
    )
    keys = [at.TuneKey("fp8_dynamic", 51200, 5120, m) for m in (1, 2)]
    asked = 31 if alongside else 32
    for free, want, note in [
        (
            22 * gib,
            6,
            f"6 compile workers, not {asked}: 1.7 GiB budgeted each, within 50% of the GPU's 22.0 GiB free",
        ),
        (139 * gib, asked, f"{asked} compile workers"),
    ]:
        monkeypatch.setattr("torch.cuda.is_available", lambda: True)
        monkeypatch.setattr("torch.cuda.mem_get_info", lambda free=free: (free, 80 * gib))
        tune = gs.make_grid_tuner(keys, at.TuneOptions(compile_alongside=alongside), compile_workers=32)
        assert tune.search.workers_note == note
        assert (pools if alongside else compilers)[-1] == want
        assert tune.search.stage_report() == f"grid search: {note}; 0.0 s in all"
    assert not (compilers if alongside else pools)
