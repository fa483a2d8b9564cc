"""torch.ops.hlvllm.scaled_mm: size dispatch inside the op, fake vs real, torch.compile."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance


@pytest.fixture
def op(hl_env):
    import hlvllm.ops as ops
    from hlvllm import dispatch
    from hlvllm.plugin import register

    register()
    calls = []

    def fake_cutlass(a, b, scale_a, scale_b, out_dtype, bias):  # CUTLASS is CUDA-only
        calls.append(a.shape[0])
        return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias)

    hl_env.setattr(ops, "_fallback_scaled_mm", fake_cutlass)
    return torch.ops.hlvllm.scaled_mm, dispatch, calls


def _args(m, n=48, k=96, seed=0, with_bias=True):
    d = generate_scaled_mm_inputs(m, n, k, with_bias=with_bias, seed=seed)
    return (d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"]), d


def test_small_m_runs_helion_once_then_fallback_in_eager(op):
    fn, dispatch, calls = op
    args, d = _args(3)
    out = fn(*args)
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    assert dispatch.DISPATCH_COUNTS[("helion", 3, 48, 96)] == 1  # warm-up compile before capture
    assert calls == [3]  # ... checked once against vLLM's kernel on the same inputs
    out2 = fn(*args)
    assert dispatch.DISPATCH_COUNTS[("fallback", 3, 48, 96)] == 1 and calls == [3, 3]
    assert rel_error(out2, out) <= tolerance("fp8_dynamic", torch.bfloat16)


def test_large_m_uses_fallback(op):
    fn, dispatch, calls = op
    args, d = _args(33)
    out = fn(*args)
    assert calls == [33] and dispatch.DISPATCH_COUNTS[("fallback", 33, 48, 96)] == 1
    assert not any(k[0] == "helion" for k in dispatch.DISPATCH_COUNTS)
    assert rel_error(out, scaled_mm_ref(**d)) == 0.0


def test_max_helion_size_env(op, hl_env):
    from hlvllm.settings import get_settings

    fn, dispatch, calls = op
    hl_env.setenv("HL_MAX_HELION_SIZE", "2")
    get_settings.cache_clear()
    fn(*_args(3)[0])
    assert calls == [3]
    fn(*_args(2)[0])
    assert dispatch.DISPATCH_COUNTS[("helion", 2, 48, 96)] == 1


def test_helion_eager_setting(op, hl_env):
    from hlvllm.settings import get_settings

    fn, dispatch, calls = op
    hl_env.setenv("HL_HELION_EAGER", "1")
    get_settings.cache_clear()
    args, _ = _args(5)
    fn(*args)
    fn(*args)
    assert dispatch.DISPATCH_COUNTS[("helion", 5, 48, 96)] == 2 and calls == [
        5
    ]  # [5]: the first call's check


def test_helion_failure_falls_back_with_warning(op, hl_env, caplog):
    import hlvllm.ops as ops

    fn, dispatch, calls = op

    def broken(*_a):
        raise RuntimeError("no config compiles")

    hl_env.setattr(ops, "_helion_scaled_mm", broken)
    args, d = _args(4)
    with caplog.at_level("WARNING", logger="vllm.hlvllm"):
        out = fn(*args)
        fn(*args)
    assert calls == [4, 4]
    assert sum("Helion fp8_dynamic kernel failed" in r.message for r in caplog.records) == 1
    assert rel_error(out, scaled_mm_ref(**d)) == 0.0


def test_a_failing_kernel_import_falls_back_with_warning(op, hl_env, caplog):
    """The first Helion call imports hlcore's GEMM module (timed, hlvllm.startup): an import that
    fails (a broken Helion install) is a Helion failure like any other: vLLM's kernel, one warning."""
    from hlvllm import startup

    fn, dispatch, calls = op

    def broken(module="hlcore.scaled_mm"):
        raise ImportError("helion is broken here")

    hl_env.setattr(startup, "import_kernels", broken)
    args, d = _args(4)
    with caplog.at_level("WARNING", logger="vllm.hlvllm"):
        out = fn(*args)
    assert calls == [4]
    assert sum("Helion fp8_dynamic kernel failed" in r.message for r in caplog.records) == 1
    assert rel_error(out, scaled_mm_ref(**d)) == 0.0


def test_m_zero(op):
    fn, dispatch, calls = op
    args, _ = _args(0)
    out = fn(*args)
    assert out.shape == (0, 48) and out.dtype == torch.bfloat16 and calls == []


@pytest.mark.parametrize("m", [1, 3, 40])
def test_fake_impl_agrees_with_real(op, m):
    fn, _, _ = op
    for with_bias, out_dtype in [(True, torch.bfloat16), (False, torch.float16)]:
        d = generate_scaled_mm_inputs(m, 48, 96, with_bias=with_bias, out_dtype=out_dtype, seed=m)
        args = (d["a"], d["b"], d["scale_a"], d["scale_b"], out_dtype, d["bias"])
        real = fn(*args)
        with FakeTensorMode() as mode:
            fake_args = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
            fake = fn(*fake_args)
        assert fake.shape == real.shape and fake.dtype == real.dtype == out_dtype
        assert fake.device == real.device


def test_dispatch_survives_torch_compile(op):
    """Dynamo treats the op as opaque: one compiled graph (dynamic M) still routes per call."""
    fn, dispatch, calls = op
    compiled = torch.compile(
        lambda a, b, sa, sb, bias: fn(a, b, sa, sb, torch.bfloat16, bias), backend="eager", dynamic=True
    )
    for m in (40, 3, 64, 2):
        args, d = _args(m, seed=m)
        out = compiled(args[0], args[1], args[2], args[3], args[5])
        assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16), m
    assert calls == [40, 3, 64, 2]  # 3 and 2: the warm-up calls' check against vLLM's kernel
    assert dispatch.DISPATCH_COUNTS[("helion", 3, 48, 96)] == 1
    assert dispatch.DISPATCH_COUNTS[("helion", 2, 48, 96)] == 1


