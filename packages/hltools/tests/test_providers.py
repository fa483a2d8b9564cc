"""hltools.providers on the CPU: the candidate order and its env overrides, the chooser's skip
reasons, the activation-scale layouts, and each provider's set-up / call split with vLLM's ops
replaced by fakes that compute what the real op computes from the arguments vLLM's kernel classes
pass it (the real ops need a GPU: ``tests/gpu/test_formats_vs_vllm_gpu.py`` runs them)."""

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error
from hltools import providers
from hltools.providers import BLOCK, PreparedWeight, Unsupported


def _inputs(fmt, m=5, n=256, k=384, seed=0):
    return generate_scaled_mm_inputs(m, n, k, fmt=fmt, seed=seed)


def _ref(d, b=None, scale_b=None):
    b = d["b"] if b is None else b
    scale_b = d["scale_b"] if scale_b is None else scale_b
    return scaled_mm_ref(d["a"], b, d["scale_a"], scale_b, torch.bfloat16, block_size=d["block_size"])


def _block_ref(a, b_kn, scale_a, scale_b_nk, out_dtype):
    """The block GEMM from explicit scale layouts (as a fake op sees them)."""
    return scaled_mm_ref(a, b_kn, scale_a, scale_b_nk, out_dtype, block_size=BLOCK)


# --------------------------------------------------------------------------------------------
# Order, overrides, chooser
# --------------------------------------------------------------------------------------------
def test_candidates_follow_vllm_order_and_overrides(monkeypatch):
    monkeypatch.delenv("HL_BLOCK_PROVIDER", raising=False)
    assert providers.candidates("fp8_dynamic") == [providers.CutlassScaledMM, providers.TorchScaledMM]
    assert providers.candidates("w8a8_int8") == [providers.CutlassScaledMM]
    assert providers.candidates("block_fp8") == [
        providers.DeepGemmBlock,
        providers.CutlassBlock,
        providers.TritonBlock,
    ]
    assert providers.candidates("block_fp8", ["triton", "cutlass", "triton"]) == [
        providers.TritonBlock,
        providers.CutlassBlock,
    ]
    monkeypatch.setenv("HL_BLOCK_PROVIDER", "cutlass")
    assert providers.candidates("block_fp8") == [providers.CutlassBlock]
    assert providers.block_order(["triton"]) == ("triton",)  # an explicit order beats the env
    monkeypatch.setenv("HL_BLOCK_PROVIDER", "flashinfer")
    with pytest.raises(ValueError, match="unknown HL_BLOCK_PROVIDER.*deep_gemm"):
        providers.candidates("block_fp8")
    with pytest.raises(ValueError, match="unknown block provider"):
        providers.block_order(["cublas"])
    with pytest.raises(ValueError, match="unknown format"):
        providers.candidates("fp4")


def _fake(name, setup=None, can_implement=None, base=providers.ScaledMMProvider):
    attrs = {"name": name, "mirrors": "-", "formats": ("block_fp8",)}
    if setup:
        attrs["_setup"] = setup
    if can_implement:
        attrs["can_implement"] = can_implement
    return type(name, (base,), attrs)


def test_vllm_default_takes_the_first_that_builds_and_says_why(monkeypatch):
    def no_import(self):
        raise ImportError("no DeepGEMM here")

    def not_this_shape(self, n, k):
        return f"N={n} is not a multiple of 64" if n % 64 else None

    chain = [
        _fake("missing", setup=no_import),
        _fake("shape", can_implement=not_this_shape),
        _fake("works"),
    ]
    monkeypatch.setattr(providers, "candidates", lambda fmt, order=None: chain)
    p = providers.vllm_default("block_fp8", n=96, k=128)
    assert p.name == "works" and p.fmt == "block_fp8" and p.out_dtype == torch.bfloat16
    assert p.skipped == (
        "missing: ImportError: no DeepGEMM here",
        "shape: Unsupported: N=96 is not a multiple of 64",
    )
    assert providers.vllm_default("block_fp8", n=128, k=128).name == "shape"
    assert providers.vllm_default("block_fp8").skipped == ("missing: ImportError: no DeepGEMM here",)
    monkeypatch.setattr(providers, "candidates", lambda fmt, order=None: chain[:2])
    with pytest.raises(
        Unsupported, match="no vLLM kernel for block_fp8.*missing: ImportError.*shape: Unsupported"
    ):
        providers.vllm_default("block_fp8", n=96, k=128)


