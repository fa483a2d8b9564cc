"""The plugin against the real vLLM 0.26 package, imported on the CPU."""

import importlib.metadata
import logging
import os

import pytest
import torch


def test_entry_point_is_discoverable():
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert "hlvllm" in eps
    assert eps["hlvllm"].value == "hlvllm.plugin:register"
    from hlvllm.plugin import register

    assert eps["hlvllm"].load() is register


def test_register_is_idempotent_and_puts_kernel_first(hl_env):
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.plugin import register

    before = list(vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA])
    register()
    register()
    import hlvllm.plugin as plugin

    plugin._registered = False  # even a second real registration must not insert twice
    register()
    kernels = vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA]
    assert kernels[0] is HelionFP8ScaledMMLinearKernel
    assert kernels.count(HelionFP8ScaledMMLinearKernel) == 1
    assert kernels[1:] == [k for k in before if k is not HelionFP8ScaledMMLinearKernel]
    assert hasattr(torch.ops.hlvllm, "scaled_mm")
    assert not torch.cuda.is_initialized()


def test_disabled_plugin_leaves_vllm_alone(hl_env):
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    hl_env.delenv("HL_LINEAR_BACKEND")
    get_settings.cache_clear()
    vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA] = [
        k
        for k in vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA]
        if k is not HelionFP8ScaledMMLinearKernel
    ]
    before = list(vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA])
    register()
    assert vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA] == before
    ok, reason = HelionFP8ScaledMMLinearKernel.is_supported(90)
    assert not ok and "HL_LINEAR_BACKEND=helion" in reason


def test_is_supported_reasons(hl_env):
    from vllm.platforms import current_platform

    import hlvllm.support as fk
    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel as K

    ok, reason = K.is_supported(90)  # this machine has no CUDA
    assert not ok and "CUDA" in reason
    hl_env.setattr(current_platform, "is_cuda", lambda: True)
    ok, reason = K.is_supported(80)
    assert not ok and "SM90" in reason and "SM80" in reason
    assert K.is_supported(90) == (True, None)
    fk.helion_importable.cache_clear()
    hl_env.setattr(fk.importlib.util, "find_spec", lambda name: None)
    ok, reason = K.is_supported(90)
    assert not ok and "helion is not installed" in reason
    fk.helion_importable.cache_clear()


def test_can_implement_reasons(hl_env, graphs_on_config, fp8_layer_config):
    from vllm.config import CUDAGraphMode
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8DynamicTensorSym,
        kFp8StaticTensorSym,
    )

    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel as K

    assert K.can_implement(fp8_layer_config()) == (True, None)
    ok, reason = K.can_implement(fp8_layer_config(weight_key=kFp8StaticTensorSym))
    assert not ok and "per-channel" in reason
    ok, reason = K.can_implement(fp8_layer_config(act_key=kFp8DynamicTensorSym))
    assert not ok and "per-token" in reason
    ok, reason = K.can_implement(fp8_layer_config(n=4100))
    assert not ok and "multiples of 16" in reason
    ok, reason = K.can_implement(fp8_layer_config(out_dtype=torch.float32))
    assert not ok and "bf16/fp16" in reason
    graphs_on_config.compilation_config.cudagraph_mode = CUDAGraphMode.NONE
    ok, reason = K.can_implement(fp8_layer_config())
    assert not ok and "CUDA graphs are off" in reason


def test_vllm_chooser_picks_helion_kernel_when_supported(hl_env, graphs_on_config, fp8_layer_config):
    """vLLM's own chooser returns our kernel first, and skips it when disabled by VLLM_DISABLED_KERNELS."""
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum, current_platform
    from vllm.platforms.interface import DeviceCapability

    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.plugin import register
    from hlvllm.vllm_compat import choose_scaled_mm_kernel

    register()
    hl_env.setattr(current_platform, "is_cuda", lambda: True)
    hl_env.setattr(current_platform, "_enum", PlatformEnum.CUDA)
    # vLLM 0.33's CUTLASS kernel (the one chosen when ours is disabled) asks the device's capability
    hl_env.setattr(current_platform, "get_device_capability", lambda device_id=0: DeviceCapability(9, 0))
    chosen = choose_scaled_mm_kernel(
        fp8_layer_config(), vllm_linear._POSSIBLE_FP8_KERNELS, compute_capability=90
    )
    assert chosen is HelionFP8ScaledMMLinearKernel
    hl_env.setattr(vllm_linear.envs, "VLLM_DISABLED_KERNELS", ["HelionFP8ScaledMMLinearKernel"])
    chosen = choose_scaled_mm_kernel(
        fp8_layer_config(), vllm_linear._POSSIBLE_FP8_KERNELS, compute_capability=90
    )
    assert chosen is not HelionFP8ScaledMMLinearKernel


def test_register_turns_the_kernel_cache_on_under_vllms_cache_root(hl_env):
    import os

    from hlvllm.plugin import register

    register()
    assert os.environ["HL_KERNEL_CACHE_DIR"] == os.path.join(os.environ["VLLM_CACHE_ROOT"], "hlcore_kernels")
    from hlcore.kernel_cache import cache_dir_from_env

    assert str(cache_dir_from_env()) == os.environ["HL_KERNEL_CACHE_DIR"]