def test_tuned_key_marked_fallback_uses_vllm(op, hl_env, tmp_path, caplog):
    """A key that `hltools autotune` saved with "fallback": true (vLLM's kernel was faster) routes to
    vLLM's kernel even during warm-up; the other tuned key of the same file still runs Helion."""
    from hlcore import config_store as cs
    from hlcore import scaled_mm_config as smc

    fn, dispatch, calls = op
    cfg = {"block_sizes": [16, 16, 32], "num_warps": 4, "num_stages": 1, "split_k": 1, "swap_ab": False}
    entries = [
        cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 48, 96, 3), cfg, fallback=True),
        cs.ConfigEntry(cs.scaled_mm_key("fp8_dynamic", 48, 96, 5), cfg),
    ]
    meta = {"gpu": "nvidia_h200", "helion": cs.installed_helion_version()}
    cs.save_config_file(cs.config_file_path("scaled_mm", "nvidia_h200", tmp_path), entries, meta)
    hl_env.setenv("HL_CONFIG_DIR", str(tmp_path))
    hl_env.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")
    smc.clear_scaled_mm_config_cache()
    try:
        with caplog.at_level("INFO", logger="vllm.hlvllm"):
            fn(*_args(3)[0])
            fn(*_args(5)[0])
        assert calls == [3, 5]  # M=3: marked -> vLLM's kernel, no warm-up compile; 5: Helion's check
        assert dispatch.DISPATCH_COUNTS[("fallback", 3, 48, 96)] == 1
        assert dispatch.DISPATCH_COUNTS[("helion", 5, 48, 96)] == 1
        assert sum("marked as slower" in r.getMessage() for r in caplog.records) == 1
    finally:
        smc.clear_scaled_mm_config_cache()


def test_deterministic_setting_runs_split_k_one(op, hl_env):
    """HL_DETERMINISTIC=1: the picked config with split_k = 1 (no atomics), still the right result;
    unset: the picker's own config (split_k > 1 for this deep-K decode shape)."""
    import json

    import hlvllm.ops as ops
    from hlcore.scaled_mm_config import pick_scaled_mm_config
    from hlvllm.settings import get_settings

    fn, dispatch, calls = op
    m, n, k = 4, 48, 1024
    picked = json.loads(pick_scaled_mm_config("fp8_dynamic", m, n, k).config_json)
    assert picked["split_k"] > 1  # the shape needs a split-K pick for this test to mean anything
    assert ops.helion_config("fp8_dynamic", m, n, k, torch.device("cpu")) is None
    hl_env.setenv("HL_DETERMINISTIC", "1")
    hl_env.setenv("HL_HELION_EAGER", "1")
    get_settings.cache_clear()
    config = ops.helion_config("fp8_dynamic", m, n, k, torch.device("cpu"))
    assert config["split_k"] == 1 and "split_k_workspace" not in config
    args, d = _args(m, n, k)
    out = fn(*args)
    assert dispatch.DISPATCH_COUNTS[("helion", m, n, k)] == 1 and calls == [m]
    assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    assert torch.equal(fn(*args), out)


def test_wrong_helion_result_falls_back_with_warning(op, hl_env, caplog):
    """Never silently wrong: a Helion result that disagrees with vLLM's kernel on the first (warm-up)
    call is replaced by vLLM's, with one warning, and the shape stays on vLLM's kernel."""
    import hlvllm.ops as ops

    fn, dispatch, calls = op
    right = ops._helion_scaled_mm

    def wrong(*a):  # e.g. the K = 1 bug: every product summed block_k times
        return 32 * right(*a)

    hl_env.setattr(ops, "_helion_scaled_mm", wrong)
    args, d = _args(4)
    with caplog.at_level("WARNING", logger="vllm.hlvllm"):
        out = fn(*args)
        out2 = fn(*args)
    assert rel_error(out, scaled_mm_ref(**d)) == 0.0 and rel_error(out2, scaled_mm_ref(**d)) == 0.0
    assert calls == [4, 4, 4]  # the check, its replacement, then the shape is on vLLM's kernel
    assert dispatch.DISPATCH_COUNTS[("fallback", 4, 48, 96)] == 2
    msgs = [r.getMessage() for r in caplog.records if "differs from vLLM's kernel" in r.getMessage()]
    assert len(msgs) == 1 and "relative error" in msgs[0]


def test_disagreement_rules():
    from hlvllm.dispatch import disagreement

    ref = torch.tensor([[1.0, -2.0], [0.5, float("inf")]], dtype=torch.bfloat16)
    assert disagreement("fp8_dynamic", ref.clone(), ref) is None  # inf where vLLM has inf: ignored
    assert "non-finite" in disagreement("fp8_dynamic", ref.masked_fill(ref == 1, float("nan")), ref)
    assert "relative error" in disagreement("fp8_dynamic", ref * 1.5, ref)
    assert "shape" in disagreement("fp8_dynamic", ref[:1], ref)
    zero = torch.zeros(2, 2, dtype=torch.float16)
    assert disagreement("w8a8_int8", zero.clone(), zero) is None
    assert "relative error" in disagreement("w8a8_int8", zero + 1, zero)
    assert disagreement("fp8_dynamic", torch.ones(2, 2), torch.ones(2, 2)) is None  # fp32 out: bf16 rule
