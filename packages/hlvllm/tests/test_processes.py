"""Issue 7, item 2: the plugin in every process. vLLM loads general plugins in each process it starts
(engine core, each worker) with ``vllm.plugins.load_general_plugins()``; its workers are started by
``multiprocessing`` with ``fork`` (the default) or ``spawn`` (``VLLM_WORKER_MULTIPROC_METHOD``, and
whenever CUDA is already initialised). Each test starts such a child, which loads the plugins the
way a worker does and reports what a worker building a model would see: the first kernel of vLLM's
CUDA FP8 / INT8 / block-FP8 lists, vLLM's out-of-tree CustomOp table, the kernel vLLM's chooser picks
for an FP8_Dynamic layer and the class of an ``RMSNorm`` it builds (on a pretend SM90 CUDA platform
with CUDA graphs on), and hlvllm's warnings.

A spawned child imports torch and vLLM afresh: 15-30 s on a 2-core CPU box (those two tests are
marked ``slow``; they still run in ``nox -s tests``). A forked child inherits the test process's
imports: about 2 s.
"""

import json
import multiprocessing

import pytest

HELION_KERNELS = {
    "fp8": "HelionFP8ScaledMMLinearKernel",
    "int8": "HelionInt8ScaledMMLinearKernel",
    "block": "HelionFp8BlockScaledMMKernel",
}
HELION_LAYERS = {"RMSNorm": "HelionRMSNorm", "SiluAndMul": "HelionSiluAndMul", "QuantFP8": "HelionQuantFP8"}

#: Run by ``exec`` in the child; globals: OUT (result file), HIDE_HELION (make helion unimportable),
#: PHASES (``VLLM_PLUGINS`` values: for each, load the plugins as a worker does, then report).
CHILD = r"""
import json, logging, os, sys

if HIDE_HELION:
    sys.modules["helion"] = None  # importlib.util.find_spec("helion") -> None, import helion -> ImportError
import torch
import vllm.plugins
from vllm.model_executor.kernels import linear as L  # before the platform is faked (CUTLASS probes it)
from vllm.model_executor.custom_op import op_registry_oot
from vllm.platforms import PlatformEnum

from hlvllm.vllm_compat import choose_scaled_mm_kernel  # vLLM's chooser, as vLLM calls it

warnings = []


class Collect(logging.Handler):  # added after vLLM configured its loggers (that drops child handlers)
    def emit(self, record):
        if record.levelno >= logging.WARNING and record.getMessage().startswith("hlvllm:"):
            warnings.append(record.getMessage())


logging.getLogger("vllm.hlvllm").addHandler(Collect())


def snapshot():
    tables = {"fp8": L._POSSIBLE_FP8_KERNELS, "int8": L._POSSIBLE_INT8_KERNELS, "block": L._POSSIBLE_FP8_BLOCK_KERNELS}
    return {
        "first": {name: t[PlatformEnum.CUDA][0].__name__ for name, t in tables.items()},
        "oot": {name: cls.__name__ for name, cls in op_registry_oot.items()},
        "ops": hasattr(torch.ops.hlvllm, "scaled_mm"),
        "registered": getattr(sys.modules.get("hlvllm.plugin"), "_registered", False),
    }


def model_build():
    # what a worker building a model sees: vLLM's chooser and layers on a pretend SM90 with graphs on
    from vllm.config import CUDAGraphMode, DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8DynamicTokenSym, kFp8StaticChannelSym
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    saved = current_platform._enum, current_platform.is_cuda, current_platform.get_device_capability
    current_platform._enum = PlatformEnum.CUDA
    current_platform.is_cuda = lambda: True
    current_platform.get_device_capability = lambda device_id=0: DeviceCapability(9, 0)
    if not hasattr(torch.ops._C, "cutlass_scaled_mm_supports_fp8"):  # vLLM 0.33's CUTLASS probe; no vllm._C here
        torch.ops._C.cutlass_scaled_mm_supports_fp8 = lambda capability: capability >= 89
    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    cfg.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cfg.compilation_config.max_cudagraph_capture_size = 64
    layer = FP8ScaledMMLinearLayerConfig(
        weight_quant_key=kFp8StaticChannelSym,
        activation_quant_key=kFp8DynamicTokenSym,
        weight_shape=(4096, 4096),
        input_dtype=torch.bfloat16,
        out_dtype=torch.bfloat16,
    )
    with set_current_vllm_config(cfg):
        chosen = [choose_scaled_mm_kernel(layer, L._POSSIBLE_FP8_KERNELS).__name__ for _ in range(2)]
        norm = RMSNorm(64)
    current_platform._enum, current_platform.is_cuda, current_platform.get_device_capability = saved
    return chosen, [type(norm).__name__, getattr(norm, "implementation", "vllm")]


report = {"before": snapshot(), "phases": []}
for plugins in PHASES:
    os.environ["VLLM_PLUGINS"] = plugins
    vllm.plugins.plugins_loaded = False
    del warnings[:]
    vllm.plugins.load_general_plugins()  # what EngineCore and WorkerWrapperBase.init_worker call
    state = snapshot()
    chosen, rms_norm = model_build()
    report["phases"].append(
        {"plugins": plugins, "state": state, "chosen": chosen, "rms_norm": rms_norm, "warnings": list(warnings)}
    )
with open(OUT, "w") as f:
    json.dump(report, f)
"""


