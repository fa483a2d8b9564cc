"""torch.ops.hlvllm aux ops: the size/capture dispatch inside the op, fake vs real, torch.compile."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from hlcore import activation, norm, quant_kernels


@pytest.fixture
def aux(hl_env):
    from hlvllm import aux_ops
    from hlvllm.plugin import register

    register()
    return aux_ops


@pytest.fixture
def capturing(hl_env):
    """Pretend a CUDA graph is being captured (what vLLM's capture of each batch size looks like
    from inside the op)."""
    from hlvllm import dispatch

    hl_env.setattr(dispatch, "_capturing", lambda: True)


def _set(hl_env, **env):
    from hlvllm.settings import get_settings

    for k, v in env.items():
        hl_env.setenv(k, v)
    get_settings.cache_clear()


# ------------------------------------------------------------------------------------------------
# The routing rule
# ------------------------------------------------------------------------------------------------
def test_route_eager_runs_helion_once_per_size_then_vllm(aux):
    assert aux.route("rms_norm", 4, 1024, torch.bfloat16) == "helion"  # compiles before capture
    assert aux.route("rms_norm", 4, 1024, torch.bfloat16) == "fallback"
    assert aux.route("rms_norm", 4, 1024, torch.float16) == "helion"  # another kernel: warm it too
    assert aux.route("rms_norm", 5, 1024, torch.bfloat16) == "helion"
    assert aux.route("silu_and_mul", 4, 1024, torch.bfloat16) == "helion"
    assert aux.route("rms_norm", 33, 1024, torch.bfloat16) == "fallback"  # > max_helion_size (32)
    assert aux.route("rms_norm", 0, 1024, torch.bfloat16) == "fallback"


def test_route_under_capture_always_helion_up_to_the_limit(aux, capturing):
    for _ in range(3):
        assert aux.route("per_token_fp8_quant", 32, 4096) == "helion"
    assert aux.route("per_token_fp8_quant", 33, 4096) == "fallback"


def test_route_keeps_vllm_where_it_was_faster(aux, capturing):
    """Sizes where the generic Helion config lost to vLLM's CUDA op on the H200 stay on vLLM's op."""
    assert aux.route("per_token_int8_quant", 8, 2048) == "helion"
    assert aux.route("per_token_int8_quant", 8, 2560) == "fallback"
    assert aux.route("per_token_group_fp8_quant", 32, 4096) == "helion"
    assert aux.route("per_token_group_fp8_quant", 16, 8192) == "helion"
    assert aux.route("per_token_group_fp8_quant", 32, 5120) == "fallback"
    for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "per_token_fp8_quant"):
        assert aux.route(op, 32, 8192) == "helion", op


def test_route_limits(aux, capturing, hl_env):
    from hlvllm import routing

    _set(hl_env, HL_MAX_HELION_SIZE="2")
    assert aux.route("rms_norm", 2, 64) == "helion" and aux.route("rms_norm", 3, 64) == "fallback"
    _set(hl_env, HL_MAX_HELION_SIZE="32")
    hl_env.setattr(routing, "_max_m_limit", 8)  # vLLM's largest CUDA-graph capture size
    assert aux.route("rms_norm", 8, 64) == "helion" and aux.route("rms_norm", 9, 64) == "fallback"
    _set(hl_env, HL_MAX_HELION_SIZE="0")
    assert aux.route("rms_norm", 1, 64) == "fallback"


def test_route_helion_eager_setting(aux, hl_env):
    _set(hl_env, HL_HELION_EAGER="1")
    assert [aux.route("silu_and_mul", 3, 64) for _ in range(3)] == ["helion"] * 3


def test_helion_failure_falls_back_once_with_one_warning(aux, capturing, hl_env, caplog):
    def broken():
        raise RuntimeError("no config compiles")

    calls = []
    with caplog.at_level("WARNING", logger="vllm.hlvllm"):
        for _ in range(2):
            out = aux.run("rms_norm", 4, 512, broken, lambda: calls.append(1) or "vllm")
    assert out == "vllm" and calls == [1, 1]
    assert sum("Helion rms_norm kernel failed" in r.message for r in caplog.records) == 1
    assert aux.route("rms_norm", 4, 512) == "fallback"  # that hidden size stays on vLLM's op
    assert aux.route("rms_norm", 4, 1024) == "helion"
    assert aux.AUX_COUNTS[("rms_norm", "fallback", 4, 512)] == 2
    assert aux.AUX_CAPTURE_COUNTS[("rms_norm", "fallback", 4, 512)] == 2


def test_dispatch_log(aux, capturing, hl_env, caplog):
    _set(hl_env, HL_DISPATCH_LOG="1")
    with caplog.at_level("INFO", logger="vllm.hlvllm"):
        for _ in range(3):
            aux.run("silu_and_mul", 2, 64, lambda: 0, lambda: 1)
    assert (
        sum(
            "hlvllm dispatch: silu_and_mul helion num_tokens=2 hidden=64" in r.message for r in caplog.records
        )
        == 1
    )


# ------------------------------------------------------------------------------------------------
# The ops: Helion path == the hlcore kernel, vLLM path == vLLM's math; inputs never mutated
# ------------------------------------------------------------------------------------------------
def _inputs(m, h, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, h + 32, generator=gen) * 2)[:, :h].to(dtype)  # row stride != hidden
    return {
        "x": x,
        "residual": torch.randn(m, h, generator=gen).to(dtype),
        "weight": (1 + 0.1 * torch.randn(h, generator=gen)).to(dtype),
        "ub": torch.tensor([0.75]),
    }


def _cases():
    """(op name, args from inputs, direct hlcore call, hidden the op reports)"""
    return [
        (
            "rms_norm",
            lambda d: (d["x"], d["weight"], 1e-6),
            lambda d: norm.rms_norm(d["x"], d["weight"], 1e-6),
        ),
        (
            "fused_add_rms_norm",
            lambda d: (d["x"], d["residual"], d["weight"], 1e-6),
            lambda d: norm.fused_add_rms_norm(d["x"], d["residual"], d["weight"], 1e-6),
        ),
        ("silu_and_mul", lambda d: (d["x"],), lambda d: activation.silu_and_mul(d["x"])),
        (
            "per_token_fp8_quant",
            lambda d: (d["x"], d["ub"]),
            lambda d: quant_kernels.per_token_fp8_quant(d["x"], d["ub"]),
        ),
        ("per_token_int8_quant", lambda d: (d["x"],), lambda d: quant_kernels.per_token_int8_quant(d["x"])),
        (
            "per_token_group_fp8_quant",
            lambda d: (d["x"], 128, True),
            lambda d: quant_kernels.per_token_group_fp8_quant(d["x"], 128, column_major_scales=True),
        ),
    ]


CASES = _cases()
IDS = [c[0] for c in CASES]


def _as_tuple(out):
    return out if isinstance(out, tuple | list) else (out,)


def _bits(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


@pytest.mark.parametrize("name,args,direct", CASES, ids=IDS)
def test_op_helion_path_is_the_hlcore_kernel(aux, capturing, name, args, direct):
    d = _inputs(3, 256)
    keep = {k: v.clone() for k, v in d.items()}
    op = getattr(torch.ops.hlvllm, name)
    got = _as_tuple(op(*args(d)))
    want = _as_tuple(direct(d))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and g.stride() == w.stride(), name
        assert torch.equal(_bits(g), _bits(w)), name
    for k in d:
        assert torch.equal(d[k], keep[k]), f"{name} mutated {k}"
    hidden = 128 if name == "silu_and_mul" else 256
    assert {(name, "helion", 3, hidden): 1} == aux.AUX_CAPTURE_COUNTS


def test_op_vllm_path_is_vllms_math(aux):
    """Second eager call at a size: vLLM's implementation (on the CPU its native / reference math)."""
    from vllm import ir
    from vllm.model_executor.layers.activation import SiluAndMul

    from hlcore.quant import per_token_fp8_quant_ref, per_token_group_fp8_quant_ref, per_token_int8_quant_ref

    d = _inputs(3, 256)
    x, w, r = d["x"], d["weight"], d["residual"]
    ops = torch.ops.hlvllm
    for _ in range(2):  # first: Helion (warm-up), second: vLLM
        out = ops.rms_norm(x, w, 1e-6)
        out2, res2 = ops.fused_add_rms_norm(x, r, w, 1e-6)
        act = ops.silu_and_mul(x)
        q8, s8 = ops.per_token_fp8_quant(x, None)
        qi, si = ops.per_token_int8_quant(x)
        qg, sg = ops.per_token_group_fp8_quant(x, 128, False)
    assert torch.equal(out, ir.ops.rms_norm.impls["native"].impl_fn(x, w, 1e-6, None))
    ref2, ref_res = ir.ops.fused_add_rms_norm.impls["native"].impl_fn(x, r, w, 1e-6, None)
    assert torch.equal(out2, ref2) and torch.equal(res2, ref_res)
    assert torch.equal(act, SiluAndMul.forward_native(x))
    for (q, s), (q_ref, s_ref) in [
        ((q8, s8), per_token_fp8_quant_ref(x)),
        ((qi, si), per_token_int8_quant_ref(x)),
        ((qg, sg), per_token_group_fp8_quant_ref(x)),
    ]:
        assert torch.equal(_bits(q), _bits(q_ref)) and torch.equal(s, s_ref)
    assert {k[1] for k in aux.AUX_COUNTS} == {"helion", "fallback"}
    assert all(v == 1 for v in aux.AUX_COUNTS.values())


