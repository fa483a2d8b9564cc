"""Fixtures for testing the plugin against the real vLLM package (0.26, or 0.33 in ``nox -s
tests_vllm033``) on the CPU."""

import pytest
import torch


def cutlass_supports_fp8(capability: int) -> bool:
    """Stand-in for vLLM's ``torch.ops._C.cutlass_scaled_mm_supports_fp8`` (CUDA >= 12.4 build)."""
    return capability >= 89


@pytest.fixture
def hl_env(monkeypatch, tmp_path_factory):
    """Enable the backend for one test and restore vLLM's FP8, INT8 and block-FP8 kernel lists, its
    out-of-tree op table (``register()`` replaces RMSNorm, SiluAndMul, QuantFP8 when the aux kernels
    are on), its hashed env factors (``register()`` adds hlvllm's compile-cache entry) and hlvllm's
    state after. ``HL_AUX_KERNELS`` and ``HL_AUX_FUSION`` start unset (the defaults: no aux kernels);
    a test that needs the aux layers sets ``HL_AUX_KERNELS=all``. ``HL_DISPATCH_AT`` starts unset (the
    default), ``HL_PRECOMPILE_PROCESSES`` at 0. ``HL_KERNEL_CACHE_DIR`` starts unset
    with ``VLLM_CACHE_ROOT`` a temporary directory; ``TRITON_PTXAS_PATH`` unset, restored after."""
    from vllm import envs
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    import hlvllm.plugin as plugin
    from hlvllm import aux_ops, dispatch, support
    from hlvllm.compile_cache import COMPILE_FACTOR
    from hlvllm.settings import get_settings

    tables = (
        vllm_linear._POSSIBLE_FP8_KERNELS,
        vllm_linear._POSSIBLE_INT8_KERNELS,
        vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS,
    )
    saved = [list(table.get(PlatformEnum.CUDA, [])) for table in tables]
    saved_oot = dict(op_registry_oot)
    saved_factor = envs.environment_variables.pop(COMPILE_FACTOR, None)
    monkeypatch.setenv("HL_LINEAR_BACKEND", "helion")
    monkeypatch.delenv("HL_AUX_KERNELS", raising=False)
    monkeypatch.delenv("HL_AUX_FUSION", raising=False)
    monkeypatch.delenv("HL_DISPATCH_AT", raising=False)  # the default, whatever the shell says
    monkeypatch.setenv("HL_PRECOMPILE_PROCESSES", "0")  # no worker pool in tests (auto on a GPU)
    # register() sets HL_KERNEL_CACHE_DIR (default: under VLLM_CACHE_ROOT): unset at the start, removed after,
    # and the default under a temporary cache root, not the user's
    monkeypatch.setenv("HL_KERNEL_CACHE_DIR", "")
    monkeypatch.delenv("HL_KERNEL_CACHE_DIR")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm-cache")))
    # register() may set TRITON_PTXAS_PATH (Inductor's ptxas, with the kernel cache on): restored after
    monkeypatch.setenv("TRITON_PTXAS_PATH", "")
    monkeypatch.delenv("TRITON_PTXAS_PATH")
    monkeypatch.setattr(plugin, "_registered", False)
    get_settings.cache_clear()
    dispatch.reset()
    aux_ops.reset()
    support._declined.clear()
    support._warned_reasons.clear()
    # vLLM 0.33's CUTLASS FP8 kernel asks torch.ops._C.cutlass_scaled_mm_supports_fp8 in is_supported
    # (and its online-FP8 module at import); 0.26 read a constant computed at import, on the CPU False.
    # There is no vllm._C here: when a test pretends to be CUDA, answer as vLLM's CUDA build does.
    monkeypatch.setattr(torch.ops._C, "cutlass_scaled_mm_supports_fp8", cutlass_supports_fp8, raising=False)
    yield monkeypatch
    for table, kernels in zip(tables, saved, strict=True):
        table[PlatformEnum.CUDA] = kernels
    op_registry_oot.clear()
    op_registry_oot.update(saved_oot)
    envs.environment_variables.pop(COMPILE_FACTOR, None)
    if saved_factor is not None:
        envs.environment_variables[COMPILE_FACTOR] = saved_factor
    get_settings.cache_clear()
    dispatch.reset()
    aux_ops.reset()
    support._declined.clear()
    support._warned_reasons.clear()


