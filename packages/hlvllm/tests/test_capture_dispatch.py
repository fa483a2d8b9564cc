"""hlvllm.capture_dispatch (``HL_DISPATCH_AT=capture``): vLLM's compiled graph unchanged, its
``cutlass_scaled_mm`` calls routed while vLLM captures CUDA graphs.

On the CPU the stand-in ``torch.ops._C.cutlass_scaled_mm`` of conftest computes the fp32 reference;
the model calls ``vllm._custom_ops.cutlass_scaled_mm`` (vLLM's own wrapper, what CUTLASS's
``apply_weights`` calls), compiled by Inductor with dynamic num_tokens as vLLM's graphs are."""

import sys
import types

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

N, K = 48, 96


@pytest.fixture
def routed(hl_env, vllm_cutlass_on_cpu):
    """The backend on with HL_DISPATCH_AT=capture, one registered FP8_Dynamic layer of [N, K]."""
    from hlvllm import dispatch, guard, ops
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_DISPATCH_AT", "capture")
    get_settings.cache_clear()
    register()
    d = generate_scaled_mm_inputs(8, N, K, with_bias=True, seed=1)
    guard.register_shape(
        ops.scaled_mm_guard_shape("fp8_dynamic", d["b"], d["scale_b"], d["bias"], torch.bfloat16)
    )
    vllm_cutlass_on_cpu.clear()
    yield d, dispatch, vllm_cutlass_on_cpu
    vllm_cutlass_on_cpu.clear()


def _model(a, b, scale_a, scale_b, bias):
    from vllm import _custom_ops as vllm_ops

    return (
        vllm_ops.cutlass_scaled_mm(
            a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, bias=bias
        )
        * 2
    )


def _inputs(d, m, seed=0):
    x = generate_scaled_mm_inputs(m, N, K, seed=seed)
    return (x["a"], d["b"], x["scale_a"], d["scale_b"], d["bias"])


def _helion(args):
    a, b, sa, sb, bias = args
    return scaled_mm(a, b, sa, sb, torch.bfloat16, bias)


def test_compiled_vllm_call_is_routed_only_while_capturing(routed, monkeypatch):
    """vLLM's graph calls vLLM's op (no hlvllm in the generated code); while routing, a small-M call
    runs Helion into the op's own output buffer, the first eager call of a size checked against
    vLLM's op, later eager calls vLLM's, capture calls Helion; large M runs vLLM's op only; after
    the routing ends the op's kernel is vLLM's again."""
    from torch._inductor.utils import run_and_get_code

    from hlvllm import capture_dispatch

    d, dispatch, cutlass = routed
    torch._dynamo.reset()
    compiled = torch.compile(_model, fullgraph=True, dynamic=True)
    args = _inputs(d, 8)
    helion = _helion(args)
    ref = scaled_mm_ref(*args[:4], torch.bfloat16, args[4])
    assert rel_error(helion, ref) <= tolerance("fp8_dynamic", torch.bfloat16)
    out, codes = run_and_get_code(compiled, *args)  # compiled outside: vLLM's op, nothing of ours
    assert "torch.ops._C.cutlass_scaled_mm.default(" in codes[0] and "hlvllm" not in codes[0]
    assert cutlass == [8] and not dispatch.DISPATCH_COUNTS and rel_error(out, 2 * ref) == 0

    with capture_dispatch.CaptureRouting("CPU"):
        first = compiled(*args)  # the warm-up before a capture: Helion, checked against vLLM's op
        assert dispatch.DISPATCH_COUNTS[("helion", 8, N, K)] == 1 and cutlass == [8, 8]
        again = compiled(*args)  # a later eager call: vLLM's op
        assert dispatch.DISPATCH_COUNTS[("fallback", 8, N, K)] == 1 and cutlass == [8, 8, 8]
        monkeypatch.setattr(dispatch, "_capturing", lambda: True)
        captured = compiled(*args)  # under capture: Helion, vLLM's op not called
        assert dispatch.CAPTURE_COUNTS[("helion", 8, N, K)] == 1 and cutlass == [8, 8, 8]
        monkeypatch.setattr(dispatch, "_capturing", lambda: False)
        big = _inputs(d, 40, seed=2)
        large = compiled(*big)  # above max_helion_size: vLLM's op into out
        assert cutlass[-1] == 40 and not any(key[1] == 40 for key in dispatch.DISPATCH_COUNTS)
    assert torch.equal(first, 2 * helion) and torch.equal(captured, 2 * helion)  # Helion, in vLLM's buffer
    assert rel_error(again, 2 * ref) == 0
    assert rel_error(large, 2 * scaled_mm_ref(*big[:4], torch.bfloat16, big[4])) == 0

    counts, calls = dict(dispatch.DISPATCH_COUNTS), len(cutlass)
    outside = compiled(*args)  # routing over: vLLM's op, nothing of ours
    assert len(cutlass) == calls + 1 and dict(dispatch.DISPATCH_COUNTS) == counts
    assert rel_error(outside, 2 * ref) == 0


