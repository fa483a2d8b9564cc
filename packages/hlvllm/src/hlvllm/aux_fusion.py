"""Graph pass: a norm (or silu_and_mul) and the per-token fp8 / int8 quantization of its output become
one op.

Under vLLM's default ``-O2``, Inductor compiles ``RMSNorm`` / ``SiluAndMul`` and ``QuantFP8``'s
native code and fuses each norm (silu_and_mul) with the fp8 quantization after it into one kernel.
hlvllm's aux layers replace both with opaque ops (``torch.ops.hlvllm.*``), two launches where vLLM
has one: at decode sizes a launch costs a few µs whatever it moves. With ``HL_AUX_FUSION=1`` this
pass, run in vLLM's post-grad pass manager, rewrites in the FX graph

    hlvllm.rms_norm(x, w, eps)                          -> hlvllm.per_token_fp8_quant(., ub)
    hlvllm.fused_add_rms_norm(x, r, w, eps)[0]          -> hlvllm.per_token_fp8_quant(., ub)
    hlvllm.silu_and_mul(x)                              -> hlvllm.per_token_fp8_quant(., ub)

into ``hlvllm.rms_norm_fp8_quant`` / ``fused_add_rms_norm_fp8_quant`` (whose third output replaces
the residual ``[1]``) / ``silu_and_mul_fp8_quant``, when the norm's (activation's) output has no
other user (no-op views in between are looked through) and its input is 2-D (vLLM's
``[num_tokens, hidden]`` hidden states). The same with ``hlvllm.per_token_int8_quant`` (W8A8_INT8
layers, aux ``int8_quant``) gives the ``*_int8_quant`` ops; vLLM's default path has no such fusion
for int8 (its int8 quantization is an opaque CUDA op), so there the pass saves a launch per pair
over vLLM itself. Same semantics: the fused ops compute the two ops in a row
(:mod:`hlcore.norm_quant`, :mod:`hlcore.activation_quant`).

:func:`install` adds the pass to ``PostGradPassManager.configure`` (vLLM 0.26's
``vllm/compilation/passes/pass_manager.py``): the pass is part of the manager's ``uuid``, so vLLM's
compile cache tells graphs with and without it apart.
"""

from __future__ import annotations

import logging
import operator

import torch
import torch.fx as fx

from hlvllm.graphs import add_post_grad_pass, module_source

logger = logging.getLogger("vllm.hlvllm")


def _ops():
    ops = torch.ops.hlvllm
    return {
        "rms_norm": ops.rms_norm.default,
        "fused_add_rms_norm": ops.fused_add_rms_norm.default,
        "silu_and_mul": ops.silu_and_mul.default,
    }


def _quants():
    """quant op -> (takes scale_ub, {producer kind: fused op})."""
    ops = torch.ops.hlvllm
    return {
        ops.per_token_fp8_quant.default: (
            True,
            {
                "rms_norm": ops.rms_norm_fp8_quant.default,
                "fused_add_rms_norm": ops.fused_add_rms_norm_fp8_quant.default,
                "silu_and_mul": ops.silu_and_mul_fp8_quant.default,
            },
        ),
        ops.per_token_int8_quant.default: (
            False,
            {
                "rms_norm": ops.rms_norm_int8_quant.default,
                "fused_add_rms_norm": ops.fused_add_rms_norm_int8_quant.default,
                "silu_and_mul": ops.silu_and_mul_int8_quant.default,
            },
        ),
    }


def _arg(node: fx.Node, i: int, name: str):
    return node.args[i] if len(node.args) > i else node.kwargs.get(name)


def _val(a):
    return a.meta.get("val") if isinstance(a, fx.Node) else a


def _is_2d(a) -> bool:
    v = _val(a)
    return isinstance(v, torch.Tensor) and v.dim() == 2


def _fake_result(target, args):
    """The op's fake result on its arguments' fake values (``node.meta["val"]``: Inductor lowers the
    graph from these), or None where the arguments carry none (graphs built without fake tensors)."""
    vals = [_val(a) for a in args]
    tensors = [a for a in vals if isinstance(a, torch.Tensor)]
    if not tensors:
        return None
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode(tensors)
    if mode is None:
        return None
    with mode:
        return target(*vals)


def _before(a: fx.Node, b: fx.Node) -> bool:
    """Whether node ``a`` comes before (or is) node ``b`` in the graph."""
    for n in a.graph.nodes:
        if n is a:
            return True
        if n is b:
            return False
    return False


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten.reshape.default, torch.ops.aten._unsafe_view.default)


def _noop_view(node: fx.Node) -> bool:
    """A view / reshape whose result has its input's shape (vLLM's ``x.view(-1, x.shape[-1])`` of
    an already 2-D activation), with no other user."""
    if node.op != "call_function" or node.target not in _VIEWS or len(node.users) != 1:
        return False
    a, b = _val(node.args[0]), _val(node)
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and tuple(a.shape) == tuple(b.shape)