def test_vllm_cuda_ops_are_what_the_fallback_calls(aux, monkeypatch):
    """On CUDA tensors the fallback calls vLLM's CUDA ops; recorded here with stand-ins."""
    from vllm import _custom_ops as vllm_ops

    from hlvllm import aux_ops

    calls = []
    monkeypatch.setattr(aux_ops, "_on_cuda", lambda t: True)  # CPU tensors taken for CUDA ones
    monkeypatch.setattr(
        torch.ops._C, "rms_norm", lambda out, x, w, eps: calls.append(("rms_norm", x.shape)), raising=False
    )
    monkeypatch.setattr(
        torch.ops._C, "silu_and_mul", lambda out, x: calls.append(("silu_and_mul", x.shape)), raising=False
    )
    monkeypatch.setattr(
        vllm_ops,
        "scaled_fp8_quant",
        lambda x, scale, scale_ub=None, use_per_token_if_dynamic=False: calls.append(
            ("scaled_fp8_quant", scale, use_per_token_if_dynamic)
        ),
    )
    monkeypatch.setattr(
        vllm_ops,
        "scaled_int8_quant",
        lambda x, scale, azp, symmetric: calls.append(("scaled_int8_quant", symmetric)) or (x, x, None),
    )
    x = torch.randn(2, 3, 256)
    aux_ops._vllm_rms_norm(x, torch.ones(256), 1e-6)
    aux_ops._vllm_fused_add_rms_norm(x, x, torch.ones(256), 1e-6)
    aux_ops._vllm_silu_and_mul(x)
    aux_ops._vllm_per_token_fp8_quant(x, None)
    aux_ops._vllm_per_token_int8_quant(x)
    assert calls == [
        ("rms_norm", (6, 256)),  # leading dims flattened for vLLM's 2-D kernel
        ("rms_norm", (6, 256)),  # fused add: rounded x + residual, then vLLM's rms_norm
        ("silu_and_mul", (2, 3, 256)),
        ("scaled_fp8_quant", None, True),
        ("scaled_int8_quant", True),
    ]


