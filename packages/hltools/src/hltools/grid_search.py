"""Exhaustive search of the scaled GEMM's decode configs (``hltools autotune --effort grid``).

Helion's own autotuner searches Helion's whole config space per key and needs minutes per key to
beat the heuristic (it beat it on none of four keys in 3 min: docs/tuning.md). Decode GEMMs have few
knobs that matter, so this search enumerates them (:func:`search_space`) and times every candidate:

1. **Buckets.** The keys of a run are grouped by (format, N, K) and M bucket (:data:`M_BUCKETS`:
   1-8, 16, 24-32; larger M each its own): one search per group, at the bucket's largest M (its
   ``block_m`` covers every M of the bucket).
2. **Compile first, in parallel.** Every candidate of every group is compiled before anything is
   timed, in worker processes (``compile(jobs)``: :func:`hltools.bench_compile.precompile`, one
   process per CPU), so timing never waits for a compiler (the refinements of step 3 in a second
   batch, before they are timed). Or, alongside the timing (``compile_pool`` and ``compile_one``:
   :class:`GridSearch`; ``hltools autotune --compile-alongside``): every job submitted at once,
   each group timed as soon as its own candidates are built.
3. **Time, refine, then check every M.** Every group's candidates are timed at its search M
   (``time(fmt, m, n, k, configs)``: CUDA-graph replay over weight copies larger than L2, the
   benchmarks' timer, a disturbed timing taken again). Then each group's fastest gets the knobs
   the grid fixes, one at a time (:data:`REFINEMENTS`: 2 or 8 warps, 3 stages, tensor-descriptor
   (TMA) loads, persistent programs; for block formats also :data:`BLOCK_REFINEMENTS`: the scales
   loaded one K step ahead) and the values the space leaves out next to it (:func:`neighbors`:
   ``block_n`` 32, ``swap_ab`` off, ``block_k`` 512 for an unsplit config), all groups' variants
   compiled in one more parallel batch and timed beside it. Then for each M of the group the
   :data:`TOP` fastest and that M's own heuristic config are timed at that M and the fastest is
   the key's config. The heuristic config is always among them, so a key
   never ends slower than the heuristic in the measurement that chose it.

The space (:func:`search_space`, the heuristic config first): ``block_n`` 64 / 128, ``block_k``
128 / 256 (128 for block formats: one scale group per K tile), ``split_k`` 1..32 (whole K tiles per
chunk), ``swap_ab`` on, ``block_m`` the bucket's (16 or 32, up to 64), 4 warps, 4 stages (2 when a
chunk holds fewer than 4 K tiles, as the heuristic). Above M = 32 (:data:`PRUNE_MAX_M`) it also holds
``block_n`` 32 and ``swap_ab`` off. For Qwen3-8B (K = 4096 / 12288) 22-24 candidates per group for
fp8_dynamic and w8a8_int8, 12 for block_fp8; the heuristic is one of them.

Why not ``block_n`` 32 and ``swap_ab`` off at decode M: the grid held both until 2026-12-04 and
twelve H200 grid runs (six models, three formats, ``lab/results/2026-12-0[2-4]*/raw/**/grid``)
picked neither for any of their 336 keys (block_n 64 in 311, 128 in 25; swap_ab on at every M 24-32,
96 keys). They doubled the M 24-32 groups and added a third to the others, about half of the
compile and timing work. Each is still tried as a neighbour of every group's fastest config
(:func:`neighbors`, with the refinements), so a shape where one of them wins finds it next to the
best grid config.

Why ``block_k`` 512 only as a neighbour: Helion's LFBO search found it (3 stages, no split-K)
faster than the grid's pick on one key; next to unsplit configs it wins on some qkv shapes by a
little, for a few more candidates a model, where a third ``block_k`` in the space would add to every
group (the measurements: docs/tuning.md, the grid section). It is not tried next to split configs.

Several GPUs (``--gpus N``, :mod:`hltools.autotune_shards`; a Ray cluster's, ``--ray``,
:mod:`hltools.autotune_ray`): :func:`shard_groups` deals whole shapes (or their groups) to one
worker process or Ray task per GPU, each running its own search (:func:`make_grid_tuner`) with its
share of the CPUs for compiling.

Times and compiles are injected (``time``, ``compile``), so the search is tested on the CPU with
fakes; :func:`gpu_timer` and :func:`parallel_compiler` are the H200 ones.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import tempfile
import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Decode M buckets: one search per (format, N, K, bucket), at the bucket's largest M.
M_BUCKETS: tuple[tuple[int, ...], ...] = ((1, 2, 4, 8), (16,), (24, 32))
#: Candidates per group re-timed at each M of the group (plus that M's heuristic config).
TOP = 3
BLOCK_N = (64, 128)
#: The largest search M whose space leaves out :data:`PRUNED_BLOCK_N` and ``swap_ab`` off (the
#: module docstring says why); above it the space holds both.
PRUNE_MAX_M = 32
#: ``block_n`` values only in the space above :data:`PRUNE_MAX_M` (a neighbour at or below it).
PRUNED_BLOCK_N = (32,)
BLOCK_K = (128, 256)
SPLIT_K = (1, 2, 4, 8, 16, 32)
#: ``block_k`` outside the space, tried next to a group's fastest config at decode M where that
#: config has ``block_k`` 256 and no split-K (:func:`neighbors`), at each of :data:`WIDE_BLOCK_K_STAGES`.
WIDE_BLOCK_K = 512
WIDE_BLOCK_K_STAGES = (3, 4)
#: Helion knobs the grid holds fixed, each tried alone on every group's fastest grid config.
REFINEMENTS: tuple[dict[str, Any], ...] = (
    {"num_warps": 2},
    {"num_warps": 8},
    {"num_stages": 3},
    {"indexing": "tensor_descriptor"},
    {"pid_type": "persistent_interleaved"},
)
#: Knobs of block formats alone, tried like :data:`REFINEMENTS` (the scales one K step ahead).
BLOCK_REFINEMENTS: tuple[dict[str, Any], ...] = ({"prefetch_scales": True},)

Config = dict[str, Any]
#: ``time(fmt, m, n, k, configs) -> [median µs per config]`` (``inf`` for a config that fails).
Timer = Callable[[str, int, int, int, Sequence[Config]], list[float]]
#: One compile job: (format, N, K, the Ms it is timed at, config).
Job = tuple[str, int, int, tuple[int, ...], Config]
#: ``compile([job, ...])``: build every kernel before timing.
Compiler = Callable[[Sequence[Job]], None]
#: ``compile_one(job) -> None or the error``: one job, run in a worker of a search's ``compile_pool``.
CompileOne = Callable[[Job], "str | None"]


def bucket_of(m: int) -> tuple[int, ...]:
    """The :data:`M_BUCKETS` bucket holding ``m`` (``(m,)`` for an M in none)."""
    return next((b for b in M_BUCKETS if m in b), (m,))


def shard_groups(keys: Sequence[Any], shards: int) -> list[list[Any]]:
    """``keys`` (objects with ``fmt``, ``n``, ``k``, ``m``: :class:`hltools.autotune.TuneKey`) split
    into at most ``shards`` lists for one search each (a sharded grid run, ``--gpus N``), none empty,
    each list in the order of ``keys``.

    The unit is a (format, N, K): its groups share configs, so one worker compiles each of them
    once. While there are fewer units than ``shards``, or a unit costs more than a shard's share
    (the total / ``shards``), the costliest such unit of several M buckets is split into its buckets
    (a search's groups, :func:`bucket_of`). Units are then dealt largest first,
    each to the shard with the least cost so far; a unit's cost is what its timing replays read,
    ``max(N * K, ROTATE_BYTES)`` bytes per key (:func:`hlcore.timing.copies_for` rotates weight
    copies up to that size; compiles cost about the same per key). Raises ``ValueError`` for
    ``shards`` < 1."""
    from hlcore.timing import ROTATE_BYTES

    if shards < 1:
        raise ValueError(f"--gpus must be at least 1; got {shards}")
    units: dict[tuple, list[int]] = {}  # indices into keys
    for i, key in enumerate(keys):
        units.setdefault((key.fmt, key.n, key.k), []).append(i)

    def cost(unit: list[int]) -> int:
        return sum(max(keys[i].n * keys[i].k, ROTATE_BYTES) for i in unit)

    share = sum(cost(ix) for ix in units.values()) / shards
    while True:
        splittable = [u for u, ix in units.items() if len({bucket_of(keys[i].m) for i in ix}) > 1]
        if len(units) >= shards:  # enough units: split only one larger than a shard's share
            splittable = [u for u in splittable if cost(units[u]) > share]
        if not splittable:
            break
        unit = max(splittable, key=lambda u: cost(units[u]))
        for i in units.pop(unit):
            units.setdefault((*unit, bucket_of(keys[i].m)), []).append(i)
    loads = [0] * min(shards, len(units))
    shard_of: dict[int, int] = {}
    for unit in sorted(units.values(), key=cost, reverse=True):
        j = loads.index(min(loads))
        loads[j] += cost(unit)
        shard_of.update((i, j) for i in unit)
    parts: list[list[Any]] = [[] for _ in loads]
    for i, key in enumerate(keys):
        parts[shard_of[i]].append(key)
    return parts


def _key(config: Config) -> str:
    return json.dumps(config, sort_keys=True)


def search_space(fmt: str, m: int, n: int, k: int) -> list[Config]:
    """The candidates for ``fmt`` at (M, N, K), M the bucket's largest: the heuristic config first
    (:func:`hlcore.scaled_mm_config.default_scaled_mm_config`), then the grid of the module
    docstring, each valid by :func:`hlcore.scaled_mm_config.check_scaled_mm_config`, no duplicates."""
    from hlcore.formats import get_format
    from hlcore.scaled_mm_config import check_scaled_mm_config, default_scaled_mm_config

    blocked = get_format(fmt).block_size is not None
    pruned = m <= PRUNE_MAX_M
    block_m = min(64, max(16, 1 << (m - 1).bit_length()))
    out: dict[str, Config] = {}
    heuristic = default_scaled_mm_config(m, n, k)
    out[_key(heuristic)] = heuristic
    for block_k in (128,) if blocked else BLOCK_K:
        for block_n in BLOCK_N if pruned else PRUNED_BLOCK_N + BLOCK_N:
            for split_k in SPLIT_K:
                chunk = k // split_k
                if split_k > 1 and chunk < block_k:
                    continue
                for swap_ab in (True,) if pruned else (True, False):
                    config = {
                        "block_sizes": [block_m, block_n, block_k],
                        "num_warps": 4,
                        "num_stages": 4 if chunk >= 4 * block_k else 2,
                        "split_k": split_k,
                        "swap_ab": swap_ab,
                    }
                    if check_scaled_mm_config(config) is None:
                        out.setdefault(_key(config), config)
    return list(out.values())


def neighbors(config: Config, m: int, seen: set[str] = frozenset()) -> list[Config]:
    """The values the space leaves out at search M ``m`` (:data:`PRUNE_MAX_M`), next to ``config``:
    its ``block_n`` halved to a :data:`PRUNED_BLOCK_N` value, ``swap_ab`` off where M > 16 (the
    decode space before the pruning held it there), and where ``config`` has ``block_k`` 256 and no
    split-K, :data:`WIDE_BLOCK_K` at each of :data:`WIDE_BLOCK_K_STAGES` (a K tile twice as deep,
    fewer loop steps for a chunk that is all of K); less those in ``seen``, invalid ones
    (:func:`hlcore.scaled_mm_config.check_scaled_mm_config`) and duplicates. None above
    :data:`PRUNE_MAX_M`."""
    from hlcore.scaled_mm_config import check_scaled_mm_config

    if m > PRUNE_MAX_M:
        return []
    block_m, block_n, block_k = config["block_sizes"]
    variants = []
    if block_n // 2 in PRUNED_BLOCK_N:
        variants.append({**config, "block_sizes": [block_m, block_n // 2, block_k]})
    if m > 16 and config.get("swap_ab", False):
        variants.append({**config, "swap_ab": False})
    if block_k == 256 and config.get("split_k", 1) == 1:
        wide = [block_m, block_n, WIDE_BLOCK_K]
        variants += [{**config, "block_sizes": wide, "num_stages": s} for s in WIDE_BLOCK_K_STAGES]
    out: dict[str, Config] = {}
    for v in variants:
        if _key(v) not in seen and check_scaled_mm_config(v) is None:
            out.setdefault(_key(v), v)
    return list(out.values())


def refinements(config: Config, seen: set[str] = frozenset(), blocked: bool = False) -> list[Config]:
    """``config`` with each of :data:`REFINEMENTS` (and :data:`BLOCK_REFINEMENTS` for a block format,
    ``blocked``) applied alone, less those already in ``seen`` (config keys as :func:`_key` writes
    them) and duplicates."""
    out: dict[str, Config] = {}
    for knob in REFINEMENTS + (BLOCK_REFINEMENTS if blocked else ()):
        variant = {**config, **knob}
        if _key(variant) not in seen:
            out.setdefault(_key(variant), variant)
    return list(out.values())


@dataclass
class KeyPick:
    """The search's result for one key: the config, its time and the heuristic config's time at the
    key's own M (µs), and how many candidates the key's group timed."""

    config: Config
    us: float
    heuristic_us: float
    candidates: int


@dataclass
class Stage:
    """One stage of a search: what it did to how many configs (``count``) in ``seconds`` of wall
    time (``clock``'s)."""

    name: str
    count: int = 0
    seconds: float = 0.0
    #: run alongside the other stages (compiles while timing): left out of the sum
    alongside: bool = False


@dataclass
class GridSearch:
    """One search over the keys ``keys`` (``(fmt, n, k, m)`` tuples) with the given timer and
    compiler; :meth:`pick` runs a key's group on first use (every group's grid, refinements and
    heuristic configs compiled and timed) and answers from memory afterwards. ``stages`` holds each
    stage's wall time (``clock``, seconds) and count, in order: :meth:`stage_report` prints them.

    Two ways to compile. By default ``compile`` builds every grid job before anything is timed
    (and the refinements in a second batch). With ``compile_pool`` (a factory of a
    ``concurrent.futures.Executor``, shut down when the search is done) and ``compile_one`` (one
    job, run in that pool), the compiles run *alongside* the timing: every job is submitted at once,
    group by group, and each group is timed as soon as its own candidates are built, its refinements
    submitted behind the rest, so the GPU times while the CPUs compile.

    A group whose timing raises (the timer, not one candidate; in the grid or its refinements) fails
    its own keys, with that error, when they are picked; the other groups are searched on. A search
    that dies (a compile raises, the pool breaks) fails every group; nothing is searched twice."""

    keys: Sequence[tuple[str, int, int, int]]
    time: Timer
    compile: Compiler | None = None
    top: int = TOP
    clock: Callable[[], float] = _time.perf_counter
    compile_pool: Callable[[], Any] | None = None
    compile_one: CompileOne | None = None
    #: ``(fmt, n, k, m) -> configs`` the keys' checks time besides the search's picks (each key's
    #: untuned pick: :func:`check_configs`): compiled at that M with the grid's jobs (so no check
    #: compiles in the search process), never timed by the search
    extra: Mapping[tuple[str, int, int, int], Sequence[Config]] = field(default_factory=dict)
    #: how many of the timer's timings so far were disturbed and taken again (:func:`gpu_timer`'s
    #: ``retimed``), the stage line's last part; None: not counted
    retimed: Callable[[], int] | None = None
    #: the compile workers as the stage line names them (:func:`make_grid_tuner`: how many, and
    #: why fewer than asked); empty: not named
    workers_note: str = ""
    _searched: bool = field(default=False, init=False)
    stages: dict[str, Stage] = field(default_factory=dict, init=False)
    _groups: dict[tuple, list[int]] = field(default_factory=dict, init=False)
    _search_m: dict[tuple, int] = field(default_factory=dict, init=False)
    _spaces: dict[tuple, list[Config]] = field(default_factory=dict, init=False)
    _picks: dict[tuple, KeyPick] = field(default_factory=dict, init=False)
    _ranked: dict[tuple, list[Config]] = field(default_factory=dict, init=False)
    _timed: dict[tuple, int] = field(default_factory=dict, init=False)
    #: group -> the error its timing raised (its keys fail with it; a rerun retries them)
    _failed: dict[tuple, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if (self.compile_pool is None) != (self.compile_one is None):
            raise ValueError("compile_pool and compile_one go together (compiles alongside the timing)")
        if self.compile is None and self.compile_pool is None:
            raise ValueError("a GridSearch needs compile, or compile_pool with compile_one")
        for fmt, n, k, m in self.keys:
            self._groups.setdefault((fmt, n, k, bucket_of(m)), []).append(m)
        for group, ms in self._groups.items():
            fmt, n, k, bucket = group
            self._search_m[group] = max(max(bucket), *ms)
            self._spaces[group] = search_space(fmt, self._search_m[group], n, k)

    @property
    def alongside(self) -> bool:
        """Whether the compiles run alongside the timing (``compile_pool``)."""
        return self.compile_pool is not None

    def _group_ms(self, group: tuple) -> set[int]:
        return set(self._groups[group]) | {self._search_m[group]}

    def _grid_jobs(self) -> tuple[dict[tuple, tuple[Config, set[int]]], dict[tuple, list[tuple]]]:
        """Every group's grid, each M's heuristic config and its :attr:`extra` configs as jobs, in
        group order: (format, N, K, config key) -> (config, every M it is timed at), and each group's
        grid job keys."""
        from hlcore.scaled_mm_config import default_scaled_mm_config

        # a config of several groups (the same tiles at M <= 8 and at 16) is compiled for the Ms of
        # all of them, or its first timing at another M compiles it in this process, uncounted
        # (~50 s per shape on the H200)
        jobs: dict[tuple, tuple[Config, set[int]]] = {}
        needs: dict[tuple, list[tuple]] = {}
        for group, space in self._spaces.items():
            fmt, n, k, _ = group
            ms = self._group_ms(group)
            for config in space:
                jk = (fmt, n, k, _key(config))
                jobs.setdefault(jk, (config, set()))[1].update(ms)
                needs.setdefault(group, []).append(jk)
            for m in ms:  # each M's own heuristic config, timed beside the top ones
                h = default_scaled_mm_config(m, n, k)
                jobs.setdefault((fmt, n, k, _key(h)), (h, set()))[1].add(m)
                for c in self.extra.get((fmt, n, k, m), ()):  # what the key's check times too
                    jobs.setdefault((fmt, n, k, _key(c)), (dict(c), set()))[1].add(m)
        return jobs, needs

    @staticmethod
    def _as_jobs(jobs: dict[tuple, tuple[Config, set[int]]]) -> list[Job]:
        return [(fmt, n, k, tuple(sorted(ms)), c) for (fmt, n, k, _), (c, ms) in jobs.items()]

    @contextlib.contextmanager
    def _stage(self, name: str, count: int) -> Iterator[None]:
        stage = self.stages.setdefault(name, Stage(name))
        start = self.clock()
        try:
            yield
        finally:
            stage.count += count
            stage.seconds += self.clock() - start

    def stage_report(self) -> str:
        """One line: each stage run so far with its count and wall seconds, and the sum of those
        not run alongside the others."""
        parts = [
            f"{s.name} ({s.count}{', alongside' if s.alongside else ''}) {s.seconds:.1f} s"
            for s in self.stages.values()
        ]
        if self.workers_note:
            parts.append(self.workers_note)
        if self.retimed is not None:
            parts.append(f"{self.retimed()} disturbed timings taken again")
        total = sum(s.seconds for s in self.stages.values() if not s.alongside)
        return f"grid search: {'; '.join(parts)}; {total:.1f} s in all"

    def _variants(self, group: tuple, timed: list[tuple[float, Config]]) -> list[Config]:
        """The group's stage-2 candidates: :func:`refinements` and :func:`neighbors` of its fastest
        grid config (none when every grid config failed)."""
        from hlcore.formats import get_format

        t, best = min(timed, key=lambda x: x[0])
        if not math.isfinite(t):
            return []
        seen = {_key(c) for c in self._spaces[group]}
        refined = refinements(best, seen, get_format(group[0]).block_size is not None)
        seen |= {_key(c) for c in refined}
        return refined + neighbors(best, self._search_m[group], seen)

    def _time_group(self, stage: str, group: tuple, configs: list[Config]) -> list[tuple[float, Config]]:
        """``configs`` timed at the group's search M; a timer that raises (not a candidate that
        fails: the timer times that one ``inf``) fails this group alone (:attr:`_failed`, raised by
        :meth:`pick` for its keys), and every other group is searched on."""
        fmt, n, k, _ = group
        with self._stage(stage, len(configs)):
            try:
                times = self.time(fmt, self._search_m[group], n, k, configs)
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory drawing one shape's copies
                from hltools.bench_compile import short_error

                self._failed.setdefault(group, short_error(exc))
                times = [math.inf] * len(configs)
            return list(zip(times, configs, strict=True))

    def _rank(self, times: dict[tuple, list[tuple[float, Config]]]) -> None:
        for group, timed in times.items():
            ranked = sorted(timed, key=lambda x: x[0])
            self._ranked[group] = [c for t, c in ranked if math.isfinite(t)]
            self._timed[group] = len(ranked)

    def _search_all(self) -> None:
        """Stage 1 (every group's grid) and stage 2 (:data:`REFINEMENTS` and :func:`neighbors` of each
        group's fastest), each compiled in one batch before it is timed (or alongside the timing:
        :meth:`_search_all_alongside`); ``_ranked`` holds each group's finite-time configs, fastest
        first."""
        if self.alongside:
            self._search_all_alongside()
            return
        jobs, _ = self._grid_jobs()
        with self._stage("compile the grid", len(jobs)):
            self.compile(self._as_jobs(jobs))
        times = {
            group: self._time_group("time the grid", group, space) for group, space in self._spaces.items()
        }
        variants = {group: self._variants(group, timed) for group, timed in times.items()}
        jobs = {}  # as in _grid_jobs: each once, all its Ms
        for group, vs in variants.items():
            fmt, n, k, _ = group
            for v in vs:
                jobs.setdefault((fmt, n, k, _key(v)), (v, set()))[1].update(self._group_ms(group))
        if jobs:
            with self._stage("compile the refinements", len(jobs)):
                self.compile(self._as_jobs(jobs))
        for group, vs in variants.items():
            if vs:
                times[group] += self._time_group("time the refinements", group, vs)
        self._rank(times)

    def _search_all_alongside(self) -> None:
        """:meth:`_search_all` with every compile submitted to ``compile_pool`` up front and each
        group timed as soon as its jobs are done: the grids group by group, each M's heuristic
        config, then each group's refinements as its grid is timed (behind the jobs already queued).
        Stage ``compile, alongside`` spans the first submit to the last job done; ``wait for the
        compiles`` is the time the timing waited for them (its count: the waits)."""
        grid, needs = self._grid_jobs()
        futures: dict[tuple, list[Any]] = {}
        have: dict[tuple, set[int]] = {}
        done_at: list[float] = []
        pool = self.compile_pool()
        start = self.clock()

        def submit(jk: tuple, config: Config, ms: set[int]) -> None:
            missing = sorted(set(ms) - have.setdefault(jk, set()))
            if missing:  # a config two groups share: the Ms the first one did not compile
                fut = pool.submit(self.compile_one, (*jk[:3], tuple(missing), config))
                fut.add_done_callback(lambda _f: done_at.append(self.clock()))
                futures.setdefault(jk, []).append(fut)
                have[jk].update(missing)

        def wait_for(jks) -> None:
            futs = [f for jk in jks for f in futures.get(jk, ())]
            with self._stage("wait for the compiles", int(not all(f.done() for f in futs))):
                for f in futs:
                    f.result()  # a job's own error is its string result; a broken pool raises

        try:
            for jk, (config, ms) in grid.items():
                submit(jk, config, ms)
            times: dict[tuple, list[tuple[float, Config]]] = {}
            variants: dict[tuple, list[Config]] = {}
            for group, space in self._spaces.items():
                wait_for(needs[group])
                times[group] = self._time_group("time the grid", group, space)
                variants[group] = self._variants(group, times[group])
                fmt, n, k, _ = group
                for v in variants[group]:
                    submit((fmt, n, k, _key(v)), v, self._group_ms(group))
            for group, vs in variants.items():
                if vs:
                    fmt, n, k, _ = group
                    wait_for([(fmt, n, k, _key(v)) for v in vs])
                    times[group] += self._time_group("time the refinements", group, vs)
            wait_for(list(futures))  # each M's heuristic config, for the checks of each M
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        jobs = sum(len(fs) for fs in futures.values())
        stage = Stage("compile", jobs, max(done_at, default=start) - start, alongside=True)
        self.stages = {"compile": stage, **self.stages}
        self._rank(times)

    def pick(self, fmt: str, n: int, k: int, m: int) -> KeyPick:
        """The key's config (see the module docstring)."""
        if (fmt, n, k, m) in self._picks:
            return self._picks[(fmt, n, k, m)]
        group = (fmt, n, k, bucket_of(m))
        if group not in self._groups:
            raise KeyError(f"{fmt} N={n} K={k} M={m} is not a key of this search")
        if not self._searched:
            self._searched = True  # once: a search that dies fails every group it had not ranked
            try:
                self._search_all()
            except Exception as exc:  # noqa: BLE001 - e.g. a compile worker killed: a rerun retries
                from hltools.bench_compile import short_error

                for g in self._groups:
                    if g not in self._ranked:
                        self._failed.setdefault(g, short_error(exc))
                        self._ranked[g] = []
        if group in self._failed:
            raise RuntimeError(
                f"the search of {fmt} N={n} K={k} M {'/'.join(map(str, group[3]))} failed: {self._failed[group]}"
            )
        self._check_each_m(group, self._ranked[group][: self.top], self._timed[group])
        return self._picks[(fmt, n, k, m)]

    def _check_each_m(self, group: tuple, best: list[Config], timed: int) -> None:
        from hlcore.scaled_mm_config import default_scaled_mm_config

        fmt, n, k, _ = group
        for m in sorted(set(self._groups[group])):
            heuristic = default_scaled_mm_config(m, n, k)
            cands = [heuristic] + [c for c in best if _key(c) != _key(heuristic)]
            with self._stage("check each M", len(cands)):
                times = self.time(fmt, m, n, k, cands)
            i = min(range(len(cands)), key=lambda j: times[j])
            self._picks[(fmt, n, k, m)] = KeyPick(cands[i], times[i], times[0], timed)


# --------------------------------------------------------------------------------------------
# The GPU's timer and compiler
# --------------------------------------------------------------------------------------------
def gpu_timer(max_m: int, seed: int = 0, block_scale_a: str = "row") -> Timer:
    """A :data:`Timer` on the current CUDA GPU for M up to ``max_m``: :func:`hltools.bench.make_inputs`
    with weight copies larger than L2 (kept for one (format, N, K) at a time), Block_FP8's scale_a in
    ``block_scale_a``'s layout (:func:`hltools.bench.block_scale_a`), each config timed by
    :func:`hltools.timing.time_graph` over one call per copy, a disturbed timing (p80 / p20 above
    :data:`hlcore.timing.RETIME_SPREAD`) taken again and the steadiest kept
    (:func:`hlcore.timing.steadiest`, as ``bench kernels`` and the per-key check); a config that
    raises times ``inf``. Its ``retimed()`` counts the timings it took again so far (the stage line's
    last part, :attr:`GridSearch.retimed`)."""
    from hlcore.timing import steadiest
    from hltools.bench import block_scale_a as layout_of
    from hltools.bench import make_inputs
    from hltools.timing import copies_for, time_graph

    inputs: dict[tuple, Any] = {}
    retimed = [0]

    def time(fmt: str, m: int, n: int, k: int, configs: Sequence[Config]) -> list[float]:
        from hlcore.scaled_mm import scaled_mm

        if (fmt, n, k) not in inputs:
            inputs.clear()  # one shape's copies at a time (GBs for the largest)
            inputs[(fmt, n, k)] = make_inputs(fmt, n, k, max_m, copies_for(n * k), seed=seed)
        d = inputs[(fmt, n, k)]
        a, sa = d.a[:m], layout_of(d.scale_a[:m], fmt, block_scale_a)
        out = []
        for config in configs:
            calls = [
                lambda b=b, sb=sb, c=config: scaled_mm(
                    a, b, sa, sb, d.out_dtype, block_size=d.block_size, config=c
                )
                for b, sb in d.weights
            ]
            try:
                timing, taken = steadiest(time_graph, calls)
            except Exception:  # noqa: BLE001 - a candidate that fails is not picked
                out.append(float("inf"))
                continue
            retimed[0] += taken > 1
            out.append(timing.median_us)
        return out

    time.retimed = lambda: retimed[0]
    return time


def parallel_compiler(
    workers: int | None = None, on_done: Callable | None = None, block_scale_a: str = "row"
) -> Compiler:
    """A :data:`Compiler` running :func:`hltools.bench_compile.precompile` in ``workers`` spawned
    processes (default: one per CPU): Triton's cache (and hlcore's kernel cache when
    ``HL_KERNEL_CACHE_DIR`` is set) is warm when the search times the candidates (Block_FP8 on
    ``block_scale_a``'s layout, as :func:`gpu_timer`)."""
    from hltools.bench_compile import precompile

    def compile(jobs: Sequence[Job]) -> None:
        work = [_compile_job(job, block_scale_a) for job in jobs]
        precompile(work, workers if workers is not None else (os.cpu_count() or 1), on_done=on_done)

    return compile


def use_run_kernel_cache() -> str:
    """``HL_KERNEL_CACHE_DIR``, set to a fresh directory for this run when it is unset or empty, so
    the search loads the code the compile workers generated instead of binding every candidate again;
    set before a sharded run starts its workers, they share it (entries are written atomically)."""
    if not os.environ.get("HL_KERNEL_CACHE_DIR", "").strip():
        os.environ["HL_KERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="hl-grid-kernels-")
    return os.environ["HL_KERNEL_CACHE_DIR"]


def compile_job(job: Job, block_scale_a: str = "row") -> str | None:
    """Compile (and run once) one grid job in this process, a worker of :func:`compile_pool`:
    :func:`hltools.bench_compile.run_compile_job` on the current CUDA GPU (Block_FP8 on
    ``block_scale_a``'s layout, as :func:`gpu_timer`); None, or the error."""
    from hltools.bench_compile import run_compile_job

    return run_compile_job(_compile_job(job, block_scale_a))


def _compile_job(job: Job, block_scale_a: str):
    """``job`` as :class:`hltools.bench_compile.CompileJob` (a Helion kernel)."""
    from hltools.bench_compile import CompileJob

    fmt, n, k, ms, config = job
    return CompileJob(
        "helion", fmt, n, k, ms, json.dumps(config, sort_keys=True), block_scale_a=block_scale_a
    )


def _workers_on_this_gpu(workers: int, keys: Sequence[Any]) -> tuple[int, str]:
    """``workers`` capped by :func:`hltools.bench_compile.workers_for_gpu_memory` on the current
    CUDA GPU, and the stage line's note naming them (and why fewer, when the cap binds)."""
    from hltools.bench_compile import workers_for_gpu_memory

    capped, why = workers_for_gpu_memory(workers, max(k.n * k.k for k in keys))
    return capped, f"{capped} compile workers" + (f", not {workers}: {why}" if why else "")


def compile_pool(workers: int) -> Callable[[], Any]:
    """A factory of the spawned process pool (``workers`` processes; CUDA needs ``spawn``) that
    compiles alongside the timing (:class:`GridSearch`'s ``compile_pool``)."""

    def make():
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(max(1, workers), mp_context=mp.get_context("spawn"))

    return make


def check_configs(
    keys: Sequence[Any], block_scale_a: str = "row", gpu: str | None = None
) -> dict[tuple[str, int, int, int], list[Config]]:
    """``(fmt, n, k, m) -> [config]``: each key's untuned pick on ``gpu`` (None: the current CUDA
    device's; no CUDA device: none), the config its check times besides the tuned and the default
    one (:func:`hltools.autotune.untuned_pick`; :class:`GridSearch`'s ``extra``)."""
    import torch

    from hltools.autotune import TuneOptions, untuned_pick

    if gpu is None:
        if not torch.cuda.is_available():
            return {}
        gpu = torch.cuda.get_device_name()
    options = TuneOptions(block_scale_a=block_scale_a)
    return {(k.fmt, k.n, k.k, k.m): [untuned_pick(k, options, gpu).config] for k in keys}


def make_grid_tuner(keys: Sequence[Any], options: Any, compile_workers: int | None = None) -> Callable:
    """The GPU's grid search over ``keys`` (:class:`hltools.autotune.TuneKey`) as a tuner
    (:func:`grid_tuner`), as ``options`` (:class:`hltools.autotune.TuneOptions`: its ``seed``,
    ``block_scale_a`` and ``compile_alongside``) asks: :func:`gpu_timer` on the current CUDA GPU,
    ``compile_workers`` CPUs for compiling (default ``options.compile_workers``, else one per CPU;
    a sharded run gives each GPU's worker its share; fewer processes where the GPU's free memory
    budgets fewer: :func:`hltools.bench_compile.workers_for_gpu_memory`), hlcore's kernel cache on
    (:func:`use_run_kernel_cache`). Every candidate compiled before the timing
    (:func:`parallel_compiler`), or with ``compile_alongside`` while the GPU times the groups already
    built (:func:`compile_pool`, one CPU fewer: the timing process keeps one); each key's untuned
    pick, which its check times, compiled with them (:func:`check_configs`)."""
    use_run_kernel_cache()
    layout = options.block_scale_a
    timer = gpu_timer(max(k.m for k in keys), options.seed, layout)
    workers = compile_workers or options.compile_workers or (os.cpu_count() or 1)
    if options.compile_alongside:  # the timing process keeps one CPU
        workers, note = _workers_on_this_gpu(max(1, workers - 1), keys)
        compiling = {
            "compile_pool": compile_pool(workers),
            "compile_one": functools.partial(compile_job, block_scale_a=layout),
        }
    else:
        workers, note = _workers_on_this_gpu(workers, keys)
        compiling = {"compile": parallel_compiler(workers, block_scale_a=layout)}
    search = GridSearch(
        [(k.fmt, k.n, k.k, k.m) for k in keys],
        time=timer,
        extra=check_configs(keys, layout),
        retimed=getattr(timer, "retimed", None),
        workers_note=note,
        **compiling,
    )
    return grid_tuner(search)


def grid_tuner(search: GridSearch) -> Callable:
    """An :data:`hltools.autotune.Tuner` over ``search`` (its ``search`` attribute): a key's config is
    :meth:`GridSearch.pick`'s (``options`` are not used: the search is exhaustive,
    ``--budget-minutes`` only stops starting keys)."""

    def tune(key, options) -> Config:
        return dict(search.pick(key.fmt, key.n, key.k, key.m).config)

    tune.search = search  # the command prints search.stage_report() after the run
    return tune
