"""Issue 7, item 1: never crash, never silently wrong. Each case where the Helion kernel cannot or
must not run: that layer or shape runs vLLM's kernel, with ONE warning that names the reason (and,
where there is one, the fix). docs/configuration.md "Fallbacks and warnings" cites these tests.

Two levels:

* layer level, at model build: vLLM's own chooser (``choose_scaled_mm_linear_kernel``) asks our
  kernels ``is_supported`` / ``can_implement``; a declined layer gets vLLM's next kernel. vLLM keeps
  the reason to itself when a later kernel takes the layer, so hlvllm warns once per (kernel, reason)
  (``hlvllm.support.warn_if_declined``). Several layers of the same kind: still one warning.
* shape level, at run time: ``torch.ops.hlvllm.scaled_mm`` with a tuned-config directory
  (``HL_CONFIG_DIR``) that is corrupt, foreign or missing, or holds a config that does not compile.
"""

import json
import logging

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm_ref
from hlcore.testing import rel_error, tolerance


def _hl_warnings(caplog) -> list[str]:
    """Our warnings (hlvllm's ``hlvllm: ...``, hlcore's ``hl: ...``), not Triton's or vLLM's."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(("hl:", "hlvllm:"))
    ]


# ------------------------------------------------------------------------------------------------
# Layer level: vLLM's chooser, our kernels declining
# ------------------------------------------------------------------------------------------------
def _int8(*, static=False, channelwise=True, symmetric=True):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        Int8ScaledMMLinearLayerConfig,
    )

    return Int8ScaledMMLinearLayerConfig(
        is_static_input_scheme=static, is_channelwise=channelwise, input_symmetric=symmetric
    )


def _fp8_config(n=4096, k=4096, *, weight=None, act=None, out_dtype=torch.bfloat16):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=getattr(qu, weight or "kFp8StaticChannelSym"),
        activation_quant_key=getattr(qu, act or "kFp8DynamicTokenSym"),
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=out_dtype,
    )


def _block_config(*, static=False, weight_group=(128, 128)):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        GroupShape,
        QuantKey,
        ScaleDesc,
        kFp8Dynamic128Sym,
    )

    fp8 = torch.float8_e4m3fn
    act = QuantKey(fp8, ScaleDesc(torch.float32, True, GroupShape(1, 128)), symmetric=True)
    weight = QuantKey(fp8, ScaleDesc(torch.float32, True, GroupShape(*weight_group)), symmetric=True)
    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=weight,
        activation_quant_key=act if static else kFp8Dynamic128Sym,
        weight_shape=(256, 384),
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
    )


TABLES = {
    "fp8": ("_POSSIBLE_FP8_KERNELS", "HelionFP8ScaledMMLinearKernel"),
    "int8": ("_POSSIBLE_INT8_KERNELS", "HelionInt8ScaledMMLinearKernel"),
    "block": ("_POSSIBLE_FP8_BLOCK_KERNELS", "HelionFp8BlockScaledMMKernel"),
}


def _no_helion(env):
    import hlvllm.support as support

    support.helion_importable.cache_clear()
    env.setattr(support.importlib.util, "find_spec", lambda name: None)


def _sm80(env):
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    env.setattr(current_platform, "get_device_capability", lambda device_id=0: DeviceCapability(8, 0))


def _batch_invariant(env):
    env.setenv("VLLM_BATCH_INVARIANT", "1")


def _graphs_off(env):
    from vllm.config import CUDAGraphMode, get_current_vllm_config

    get_current_vllm_config().compilation_config.cudagraph_mode = CUDAGraphMode.NONE


# id -> (table, layer config, environment change or None, what the warning must say)
DECLINED = {
    "helion_not_importable": (
        "fp8",
        lambda: _fp8_config(),
        _no_helion,
        ["helion is not installed", "pip install helion"],
    ),
    "not_sm90": ("int8", lambda: _int8(), _sm80, ["SM90", "SM80"]),
    "batch_invariant": ("int8", lambda: _int8(), _batch_invariant, ["VLLM_BATCH_INVARIANT=1"]),
    "cuda_graphs_off": ("fp8", lambda: _fp8_config(), _graphs_off, ["CUDA graphs are off", "enforce_eager"]),
    "int8_static_input_scales": ("int8", lambda: _int8(static=True), None, ["static input scales"]),
    "int8_asymmetric": ("int8", lambda: _int8(symmetric=False), None, ["asymmetric"]),
    "int8_per_tensor_weights": ("int8", lambda: _int8(channelwise=False), None, ["per-tensor"]),
    "fp8_per_tensor_weights": (
        "fp8",
        lambda: _fp8_config(weight="kFp8StaticTensorSym"),
        None,
        ["per-channel"],
    ),
    "fp8_static_activations": ("fp8", lambda: _fp8_config(act="kFp8StaticTensorSym"), None, ["per-token"]),
    "fp8_per_tensor_activations": (
        "fp8",
        lambda: _fp8_config(act="kFp8DynamicTensorSym"),
        None,
        ["per-token"],
    ),
    "fp8_n_not_multiple_of_16": ("fp8", lambda: _fp8_config(n=4100), None, ["multiples of 16", "N=4100"]),
    "fp8_k_not_multiple_of_16": ("fp8", lambda: _fp8_config(k=4100), None, ["multiples of 16", "K=4100"]),
    "fp8_fp32_output": ("fp8", lambda: _fp8_config(out_dtype=torch.float32), None, ["bf16/fp16"]),
    "block_static_activations": ("block", lambda: _block_config(static=True), None, ["dynamic"]),
    "block_64x128_weight_blocks": ("block", lambda: _block_config(weight_group=(64, 128)), None, ["128x128"]),
}


@pytest.fixture
def chooser(cuda_like, graphs_on_config):
    """vLLM's chooser on a pretend SM90 CUDA platform with CUDA graphs on, the plugin registered."""
    from vllm.model_executor.kernels import linear as vllm_linear

    import hlvllm.support as support
    from hlvllm.plugin import register
    from hlvllm.vllm_compat import choose_scaled_mm_kernel

    register()

    def choose(table: str, config) -> str:
        """The chosen kernel's class name, or vLLM's error when no kernel takes the layer."""
        try:
            kernel = choose_scaled_mm_kernel(config, getattr(vllm_linear, TABLES[table][0]))
        except ValueError as exc:
            assert "Failed to find a kernel" in str(exc)
            return "ValueError"
        return kernel.__name__

    yield choose
    support.helion_importable.cache_clear()