def test_register_points_triton_at_inductors_ptxas_when_the_kernel_cache_is_on(hl_env):
    """Before anything compiles (the precompile workers inherit it); not with the cache off."""
    import hlcore.kernel_cache as kc
    from hlvllm.plugin import register

    calls = []
    hl_env.setattr(kc, "use_inductors_ptxas", lambda: calls.append("cache on"))
    register()
    assert calls == ["cache on"]

    import hlvllm.plugin as plugin

    hl_env.setattr(plugin, "_registered", False)
    hl_env.setenv("HL_KERNEL_CACHE_DIR", "")  # the user turned the kernel cache off
    calls.clear()
    register()
    assert calls == []


def test_register_leaves_the_kernel_cache_alone_when_disabled(hl_env):
    import os

    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    hl_env.delenv("HL_LINEAR_BACKEND")
    get_settings.cache_clear()
    register()
    assert "HL_KERNEL_CACHE_DIR" not in os.environ


def test_default_kernel_cache_respects_the_users_choice(tmp_path):
    from hlvllm.plugin import default_kernel_cache

    env = {"VLLM_CACHE_ROOT": str(tmp_path)}
    assert default_kernel_cache(env) == str(tmp_path / "hlcore_kernels")
    assert env["HL_KERNEL_CACHE_DIR"] == str(tmp_path / "hlcore_kernels")
    assert default_kernel_cache(env) == str(tmp_path / "hlcore_kernels")  # idempotent
    chosen = {"HL_KERNEL_CACHE_DIR": "/srv/kc", "VLLM_CACHE_ROOT": str(tmp_path)}
    assert default_kernel_cache(chosen) == "/srv/kc" and chosen["HL_KERNEL_CACHE_DIR"] == "/srv/kc"
    off = {"HL_KERNEL_CACHE_DIR": " ", "VLLM_CACHE_ROOT": str(tmp_path)}
    assert default_kernel_cache(off) is None and off["HL_KERNEL_CACHE_DIR"] == " "
    for value in ("1", "2"):
        no_compile_cache = {"VLLM_DISABLE_COMPILE_CACHE": value, "VLLM_CACHE_ROOT": str(tmp_path)}
        assert (
            default_kernel_cache(no_compile_cache) is None and "HL_KERNEL_CACHE_DIR" not in no_compile_cache
        )
    compile_cache_on = {"VLLM_DISABLE_COMPILE_CACHE": "0", "VLLM_CACHE_ROOT": "~/vc"}
    assert default_kernel_cache(compile_cache_on) == os.path.join(
        os.path.expanduser("~/vc"), "hlcore_kernels"
    )


@pytest.mark.parametrize(
    "env,named",
    [
        ({"HL_MAX_HELION_SIZE": "abc"}, "HL_MAX_HELION_SIZE"),
        ({"HL_UNTUNED_SHAPES": "fastest"}, "HL_UNTUNED_SHAPES"),
        ({"HL_AUX_KERNELS": "rmsnorm"}, "HL_AUX_KERNELS"),
        ({"HL_HELION_EAGER": "2"}, "HL_HELION_EAGER"),
        ({"HL_LINEAR_BACKEND": "1"}, "HL_LINEAR_BACKEND"),
        ({"HL_LINEAR_BACKEND": "", "HL_MAX_HELION_SIZE": "-1"}, "HL_MAX_HELION_SIZE"),
    ],
)
def test_a_bad_setting_leaves_vllm_alone_with_one_warning(hl_env, caplog, env, named):
    # vLLM loads general plugins in every process: a ValueError there stopped the server, even with
    # the backend off (fresh-user check, 2026-12-01)
    from vllm import envs
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    from hlvllm.compile_cache import COMPILE_FACTOR
    from hlvllm.fp8_kernel import HelionFP8ScaledMMLinearKernel
    from hlvllm.plugin import register
    from hlvllm.settings import get_settings

    for name, value in env.items():
        hl_env.setenv(name, value)
    get_settings.cache_clear()
    with pytest.raises(ValueError, match=named):
        get_settings()
    table = vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA]
    table[:] = [k for k in table if k is not HelionFP8ScaledMMLinearKernel]
    before = list(table)
    with caplog.at_level(logging.WARNING, logger="vllm.hlvllm"):
        register()
    assert vllm_linear._POSSIBLE_FP8_KERNELS[PlatformEnum.CUDA] == before
    assert COMPILE_FACTOR not in envs.environment_variables  # the compile-cache key is plain vLLM's
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and named in warnings[0] and "vLLM's kernels run" in warnings[0]


@pytest.mark.parametrize("value", ["", "vllm", "0", "off", " OFF "])
def test_backend_off_values_are_quiet(hl_env, value):
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_LINEAR_BACKEND", value)
    get_settings.cache_clear()
    assert not get_settings().enabled