def test_calls_it_does_not_compute_exactly_pass_through(routed):
    """Per-tensor scales, an unregistered (N, K), fp32 output: vLLM's op, untouched."""
    from hlvllm import capture_dispatch

    d, dispatch, cutlass = routed
    op = torch.ops._C.cutlass_scaled_mm.default
    a, b, sa, sb, bias = _inputs(d, 4)
    other = generate_scaled_mm_inputs(4, 64, K, seed=5)
    cases = [
        (a, b, sa.amax().reshape(1), sb, bias, torch.bfloat16),  # per-tensor activation scale
        (a, b, sa, sb.amax().reshape(1), bias, torch.bfloat16),  # per-tensor weight scale
        (other["a"], other["b"], other["scale_a"], other["scale_b"], None, torch.bfloat16),  # not our layer
        (a, b, sa, sb, None, torch.float32),  # an output dtype hlvllm's kernels never write
    ]
    with capture_dispatch.CaptureRouting("CPU"):
        for a_, b_, sa_, sb_, bias_, dtype in cases:
            out = torch.empty((a_.shape[0], b_.shape[1]), dtype=dtype)
            op(out, a_, b_, sa_, sb_, bias_)
            sa_, sb_ = (
                sa_.expand(a_.shape[0], 1) if sa_.numel() == 1 else sa_,
                sb_.expand(b_.shape[1]) if sb_.numel() == 1 else sb_,
            )
            assert torch.equal(out, scaled_mm_ref(a_, b_, sa_, sb_, dtype, bias_))
    assert cutlass == [4, 4, 4, 4] and not dispatch.DISPATCH_COUNTS


def test_a_failing_helion_call_writes_vllms_result_and_warns(routed, monkeypatch, caplog):
    from hlvllm import capture_dispatch, gemm

    d, dispatch, cutlass = routed

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gemm, "helion_scaled_mm", broken)
    a, b, sa, sb, bias = _inputs(d, 2)
    out = torch.full((2, N), 5.0, dtype=torch.bfloat16)
    with capture_dispatch.CaptureRouting("CPU"), caplog.at_level("WARNING"):
        torch.ops._C.cutlass_scaled_mm.default(out, a, b, sa, sb, bias)
    assert torch.equal(out, scaled_mm_ref(a, b, sa, sb, torch.bfloat16, bias))
    assert "boom" in caplog.text and "uses vLLM's kernel from now on" in caplog.text


def test_install_runs_the_runners_capture_with_routing(routed, monkeypatch):
    """install() wraps capture_model of the runner modules already imported (never imports one);
    the op is routed inside it only; a second install does not wrap twice."""
    from hlvllm import capture_dispatch

    d, dispatch, cutlass = routed
    monkeypatch.setattr(capture_dispatch.CaptureRouting.__init__, "__defaults__", ("CPU",))
    args = _inputs(d, 2)

    class Runner:
        def capture_model(self):
            out = torch.empty((2, N), dtype=torch.bfloat16)
            torch.ops._C.cutlass_scaled_mm.default(out, *args)
            return out

    fake = types.ModuleType(capture_dispatch.RUNNER_MODULES[0])
    fake.GPUModelRunner = Runner
    monkeypatch.setitem(sys.modules, capture_dispatch.RUNNER_MODULES[0], fake)
    monkeypatch.delitem(sys.modules, capture_dispatch.RUNNER_MODULES[1], raising=False)
    assert capture_dispatch.install() == [capture_dispatch.RUNNER_MODULES[0]]
    assert capture_dispatch.install() == [] and capture_dispatch.installed()
    assert torch.equal(Runner().capture_model(), _helion(args))
    assert dispatch.DISPATCH_COUNTS[("helion", 2, N, K)] == 1
    out = torch.empty((2, N), dtype=torch.bfloat16)
    torch.ops._C.cutlass_scaled_mm.default(out, *args)  # outside capture_model: vLLM's op
    assert sum(dispatch.DISPATCH_COUNTS.values()) == 1
    assert torch.equal(out, scaled_mm_ref(*args[:4], torch.bfloat16, args[4]))


