"""hlvllm's settings in vLLM's torch.compile cache key (:mod:`hlvllm.compile_cache`), against the real
vLLM 0.26 on the CPU.

The key is what vLLM computes: ``vllm.compilation.caching.aot_compile_hash_factors(vllm_config)``
(the default AOT path: the hash of ``envs.compile_factors()`` and ``VllmConfig.compute_hash()``; the
first is also in ``compilation/backends.py``'s key of the non-AOT path)."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

HL_VARS = (
    "HL_LINEAR_BACKEND",
    "HL_AUX_KERNELS",
    "HL_AUX_FUSION",
    "HL_MAX_HELION_SIZE",
    "HL_HELION_EAGER",
    "HL_DISPATCH_LOG",
    "HL_CONFIG_DIR",
)


@pytest.fixture
def cache_key(hl_env):
    """``cache_key(load_plugin=True, **env)``: a fresh process's view (HL_* and VLLM_PLUGINS from
    ``env`` only, the plugin registered anew or not at all) -> vLLM's compile-cache key factors of a
    new CPU ``VllmConfig``."""
    from vllm import envs
    from vllm.compilation.caching import aot_compile_hash_factors
    from vllm.compilation.passes.pass_manager import PostGradPassManager
    from vllm.config import DeviceConfig, VllmConfig

    import hlvllm.plugin as plugin
    from hlvllm import aux_fusion
    from hlvllm.compile_cache import COMPILE_FACTOR
    from hlvllm.settings import get_settings

    # register() installs the HL_AUX_FUSION pass on vLLM's pass manager: undone per key and after
    configure = PostGradPassManager.configure
    hl_env.setattr(PostGradPassManager, "configure", configure)
    hl_env.setattr(aux_fusion, "_installed", False)

    def key(load_plugin: bool = True, **env: str) -> tuple[str, ...]:
        for name in (*HL_VARS, "VLLM_PLUGINS"):
            hl_env.delenv(name, raising=False)
        for name, value in env.items():
            hl_env.setenv(name, value)
        get_settings.cache_clear()
        PostGradPassManager.configure = configure
        aux_fusion._installed = False
        plugin._registered = False
        envs.environment_variables.pop(COMPILE_FACTOR, None)  # what a process that never loaded it has
        if load_plugin:
            plugin.register()
        factors = aot_compile_hash_factors(VllmConfig(device_config=DeviceConfig(device="cpu")))
        # vLLM 0.33 appends Inductor's config dicts (VLLM_USE_MEGA_AOT_ARTIFACT, on by default there)
        return tuple(f if isinstance(f, str) else repr(f) for f in factors)

    return key


def test_same_settings_same_key(cache_key):
    from hlvllm.plugin import register

    on = cache_key(HL_LINEAR_BACKEND="helion")
    register()  # idempotent: a second call changes nothing
    assert cache_key(HL_LINEAR_BACKEND="helion") == on
    tuned = dict(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="rms_norm,quant_fp8", HL_MAX_HELION_SIZE="16")
    assert cache_key(**tuned) == cache_key(**tuned)


def test_graph_settings_change_key(cache_key):
    keys = {
        "default": cache_key(HL_LINEAR_BACKEND="helion"),  # no aux kernel
        "all aux": cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="all"),
        "rms_norm only": cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="rms_norm"),
        "rms_norm+silu": cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="rms_norm,silu_and_mul"),
        "no int8 quant": cache_key(
            HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="rms_norm,silu_and_mul,quant_fp8"
        ),
        "all aux fused": cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_FUSION="1"),
        "max 16": cache_key(HL_LINEAR_BACKEND="helion", HL_MAX_HELION_SIZE="16"),
        "max 0": cache_key(HL_LINEAR_BACKEND="helion", HL_MAX_HELION_SIZE="0"),
    }
    assert len(set(keys.values())) == len(keys), keys
    # the difference is in the env factors, not in vLLM's config hash
    assert len({k[1] for k in keys.values()}) == 1
    assert len({k[0] for k in keys.values()}) == len(keys)


def test_aux_default_key_is_no_aux_and_all_differs(cache_key):
    """The key hashes the parsed aux set: ``HL_AUX_KERNELS`` unset (the default: no aux kernel) keys
    like ``none``; ``all`` differs; unset with ``HL_AUX_FUSION=1`` means all (its key is the explicit
    ``all`` one's), and an explicit ``none`` with the pass is a third graph."""
    default = cache_key(HL_LINEAR_BACKEND="helion")
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="none") == default
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="0") == default
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="") == default
    all_aux = cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="all")
    assert all_aux != default
    fused = cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_FUSION="1")
    assert fused == cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_FUSION="1", HL_AUX_KERNELS="all")
    fused_no_aux = cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_FUSION="1", HL_AUX_KERNELS="none")
    assert len({default, all_aux, fused, fused_no_aux}) == 4