def test_zero_tokens_no_launch(aux):
    x = torch.empty(0, 256, dtype=torch.bfloat16)
    w = torch.ones(256, dtype=torch.bfloat16)
    assert torch.ops.hlvllm.rms_norm(x, w, 1e-6).shape == (0, 256)
    assert torch.ops.hlvllm.silu_and_mul(x).shape == (0, 128)
    q, s = torch.ops.hlvllm.per_token_group_fp8_quant(x, 128, True)
    assert q.shape == (0, 256) and s.shape == (0, 2)
    assert not aux.AUX_COUNTS


def test_group_size_other_than_128_is_an_error(aux):
    with pytest.raises(ValueError, match="group_size must be 128"):
        torch.ops.hlvllm.per_token_group_fp8_quant(torch.randn(2, 128), 64, False)


# ------------------------------------------------------------------------------------------------
# Fake impls agree with the real ones; torch.compile keeps the ops opaque and routes per call
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 3, 40])
@pytest.mark.parametrize("name,args,direct", CASES, ids=IDS)
def test_fake_impl_agrees_with_real(aux, name, args, direct, m):
    d = _inputs(m, 256, seed=m)
    op = getattr(torch.ops.hlvllm, name)
    real = _as_tuple(op(*args(d)))
    with FakeTensorMode() as mode:
        fake_d = {k: mode.from_tensor(v) for k, v in d.items()}
        fake = _as_tuple(op(*args(fake_d)))
    for r, f in zip(real, fake, strict=True):
        assert (f.shape, f.dtype, f.stride()) == (r.shape, r.dtype, r.stride()), (name, m)


