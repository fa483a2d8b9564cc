"""Host time of one linear call at prefill sizes: plugin off vs on, and the designs that were weighed.

Issue 20 ("No cost to switch it on"): above max_helion_size a linear layer must cost what vLLM's
own path costs. Every variant below computes the same FP8_Dynamic GEMM out[M, N] = scale_a *
scale_b * (a @ b) at N = K = 4096 and M in {64, 256, 1024, 4096}, through torch.compile with a
dynamic M, as vLLM's compiled graph does:

* ``vllm``: the graph vLLM traces without the plugin (``vllm._custom_ops.cutlass_scaled_mm``);
* ``op``: the graph with hlvllm's op left in place (before the lowering pass: the op's Python body
  runs its size test on every call);
* ``lowered``: hlvllm's op with :mod:`hlvllm.lowering` run in the range above max_helion_size (what
  the plugin does now);
* ``cond``: the size branch inside the traced graph, ``torch.cond(M <= 32, Helion op, vLLM op)``
  (the alternative the issue names), where it compiles.

Every variant, the eager ones too, is called inside the same vLLM pass context and Inductor config
patch (so a recompile would also get the pass, and the contexts' own cost is in every column); the
generated code of each compiled variant is recorded (``generated_code``: does it call
``torch.ops._C.cutlass_scaled_mm`` or ``torch.ops.hlvllm.scaled_mm``). The 2026-12-01 night run
called the compiled functions outside those contexts, and its ``lowered`` column measured a graph
with hlvllm's op (lab/results/2026-12-01-night/README.md). The 2026-12-01 midnight run compiled
``op`` and ``lowered`` from one function (one code object, so one Dynamo cache shared by both, with
``torch._dynamo.reset()`` between the variants) and kept Dynamo's guards, which vLLM drops: its
``lowered`` column again cost what ``op`` cost. Now every variant has its own function and, as in
vLLM's wrapper, no guards.

Host time = wall time of 200 back-to-back calls without synchronising, divided by 200 (these shapes
are host-bound at prefill sizes up to ~1024; the GPU time per call is printed beside it, measured
with CUDA events, so a host figure that is really GPU time shows). ``ROUNDS`` (default 21) rounds,
each timing one such loop of every variant in a new random order; per variant the median over
rounds, and for ``op`` / ``lowered`` / ``cond`` the median (p20-p80) of the per-round differences
against ``vllm`` (a process's slow phases hit both sides of a difference alike; the 2026-12-02 run
timed the variants one after the other and spread by up to ±20 %). Prints the tables and writes
``$OUT/prefill_host_time.json`` with each variant's generated code.

Usage (GPU machine, vLLM bundle env + the project's wheels): ``python3 lab/scripts/prefill_host_time.py``
"""

from __future__ import annotations

import json
import os
import statistics
import time

import torch

MS = (64, 256, 1024, 4096)
N = K = 4096
CALLS = 200
ROUNDS = int(os.environ.get("ROUNDS", "21"))