def test_backend_off_is_plain_vllm_and_differs_from_on(cache_key):
    from vllm import envs

    from hlvllm.compile_cache import COMPILE_FACTOR

    plain = cache_key(load_plugin=False)
    on = cache_key(HL_LINEAR_BACKEND="helion")
    assert COMPILE_FACTOR in envs.compile_factors()
    off = cache_key()  # registered with HL_LINEAR_BACKEND unset: same graph as plain vLLM, same key
    assert COMPILE_FACTOR not in envs.compile_factors()
    assert off == plain != on
    assert cache_key(HL_LINEAR_BACKEND="cutlass") == plain  # not a value it takes: off, one warning
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="none") != plain


def test_no_plugins_differs_from_enabled(cache_key):
    on = cache_key(HL_LINEAR_BACKEND="helion")
    # VLLM_PLUGINS= loads no general plugin: hlvllm never registers, whatever HL_* say
    assert cache_key(load_plugin=False, VLLM_PLUGINS="", HL_LINEAR_BACKEND="helion") != on
    assert cache_key(load_plugin=False, VLLM_PLUGINS="") != cache_key(load_plugin=False)


def test_runtime_only_settings_and_spellings_keep_key(cache_key, tmp_path):
    base = cache_key(HL_LINEAR_BACKEND="helion")
    assert cache_key(HL_LINEAR_BACKEND=" HELION ", HL_AUX_KERNELS="none", HL_MAX_HELION_SIZE="32") == base
    all_aux = cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="all")
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS=" ALL ") == all_aux
    assert (
        cache_key(HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="silu_and_mul,rms_norm,int8_quant,quant_fp8")
        == all_aux
    )
    # read inside the opaque torch.ops.hlvllm.* ops at run time: not part of the traced graph
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_HELION_EAGER="1", HL_DISPATCH_LOG="1") == base
    assert cache_key(HL_LINEAR_BACKEND="helion", HL_CONFIG_DIR=str(tmp_path)) == base


def test_compile_key_names_settings_and_versions(hl_env):
    from vllm import envs

    from hlvllm.compile_cache import COMPILE_FACTOR, compile_key
    from hlvllm.plugin import register
    from hlvllm.settings import AUX_KERNEL_NAMES, Settings, get_settings

    register()
    value = envs.compile_factors()[COMPILE_FACTOR]
    assert value == compile_key()
    assert "backend=helion aux=none max_helion_size=32 aux_fusion=0 " in value  # the defaults
    hl_env.setenv("HL_AUX_KERNELS", "all")
    get_settings.cache_clear()
    value = envs.compile_factors()[COMPILE_FACTOR]  # the getter reads the settings anew
    assert f"aux={','.join(sorted(AUX_KERNEL_NAMES))} " in value
    for dist in ("hlvllm", "hlcore", "helion"):
        assert f"{dist}={importlib.metadata.version(dist)}" in value
    assert "hlvllm_src=" in value
    off = Settings(
        enabled=False, max_helion_size=8, helion_eager=True, dispatch_log=True, aux_kernels=frozenset()
    )
    assert compile_key(off).startswith("backend=off aux=none max_helion_size=8 ")


def test_fresh_process_loading_the_plugin_hashes_the_same_value(hl_env):
    """What a spawned engine core or worker does: ``load_general_plugins()`` through the entry point,
    then vLLM hashes ``envs.compile_factors()``; it must see the value this process computes."""
    from hlvllm.compile_cache import COMPILE_FACTOR, compile_key
    from hlvllm.settings import get_settings

    env = {k: v for k, v in os.environ.items() if k not in HL_VARS}
    env.update(
        HL_LINEAR_BACKEND="helion", HL_AUX_KERNELS="rms_norm", HL_MAX_HELION_SIZE="16", VLLM_PLUGINS="hlvllm"
    )
    code = (
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "from vllm import envs\n"
        f"print('KEY=' + str(envs.compile_factors().get({COMPILE_FACTOR!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("KEY=")]
    for name in ("HL_LINEAR_BACKEND", "HL_AUX_KERNELS", "HL_MAX_HELION_SIZE"):
        hl_env.setenv(name, env[name])
    get_settings.cache_clear()
    assert line == "KEY=" + compile_key()
    assert "backend=helion aux=rms_norm max_helion_size=16 " in line
