"""hlcore.kernel_cache (``HL_KERNEL_CACHE_DIR``): Helion's generated code cached on disk, so a new
process runs hlcore's kernels without binding or code generation.

Runs in the Triton-interpreter mode (Helion generates real Triton code, TRITON_INTERPRET runs it)
and on a GPU (``HL_TEST_GPU=1``); in Helion's eager mode (no code generation) the cache is off,
which is checked, and the rest is skipped."""

import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from hlcore import helion_free, norm
from hlcore import kernel_cache as kc
from hlcore import scaled_mm as sm
from hlcore.testing import rel_error, tolerance

HELION_MODE = os.environ.get("HELION_INTERPRET") == "1"
GPU = os.environ.get("HL_TEST_GPU") == "1" and torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
needs_codegen = pytest.mark.skipif(HELION_MODE, reason="HELION_INTERPRET=1 generates no code: cache off")

#: explicit configs (split_k 1: one program writes each output, so results are repeatable bitwise)
CFG = {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": True, "num_warps": 4, "num_stages": 2}
CFG2 = {"block_sizes": [16, 32, 128], "split_k": 1, "swap_ab": False, "num_warps": 4, "num_stages": 1}


def _clear_kernels():
    sm._kernel_for.cache_clear()
    norm._kernel_for.cache_clear()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """``HL_KERNEL_CACHE_DIR`` set for kernels created in the test (and plain kernels after it)."""
    directory = tmp_path / "kc"
    monkeypatch.setenv(kc.ENV_VAR, str(directory))
    monkeypatch.setattr(kc, "_warned", set())
    _clear_kernels()
    yield directory
    _clear_kernels()


def _entries(directory, name=None):
    pattern = f"{name}/*.py" if name else "*/*.py"
    return sorted(directory.glob(pattern))


def _gemm(m=8, out_dtype=torch.bfloat16, config=CFG, seed=1):
    d = sm.generate_scaled_mm_inputs(m, 64, 256, device=DEVICE, out_dtype=out_dtype, seed=seed)
    out = sm.scaled_mm(**d, config=config)
    assert rel_error(out, sm.scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", out_dtype)
    return out


def _rms(m=4, h=256):
    d = norm.generate_norm_inputs(m, h, device=DEVICE, seed=2)
    out = norm.rms_norm(d["x"], d["weight"], 1e-6)
    ref = norm.rms_norm_ref(d["x"], d["weight"], 1e-6)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2.0**-6, atol=1e-5)
    return out


def _stats_delta(before):
    after = kc.stats()
    return {k: after[k] - before[k] for k in after}


# --------------------------------------------------------------------------------------------
# Off unless asked for
# --------------------------------------------------------------------------------------------
def test_off_without_the_variable(monkeypatch):
    monkeypatch.delenv(kc.ENV_VAR, raising=False)
    _clear_kernels()
    try:
        kernel = sm._kernel_for(sm.config_json(CFG, "scaled_mm"))
        assert not isinstance(kernel, kc.CachedKernel)
        assert type(kernel).__name__ == "Kernel"
        monkeypatch.setenv(kc.ENV_VAR, "")
        assert kc.cached_kernel(kernel) is kernel
    finally:
        _clear_kernels()


def test_off_in_helion_eager_mode(cache_dir, monkeypatch):
    """HELION_INTERPRET=1 generates no code: the kernel stays Helion's own, nothing is written."""
    if HELION_MODE:
        assert not isinstance(sm._kernel_for(sm.config_json(CFG, "scaled_mm")), kc.CachedKernel)
        _gemm()
        _rms()
        assert not cache_dir.exists()
    else:
        kernel = sm._kernel_for(sm.config_json(CFG, "scaled_mm"))
        assert isinstance(kernel, kc.CachedKernel)
        helion_kernel = kernel.kernel  # made (lazily) before the eager mode is switched on
        monkeypatch.setenv("HELION_INTERPRET", "1")
        assert kc.cached_kernel(helion_kernel) is helion_kernel


def test_bare_kernel_for_autotuning_is_not_wrapped(cache_dir):
    """No fixed config (the autotuning kernel): nothing to cache."""
    assert not isinstance(sm.scaled_mm_kernel(), kc.CachedKernel)


# --------------------------------------------------------------------------------------------
# Keys (no compile)
# --------------------------------------------------------------------------------------------
def test_call_key_is_exact_metadata():
    x = torch.zeros(8, 256)
    y = torch.zeros(8, 256)
    key = kc.call_key((x, y, None, torch.bfloat16, 0, 1e-6))
    assert key == kc.call_key((torch.ones(8, 256), torch.ones(8, 256), None, torch.bfloat16, 0, 1e-6))
    assert key != kc.call_key((torch.zeros(1, 256), y, None, torch.bfloat16, 0, 1e-6))  # M
    assert key != kc.call_key((x.half(), y, None, torch.bfloat16, 0, 1e-6))  # dtype
    assert key != kc.call_key((torch.zeros(8, 300)[:, :256], y, None, torch.bfloat16, 0, 1e-6))  # stride
    assert key != kc.call_key((x, x, None, torch.bfloat16, 0, 1e-6))  # the same tensor twice
    assert key != kc.call_key((x, y, y, torch.bfloat16, 0, 1e-6))  # None vs a tensor
    assert key != kc.call_key((x, y, None, torch.bfloat16, 128, 1e-6))  # an int's value
    assert kc.call_key((x, float("nan"))) == kc.call_key((x, float("nan")))
    assert kc.call_key((x, [1, 2])) is None  # other kinds: Helion's own call
    # a layer's nn.Parameter (what vLLM's compiled graph hands its GEMM op) keys as its tensor does
    param = torch.nn.Parameter(torch.zeros(8, 256), requires_grad=False)
    assert kc.call_key((x, param, None, torch.bfloat16, 0, 1e-6)) == key


@needs_codegen
def test_parameter_argument_loads_the_entry_a_tensor_wrote(cache_dir):
    # Block_FP8 hands scale_b to the kernel as given: at CUDA-graph capture vLLM passes the layer's
    # weight_scale_inv Parameter, while the precompile workers ran with plain tensors (2026-12-04:
    # 21 of 21 precompiled kernels missed on the H200 for this reason)
    d = sm.generate_scaled_mm_inputs(4, 256, 256, fmt="block_fp8", device=DEVICE, seed=3)
    args = {k: d[k] for k in ("a", "b", "scale_a", "scale_b", "out_dtype")}
    out = sm.scaled_mm(**args, block_size=(128, 128), config=CFG)
    assert len(_entries(cache_dir, "_scaled_mm_body")) == 1
    _clear_kernels()
    args["scale_b"] = torch.nn.Parameter(d["scale_b"], requires_grad=False)
    before = kc.stats()
    assert torch.equal(sm.scaled_mm(**args, block_size=(128, 128), config=CFG), out)
    assert _stats_delta(before) == {"disk_hits": 1, "misses": 0, "writes": 0, "errors": 0}


@needs_codegen
def test_load_seconds_count_disk_hits_only(cache_dir, monkeypatch):
    """A miss (Helion's own path) adds no load seconds; a disk hit adds its import and its first run,
    each timed around its own step (a fake clock that ticks one second per reading)."""
    d = sm.generate_scaled_mm_inputs(3, 64, 128, device=DEVICE, seed=5)
    args = {k: d[k] for k in ("a", "b", "scale_a", "scale_b", "out_dtype")}
    before = kc.load_seconds()
    out = sm.scaled_mm(**args, config=CFG)  # miss: compiles and writes
    assert kc.load_seconds() == before
    _clear_kernels()
    ticks = iter(range(100, 200))
    monkeypatch.setattr(kc, "clock", lambda: float(next(ticks)))
    assert torch.equal(sm.scaled_mm(**args, config=CFG), out)  # disk hit
    after = kc.load_seconds()
    assert after["import"] - before["import"] == 1.0 and after["first_run"] - before["first_run"] == 1.0


def test_stable_repr_has_no_addresses_and_sorted_sets():
    text = kc.stable_repr({"b": frozenset({3, 1, 2}), "a": [len, torch.Tensor, object()]})
    assert "0x" not in text
    assert text == kc.stable_repr({"a": [len, torch.Tensor, object()], "b": frozenset({2, 3, 1})})
    assert "{1, 2, 3}" in text


# --------------------------------------------------------------------------------------------
# In-process: same results, entries per specialization and config
# --------------------------------------------------------------------------------------------
@needs_codegen
def test_same_results_and_one_entry_per_specialization(cache_dir, monkeypatch):
    monkeypatch.delenv(kc.ENV_VAR)
    _clear_kernels()
    plain_gemm, plain_rms = _gemm(), _rms()
    assert not isinstance(sm._kernel_for(sm.config_json(CFG, "scaled_mm")), kc.CachedKernel)

    monkeypatch.setenv(kc.ENV_VAR, str(cache_dir))
    _clear_kernels()
    assert isinstance(sm._kernel_for(sm.config_json(CFG, "scaled_mm")), kc.CachedKernel)
    before = kc.stats()
    assert torch.equal(_gemm(), plain_gemm)
    assert torch.equal(_rms(), plain_rms)
    assert _stats_delta(before) == {"disk_hits": 0, "misses": 2, "writes": 2, "errors": 0}
    gemm_files, rms_files = _entries(cache_dir, "_scaled_mm_body"), _entries(cache_dir, "_rms_norm_body")
    assert len(gemm_files) == 1 and len(rms_files) == 1

    before = kc.stats()  # second call: the in-process dict
    assert torch.equal(_gemm(), plain_gemm)
    assert _stats_delta(before) == {"disk_hits": 0, "misses": 0, "writes": 0, "errors": 0}

    _clear_kernels()  # new kernel objects: from the files
    before = kc.stats()
    assert torch.equal(_gemm(), plain_gemm)
    assert torch.equal(_rms(), plain_rms)
    assert _stats_delta(before) == {"disk_hits": 2, "misses": 0, "writes": 0, "errors": 0}

    # another M, out dtype or config: another entry each
    _gemm(m=1)
    _gemm(out_dtype=torch.float16)
    _gemm(config=CFG2)
    files = _entries(cache_dir, "_scaled_mm_body")
    assert len(files) == 4
    keys = {json.loads(f.read_text().partition("\n")[0][len(kc._HEADER) :])["key"] for f in files}
    assert len(keys) == 4


@needs_codegen
def test_source_digest_change_misses(cache_dir, monkeypatch):
    out = _rms()
    assert len(_entries(cache_dir)) == 1
    _clear_kernels()
    monkeypatch.setattr(kc, "source_digest", lambda: "another hlcore")
    before = kc.stats()
    assert torch.equal(_rms(), out)
    assert _stats_delta(before)["misses"] == 1
    assert len(_entries(cache_dir)) == 2


# --------------------------------------------------------------------------------------------
# Bad entries: Helion's path, then the entry is rewritten
# --------------------------------------------------------------------------------------------
def _entry_key(path):
    header = path.read_text(encoding="utf-8").partition("\n")[0]
    return json.loads(header[len(kc._HEADER) :])["key"]


@needs_codegen
@pytest.mark.parametrize("damage", ["garbage", "truncated", "import_error", "run_error"])
def test_bad_entry_falls_back_and_is_rewritten(cache_dir, damage, caplog):
    out = _rms()
    (path,) = _entries(cache_dir)
    good = path.read_bytes()
    key = _entry_key(path)
    if damage == "garbage":
        path.write_bytes(b"\xff\xfe not a cache entry")
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "import_error":  # header and checksum right, the source does not load
        kc.write_entry(path, key, "_rms_norm_body", "raise RuntimeError('broken entry')\n")
    else:  # loads, but its host function fails
        kc.write_entry(
            path, key, "_rms_norm_body", "def _rms_norm_body(*args):\n    raise RuntimeError('x')\n"
        )
    _clear_kernels()
    before = kc.stats()
    with caplog.at_level(logging.WARNING, logger=kc.__name__):
        assert torch.equal(_rms(), out)
    assert _stats_delta(before)["misses"] == 1 and _stats_delta(before)["errors"] == 1
    assert any("hlcore kernel cache" in r.getMessage() for r in caplog.records)
    assert path.read_bytes() == good  # rewritten with Helion's code
    assert kc.read_entry(path, key, "_rms_norm_body") is not None


@needs_codegen
def test_unwritable_directory_only_warns(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(kc.ENV_VAR, str(blocker))
    monkeypatch.setattr(kc, "_warned", set())
    _clear_kernels()
    try:
        with caplog.at_level(logging.WARNING, logger=kc.__name__):
            _rms()
            _rms(m=3)
        assert sum("cannot write" in r.getMessage() for r in caplog.records) == 1  # once per process
    finally:
        _clear_kernels()


# --------------------------------------------------------------------------------------------
# Triton's cache of hlcore's kernels: <dir>/triton at every first call, whatever TRITON_CACHE_DIR says
# --------------------------------------------------------------------------------------------
class _ProbeKernel:
    """Stands in for a Helion kernel on the miss path: records Triton's cache directory and the
    environment's at its call (it has no config, so the entry lookup fails and Helion's path runs)."""

    name = "probe"
    signature = inspect.signature(lambda x: None)

    def __init__(self, seen):
        self.seen = seen

    def __call__(self, x):
        from triton import knobs

        self.seen.append((knobs.cache.dir, os.environ.get("TRITON_CACHE_DIR")))
        return x + 1


@pytest.fixture
def engine_triton_dir(tmp_path, monkeypatch):
    """``TRITON_CACHE_DIR`` pointed elsewhere, as vLLM does once its compilation starts."""
    from triton import knobs

    monkeypatch.delitem(knobs.cache.__dict__, "dir", raising=False)
    path = str(tmp_path / "vllm-triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", path)
    return path


def test_a_miss_compiles_into_the_kernel_caches_triton_folder(tmp_path, engine_triton_dir, monkeypatch):
    """Helion's call on a miss (what kernel_pool's workers make) runs with Triton's cache at
    <dir>/triton; the environment is left as it is, and so is Triton's directory afterwards."""
    from triton import knobs

    monkeypatch.setattr(kc, "_warned", {"lookup", "harvest"})  # the probe has no config: no entry
    seen = []
    kernel = kc.CachedKernel(_ProbeKernel(seen), tmp_path / "kc")
    assert torch.equal(kernel(torch.zeros(2)), torch.ones(2))
    assert seen == [(str(tmp_path / "kc" / "triton"), engine_triton_dir)]
    assert (tmp_path / "kc" / "triton").is_dir()
    assert knobs.cache.dir == engine_triton_dir and "dir" not in knobs.cache.__dict__
    assert os.environ["TRITON_CACHE_DIR"] == engine_triton_dir


def test_a_disk_hits_first_run_finds_tritons_files_where_the_workers_wrote_them(
    tmp_path, engine_triton_dir, monkeypatch
):
    """A disk hit's first run looks in <dir>/triton (where the miss above compiled); later calls of
    the same arguments are the in-process fast path and change nothing."""
    from triton import knobs

    seen = []

    def run(x):
        seen.append(knobs.cache.dir)
        return x * 2

    monkeypatch.setattr(kc.CachedKernel, "entry_key", lambda self, args, key: "k")
    monkeypatch.setattr(kc.CachedKernel, "_load", lambda self, path, entry_key, args: run)
    kernel = kc.CachedKernel(_ProbeKernel([]), tmp_path / "kc")
    x = torch.ones(3)
    assert torch.equal(kernel(x), 2 * x) and torch.equal(kernel(x), 2 * x)
    assert seen == [str(tmp_path / "kc" / "triton"), engine_triton_dir]
    assert knobs.cache.dir == engine_triton_dir


def test_triton_cache_scope_leaves_triton_alone_where_it_cannot_write(
    tmp_path, engine_triton_dir, monkeypatch
):
    """A folder that cannot be made (a file in the way) or written: no override, the call runs on
    Triton's own directory, and an error in the body leaves nothing behind either."""
    from triton import knobs

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with kc.triton_cache_scope(blocker):
        assert knobs.cache.dir == engine_triton_dir and "dir" not in knobs.cache.__dict__
    with monkeypatch.context() as patch:
        patch.setattr(kc.os, "access", lambda path, mode: False)  # e.g. read-only, not ours
        with kc.triton_cache_scope(tmp_path / "ro"):
            assert knobs.cache.dir == engine_triton_dir
    with pytest.raises(RuntimeError), kc.triton_cache_scope(tmp_path / "ok"):
        assert knobs.cache.dir == str(tmp_path / "ok" / "triton")
        raise RuntimeError("the kernel failed")
    assert "dir" not in knobs.cache.__dict__ and kc._triton_scope["depth"] == 0


def test_use_inductors_ptxas_applies_inductors_rule_and_survives_without_it(monkeypatch):
    """Inductor's own rule sets TRITON_PTXAS_PATH (here a fake of it); without that private
    function (another torch) nothing changes and nothing raises."""
    from torch._inductor.runtime import compile_tasks

    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.setattr(
        compile_tasks,
        "_set_triton_ptxas_path",
        lambda: os.environ.setdefault("TRITON_PTXAS_PATH", "/torch/bin/ptxas"),
    )
    assert kc.use_inductors_ptxas() == "/torch/bin/ptxas" == os.environ["TRITON_PTXAS_PATH"]
    monkeypatch.delenv("TRITON_PTXAS_PATH")
    monkeypatch.delattr(compile_tasks, "_set_triton_ptxas_path")
    assert kc.use_inductors_ptxas() is None and "TRITON_PTXAS_PATH" not in os.environ


def test_triton_cache_scope_nests_across_threads_and_restores_an_earlier_override(tmp_path, monkeypatch):
    """Blocks entered while one is open keep the first block's directory (another thread's too); the
    last one to leave restores what was there before, here an explicit override."""
    import threading

    from triton import knobs

    monkeypatch.setitem(knobs.cache.__dict__, "dir", "/earlier")
    entered, release, seen = threading.Event(), threading.Event(), []

    def other():
        with kc.triton_cache_scope(tmp_path / "b"):
            seen.append(knobs.cache.dir)
            entered.set()
            release.wait(10)
        seen.append(knobs.cache.dir)

    with kc.triton_cache_scope(tmp_path / "a"):
        t = threading.Thread(target=other)
        t.start()
        assert entered.wait(10)
    assert knobs.cache.dir == str(tmp_path / "a" / "triton")  # the other thread is still inside
    release.set()
    t.join(10)
    assert seen == [str(tmp_path / "a" / "triton"), "/earlier"]
    assert knobs.cache.dir == "/earlier" and kc._triton_scope["depth"] == 0


# --------------------------------------------------------------------------------------------
# A fresh process: no bind, same output; cold vs warm first call
# --------------------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import json, sys, time
    import torch, helion
    from helion.runtime.kernel import BoundKernel
    mode, device, out_path = sys.argv[1:4]
    cfg = json.loads(sys.argv[4])
    originals = [(c, n, getattr(c, n)) for c, n in
                 [(helion.Kernel, "bind"), (helion.Kernel, "_bind"), (BoundKernel, "__init__"), (BoundKernel, "to_code")]]
    if mode == "warm":  # any bind, trace or codegen raises: the kernels must come from the files
        def no_bind(*args, **kwargs):
            raise AssertionError("Helion bind called in the warm process")
        for c, n, _ in originals:
            setattr(c, n, no_bind)
    from hlcore import kernel_cache, norm, scaled_mm as sm
    d = sm.generate_scaled_mm_inputs(8, 64, 256, device=device, seed=1)
    n = norm.generate_norm_inputs(4, 256, device=device, seed=2)
    t0 = time.perf_counter()
    gemm = sm.scaled_mm(**d, config=cfg)
    t1 = time.perf_counter()
    rms = norm.rms_norm(n["x"], n["weight"], 1e-6)
    t2 = time.perf_counter()
    hits = kernel_cache.stats()
    if mode == "warm":  # a new specialization (M = 1) in this process: a miss, a new entry
        for c, n, f in originals:
            setattr(c, n, f)
        sm.scaled_mm(**sm.generate_scaled_mm_inputs(1, 64, 256, device=device, seed=3), config=cfg)
    torch.save({"gemm": gemm.cpu(), "rms": rms.cpu()}, out_path)
    print("RESULT " + json.dumps({"gemm_s": t1 - t0, "rms_s": t2 - t1, "stats": hits, "end": kernel_cache.stats()}))
    """
)


def _child(mode, directory, out_path, triton_cache, script=CHILD):
    env = {**os.environ, kc.ENV_VAR: str(directory), "TRITON_CACHE_DIR": str(triton_cache)}
    if mode == "plain":  # a warm restart without the kernel cache: Triton's cache warm (where the
        del env[kc.ENV_VAR]  # kernel-cache processes compiled: <dir>/triton)
        env["TRITON_CACHE_DIR"] = str(directory / kc.TRITON_SUBDIR)
    if not GPU:
        env["TRITON_INTERPRET"] = "1"
        env.pop("HELION_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable, "-c", script, mode, DEVICE, str(out_path), json.dumps(CFG)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _fresh_process_check(tmp_path, capsys):
    """A cold process fills the cache; a fresh one with every Helion bind/trace/codegen entry point
    raising gives the same outputs from it; its first M = 1 call is a miss with its own entry. On
    the GPU also a process with Triton's cache warm and no kernel cache (today's warm restart)."""
    directory, triton_cache = tmp_path / "kc", tmp_path / "triton"
    start = time.perf_counter()
    cold = _child("cold", directory, tmp_path / "cold.pt", triton_cache)
    cold_wall = time.perf_counter() - start
    assert cold["stats"]["misses"] == 2 and cold["stats"]["writes"] == 2
    assert len(_entries(directory)) == 2
    if GPU:  # Triton compiled the kernels and built their launchers into <dir>/triton, not TRITON_CACHE_DIR
        names = [p.name for p in (directory / kc.TRITON_SUBDIR).rglob("*")]
        assert any(n.endswith(".cubin") for n in names) and any(
            n.startswith("__triton_launcher") for n in names
        )

    start = time.perf_counter()
    warm = _child("warm", directory, tmp_path / "warm.pt", triton_cache)
    warm_wall = time.perf_counter() - start
    assert warm["stats"] == {"disk_hits": 2, "misses": 0, "writes": 0, "errors": 0}
    assert warm["end"]["misses"] == 1 and warm["end"]["writes"] == 1  # M = 1: its own entry
    assert len(_entries(directory)) == 3

    a, b = torch.load(tmp_path / "cold.pt"), torch.load(tmp_path / "warm.pt")
    assert torch.equal(a["gemm"], b["gemm"]) and torch.equal(a["rms"], b["rms"])
    plain = ""
    if GPU:
        base = _child("plain", directory, tmp_path / "plain.pt", triton_cache)
        assert torch.equal(torch.load(tmp_path / "plain.pt")["gemm"], a["gemm"])
        plain = (
            f"; without the kernel cache (Triton cache warm) {base['gemm_s']:.3f} s / {base['rms_s']:.3f} s"
        )
    with capsys.disabled():
        print(
            f"\n[kernel cache, {'GPU' if GPU else 'CPU, TRITON_INTERPRET=1'}] first call in a new process, "
            f"scaled_mm / rms_norm: cold {cold['gemm_s']:.3f} s / {cold['rms_s']:.3f} s, "
            f"warm {warm['gemm_s']:.3f} s / {warm['rms_s']:.3f} s{plain} "
            f"(process wall cold {cold_wall:.1f} s, warm {warm_wall:.1f} s incl. imports and the M=1 miss)"
        )


@needs_codegen
def test_fresh_process_runs_from_the_cache_without_binding(tmp_path, capsys):
    _fresh_process_check(tmp_path, capsys)


@pytest.mark.gpu
def test_fresh_process_runs_from_the_cache_without_binding_gpu(tmp_path, capsys):
    """The same on the GPU (``nox -s gpu_tests -- packages/hlcore/tests/test_kernel_cache.py``):
    real Triton compiles, and the first-call times that a warm restart pays with and without it."""
    if not GPU:
        pytest.skip("needs HL_TEST_GPU=1 and a CUDA GPU")
    _fresh_process_check(tmp_path, capsys)


# --------------------------------------------------------------------------------------------
# Warm without helion (hlcore.helion_free)
# --------------------------------------------------------------------------------------------
CHILD_FREE = textwrap.dedent(
    """
    import json, sys
    import torch
    from hlcore import kernel_cache, scaled_mm as sm
    mode, device, out_path = sys.argv[1:4]
    cfg = json.loads(sys.argv[4])
    d = sm.generate_scaled_mm_inputs(8, 64, 256, device=device, seed=1)
    before = "helion" in sys.modules
    gemm = sm.scaled_mm(**d, config=cfg)
    torch.save({"gemm": gemm.cpu()}, out_path)
    print("RESULT " + json.dumps({"before": before, "helion": "helion" in sys.modules, "stats": kernel_cache.stats()}))
    """
)


@needs_codegen
def test_fresh_process_loads_the_gemm_without_importing_helion(tmp_path):
    """A cold process fills the cache; a fresh one that calls the GEMM with the same arguments loads
    it from the cache without ever importing helion, and gives the same output bitwise."""
    directory, triton_cache = tmp_path / "kc", tmp_path / "triton"
    _child("cold", directory, tmp_path / "cold.pt", triton_cache)
    result = _child("free", directory, tmp_path / "free.pt", triton_cache, script=CHILD_FREE)
    assert result["before"] is False and result["helion"] is False
    assert result["stats"] == {"disk_hits": 1, "misses": 0, "writes": 0, "errors": 0}
    assert torch.equal(torch.load(tmp_path / "free.pt")["gemm"], torch.load(tmp_path / "cold.pt")["gemm"])


def test_helion_free_arithmetic_and_triton_cache_dir_are_helions(monkeypatch):
    import helion
    from helion.autotuner.local_cache import helion_triton_cache_dir

    for n in range(-3, 300):
        assert helion_free.next_power_of_2(n) == helion.next_power_of_2(n)
        for d in (1, 3, 16, 128):
            assert helion_free.cdiv(n, d) == helion.cdiv(n, d)
    for index in (0, 3):
        monkeypatch.delenv("HELION_CACHE_DIR", raising=False)
        assert helion_free.triton_cache_dir(index) == helion_triton_cache_dir(index)
        monkeypatch.setenv("HELION_CACHE_DIR", "/some/where")
        assert helion_free.triton_cache_dir(index) == helion_triton_cache_dir(index)


@needs_codegen
def test_generated_gemm_source_is_rewritten_and_other_helion_uses_are_not(cache_dir):
    _gemm()
    (path,) = _entries(cache_dir, "_scaled_mm_body")
    source = path.read_text(encoding="utf-8").partition("\n")[2]
    assert "import helion\n" in source
    rewritten = helion_free.rewrite(source)
    assert rewritten is not None
    assert "import helion\n" not in rewritten and "from helion" not in rewritten
    assert "import hlcore.helion_free as helion\n" in rewritten
    for other in (
        "    helion.runtime.set_triton_allocator()\n",  # TMA host code
        "from helion.runtime.triton import helpers as helion_triton_helpers\n",  # device helpers
        "    x = helion.exc.ShapeMismatch\n",
        "import helion.language as hl\n",
    ):
        assert helion_free.rewrite(source + other) is None, other
    assert helion_free.rewrite("x = 1\n") is None  # nothing of Helion's to point elsewhere