@pytest.mark.parametrize("case", list(DECLINED))
def test_declined_layer_runs_vllms_kernel_with_one_warning(chooser, cuda_like, caplog, case):
    """Three layers our kernel declines: each gets what vLLM alone would choose (for the block
    cases on this CPU that is vLLM's own "no kernel" error, with or without us), one warning."""
    table, make_config, change, says = DECLINED[case]
    ours = TABLES[table][1]
    if change is not None:
        change(cuda_like)
    with caplog.at_level(logging.WARNING):
        chosen = [chooser(table, make_config()) for _ in range(3)]  # three layers of the same kind
    warnings = _hl_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"hlvllm: {ours} ")
    for text in [*says, f"VLLM_DISABLED_KERNELS={ours}"]:
        assert text in warnings[0], (text, warnings[0])
    cuda_like.setenv("VLLM_DISABLED_KERNELS", ours)
    assert chosen == [chooser(table, make_config())] * 3  # vLLM's choice without our kernel
    if table != "block":
        assert chosen[0].startswith(("Cutlass", "FlashInfer", "Marlin", "Triton")), chosen


def test_each_declined_shape_warns_once(chooser, caplog):
    """Layers of two unsupported shapes: one warning per shape, not per layer."""
    with caplog.at_level(logging.WARNING):
        for n in (4100, 4100, 4104, 4100, 4104):
            chooser("fp8", _fp8_config(n=n))
    warnings = _hl_warnings(caplog)
    assert len(warnings) == 2 and "N=4100" in warnings[0] and "N=4104" in warnings[1], warnings


@pytest.mark.parametrize(
    ("table", "make_config"),
    [("fp8", lambda: _fp8_config()), ("int8", lambda: _int8()), ("block", lambda: _block_config())],
)
def test_supported_layer_takes_helion_and_disabled_kernel_goes_to_vllm(
    chooser, cuda_like, caplog, table, make_config
):
    """A supported layer gets our kernel with no warning; ``VLLM_DISABLED_KERNELS`` naming our kernel
    (the per-format switch to vLLM's kernel) makes vLLM skip it before asking it: vLLM's kernel, and no
    warning from us either."""
    from vllm import envs

    ours = TABLES[table][1]
    assert not envs._is_envs_cache_enabled()  # the env var below is read live
    with caplog.at_level(logging.WARNING):
        assert chooser(table, make_config()) == ours
        cuda_like.setenv("VLLM_DISABLED_KERNELS", f"SomeOtherKernel,{ours}")
        chosen = chooser(table, make_config())
    assert chosen != ours
    assert _hl_warnings(caplog) == []