def _child(method: str, tmp_path, phases: list[str], *, hide_helion: bool = False) -> dict:
    """Start a ``method`` child running :data:`CHILD` with ``phases``; its report."""
    from hlvllm.settings import get_settings

    get_settings.cache_clear()  # a fork child inherits the cache: let it read the environment
    out = tmp_path / f"{method}.json"
    proc = multiprocessing.get_context(method).Process(
        target=exec, args=(CHILD, {"OUT": str(out), "HIDE_HELION": hide_helion, "PHASES": phases})
    )
    proc.start()
    proc.join(timeout=300)
    if proc.is_alive():
        proc.kill()
        proc.join()
    assert proc.exitcode == 0, f"{method} child exited with {proc.exitcode} (its traceback is on stderr)"
    return json.loads(out.read_text())


@pytest.fixture
def clean(hl_env):
    """This process as a fresh one looks to a forked child: vLLM's plugins not loaded yet, none of
    hlvllm's kernels in vLLM's lists and none of its layers in the out-of-tree table (``hl_env``
    puts everything back after); ``HL_LINEAR_BACKEND=helion``, no other HL_* / kernel-selection
    variable (so no aux kernel: a test that expects hlvllm's layers sets ``HL_AUX_KERNELS=all``).
    The child sets ``VLLM_PLUGINS`` itself (``PHASES``)."""
    import vllm.plugins
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.kernels import linear as vllm_linear
    from vllm.platforms import PlatformEnum

    hl_env.setattr(vllm.plugins, "plugins_loaded", False)
    for table in (
        vllm_linear._POSSIBLE_FP8_KERNELS,
        vllm_linear._POSSIBLE_INT8_KERNELS,
        vllm_linear._POSSIBLE_FP8_BLOCK_KERNELS,
    ):
        kernels = [k for k in table[PlatformEnum.CUDA] if k.__name__ not in HELION_KERNELS.values()]
        hl_env.setitem(table, PlatformEnum.CUDA, kernels)
    for name in HELION_LAYERS:
        hl_env.delitem(op_registry_oot, name, raising=False)
    for name in (
        "HL_AUX_KERNELS",
        "HL_AUX_FUSION",
        "HL_MAX_HELION_SIZE",
        "VLLM_DISABLED_KERNELS",
        "VLLM_BATCH_INVARIANT",
    ):
        hl_env.delenv(name, raising=False)
    return hl_env


def _assert_clean(state: dict, method: str) -> None:
    """Nothing of hlvllm's in ``state`` (torch ops: spawn only; a fork child inherits this process's)."""
    assert not set(state["first"].values()) & set(HELION_KERNELS.values())
    assert not set(state["oot"]) & set(HELION_LAYERS)
    assert not state["registered"]
    if method == "spawn":
        assert not state["ops"]


def _assert_registered(state: dict, *, layers: bool = True) -> None:
    """The three Helion kernels first, the torch ops, and (``layers``) hlvllm's aux layers."""
    assert state["first"] == HELION_KERNELS
    assert {k: v for k, v in state["oot"].items() if k in HELION_LAYERS} == (HELION_LAYERS if layers else {})
    assert state["ops"] and state["registered"]


def _assert_vllm_only(phase: dict) -> None:
    assert phase["chosen"][0] != "HelionFP8ScaledMMLinearKernel"
    assert phase["rms_norm"] == ["RMSNorm", "vllm"]
    assert phase["warnings"] == []