def test_constructor_checks_format_dtype_and_vllm_env(monkeypatch):
    with pytest.raises(Unsupported, match="does not take w8a8_int8"):
        providers.TritonBlock("w8a8_int8")
    with pytest.raises(Unsupported, match="bf16 or fp16"):
        providers.TorchScaledMM("fp8_dynamic", torch.float32)
    monkeypatch.setenv("VLLM_USE_DEEP_GEMM", "0")
    with pytest.raises(Unsupported, match="VLLM_USE_DEEP_GEMM=0"):
        providers.DeepGemmBlock("block_fp8")
    monkeypatch.delenv("VLLM_USE_DEEP_GEMM")
    with pytest.raises(Unsupported, match="bf16 output only"):
        providers.DeepGemmBlock("block_fp8", torch.float16)


def test_scale_layouts():
    s = torch.arange(15, dtype=torch.float32).reshape(5, 3)
    cm = providers.column_major(s)
    assert torch.equal(cm, s) and cm.stride() == (1, 5)
    tma = providers.tma_aligned_column_major(s)
    assert torch.equal(tma, s) and tma.stride() == (1, 8)  # M rounded up to 4 floats (16 bytes)
    assert providers.tma_aligned_column_major(s[:4]).stride() == (1, 4)


# --------------------------------------------------------------------------------------------
# Each provider's set-up / call split, with fakes of vLLM's ops
# --------------------------------------------------------------------------------------------
class FakeCutlassOps:
    """``cutlass_scaled_mm(a, b [K, N] col-major, scale_a, scale_b, out_dtype)``: per-token/channel
    scales ``[M, 1]``/``[N, 1]``, or block scales ``[M, K/128]`` and ``[K/128, N/128]``."""

    def __init__(self):
        self.scale_layouts = []

    def cutlass_scaled_mm(self, a, b, scale_a, scale_b, out_dtype):
        assert b.stride(0) == 1, "CUTLASS takes B column-major"
        self.scale_layouts.append((scale_a.stride(), tuple(scale_b.shape)))
        if scale_a.shape[1] == 1:
            return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype)
        return _block_ref(a, b, scale_a, scale_b.t(), out_dtype)


def _with_setup(cls, **attrs):
    """``cls`` whose import/GPU probe is replaced by ``attrs`` (the fakes)."""

    def setup(self):
        for key, value in attrs.items():
            setattr(self, key, value)

    return type(cls.__name__, (cls,), {"_setup": setup})


@pytest.mark.parametrize("fmt", ["fp8_dynamic", "w8a8_int8"])
def test_cutlass_scaled_mm(fmt):
    ops = FakeCutlassOps()
    p = _with_setup(providers.CutlassScaledMM, _ops=ops)(fmt)
    d = _inputs(fmt)
    assert rel_error(p(d["a"], d["b"], d["scale_a"], d["scale_b"]), _ref(d)) == 0
    assert ops.scale_layouts == [((1, 1), (256, 1))]


def test_cutlass_block_takes_column_major_scales_and_transposed_weight_scales():
    ops = FakeCutlassOps()
    p = _with_setup(providers.CutlassBlock, _ops=ops)("block_fp8")
    d = _inputs("block_fp8")
    w = p.prepare_weight(d["b"], d["scale_b"])
    assert w.kernel_b is d["b"] and torch.equal(w.kernel_scale_b, d["scale_b"].t()) and not w.requantized
    assert rel_error(p.call(d["a"], p.prepare_scale_a(d["scale_a"]), w), _ref(d)) == 0
    assert ops.scale_layouts == [((1, 5), (3, 2))]  # As column-major [M, K/128]; Ws.T [K/128, N/128]


def test_triton_block_takes_the_n_by_k_weight():
    def w8a8_triton_block_scaled_mm(a, w_nk, scale_a, scale_b, block_size, out_dtype):
        assert w_nk.shape == (256, 384) and w_nk.is_contiguous() and block_size == [128, 128]
        return _block_ref(a, w_nk.t(), scale_a, scale_b, out_dtype)

    p = _with_setup(providers.TritonBlock, _mm=w8a8_triton_block_scaled_mm)("block_fp8")
    d = _inputs("block_fp8")
    assert rel_error(p(d["a"], d["b"], d["scale_a"], d["scale_b"]), _ref(d)) == 0


