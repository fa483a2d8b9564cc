"""hltools.bench on the CPU: the loop with the real Helion kernel (Triton interpreter) next to fake
baselines and a fake timer, the provider fallback order, the inputs and the bytes moved (the result
schema and its files: test_kernel_results.py)."""

import json

import pytest
import torch

from hlcore import timing
from hlcore.scaled_mm_config import default_scaled_mm_config
from hltools import bench, kernel_results
from hltools.bench import BenchShape, Candidate
from hltools.timing import Timing

TINY = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
META = {"gpu": "cpu", "torch": "t", "triton": "tr", "helion": "h", "vllm": "v", "commit": "abc", "date": "d"}


def _ref_prepare(inputs):
    """A correct baseline: the fp32 reference of each weight copy."""
    from hlcore.scaled_mm import scaled_mm_ref

    def for_m(m):
        a, sa = inputs.a[:m], inputs.scale_a[:m]
        return [
            lambda b=b, s=s: scaled_mm_ref(a, b, sa, s, inputs.out_dtype, block_size=inputs.block_size)
            for b, s in inputs.weights
        ]

    return for_m


def _zeros_prepare(inputs):
    def for_m(m):
        return [lambda: torch.zeros((m, inputs.n), dtype=inputs.out_dtype)] * len(inputs.weights)

    return for_m


def _unavailable(inputs):
    raise ImportError("no such library")


def _raises_at_call(inputs):
    def for_m(m):
        def call():
            raise RuntimeError("kernel launch failed")

        return [call]

    return for_m


class FakeTimer:
    """Times by kernel: the calls of a candidate are recognised by the order they are timed in."""

    def __init__(self, times):
        self.times = list(times)
        self.seen = []

    def __call__(self, calls):
        self.seen.append(len(calls))
        us = self.times[(len(self.seen) - 1) % len(self.times)]
        return Timing(us, 0.99 * us, 1.01 * us)


def _inputs(shape, copies):
    return bench.make_inputs(shape.fmt, shape.n, shape.k, max(shape.ms), copies, device="cpu")


def _run(shapes, candidates, timer, **kw):
    from hlcore.testing import tolerance

    return bench.run_kernel_bench(
        shapes,
        candidates=candidates,
        timer=timer,
        inputs_for=_inputs,
        copies_for=lambda n, k: 3,
        bandwidth_gbs=1000.0,
        shared=META,
        repeats=7,
        tolerance=tolerance,
        **kw,
    )


def test_bench_shapes_order_merge_and_errors():
    shapes = bench.bench_shapes([("tiny", TINY)], ["fp8_dynamic", "block_fp8"], [4, 1, 4])
    assert [(s.fmt, s.layer, s.n, s.k) for s in shapes] == [
        ("fp8_dynamic", "qkv", 512, 256),
        ("fp8_dynamic", "o", 256, 256),
        ("fp8_dynamic", "gate_up", 1024, 256),
        ("fp8_dynamic", "down", 256, 512),
        ("block_fp8", "qkv", 512, 256),
        ("block_fp8", "o", 256, 256),
        ("block_fp8", "gate_up", 1024, 256),
        ("block_fp8", "down", 256, 512),
    ]
    assert all(s.ms == (1, 4) and s.model == "tiny" for s in shapes)
    square = {**TINY, "intermediate_size": 128}  # gate_up (256, 256) = o's shape: timed once
    merged = bench.bench_shapes([("sq", square)], ["fp8_dynamic"], [1], layers=["o", "gate_up"])
    assert [(s.layer, s.n, s.k) for s in merged] == [("o/gate_up", 256, 256)]
    assert [(s.n, s.k, s.tp) for s in bench.bench_shapes([("t", TINY)], ["w8a8_int8"], [1], tp=2)][:2] == [
        (256, 256, 2),
        (256, 128, 2),
    ]
    with pytest.raises(ValueError, match="unknown format"):
        bench.bench_shapes([("t", TINY)], ["fp4"], [1])
    with pytest.raises(ValueError, match="unknown layer"):
        bench.bench_shapes([("t", TINY)], ["fp8_dynamic"], [1], layers=["lm_head"])
    with pytest.raises(ValueError, match="does not divide"):
        bench.bench_shapes([("t", TINY)], ["fp8_dynamic"], [1], tp=3)