def _inputs(m: int):
    g = torch.Generator(device="cuda").manual_seed(m)
    a = torch.randn((m, K), device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn((N, K), device="cuda", generator=g).to(torch.float8_e4m3fn).t()
    sa = torch.rand((m, 1), device="cuda", generator=g) * 0.01
    sb = torch.rand((N, 1), device="cuda", generator=g) * 0.01
    return a, b, sa, sb


def _loop_us(fn, args) -> float:
    """Host µs per call of one loop of CALLS back-to-back calls (then a sync, not timed)."""
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn(*args)
    us = (time.perf_counter() - t0) * 1e6 / CALLS
    torch.cuda.synchronize()
    return us


def _gpu_us(fn, args) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        fn(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / CALLS


def _interleaved(fns: dict, args, rounds: int) -> dict:
    """Host µs per call of every variant, measured in ``rounds`` rounds; each round times one loop of
    each variant in a new random order, so a slow phase of the process hits every variant alike.
    Returns per variant the median over rounds and the loops themselves."""
    import random

    for fn in fns.values():  # warm-up
        for _ in range(10):
            fn(*args)
    torch.cuda.synchronize()
    loops = {name: [] for name in fns}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            loops[name].append(_loop_us(fns[name], args))
    return loops


def _code_lines(text: str) -> list[str]:
    """Generated code without comment lines (the AOT id, the source nodes' names)."""
    return [line for line in text.splitlines() if not line.strip().startswith("#")]


def _paired(a: list[float], b: list[float]) -> dict:
    """Median and p20-p80 of the per-round differences ``a - b`` (µs)."""
    d = sorted(x - y for x, y in zip(a, b, strict=True))
    q = lambda p: d[min(len(d) - 1, int(p * len(d)))]  # noqa: E731
    return {"median": round(statistics.median(d), 2), "p20": round(q(0.2), 2), "p80": round(q(0.8), 2)}


def main() -> None:
    from vllm import _custom_ops as vllm_ops
    from vllm.config.utils import Range

    os.environ.setdefault("HL_LINEAR_BACKEND", "helion")
    from hlvllm.lowering import _pass_class
    from hlvllm.plugin import register

    register()
    ops = torch.ops.hlvllm

    def vllm_graph(a, b, sa, sb):
        return vllm_ops.cutlass_scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    def op_graph(a, b, sa, sb):
        return ops.scaled_mm(a, b, sa, sb, torch.bfloat16, None)

    def lowered_graph(a, b, sa, sb):  # op_graph's body under its own code object (own Dynamo cache)
        return ops.scaled_mm(a, b, sa, sb, torch.bfloat16, None)

    def cond_graph(a, b, sa, sb):
        return torch.cond(a.shape[0] <= 32, op_graph, vllm_graph, (a, b, sa, sb))

    import torch._inductor.config as inductor_config
    from vllm.compilation.passes.inductor_pass import pass_context

    variants = {}
    codes = {}
    large = Range(start=33, end=8192)
    for name, fn, post in (
        ("vllm", vllm_graph, None),
        ("op", op_graph, None),
        ("lowered", lowered_graph, _pass_class()()),
        ("cond", cond_graph, None),
    ):
        # vLLM's wrapper drops every guard (compilation/wrapper.py: skip_all_guards_unsafe); so do we,
        # and each variant has its own code object, so no call walks another variant's cache entry
        compiled = torch.compile(
            fn,
            fullgraph=True,
            dynamic=True,
            options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe},
        )

        def call(
            *args, compiled=compiled, post=post
        ):  # every call in the same contexts: no recompile without the pass
            with pass_context(large), inductor_config.patch(post_grad_custom_post_pass=post):
                return compiled(*args)

        try:
            from torch._inductor.utils import run_and_get_code

            _, code = run_and_get_code(call, *_inputs(64))  # compile once, dynamic M
            text = "\n".join(code)
            codes[name] = {
                "calls_cutlass_op": "torch.ops._C.cutlass_scaled_mm" in text,
                "calls_hlvllm_op": "torch.ops.hlvllm.scaled_mm" in text,
                "text": text,  # the whole generated code, to diff the variants
            }
            variants[name] = call
        except Exception as exc:  # noqa: BLE001 - record why a design does not compile
            variants[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    rows = []

    def in_contexts(fn):
        def call(*args):
            with pass_context(large), inductor_config.patch(post_grad_custom_post_pass=None):
                return fn(*args)

        return call

    eager = {
        "eager vllm wrapper": in_contexts(vllm_graph),
        "eager hlvllm op": in_contexts(op_graph),
        "eager _C op": in_contexts(
            lambda a, b, sa, sb: torch.ops._C.cutlass_scaled_mm(
                torch.empty((a.shape[0], N), dtype=torch.bfloat16, device="cuda"), a, b, sa, sb, None
            )
        ),
    }
    for m in MS:
        args = _inputs(m)
        row = {"M": m, "N": N, "K": K}
        fns = {name: fn for name, fn in [*variants.items(), *eager.items()] if not isinstance(fn, str)}
        loops = _interleaved(fns, args, ROUNDS)
        for name, fn in fns.items():
            row[f"{name}_host_us"] = round(statistics.median(loops[name]), 2)
            row[f"{name}_gpu_us"] = round(_gpu_us(fn, args), 2)
            row[f"{name}_loops_us"] = [round(x, 2) for x in loops[name]]
        for name in ("op", "lowered", "cond"):
            if name in fns:
                row[f"{name}_minus_vllm_us"] = _paired(loops[name], loops["vllm"])
        rows.append(row)
    out = os.environ.get("OUT", ".")
    from hltools.results import provenance  # noqa: PLC0415 (GPU-machine script)

    payload = {"metadata": provenance("nvidia_h200"), "generated_code": codes, "rows": rows}
    with open(os.path.join(out, "prefill_host_time.json"), "w") as f:
        json.dump(payload, f, indent=1)
    names = [n for n in [*variants, *eager] if not isinstance(variants.get(n), str)]
    print("host µs per call (GPU µs per call), FP8_Dynamic N=K=4096, torch.compile dynamic M")
    print("| M | " + " | ".join(names) + " |")
    for row in rows:
        cells = [f"{row.get(n + '_host_us', '-')} ({row.get(n + '_gpu_us', '-')})" for n in names]
        print(f"| {row['M']} | " + " | ".join(cells) + " |")
    for name, v in variants.items():
        if isinstance(v, str):
            print(f"{name}: did not compile: {v}")
    print("paired per-round differences against vllm, µs: median (p20-p80)")
    for row in rows:
        cells = [
            f"{n} {row[n + '_minus_vllm_us']['median']} ({row[n + '_minus_vllm_us']['p20']}..{row[n + '_minus_vllm_us']['p80']})"
            for n in ("op", "lowered", "cond")
            if n + "_minus_vllm_us" in row
        ]
        print(f"M={row['M']}: " + "; ".join(cells))
    print(
        "generated code per variant:",
        {k: {a: b for a, b in v.items() if a != "text"} for k, v in codes.items()},
    )
    if "vllm" in codes and "lowered" in codes:
        print("lowered code == vllm code (byte for byte):", codes["vllm"]["text"] == codes["lowered"]["text"])
        print(
            "lowered code == vllm code (without comments, e.g. the AOT id and source-node names):",
            _code_lines(codes["vllm"]["text"]) == _code_lines(codes["lowered"]["text"]),
        )
    print("every variant (and the eager rows) is called inside the same pass_context + Inductor config patch")


if __name__ == "__main__":
    main()