def fuse_norm_quant(graph: fx.Graph) -> int:
    """Rewrite every fusible (norm or silu_and_mul) -> per_token_fp8_quant pair of ``graph`` in
    place (see the module docstring); returns how many pairs were fused."""
    ops, quants = _ops(), _quants()
    fused = 0
    for quant in list(graph.nodes):
        if quant.op != "call_function" or quant.target not in quants:
            continue
        takes_ub, fused_ops = quants[quant.target]
        src, scale_ub = _arg(quant, 0, "x"), (_arg(quant, 1, "scale_ub") if takes_ub else None)
        ub = (scale_ub,) if takes_ub else ()
        views = []  # no-op views between the producer and the quant, quant side first
        while isinstance(src, fx.Node) and _noop_view(src):
            views.append(src)
            src = src.args[0]
        if not isinstance(src, fx.Node) or len(src.users) != 1 or src.op != "call_function":
            continue
        if not all(u.target is operator.getitem for u in quant.users):
            continue
        anchor = src  # the new op goes where the producer was: its inputs exist there
        residual_out = None
        if src.target is ops["rms_norm"]:
            x, w, eps = src.args[:3]
            target, args = fused_ops["rms_norm"], (x, w, eps, *ub)
        elif src.target is ops["silu_and_mul"]:
            (x,) = src.args[:1]
            target, args = fused_ops["silu_and_mul"], (x, *ub)
        elif (
            src.target is operator.getitem
            and src.args[1] == 0
            and isinstance(src.args[0], fx.Node)
            and src.args[0].target is ops["fused_add_rms_norm"]
        ):
            norm = src.args[0]
            outs = {u.args[1]: u for u in norm.users if u.target is operator.getitem}
            if set(norm.users) - set(outs.values()):
                continue
            x, r, w, eps = norm.args[:4]
            target, args = fused_ops["fused_add_rms_norm"], (x, r, w, eps, *ub)
            anchor, residual_out = norm, outs.get(1)
        else:
            continue
        if not _is_2d(x) or (isinstance(scale_ub, fx.Node) and not _before(scale_ub, anchor)):
            continue
        val = _fake_result(target, args)  # before any change: a failure here leaves the graph as it was
        with graph.inserting_after(anchor):
            new = graph.call_function(target, args)
        if val is not None:
            new.meta["val"] = val
        with graph.inserting_after(new):
            q = graph.call_function(operator.getitem, (new, 0))
            scale = graph.call_function(operator.getitem, (new, 1))
            res = graph.call_function(operator.getitem, (new, 2)) if residual_out is not None else None
        for i, item in ((0, q), (1, scale), (2, res)):
            if item is not None and isinstance(new.meta.get("val"), tuple):
                item.meta["val"] = new.meta["val"][i]
        for user in list(quant.users):  # getitem(quant, 0 / 1)
            user.replace_all_uses_with(q if user.args[1] == 0 else scale)
            graph.erase_node(user)
        graph.erase_node(quant)
        for view in views:
            graph.erase_node(view)
        graph.erase_node(src)
        if residual_out is not None:
            residual_out.replace_all_uses_with(res)
            graph.erase_node(residual_out)
            graph.erase_node(anchor)
        elif src is not anchor:
            graph.erase_node(anchor)
        for item in (q, scale, res):
            if item is not None and not item.users:
                graph.erase_node(item)
        fused += 1
    return fused


def _pass_class():
    from vllm.compilation.passes.inductor_pass import InductorPass

    class HlvllmNormQuantFusionPass(InductorPass):
        """vLLM post-grad pass running :func:`fuse_norm_quant`; its uuid hashes this module's source."""

        def __call__(self, graph: fx.Graph) -> None:
            try:
                n = fuse_norm_quant(graph)
            except Exception as exc:  # noqa: BLE001 - a failed rewrite must not stop vLLM's compile
                graph.lint()  # a graph left inconsistent cannot be compiled: then the error stands
                logger.warning(
                    "hlvllm: HL_AUX_FUSION pass failed (%s: %s); the pairs not yet fused stay as two ops",
                    type(exc).__name__,
                    str(exc)[:300],
                )
                return
            if n:
                logger.debug("hlvllm: fused %d norm/activation + fp8 quant pairs", n)

        def uuid(self) -> str:
            return InductorPass.hash_source(module_source(__name__))

    return HlvllmNormQuantFusionPass


_installed = False


def install() -> None:
    """Make vLLM's ``PostGradPassManager.configure`` append :class:`HlvllmNormQuantFusionPass`
    (idempotent; the pass itself does nothing to graphs without hlvllm's ops)."""
    global _installed
    if _installed:
        return
    add_post_grad_pass(_pass_class())
    _installed = True