def test_default_candidates_follow_vllm_order(monkeypatch):
    monkeypatch.delenv("HL_BLOCK_PROVIDER", raising=False)
    c = bench.default_candidates()
    assert list(c) == ["helion", "vllm", "torch"]
    assert [x.kernel for x in c["vllm"]] == [
        "vllm cutlass_scaled_mm",
        "torch._scaled_mm",  # vLLM's fp8 fallback when its CUTLASS ops are missing
        "vllm block deep_gemm fp8_gemm_nt",
        "vllm block cutlass_scaled_mm",
        "vllm block w8a8_triton_block_scaled_mm",
    ]
    assert [x.kernel for x in c["vllm"] if "block_fp8" in x.formats][0].endswith("fp8_gemm_nt")
    assert [x.kernel for x in c["vllm"] if "w8a8_int8" in x.formats] == ["vllm cutlass_scaled_mm"]
    assert [x.kernel for x in c["torch"]] == ["torch._scaled_mm"] and c["torch"][0].formats == (
        "fp8_dynamic",
    )
    only = bench.default_candidates(["vllm"], ["triton", "cutlass"])
    assert list(only) == ["helion", "vllm"]
    assert [x.kernel for x in only["vllm"]][2:] == [
        "vllm block w8a8_triton_block_scaled_mm",
        "vllm block cutlass_scaled_mm",
    ]
    monkeypatch.setenv("HL_BLOCK_PROVIDER", "cutlass")
    assert [x.kernel for x in bench.default_candidates(["vllm"])["vllm"]][2:] == [
        "vllm block cutlass_scaled_mm"
    ]
    with pytest.raises(ValueError, match="block provider"):
        bench.default_candidates(block_order=["flashinfer"])
    with pytest.raises(ValueError, match="baseline"):
        bench.default_candidates(["cublas"])


def test_provider_candidates_prepare_each_weight_once(ref_provider):
    """A hltools.providers kernel in the loop: weight copies processed once per shape, activation
    scales once per M, and only kernel launches in the timed calls."""
    shape = BenchShape("tiny", "block_fp8", "o", 128, 256, (1, 3))
    timer = FakeTimer([4.0])
    chain = {"vllm": [bench.provider_candidate("vllm", ref_provider)]}
    results = _run([shape], chain, timer)
    assert [(r.kernel, r.m, r.rel_err, r.ok) for r in results] == [
        ("fake reference kernel", 1, 0.0, True),
        ("fake reference kernel", 3, 0.0, True),
    ]
    # calls: the first of each M, checked against the fp32 reference (the fake timer runs none)
    assert ref_provider.counts == {"weights": 3, "scales": 2, "calls": 2}
    assert timer.seen == [3, 3]


def test_loop_with_helion_and_fallback_chain():
    """Helion really runs (interpreter); the vLLM chain skips an unavailable, a raising and a wrong
    candidate, in that order, and records the one that ran and why the others did not."""
    shapes = [BenchShape("tiny", fmt, "o", 32, 128, (1, 3)) for fmt in ("fp8_dynamic", "block_fp8")]
    chain = [
        Candidate("vllm", "unavailable", bench.FORMATS, _unavailable),
        Candidate("vllm", "raises", bench.FORMATS, _raises_at_call),
        Candidate("vllm", "wrong", bench.FORMATS, _zeros_prepare),
        Candidate("vllm", "reference", bench.FORMATS, _ref_prepare),
    ]
    torch_only_fp8 = [Candidate("torch", "torch ref", ("fp8_dynamic",), _ref_prepare)]
    timer = FakeTimer([10.0, 12.5, 20.0])
    seen = []
    results = _run(
        shapes,
        {"helion": [bench.HELION], "vllm": chain, "torch": torch_only_fp8},
        timer,
        on_result=seen.append,
    )
    assert seen == results
    assert [(r.format, r.m, r.provider) for r in results] == [
        ("fp8_dynamic", 1, "helion"),
        ("fp8_dynamic", 1, "vllm"),
        ("fp8_dynamic", 1, "torch"),
        ("fp8_dynamic", 3, "helion"),
        ("fp8_dynamic", 3, "vllm"),
        ("fp8_dynamic", 3, "torch"),
        ("block_fp8", 1, "helion"),
        ("block_fp8", 1, "vllm"),
        ("block_fp8", 3, "helion"),
        ("block_fp8", 3, "vllm"),
    ]
    assert set(timer.seen) == {3}  # every timed graph rotates over the 3 weight copies
    helion = [r for r in results if r.provider == "helion"]
    vllm = [r for r in results if r.provider == "vllm"]
    assert all(r.kernel == "helion scaled_mm" and r.ok for r in helion)
    assert [r.config for r in helion] == [  # where the config came from, then the config itself
        "heuristic "
        + json.dumps(default_scaled_mm_config(r.m, 32, 128), sort_keys=True, separators=(",", ":"))
        for r in helion
    ]
    assert all(r.rel_err < 1e-2 for r in helion)
    assert all(r.kernel == "reference" and r.ok and r.rel_err == 0 for r in vllm)
    for r in vllm:
        assert r.note.startswith("skipped unavailable: unavailable (ImportError: no such library)")
        assert "raises: RuntimeError: kernel launch failed" in r.note
        assert "wrong: wrong result (relative error 1 " in r.note
    first = results[0]
    assert (first.median_us, first.p20_us, first.p80_us) == (10.0, 9.9, 10.1)
    assert results[1].median_us == 12.5 and first.speedup_vs_vllm == pytest.approx(1.25)
    assert results[1].speedup_vs_vllm == 1.0 and results[2].speedup_vs_vllm == pytest.approx(12.5 / 20)
    nbytes = bench.gemm_bytes("fp8_dynamic", 1, 32, 128)
    assert first.gbps == pytest.approx(nbytes / 10e3) and first.roofline_pct == pytest.approx(first.gbps / 10)
    assert all(r.copies == 3 and r.repeats == 7 and r.gpu == "cpu" and r.commit == "abc" for r in results)
    assert kernel_results.failures(results) == []


