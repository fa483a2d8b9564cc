"""The three formats on a CUDA GPU against vLLM's own kernels (``nox -s gpu_tests``).

Helion's ``scaled_mm`` must agree with every vLLM kernel that serves the format (CUTLASS FP8 and INT8;
DeepGEMM, CUTLASS block and Triton block for Block_FP8; :mod:`hltools.providers`, weights processed as
vLLM does at load time) and each of them with the fp32 reference of the operands it multiplies
(DeepGEMM's weight re-quantized to UE8M0 scales when vLLM does that; Helion then also runs on it), on
Qwen3-8B and Qwen3-32B TP=2 shapes at decode sizes and with a bias, and CUDA-graph replay must equal
the eager result bit for bit (split_k > 1 included: replays run the same atomics order only up to
rounding, so replay is compared within tolerance and against a second eager call for split_k = 1).
"""

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

pytestmark = pytest.mark.gpu
pytest.importorskip("vllm._custom_ops", reason="vLLM's CUDA ops are not importable here")

# (N, K): Qwen3-8B qkv, o, gate_up, down; Qwen3-32B TP=2 qkv, down (N/2 column-parallel, K/2 row-parallel)
SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (5120, 5120), (5120, 12800)]
MS = (1, 3, 8, 17, 32)
FORMATS = ("fp8_dynamic", "w8a8_int8", "block_fp8")


def _providers(fmt, n, k, with_deep_gemm):
    """vLLM's kernels for ``fmt`` that take an ``[N, K]`` weight here (for block_fp8 each of them, not
    only the default); DeepGEMM JIT-compiles each shape with nvcc (tens of seconds), so it runs on
    one shape only."""
    from hltools import providers

    if fmt != "block_fp8":
        return [providers.vllm_default(fmt, torch.bfloat16, n, k)]
    out = []
    for cls in providers.BLOCK_PROVIDERS.values():
        if cls is providers.DeepGemmBlock and not with_deep_gemm:
            continue
        try:
            out.append(cls(fmt, torch.bfloat16, n, k))
        except providers.Unsupported:
            continue
    assert out, "no vLLM block-FP8 kernel is usable on this GPU"
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("nk", SHAPES, ids=[f"N{n}K{k}" for n, k in SHAPES])
def test_helion_matches_vllm_kernels(fmt, nk):
    n, k = nk
    tol = tolerance(fmt, torch.bfloat16)
    providers = _providers(fmt, n, k, with_deep_gemm=nk == SHAPES[0])
    for m in MS:
        d = generate_scaled_mm_inputs(m, n, k, fmt=fmt, device="cuda", seed=m)
        out = scaled_mm(
            d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, block_size=d["block_size"]
        )
        ref = scaled_mm_ref(**d)
        assert rel_error(out, ref) <= tol, (fmt, m, n, k, rel_error(out, ref))
        for p in providers:
            w = p.prepare_weight(d["b"], d["scale_b"])
            theirs = p.call(d["a"], p.prepare_scale_a(d["scale_a"]), w)
            their_ref = p.reference(d["a"], d["scale_a"], w)
            assert rel_error(theirs, their_ref) <= tol, (p.name, m, n, k, rel_error(theirs, their_ref))
            ours = out
            if w.requantized:  # Helion on the same (re-quantized) weight
                ours = scaled_mm(
                    d["a"], w.b, d["scale_a"], w.scale_b, torch.bfloat16, block_size=d["block_size"]
                )
            assert rel_error(ours, theirs) <= tol, (p.name, m, n, k, rel_error(ours, theirs))


@pytest.mark.parametrize("fmt", FORMATS)
def test_bias_and_graph_replay(fmt):
    n, k, m = 6144, 4096, 8
    d = generate_scaled_mm_inputs(m, n, k, fmt=fmt, device="cuda", with_bias=True, seed=3)
    args = (d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, d["bias"])
    eager = scaled_mm(*args, block_size=d["block_size"])
    ref = scaled_mm_ref(**d)
    assert rel_error(eager, ref) <= tolerance(fmt, torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        scaled_mm(*args, block_size=d["block_size"])
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            captured = scaled_mm(*args, block_size=d["block_size"])
    torch.cuda.current_stream().wait_stream(stream)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(captured, ref) <= tolerance(fmt, torch.bfloat16)
    assert rel_error(captured, eager) <= tolerance(fmt, torch.bfloat16)


@pytest.mark.parametrize("fmt", FORMATS)
def test_split_k_one_is_bitwise_repeatable(fmt):
    n, k, m = 4096, 4096, 5
    d = generate_scaled_mm_inputs(m, n, k, fmt=fmt, device="cuda", seed=5)
    cfg = {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": True, "num_warps": 4, "num_stages": 3}
    args = (d["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16)
    first = scaled_mm(*args, block_size=d["block_size"], config=cfg)
    second = scaled_mm(*args, block_size=d["block_size"], config=cfg)
    assert torch.equal(first, second)
    assert rel_error(first, scaled_mm_ref(**d)) <= tolerance(fmt, torch.bfloat16)