def test_backend_off_never_warns(hl_env, graphs_on_config, caplog):
    """With ``HL_LINEAR_BACKEND`` unset nothing of ours is in vLLM's lists; even asked directly, a
    declining check stays quiet (the user did not ask for Helion)."""
    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel as K
    from hlvllm.settings import get_settings

    hl_env.delenv("HL_LINEAR_BACKEND")
    get_settings.cache_clear()
    with caplog.at_level(logging.WARNING):
        assert not K.is_supported(90)[0]
        assert not K.can_implement(_fp8_config(n=4100))[0]
    assert _hl_warnings(caplog) == []


# ------------------------------------------------------------------------------------------------
# Shape level: tuned-config files at run time, through torch.ops.hlvllm.scaled_mm
# ------------------------------------------------------------------------------------------------
N, K = 48, 96
GOOD = {"block_sizes": [16, 16, 32], "num_warps": 4, "num_stages": 1, "split_k": 1, "swap_ab": False}


@pytest.fixture
def op(hl_env, tmp_path):
    """The registered op on a pretend H200 (GPU name ``nvidia_h200``), vLLM's kernel replaced by the
    fp32 reference (CUTLASS is CUDA-only), ``HL_CONFIG_DIR`` = an empty ``tmp_path``."""
    import hlvllm.ops as ops
    from hlcore import scaled_mm_config as smc
    from hlvllm import dispatch
    from hlvllm.plugin import register

    register()
    calls = []

    def fake_cutlass(a, b, scale_a, scale_b, out_dtype, bias):
        calls.append(a.shape[0])
        return scaled_mm_ref(a, b, scale_a, scale_b, out_dtype, bias)

    hl_env.setattr(ops, "_fallback_scaled_mm", fake_cutlass)
    hl_env.setattr(smc, "current_gpu_name", lambda device=None: "nvidia_h200")
    hl_env.setenv("HL_CONFIG_DIR", str(tmp_path))
    smc.clear_scaled_mm_config_cache()
    yield torch.ops.hlvllm.scaled_mm, dispatch, calls
    smc.clear_scaled_mm_config_cache()