@pytest.mark.slow
def test_spawned_child_loads_the_plugin_only_when_vllm_plugins_allows_it(clean, tmp_path):
    """A spawned child (a fresh interpreter), ``HL_LINEAR_BACKEND=helion``. Started with
    ``VLLM_PLUGINS=""`` (vLLM loads no general plugin): nothing of ours, not even the torch ops;
    vLLM's kernel and RMSNorm. Then, in the same child, ``VLLM_PLUGINS=hlvllm`` and a second plugin
    load: the three Helion kernels first in vLLM's lists, hlvllm's RMSNorm / SiluAndMul / QuantFP8,
    ``torch.ops.hlvllm.*``; vLLM's chooser picks the Helion FP8 kernel; no warning
    (``HL_AUX_KERNELS=all``)."""
    clean.setenv("HL_AUX_KERNELS", "all")
    report = _child("spawn", tmp_path, ["", "hlvllm"])
    _assert_clean(report["before"], "spawn")
    excluded, included = report["phases"]
    assert excluded["state"] == report["before"]
    _assert_vllm_only(excluded)
    _assert_registered(included["state"])
    assert included["chosen"] == ["HelionFP8ScaledMMLinearKernel"] * 2
    assert included["rms_norm"] == ["HelionRMSNorm", "hlvllm"]
    assert included["warnings"] == []


@pytest.mark.parametrize("plugins", ["hlvllm", "", "lora_filesystem_resolver"])
def test_forked_child_loads_the_plugin_only_when_vllm_plugins_allows_it(clean, tmp_path, plugins):
    """A forked child (vLLM's default worker start), ``HL_LINEAR_BACKEND=helion``: with ``hlvllm``
    allowed, its plugin load registers everything and the chooser picks Helion; with a list that
    leaves ``hlvllm`` out (empty: no general plugin), nothing of ours is registered
    (``HL_AUX_KERNELS=all``)."""
    clean.setenv("HL_AUX_KERNELS", "all")
    report = _child("fork", tmp_path, [plugins])
    _assert_clean(report["before"], "fork")
    (phase,) = report["phases"]
    if plugins == "hlvllm":
        _assert_registered(phase["state"])
        assert phase["chosen"] == ["HelionFP8ScaledMMLinearKernel"] * 2
        assert phase["rms_norm"] == ["HelionRMSNorm", "hlvllm"]
        assert phase["warnings"] == []
    else:
        assert phase["state"] == report["before"]
        _assert_vllm_only(phase)


@pytest.mark.slow
def test_spawned_child_without_helion_registers_and_falls_back_with_one_warning(clean, tmp_path):
    """helion not importable in a fresh worker: ``register()`` still works (hlvllm imports helion
    only inside kernel calls), the Helion FP8 kernel declines every layer with ONE warning naming
    ``pip install helion``, vLLM's kernel is chosen, and RMSNorm keeps vLLM's implementation
    (``HL_AUX_KERNELS=all``)."""
    clean.setenv("HL_AUX_KERNELS", "all")
    report = _child("spawn", tmp_path, ["hlvllm"], hide_helion=True)
    _assert_clean(report["before"], "spawn")
    (phase,) = report["phases"]
    _assert_registered(phase["state"])
    assert phase["chosen"][0] != "HelionFP8ScaledMMLinearKernel" and len(set(phase["chosen"])) == 1
    assert phase["rms_norm"] == ["HelionRMSNorm", "vllm"]
    assert len(phase["warnings"]) == 1, phase["warnings"]
    assert "helion is not installed (pip install helion" in phase["warnings"][0]


@pytest.mark.parametrize(
    "env,layers",
    [({}, False), ({"HL_AUX_FUSION": "1"}, True), ({"HL_AUX_KERNELS": "none", "HL_AUX_FUSION": "1"}, False)],
    ids=["default", "fusion", "none+fusion"],
)
def test_forked_child_aux_layers_follow_the_default(clean, tmp_path, env, layers):
    """A forked worker with ``HL_AUX_KERNELS`` unset (the default): the Helion kernels and the
    chooser's pick, but vLLM's own RMSNorm / SiluAndMul / QuantFP8; unset with ``HL_AUX_FUSION=1``:
    hlvllm's layers too (the pass fuses them); ``HL_AUX_KERNELS=none`` wins over the fusion flag."""
    for name, value in env.items():
        clean.setenv(name, value)
    report = _child("fork", tmp_path, ["hlvllm"])
    (phase,) = report["phases"]
    _assert_registered(phase["state"], layers=layers)
    assert phase["chosen"] == ["HelionFP8ScaledMMLinearKernel"] * 2
    assert phase["rms_norm"] == (["HelionRMSNorm", "hlvllm"] if layers else ["RMSNorm", "vllm"])
    assert phase["warnings"] == []


def test_backend_off_in_a_child_registers_ops_only(clean, tmp_path):
    """Plugin loaded but ``HL_LINEAR_BACKEND`` unset: only the torch ops; vLLM's kernels and layers."""
    clean.delenv("HL_LINEAR_BACKEND")
    report = _child("fork", tmp_path, ["hlvllm"])
    (phase,) = report["phases"]
    assert phase["state"]["registered"] and phase["state"]["ops"]
    assert phase["state"]["first"] == report["before"]["first"]
    assert phase["state"]["oot"] == report["before"]["oot"]
    _assert_vllm_only(phase)
