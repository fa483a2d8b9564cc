"""What vLLM's compilation config says about CUDA graphs and compile ranges, for hlvllm's kernels.

Helion's host call costs tens of µs, so hlvllm's GEMMs run only under CUDA-graph replay, up to the
largest capture size; and vLLM's compiled graph is split at ``max_helion_size`` into two compile
ranges so the one above calls vLLM's kernels with no op of ours (:mod:`hlvllm.lowering`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys

logger = logging.getLogger("vllm.hlvllm")


def graphs_on(cfg) -> bool:
    """Whether a vLLM ``CompilationConfig`` captures CUDA graphs."""
    from vllm.config import CUDAGraphMode

    return cfg.cudagraph_mode is not None and cfg.cudagraph_mode != CUDAGraphMode.NONE


def cudagraph_capture_limit() -> tuple[int, str | None]:
    """The largest CUDA-graph capture size of the current vLLM config, or 0 and a reason."""
    from vllm.config import get_current_vllm_config

    cfg = get_current_vllm_config().compilation_config
    if not graphs_on(cfg):
        return 0, "CUDA graphs are off (enforce_eager or cudagraph_mode=NONE); Helion only pays under graphs"
    size = cfg.max_cudagraph_capture_size or 0
    if size <= 0:
        return 0, "max_cudagraph_capture_size is 0"
    return size, None


def capture_sizes_of(cfg) -> list[int]:
    """The CUDA-graph capture sizes of a vLLM ``CompilationConfig`` (empty when CUDA graphs are off)."""
    if not graphs_on(cfg):
        return []
    limit = cfg.max_cudagraph_capture_size or 0
    return [int(s) for s in (cfg.cudagraph_capture_sizes or []) if 0 < int(s) <= limit]


def add_compile_range_endpoint(vllm_config, size: int) -> bool:
    """Split vLLM's compile ranges at ``size`` (num_tokens <= ``size`` in one range, the rest in the
    next), as vLLM's own passes that apply only to small batches do (``VllmConfig._set_compile_ranges``
    in vLLM 0.26). Done at model construction, before vLLM compiles; vLLM's compile-cache key hashes
    the endpoints. Returns whether ``size`` is an endpoint now (vLLM ignores endpoints <= 1 and
    >= ``max_num_batched_tokens``: then one range holds every size and the op keeps its own size
    test)."""
    cfg = vllm_config.compilation_config
    limit = getattr(vllm_config.scheduler_config, "max_num_batched_tokens", None)
    if size <= 1 or (limit is not None and size >= limit):
        return False
    endpoints = list(cfg.compile_ranges_endpoints or [])
    if size not in endpoints:
        cfg.compile_ranges_endpoints = sorted([*endpoints, size])
        logger.debug("hlvllm: compile ranges split at num_tokens=%d: %s", size, cfg.compile_ranges_endpoints)
    return True


def add_post_grad_pass(pass_cls) -> None:
    """Make vLLM's ``PostGradPassManager.configure`` append a ``pass_cls()`` to its passes (vLLM
    0.26's ``vllm/compilation/passes/pass_manager.py``: the passes run on every compiled graph
    piece, in every compile range, each asked ``is_applicable_for_range``; their uuids enter the
    pass manager's, so vLLM's compile cache tells graphs with and without the pass apart).

    Raises:
        ImportError, AttributeError: vLLM's pass manager does not import here (then vLLM cannot
            run it either)."""
    from vllm.compilation.passes.pass_manager import PostGradPassManager

    original = PostGradPassManager.configure

    @functools.wraps(original)
    def configure(self, config):
        original(self, config)
        self.passes.append(pass_cls())

    PostGradPassManager.configure = configure


@functools.cache
def module_source(name: str) -> str:
    """The source text of module ``name`` (a pass's uuid hashes its module's source)."""
    return inspect.getsource(sys.modules[name])