def _run(fn, fmt="fp8_dynamic", ms=(1, 1, 2, 3)):
    """Call the op at each M (eager: Helion once per M, then vLLM's kernel); check every result."""
    for i, m in enumerate(ms):
        d = generate_scaled_mm_inputs(m, N, K, fmt=fmt, with_bias=True, seed=i)
        out = fn(d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"])
        assert rel_error(out, scaled_mm_ref(**d)) <= tolerance(fmt, torch.bfloat16), m


def _meta(**changes):
    from hlcore.config_store import installed_helion_version

    return {"_metadata": {"gpu": "nvidia_h200", "helion": installed_helion_version(), **changes}}


def _entry(config=GOOD, n=N, k=K, m=1, fmt="fp8_dynamic"):
    return {"key": {"format": fmt, "n": n, "k": k, "m": m}, "config": config}


REJECTED_FILES = {  # file content -> what the one warning says
    "bad_json": ("[{not json", "not valid JSON"),
    "not_a_list": (json.dumps({"key": {}, "config": GOOD}), "expected a JSON list"),
    "bad_metadata": (json.dumps([{"_metadata": "nvidia_h200"}, _entry()]), '"_metadata" must be'),
    "bad_entry": (json.dumps([_meta(), {"key": {"n": 1.5}, "config": GOOD}]), "key must be an object"),
    "another_gpus_file": (json.dumps([_meta(gpu="nvidia_h100"), _entry()]), "tuned on GPU 'nvidia_h100'"),
    "another_helion_version": (json.dumps([_meta(helion="0.0.1"), _entry()]), "tuned with helion 0.0.1"),
}


@pytest.mark.parametrize("case", list(REJECTED_FILES))
def test_rejected_config_file_warns_once_and_vllms_kernel_runs(op, tmp_path, caplog, case):
    """A corrupt or foreign ``scaled_mm/nvidia_h200.json``: one warning naming the file and the
    reason for the whole process (not per shape or call); treated as no file: vLLM's kernel runs."""
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    fn, dispatch, calls = op
    content, reason = REJECTED_FILES[case]
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir()
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        _run(fn)
        assert pick_scaled_mm_config("fp8_dynamic", 1, N, K).source == "heuristic"
    warnings = _hl_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "ignoring tuned-config file" in warnings[0] and str(path) in warnings[0] and reason in warnings[0]
    assert "hlvllm runs vLLM's kernel" in warnings[0]
    assert not any(p == "helion" for (p, _, _, _) in dispatch.DISPATCH_COUNTS) and calls == [1, 1, 2, 3]


def test_file_without_metadata_is_used_silently(op, tmp_path, caplog):
    """``_metadata`` is optional (a hand-written file): its entries are used, nothing is logged."""
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    fn, dispatch, _ = op
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir()
    path.write_text(json.dumps([_entry()]))
    with caplog.at_level(logging.WARNING):
        _run(fn)
    assert _hl_warnings(caplog) == []
    pick = pick_scaled_mm_config("fp8_dynamic", 1, N, K)
    assert pick.source == "exact" and pick.config == GOOD


def test_untuned_shape_uses_the_nearest_tuned_config_with_one_warning(op, tmp_path, caplog):
    """A shape with no key of its own: Helion with the nearest tuned key's config (K, then N, then
    M), one warning for the format naming the shape, the key used, ``hltools autotune`` and
    ``HL_UNTUNED_SHAPES``; a second untuned shape of the format logs at INFO; results checked."""
    from hlcore.scaled_mm_config import pick_scaled_mm_config

    fn, dispatch, _ = op
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir()
    path.write_text(json.dumps([_meta(), _entry(n=64)]))
    with caplog.at_level(logging.INFO, logger="vllm.hlvllm"):
        _run(fn)
        assert dispatch.tuned_fallback("fp8_dynamic", 1, N + 32, K) is False  # another untuned shape
    (warning,) = _hl_warnings(caplog)
    assert f"fp8_dynamic M=1 N={N} K={K} has no tuned key in {path}" in warning
    assert "'n': 64" in warning and "hltools autotune --model <model> --formats fp8_dynamic" in warning
    assert "HL_UNTUNED_SHAPES=vllm" in warning
    infos = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and "has no tuned key" in r.getMessage()
    ]
    assert len(infos) == 1 and f"N={N + 32} K={K}" in infos[0], infos
    pick = pick_scaled_mm_config("fp8_dynamic", 2, N, K)
    assert pick.source == "nearest" and pick.config == GOOD
    assert {m for (p, m, _, _) in dispatch.DISPATCH_COUNTS if p == "helion"} == {1, 2, 3}


