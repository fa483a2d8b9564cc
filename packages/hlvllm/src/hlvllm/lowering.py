"""Graph pass: above max_helion_size, vLLM's compiled graph calls vLLM's kernels, not our ops.

hlvllm's linear kernels call an opaque op (``torch.ops.hlvllm.scaled_mm`` /
``block_scaled_mm``) whose body picks Helion or vLLM's kernel by num_tokens; vLLM traces the model
once with a symbolic num_tokens and drops Dynamo's guards, so the size test cannot live in traced
code. The op's Python body costs 20-30 µs of host time per call, which prefill and large batches
(eager, host-bound) would pay for nothing.

vLLM compiles its graph once per *compile range* of num_tokens (``compile_ranges_endpoints``; vLLM's
own AllReduce+RMSNorm fusion uses this to apply only to small batches). hlvllm's kernels add an
endpoint at max_helion_size (:func:`hlvllm.graphs.add_compile_range_endpoint`), and this pass, run
by vLLM's ``PostGradPassManager`` for every range that starts above max_helion_size, replaces each
hlvllm linear op node by its vLLM implementation (:data:`VLLM_IMPLS`, declared by :mod:`hlvllm.ops`: the
``cutlass_scaled_mm`` call of vLLM's CUTLASS kernels; the block kernel's own ``apply_weights``),
traced into the graph the way vLLM's IR lowering inserts its chosen implementations
(``Match.replace_by_example``). The compiled code of that range then calls
``torch.ops._C.cutlass_scaled_mm`` (or vLLM's block ops) directly: no frame of ours per call. The
range up to max_helion_size keeps the op (CUDA-graph replay there costs no host time).

Safety: a node the pass cannot lower stays the op (correct; it pays the op's host cost) and the
pass logs one warning. Where vLLM does not split (max_helion_size >= max_num_batched_tokens, no
Inductor, ``compile_sizes`` spanning both sides) the op keeps its own size test. The pass is part of
the pass manager's uuid, so vLLM's compile cache tells graphs with and without it apart.
"""

from __future__ import annotations

import functools
import logging

import torch
import torch.fx as fx

from hlvllm.graphs import add_post_grad_pass, module_source

logger = logging.getLogger("vllm.hlvllm")

#: hlvllm op name -> its vLLM implementation (same arguments), filled by :func:`register_vllm_impl`.
VLLM_IMPLS: dict = {}


def register_vllm_impl(op_name: str, impl) -> None:
    """Declare what ``torch.ops.hlvllm.<op_name>`` becomes above max_helion_size: ``impl`` takes the
    op's arguments (defaults filled in) and returns its result by vLLM's own code; it is traced into
    the graph, so it must be traceable with fake tensors (vLLM ops with fake impls, torch ops)."""
    VLLM_IMPLS[op_name] = impl


@functools.cache
def _patterns():
    """The pattern-matcher pass that finds hlvllm linear op nodes (built once per process, after
    :func:`hlvllm.ops.register_ops`), and the list its handler appends errors to."""
    from torch._inductor.pattern_matcher import (
        CallFunctionVarArgs,
        Match,
        PatternMatcherPass,
        register_graph_pattern,
    )

    names = {getattr(torch.ops.hlvllm, name).default: name for name in VLLM_IMPLS}
    patterns = PatternMatcherPass("hlvllm_linear_lowering")
    errors: list[str] = []

    def lower(match: Match, *args, **kwargs) -> None:
        (node,) = match.nodes
        name = names[node.target]
        bound = list(node.args)
        for arg in node.target._schema.arguments[len(bound) :]:
            bound.append(node.kwargs.get(arg.name, arg.default_value if arg.has_default_value() else None))
        try:
            match.replace_by_example(VLLM_IMPLS[name], bound, run_functional_passes=False)
        except Exception as exc:  # noqa: BLE001 - the op stays: correct, only slower on the host
            errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")

    register_graph_pattern(CallFunctionVarArgs(list(names)), pass_dict=patterns)(lower)
    return patterns, errors


def lower_to_vllm(graph: fx.Graph) -> tuple[int, list[str]]:
    """Replace every hlvllm linear op node of ``graph`` by its vLLM implementation; returns (nodes
    lowered, errors of the nodes left as they were). Needs Inductor's fake mode (``V.fake_mode``),
    as inside a post-grad pass; node arguments need their ``meta["val"]``."""
    patterns, errors = _patterns()
    errors.clear()
    matched = patterns.apply(graph)
    return matched - len(errors), list(errors)


def _pass_class():
    from vllm.compilation.passes.inductor_pass import InductorPass

    class HlvllmLinearLoweringPass(InductorPass):
        """vLLM post-grad pass running :func:`lower_to_vllm` in compile ranges above max_helion_size."""

        def is_applicable_for_range(self, compile_range) -> bool:
            from hlvllm.routing import max_helion_m

            return compile_range.start > max_helion_m()

        def __call__(self, graph: fx.Graph) -> None:
            lowered, errors = lower_to_vllm(graph)
            if errors:
                logger.warning(
                    "hlvllm: %d linear op(s) above max_helion_size could not be lowered to vLLM's kernel "
                    "and keep hlvllm's op (correct, with its host cost): %s",
                    len(errors),
                    "; ".join(sorted(set(errors)))[:600],
                )
            logger.debug("hlvllm: lowered %d linear ops to vLLM's kernels", lowered)

        def uuid(self) -> str:
            from hlvllm.routing import max_helion_m

            return InductorPass.hash_source(module_source(__name__)) + f"-max{max_helion_m()}"

    return HlvllmLinearLoweringPass


_installed = False


def install() -> None:
    """Make vLLM's ``PostGradPassManager.configure`` append :class:`HlvllmLinearLoweringPass`
    (idempotent; the pass does nothing to graphs without hlvllm's linear ops). Only with a CUDA
    device: elsewhere hlvllm's linear kernels never run, and importing vLLM's pass manager can fail
    (its fusion passes look up CUDA ops at import)."""
    global _installed
    if _installed or not torch.cuda.is_available():  # no CUDA graphs, no Helion: nothing to lower
        return
    try:
        add_post_grad_pass(_pass_class())
    except (ImportError, AttributeError) as exc:  # vLLM cannot run its pass manager here either
        logger.debug(
            "hlvllm: vLLM's pass manager is not importable (%s); the linear ops keep their size test", exc
        )
        return
    _installed = True