@pytest.fixture
def cuda_like(hl_env):
    """Pretend to be an SM90 CUDA platform (vLLM's block kernels then report themselves supported)."""
    from vllm.platforms import PlatformEnum, current_platform
    from vllm.platforms.interface import DeviceCapability

    hl_env.setattr(current_platform, "_enum", PlatformEnum.CUDA)
    hl_env.setattr(current_platform, "is_cuda", lambda: True)
    hl_env.setattr(current_platform, "get_device_capability", lambda device_id=0: DeviceCapability(9, 0))
    return hl_env


@pytest.fixture
def op_dispatch(hl_env):
    """``HL_DISPATCH_AT=op``: tests of the op design (hlvllm's op in vLLM's graph, two compile ranges,
    ``hlvllm.lowering``), whatever the default; list it before fixtures that register the plugin.
    Capture mode has its own tests (``test_capture_dispatch.py``)."""
    from hlvllm.settings import get_settings

    hl_env.setenv("HL_DISPATCH_AT", "op")
    get_settings.cache_clear()
    return hl_env


@pytest.fixture
def graphs_on_config():
    """A CPU VllmConfig whose compilation config says CUDA graphs are on (capture sizes <= 64)."""
    from vllm.config import CUDAGraphMode, DeviceConfig, VllmConfig, set_current_vllm_config

    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg.compilation_config.max_cudagraph_capture_size = 64
    with set_current_vllm_config(cfg):
        yield cfg


def _fp8_layer_config(n=4096, k=4096, *, weight_key=None, act_key=None, out_dtype=torch.bfloat16):
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8DynamicTokenSym,
        kFp8StaticChannelSym,
    )

    return FP8ScaledMMLinearLayerConfig(
        weight_quant_key=weight_key or kFp8StaticChannelSym,
        activation_quant_key=act_key or kFp8DynamicTokenSym,
        weight_shape=(n, k),
        input_dtype=torch.bfloat16,
        out_dtype=out_dtype,
    )


@pytest.fixture
def fp8_layer_config():
    """Factory for ``FP8ScaledMMLinearLayerConfig`` (default: per-token fp8 x per-channel fp8, 4096^2)."""
    return _fp8_layer_config


_stand_in = []  # keeps the stand-in library alive for the whole session
#: Calls of the stand-in (M of each), for tests that count vLLM's kernel calls.
CUTLASS_CALLS: list[int] = []


def per_row_scales(a, b, scale_a, scale_b):
    """Per-tensor scales (one value) as per-token [M, 1] / per-channel [N] ones, as CUTLASS broadcasts them."""
    if scale_a.numel() == 1:
        scale_a = scale_a.reshape(1, 1).expand(a.shape[0], 1)
    if scale_b.numel() == 1:
        scale_b = scale_b.reshape(1).expand(b.shape[1])
    return scale_a, scale_b


@pytest.fixture(scope="session")
def vllm_cutlass_on_cpu():
    """``torch.ops._C.cutlass_scaled_mm`` (mutating ``out``; vLLM's schema, read from its
    ``_C_stable_libtorch``) computing the fp32 reference on the CPU, where vLLM's CUDA ops are not
    loaded; each call's M is appended to :data:`CUTLASS_CALLS`."""
    from hlcore.scaled_mm import scaled_mm_ref

    if not hasattr(torch.ops._C, "cutlass_scaled_mm"):
        lib = torch.library.Library("_C", "FRAGMENT")
        lib.define(
            "cutlass_scaled_mm(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales, Tensor? bias) -> ()"
        )

        def impl(out, a, b, scale_a, scale_b, bias):
            CUTLASS_CALLS.append(a.shape[0])
            out.copy_(scaled_mm_ref(a, b, *per_row_scales(a, b, scale_a, scale_b), out.dtype, bias))

        lib.impl("cutlass_scaled_mm", impl, "CPU")
        lib.impl("cutlass_scaled_mm", lambda out, a, b, scale_a, scale_b, bias: None, "Meta")
        _stand_in.append(lib)
    yield CUTLASS_CALLS