def test_group_quant_fake_layouts(aux):
    x = torch.randn(5, 384)
    for column_major, stride in ((False, (3, 1)), (True, (1, 5))):
        real = torch.ops.hlvllm.per_token_group_fp8_quant(x, 128, column_major)[1]
        with FakeTensorMode() as mode:
            fake = torch.ops.hlvllm.per_token_group_fp8_quant(mode.from_tensor(x), 128, column_major)[1]
        assert real.stride() == fake.stride() == stride


def test_ops_survive_aot_autograd_with_dynamic_tokens(aux):
    """aot_eager runs the fake impls through AOTAutograd (functionalization included): the ops stay
    opaque and the size rule is applied per real call."""
    ops = torch.ops.hlvllm

    def block(x, residual, w):
        h, residual = ops.fused_add_rms_norm(x, residual, w, 1e-6)
        q, s = ops.per_token_fp8_quant(h, None)
        act = ops.silu_and_mul(torch.cat([h, h], dim=-1))
        return q.float() * s + act.float(), residual

    compiled = torch.compile(block, backend="aot_eager", dynamic=True, fullgraph=True)
    for m in (40, 3, 64, 3):
        d = _inputs(m, 128, seed=m)
        out, res = compiled(d["x"].contiguous(), d["residual"], d["weight"])
        assert out.shape == (m, 128) and res.shape == (m, 128)
    helion = {k for k in aux.AUX_COUNTS if k[1] == "helion"}
    assert helion == {
        ("fused_add_rms_norm", "helion", 3, 128),
        ("per_token_fp8_quant", "helion", 3, 128),
        ("silu_and_mul", "helion", 3, 128),
    }
    assert aux.AUX_COUNTS[("fused_add_rms_norm", "fallback", 3, 128)] == 1  # second call at M = 3
    assert aux.AUX_COUNTS[("fused_add_rms_norm", "fallback", 64, 128)] == 1


@pytest.mark.parametrize("name,args,direct", CASES, ids=IDS)
def test_opcheck(aux, name, args, direct):
    """torch.library.opcheck: schema, fake tensor, AOT dispatch (static and dynamic)."""
    d = _inputs(4, 256)
    torch.library.opcheck(
        getattr(torch.ops.hlvllm, name).default,
        args(d),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"),
    )