def test_nested_vllm_calls_while_routing_reach_vllms_op(routed, monkeypatch):
    """A vLLM call made while a routed call runs (the speed guard timing vLLM's kernel) is not
    routed again."""
    from hlvllm import capture_dispatch, gemm

    d, dispatch, cutlass = routed
    args = _inputs(d, 4)
    inner = []

    def helion_then_vllm(a, b, sa, sb, out_dtype, bias, out=None, fmt=None):
        vllm = torch.empty((4, N), dtype=torch.bfloat16)
        torch.ops._C.cutlass_scaled_mm.default(vllm, a, b, sa, sb, bias)
        inner.append(vllm)
        return scaled_mm(a, b, sa, sb, out_dtype, bias, out=out)

    monkeypatch.setattr(gemm, "helion_scaled_mm", helion_then_vllm)
    out = torch.empty((4, N), dtype=torch.bfloat16)
    with capture_dispatch.CaptureRouting("CPU"):
        torch.ops._C.cutlass_scaled_mm.default(out, *args)
    assert torch.equal(inner[0], scaled_mm_ref(*args[:4], torch.bfloat16, args[4]))
    assert torch.equal(out, _helion(args)) and dispatch.DISPATCH_COUNTS[("helion", 4, N, K)] == 1


@pytest.mark.parametrize("setting", ["capture", None])
def test_capture_mode_kernel_keeps_vllms_graph(
    cuda_like, graphs_on_config, fp8_layer_config, monkeypatch, caplog, setting
):
    """With HL_DISPATCH_AT=capture, and without it (the default), a kernel adds no compile range and no
    lowering pass, and warns once when no model runner is there to hook."""
    from hlvllm import capture_dispatch, lowering
    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.settings import get_settings

    if setting is None:
        cuda_like.delenv("HL_DISPATCH_AT", raising=False)
    else:
        cuda_like.setenv("HL_DISPATCH_AT", setting)
    get_settings.cache_clear()
    for name in capture_dispatch.RUNNER_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    installed = []
    monkeypatch.setattr(lowering, "install", lambda: installed.append(1))
    cc = graphs_on_config.compilation_config
    before = [(r.start, r.end) for r in cc.get_compile_ranges()]
    with caplog.at_level("WARNING"):
        kernel = HelionFP8ScaledMMLinearKernel(
            fp8_layer_config(), ["weight", "weight_scale", "input_scale", "input_scale_ub"]
        )
    assert kernel.at_capture and not installed
    assert [(r.start, r.end) for r in cc.get_compile_ranges()] == before
    assert "found no vLLM model runner" in caplog.text


_gemm_nt_lib = []
_gemm_nt_calls: list[int] = []


def _fp8_gemm_nt_stand_in():
    """``hltest::fp8_gemm_nt_op`` with DeepGEMM's op schema (vLLM's ``deep_gemm.py``) and the fp32
    block-scaled reference on the CPU; packed (int32) scales, which that reference cannot read, fill
    the output with 7 so that a test sees which kernel wrote it."""
    if not _gemm_nt_lib:
        lib = torch.library.Library("hltest", "DEF")
        lib.define(
            "fp8_gemm_nt_op(Tensor q_input, Tensor input_scale, Tensor weight, Tensor weight_scale, "
            "Tensor(a!) output, bool use_deep_gemm_e8m0) -> ()"
        )

        def impl(q, qs, w, ws, output, e8m0):
            _gemm_nt_calls.append(q.shape[0])
            if qs.dtype == torch.int32:
                output.fill_(7)
                return
            output.copy_(scaled_mm_ref(q, w.t(), qs, ws, output.dtype, block_size=(128, 128)))

        lib.impl("fp8_gemm_nt_op", impl, "CPU")
        _gemm_nt_lib.append(lib)
    return torch.ops.hltest.fp8_gemm_nt_op.default