def test_a_disturbed_timing_is_timed_again_and_the_steadiest_kept():
    """A timing whose p80 / p20 exceeds RETIME_SPREAD is timed again (at most RETIME_TRIES more
    times); the row keeps the narrowest and says so. The numbers are a disturbed row of a real run
    (lab/results/2026-12-05-e, Qwen3-14B W8A8_INT8 down at M = 2: 45.8 µs, p20-p80 43.5-47.7, where
    the same config read 34.7 µs at M = 1)."""
    shape = BenchShape("tiny", "w8a8_int8", "o", 32, 128, (1, 2, 3))
    fake_helion = Candidate("helion", "fake helion", bench.FORMATS, _ref_prepare)
    timings = iter(
        [
            Timing(45.8, 43.5, 47.7),  # M = 1: disturbed, then steady
            Timing(34.7, 34.6, 35.1),
            Timing(35.0, 34.8, 35.3),  # M = 2: steady at once
            Timing(50.0, 40.0, 60.0),  # M = 3: disturbed every time; the narrowest is kept
            Timing(40.0, 38.0, 44.0),
            Timing(55.0, 40.0, 70.0),
        ]
    )
    calls = []

    def timer(c):
        calls.append(len(c))
        return next(timings)

    results = _run([shape], {"helion": [fake_helion]}, timer)
    assert len(calls) == 2 + 1 + (1 + timing.RETIME_TRIES) == 6  # M = 1, 2, 3
    assert [(r.m, r.median_us, r.p20_us, r.p80_us) for r in results] == [
        (1, 34.7, 34.6, 35.1),
        (2, 35.0, 34.8, 35.3),
        (3, 40.0, 38.0, 44.0),
    ]
    assert results[0].note == f"timed 2 times (p80/p20 above {timing.RETIME_SPREAD}): kept the steadiest"
    assert results[1].note == ""
    assert results[2].note.startswith("timed 3 times") and "all disturbed" in results[2].note
    assert all(r.ok for r in results)


def test_all_candidates_failing_gives_a_failed_row():
    shape = BenchShape("tiny", "w8a8_int8", "o", 32, 128, (2,))
    fake_helion = Candidate("helion", "fake helion", bench.FORMATS, _ref_prepare)
    chain = [
        Candidate("vllm", "a", bench.FORMATS, _unavailable),
        Candidate("vllm", "b", ("block_fp8",), _ref_prepare),
    ]
    results = _run([shape], {"helion": [fake_helion], "vllm": chain}, FakeTimer([5.0]))
    helion, vllm = results
    assert helion.ok and helion.speedup_vs_vllm is None
    assert vllm.kernel == "-" and vllm.median_us is None and not vllm.ok
    assert vllm.note == "failed: a: unavailable (ImportError: no such library)"
    assert kernel_results.speedups(results) == [] and kernel_results.geomean_by_format(results) == {}