def test_untuned_shape_runs_vllms_kernel_with_hl_untuned_shapes_vllm(op, hl_env, tmp_path, caplog):
    """``HL_UNTUNED_SHAPES=vllm``: a shape without a tuned key runs vLLM's kernel (one warning saying
    so); a tuned shape in the same file still runs Helion."""
    from hlvllm.settings import get_settings

    fn, dispatch, calls = op
    hl_env.setenv("HL_UNTUNED_SHAPES", "vllm")
    get_settings.cache_clear()
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir()
    path.write_text(json.dumps([_meta(), _entry(n=64), _entry(m=2)]))
    with caplog.at_level(logging.WARNING):
        _run(fn, ms=(1, 2))  # M=1: key (N, K, 2) is the same shape at another M, so tuned; M=2 exact
        assert {m for (p, m, _, _) in dispatch.DISPATCH_COUNTS if p == "helion"} == {1, 2}
        assert _hl_warnings(caplog) == []
        dispatch.reset()
        calls.clear()
        d = generate_scaled_mm_inputs(1, 64 + 16, K, fmt="fp8_dynamic", with_bias=True, seed=0)
        out = fn(d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"])
        assert rel_error(out, scaled_mm_ref(**d)) <= tolerance("fp8_dynamic", torch.bfloat16)
    assert calls == [1] and set(dispatch.DISPATCH_COUNTS) == {("fallback", 1, 64 + 16, K)}
    (warning,) = _hl_warnings(caplog)
    assert f"N={64 + 16} K={K} has no tuned key" in warning and "vLLM's kernel runs for it" in warning


def test_hl_untuned_shapes_rejects_an_unknown_value(hl_env):
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_UNTUNED_SHAPES", "fastest")
    get_settings.cache_clear()
    with pytest.raises(
        ValueError, match="HL_UNTUNED_SHAPES must be one of nearest, vllm, heuristic; got 'fastest'"
    ):
        get_settings()


@pytest.mark.parametrize("mode", ["nearest", "heuristic"])
@pytest.mark.parametrize("gpu", ["nvidia_h100", None])
def test_gpu_without_a_config_file_warns_once_with_the_tuning_command(
    op, hl_env, tmp_path, caplog, gpu, mode
):
    """An SM90 GPU with no tuned file (here an H100; or ``HL_CONFIG_DIR`` naming a directory that
    does not exist): one warning naming the files looked for, ``hltools autotune`` and
    ``HL_CONFIG_DIR``; vLLM's kernel runs (never an unmeasured config: issue 7), results checked; with
    ``HL_UNTUNED_SHAPES=heuristic`` Helion runs its heuristic default config instead."""
    from hlcore import scaled_mm_config as smc
    from hlvllm.settings import get_settings

    fn, dispatch, calls = op
    hl_env.setenv("HL_UNTUNED_SHAPES", mode)
    get_settings.cache_clear()
    if gpu is None:  # a typo'd HL_CONFIG_DIR
        gpu = "nvidia_h200"
        hl_env.setenv("HL_CONFIG_DIR", str(tmp_path / "no_such_dir"))
    hl_env.setattr(smc, "current_gpu_name", lambda device=None: gpu)
    with caplog.at_level(logging.WARNING):
        _run(fn)
    warnings = _hl_warnings(caplog)
    assert len(warnings) == 1, warnings
    for text in (
        f"no tuned scaled_mm configs for GPU {gpu}",
        "hltools autotune",
        "HL_CONFIG_DIR",
        "vLLM's kernel",
    ):
        assert text in warnings[0], (text, warnings[0])
    helion = {m for (p, m, _, _) in dispatch.DISPATCH_COUNTS if p == "helion"}
    if mode == "heuristic":
        assert helion == {1, 2, 3}
    else:
        assert helion == set() and calls == [1, 1, 2, 3]


def test_file_without_entries_of_a_format_runs_vllms_kernel_with_one_warning(op, tmp_path, caplog):
    """This GPU's file has keys of another format only: the format's shapes run vLLM's kernel, one
    warning naming the shape, the file and the tuning command."""
    fn, dispatch, calls = op
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir()
    path.write_text(json.dumps([_meta(), _entry(fmt="w8a8_int8")]))
    with caplog.at_level(logging.WARNING):
        _run(fn)
    (warning,) = _hl_warnings(caplog)
    assert f"fp8_dynamic M=1 N={N} K={K} has no tuned key in {path}" in warning
    assert "vLLM's kernel runs for it (no tuned entry of this format)" in warning
    assert not any(p == "helion" for (p, _, _, _) in dispatch.DISPATCH_COUNTS) and calls == [1, 1, 2, 3]


@pytest.mark.triton_interpret  # a config fails only when its code is generated
@pytest.mark.parametrize("fmt", ["fp8_dynamic", "w8a8_int8"])
def test_config_that_does_not_compile_falls_back_for_the_shape_with_one_warning(op, tmp_path, caplog, fmt):
    """A tuned config that passes hlcore's checks but that Helion cannot compile (an unknown
    ``indexing``): the first call logs one warning and returns vLLM's result; every later call of
    that (N, K), at any M, runs vLLM's kernel without another warning."""
    fn, dispatch, calls = op
    bad = {**GOOD, "indexing": "no_such_indexing"}
    path = tmp_path / "scaled_mm" / "nvidia_h200.json"
    path.parent.mkdir()
    path.write_text(json.dumps([_meta(), _entry(bad, fmt=fmt)]))
    with caplog.at_level(logging.WARNING):
        _run(fn, fmt)
    warnings = _hl_warnings(caplog)
    assert len(warnings) == 1, warnings
    for text in (f"Helion {fmt} kernel failed for M=1 N={N} K={K}", "no_such_indexing", "hltools validate"):
        assert text in warnings[0], (text, warnings[0])
    assert calls == [1, 1, 2, 3]
    assert not any(p == "helion" for (p, _, _, _) in dispatch.DISPATCH_COUNTS)