def _tma_aligned(scale_a: torch.Tensor) -> torch.Tensor:
    """``scale_a [M, G]`` in the layout of vLLM's ``per_token_group_quant_fp8(column_major_scales=True,
    tma_aligned_scales=True)``, what its DeepGEMM kernel quantizes into: strides ``(1, M rounded up to
    a multiple of 4)``."""
    m, g = scale_a.shape
    out = torch.empty_strided((m, g), (1, -(-m // 4) * 4), dtype=scale_a.dtype)
    out.copy_(scale_a)
    return out


@pytest.mark.parametrize("scale_layout", ["row", "column", "tma"])
def test_block_fp8_gemm_ops_are_routed(routed, monkeypatch, scale_layout):
    """Block_FP8 at capture: DeepGEMM's fp8_gemm_nt_op and CUTLASS's block-scaled cutlass_scaled_mm
    of a registered block layer run Helion into the op's output (scales row- or column-major or
    TMA-aligned, as vLLM's quantizers lay them out), also with ``use_deep_gemm_e8m0`` on and fp32
    power-of-two scales (vLLM 0.26's default on Hopper); packed int32 UE8M0 scales stay on vLLM's op."""
    from hlvllm import capture_dispatch, guard
    from hlvllm.guard import GuardShape

    d, dispatch, cutlass = routed
    n, k = 256, 384
    guard.register_shape(GuardShape("block_fp8", n, k, 0, "stand-in", None, None))
    op = _fp8_gemm_nt_stand_in()
    calls = _gemm_nt_calls
    calls.clear()
    monkeypatch.setitem(
        capture_dispatch.ROUTES, ("hltest", "fp8_gemm_nt_op"), capture_dispatch.fp8_gemm_nt_handler
    )
    x = generate_scaled_mm_inputs(3, n, k, fmt="block_fp8", seed=4)
    q, w, ws = x["a"], x["b"].t(), x["scale_b"]
    qs = {"row": x["scale_a"], "column": x["scale_a"].t().contiguous().t()}.get(scale_layout)
    qs = _tma_aligned(x["scale_a"]) if qs is None else qs
    helion = scaled_mm(q, x["b"], qs, ws, torch.bfloat16, block_size=(128, 128))
    ref = scaled_mm_ref(q, x["b"], qs, ws, torch.bfloat16, block_size=(128, 128))
    assert rel_error(helion, ref) <= tolerance("block_fp8", torch.bfloat16)
    # vLLM's FLOAT32_CEIL_UE8M0: fp32 scales rounded up to powers of two
    qs2, ws2 = (torch.exp2(torch.ceil(torch.log2(s))) for s in (qs, ws))
    qs2 = _tma_aligned(qs2) if scale_layout == "tma" else qs2
    assert not torch.equal(qs2, qs)
    helion2 = scaled_mm(q, x["b"], qs2, ws2, torch.bfloat16, block_size=(128, 128))
    packed = torch.zeros((3, 1), dtype=torch.int32)  # Blackwell's UE8M0: 4 exponents per int32
    deep, block_cutlass, e8m0, blackwell = (torch.empty((3, n), dtype=torch.bfloat16) for _ in range(4))
    with capture_dispatch.CaptureRouting("CPU"):
        op(q, qs, w, ws, deep, False)  # the first eager call: Helion, checked against the op
        assert dispatch.DISPATCH_COUNTS[("helion", 3, n, k)] == 1 and calls == [3]
        monkeypatch.setattr(dispatch, "_capturing", lambda: True)
        torch.ops._C.cutlass_scaled_mm.default(block_cutlass, q, x["b"], qs, ws, None)
        assert dispatch.CAPTURE_COUNTS[("helion", 3, n, k)] == 1 and cutlass == []
        op(q, qs2, w, ws2, e8m0, True)  # fp32 power-of-two scales: Helion
        assert dispatch.CAPTURE_COUNTS[("helion", 3, n, k)] == 2 and calls == [3]
        op(q, packed, w, ws2, blackwell, True)  # packed scales: DeepGEMM's own
        assert calls == [3, 3] and dispatch.CAPTURE_COUNTS[("helion", 3, n, k)] == 2
    assert torch.equal(deep, helion) and torch.equal(block_cutlass, helion)
    assert torch.equal(e8m0, helion2) and not torch.equal(helion2, helion)
    assert bool((blackwell == 7).all())
    counts, captured = dict(dispatch.DISPATCH_COUNTS), dict(dispatch.CAPTURE_COUNTS)
    outside = torch.empty((3, n), dtype=torch.bfloat16)
    op(q, qs, w, ws, outside, False)  # routing over (prefill, eager calls): the op's own kernel only
    assert calls == [3, 3, 3] and dict(dispatch.DISPATCH_COUNTS) == counts
    assert dict(dispatch.CAPTURE_COUNTS) == captured and rel_error(outside, ref) == 0


def test_a_routing_that_cannot_be_set_up_leaves_vllms_kernel(routed, monkeypatch, caplog):
    """get_kernel failing (another vLLM's op registration, say): one warning, vLLM's op runs."""
    from hlvllm import capture_dispatch

    d, dispatch, cutlass = routed

    def no_kernel(op, key):
        raise RuntimeError("no kernel for this key")

    monkeypatch.setattr(torch.library, "get_kernel", no_kernel)
    args = _inputs(d, 2)
    out = torch.empty((2, N), dtype=torch.bfloat16)
    with caplog.at_level("WARNING"), capture_dispatch.CaptureRouting("CPU"):
        torch.ops._C.cutlass_scaled_mm.default(out, *args)
    assert "cannot route _C::cutlass_scaled_mm" in caplog.text and cutlass == [2]
    assert (
        torch.equal(out, scaled_mm_ref(*args[:4], torch.bfloat16, args[4])) and not dispatch.DISPATCH_COUNTS
    )