def test_torch_scaled_mm_row_wise_scales(monkeypatch):
    def fake_scaled_mm(a, b, *, scale_a, scale_b, out_dtype):
        assert scale_a.shape == (5, 1) and scale_b.shape == (1, 256)
        return scaled_mm_ref(a, b, scale_a, scale_b.t(), out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", fake_scaled_mm)
    p = providers.TorchScaledMM("fp8_dynamic")
    d = _inputs("fp8_dynamic")
    assert rel_error(p(d["a"], d["b"], d["scale_a"], d["scale_b"]), _ref(d)) == 0


class FakeDeepGemm:
    """``vllm.utils.deep_gemm`` with DeepGEMM's SM90 contract: ``fp8_gemm_nt((A, As), (W [N, K],
    Ws), out)`` with As TMA-aligned column-major; Ws in whatever layout the post-processing made."""

    def __init__(self, e8m0):
        self.e8m0, self.gemm_calls = e8m0, 0

    def is_deep_gemm_supported(self):
        return True

    def is_deep_gemm_e8m0_used(self):
        return self.e8m0

    def should_use_deepgemm_for_fp8_linear(self, out_dtype, weight_shape):
        return out_dtype == torch.bfloat16 and weight_shape[0] % 64 == 0 and weight_shape[1] % 128 == 0

    def fp8_gemm_nt(self, a_pair, w_pair, out, is_deep_gemm_e8m0_used):
        (a, sa), (w, ws_kernel) = a_pair, w_pair
        assert sa.stride(0) == 1 and sa.stride(1) % 4 == 0, "As must be TMA-aligned column-major"
        assert w.is_contiguous() and is_deep_gemm_e8m0_used == self.e8m0
        self.gemm_calls += 1
        out.copy_(_block_ref(a, w.t(), sa, ws_kernel.t(), out.dtype))


def _fake_post_process(wq, ws, block, use_e8m0):
    """vLLM's deepgemm_post_process_fp8_weight_block: UE8M0 re-quantization in place (power-of-two
    block scales), then the scales in DeepGEMM's layout (here: transposed, so a caller that hands the
    reference layout to the kernel would fail)."""
    if use_e8m0:
        bn, bk = block
        s_old = ws.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[: wq.shape[0], : wq.shape[1]]
        pow2 = torch.exp2(torch.ceil(torch.log2(ws)))
        s_new = pow2.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[: wq.shape[0], : wq.shape[1]]
        wq.copy_((wq.float() * s_old / s_new).to(wq.dtype))
        ws.copy_(pow2)
    return wq, ws.t().contiguous()


@pytest.mark.parametrize("e8m0", [True, False])
def test_deep_gemm_processes_each_weight_once_on_a_copy(monkeypatch, e8m0):
    from vllm.model_executor.layers.quantization.utils import fp8_utils
    from vllm.utils import deep_gemm

    fake = FakeDeepGemm(e8m0)
    for name in ("is_deep_gemm_supported", "is_deep_gemm_e8m0_used", "should_use_deepgemm_for_fp8_linear"):
        monkeypatch.setattr(deep_gemm, name, getattr(fake, name))
    monkeypatch.setattr(deep_gemm, "fp8_gemm_nt", fake.fp8_gemm_nt)
    monkeypatch.setattr(fp8_utils, "deepgemm_post_process_fp8_weight_block", _fake_post_process)
    with pytest.raises(Unsupported, match="N=96"):
        providers.DeepGemmBlock("block_fp8", n=96, k=384)
    p = providers.DeepGemmBlock("block_fp8", n=256, k=384)
    d = _inputs("block_fp8")
    b0, sb0 = d["b"].clone(), d["scale_b"].clone()
    w = p.prepare_weight(d["b"], d["scale_b"])
    assert torch.equal(d["b"].float(), b0.float()) and torch.equal(d["scale_b"], sb0)  # caller's untouched
    assert isinstance(w, PreparedWeight) and w.requantized == e8m0 and w.b.stride(0) == 1
    assert torch.equal(w.kernel_scale_b, w.scale_b.t())  # the kernel gets the post-processed layout
    calls = p.calls(d["a"], p.prepare_scale_a(d["scale_a"]), [w, w])
    outs = [c() for c in calls]
    assert fake.gemm_calls == 2 and all(rel_error(o, p.reference(d["a"], d["scale_a"], w)) == 0 for o in outs)
    if e8m0:  # the re-quantized weight is what vLLM multiplies: off the original reference, by design
        assert torch.equal(w.scale_b, torch.exp2(torch.log2(w.scale_b).round()))
        assert 5e-3 < rel_error(outs[0], _ref(d)) < 0.1
    else:
        assert w.b is d["b"] and w.scale_b is d["scale_b"] and rel_error(outs[0], _ref(d)) == 0


def test_one_off_call_and_reference_use_the_prepared_operands(ref_provider):
    p = ref_provider("block_fp8")
    d = _inputs("block_fp8", n=192, k=200)  # partial 128-blocks
    assert rel_error(p(d["a"], d["b"], d["scale_a"], d["scale_b"]), _ref(d)) == 0
    assert p.counts == {"weights": 1, "scales": 1, "calls": 1}
    assert p.block_size == BLOCK and ref_provider("fp8_dynamic").block_size is None