def test_helion_failure_and_tolerance_are_reported():
    shape = BenchShape("tiny", "fp8_dynamic", "o", 32, 128, (1,))
    wrong = Candidate("helion", "helion zeros", bench.FORMATS, _zeros_prepare)
    (row,) = _run([shape], {"helion": [wrong]}, FakeTimer([5.0]))
    assert row.kernel == "helion zeros" and row.median_us == 5.0 and not row.ok
    assert "above the tolerance" in row.note
    (row,) = _run(
        [shape], {"helion": [Candidate("helion", "x", bench.FORMATS, _unavailable)]}, FakeTimer([1])
    )
    assert row.kernel == "-" and not row.ok and row.note.startswith("failed: x: unavailable")
    assert kernel_results.failures([row]) == [row]


def test_make_inputs_and_bytes():
    d = bench.make_inputs("block_fp8", 256, 384, 5, 3, device="cpu", seed=1)
    assert d.a.shape == (5, 384) and d.scale_a.shape == (5, 3) and len(d.weights) == 3
    for b, s in d.weights:
        assert b.shape == (384, 256) and b.stride() == (1, 384) and s.shape == (2, 3)
        assert b.float().abs().sum() > 0  # never zeros
    assert not torch.equal(d.weights[1][0].float(), d.weights[2][0].float())
    assert d.block_size == (128, 128) and d.reference(2).shape == (2, 256)
    i8 = bench.make_inputs("w8a8_int8", 64, 128, 2, 2, device="cpu")
    assert (
        i8.a.dtype == torch.int8
        and i8.weights[1][0].dtype == torch.int8
        and i8.weights[1][1].shape == (64, 1)
    )
    assert bench.gemm_bytes("fp8_dynamic", 2, 64, 128) == 2 * 128 + 64 * 128 + 4 * (2 + 64) + 2 * 2 * 64
    assert (
        bench.gemm_bytes("block_fp8", 2, 256, 384, out_bytes=4)
        == 2 * 384 + 256 * 384 + 4 * (2 * 3 + 2 * 3) + 4 * 2 * 256
    )
    with pytest.raises(ValueError, match="unknown format"):
        bench.quantize_weight("fp4", torch.zeros(2, 2))


def test_helion_reads_block_scales_in_the_layout_asked(monkeypatch):
    """``--block-scale-a tma``: Helion's Block_FP8 calls get vLLM's TMA-aligned column-major scale_a
    (column stride M rounded up to 4), the result still the fp32 reference's; per-token formats and
    ``row`` keep the row-major scales."""
    from hlcore import scaled_mm as sm

    strides = []
    real = sm.scaled_mm

    def spy(a, b, scale_a, *args, **kw):
        strides.append((kw.get("block_size") is not None, a.shape[0], scale_a.stride()))
        return real(a, b, scale_a, *args, **kw)

    monkeypatch.setattr(sm, "scaled_mm", spy)
    shapes = [BenchShape("tiny", fmt, "o", 32, 256, (3,)) for fmt in ("fp8_dynamic", "block_fp8")]
    for layout, block_stride in (("tma", (1, 4)), ("row", (2, 1))):
        strides.clear()
        cand = bench.helion_candidate(layout)
        results = _run(shapes, {"helion": [cand]}, FakeTimer([10.0]))
        assert all(r.ok and r.rel_err < 1e-2 for r in results)
        # the layout is named on Block_FP8's rows only: the per-token formats have no block scales
        tag = " (block scale_a tma)" if layout == "tma" else ""
        assert {(r.format, r.kernel) for r in results} == {
            ("fp8_dynamic", "helion scaled_mm"),
            ("block_fp8", "helion scaled_mm" + tag),
        }
        assert {s for s in strides if s[0]} == {(True, 3, block_stride)}  # [3, 2] groups of K = 256
        assert {s for s in strides if not s[0]} == {(False, 3, (1, 1))}  # per-token [3, 1]
    assert bench.helion_candidate("tma").kernel == "helion scaled_mm (block scale_a tma)"
    with pytest.raises(ValueError, match="block scale_a layout"):
        bench.helion_candidate("column")


@pytest.mark.parametrize(
    ("layout", "mode", "expected"),
    [
        ("auto", None, "tma"),
        ("auto", "op", "row"),
        ("auto", "capture", "tma"),
        ("row", None, "row"),
        ("tma", "op", "tma"),
    ],
)
def test_block_scale_a_auto_is_the_dispatch_modes_layout(dispatch_at, layout, mode, expected):
    dispatch_at(mode)
    assert bench.resolve_block_scale_a(layout) == expected
    with pytest.raises(
        ValueError, match=r"block scale_a layout must be auto or one of \[.row., .tma.\]; got .column."
    ):
        bench.resolve_block_scale_a("column")
