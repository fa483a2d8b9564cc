"""scaled_mm compiled on a CUDA GPU: fp32 reference, torch._scaled_mm, CUDA-graph replay."""

import pytest
import torch

from hlcore.scaled_mm import generate_scaled_mm_inputs, scaled_mm, scaled_mm_ref
from hlcore.testing import rel_error, tolerance

pytestmark = pytest.mark.gpu

# Qwen3-8B linear layers (N, K): qkv, o, gate_up, down
QWEN3_8B = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]
NUM_TOKENS = [1, 2, 4, 8, 16, 24, 32]
TOL = tolerance("fp8_dynamic", torch.bfloat16)


@pytest.mark.parametrize("nk", QWEN3_8B, ids=[f"N{n}K{k}" for n, k in QWEN3_8B])
def test_default_config_on_qwen3_8b(nk):
    n, k = nk
    for m in NUM_TOKENS:
        d = generate_scaled_mm_inputs(m, n, k, device="cuda", with_bias=(m % 2 == 0), seed=m)
        out = scaled_mm(**d)
        ref = scaled_mm_ref(**d)
        assert rel_error(out, ref) <= TOL, (m, n, k, rel_error(out, ref))
        # torch._scaled_mm (cuBLASLt rowwise) as an independent fast kernel
        try:
            ts = torch._scaled_mm(
                d["a"],
                d["b"],
                scale_a=d["scale_a"],
                scale_b=d["scale_b"].reshape(1, n),
                out_dtype=torch.bfloat16,
                bias=d["bias"],
            )
        except RuntimeError:
            continue  # shapes cuBLASLt rejects
        assert rel_error(out, ts) <= 2 * TOL, (m, n, k, rel_error(out, ts))


@pytest.mark.parametrize("split_k", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("swap_ab", [False, True])
def test_algorithms_on_real_shape(split_k, swap_ab):
    cfg = {
        "block_sizes": [16, 64, 128],
        "split_k": split_k,
        "swap_ab": swap_ab,
        "num_warps": 4,
        "num_stages": 3,
    }
    for m in (1, 5, 32):
        d = generate_scaled_mm_inputs(m, 6144, 4096, device="cuda", with_bias=True, seed=split_k)
        out = scaled_mm(**d, config=cfg)
        assert rel_error(out, scaled_mm_ref(**d)) <= TOL, (m, split_k, swap_ab)


@pytest.mark.parametrize("split_k", [1, 4])
def test_cuda_graph_replay_equals_eager(split_k):
    cfg = {"block_sizes": [16, 64, 128], "split_k": split_k, "swap_ab": True, "num_warps": 4, "num_stages": 3}
    d = generate_scaled_mm_inputs(4, 4096, 4096, device="cuda", with_bias=True, seed=3)
    eager = scaled_mm(**d, config=cfg)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        scaled_mm(**d, config=cfg)
        with torch.cuda.graph(graph, stream=stream):
            captured = scaled_mm(**d, config=cfg)
    torch.cuda.current_stream().wait_stream(stream)
    captured.fill_(float("nan"))  # poison, then replay must rewrite every element
    graph.replay()
    torch.cuda.synchronize()
    if split_k == 1:
        assert torch.equal(captured, eager)
    else:  # atomics: order varies
        assert rel_error(captured, eager) <= TOL
    assert rel_error(captured, scaled_mm_ref(**d)) <= TOL
    # new activations copied into the captured input buffer are picked up by the replay
    d2 = generate_scaled_mm_inputs(4, 4096, 4096, device="cuda", with_bias=True, seed=4)
    d["a"].copy_(d2["a"])
    graph.replay()
    torch.cuda.synchronize()
    ref2 = scaled_mm_ref(d2["a"], d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, d["bias"])
    assert rel_error(captured, ref2) <= TOL


@pytest.mark.parametrize("split_k,with_bias", [(1, True), (8, True), (8, False)])
def test_graph_replay_after_the_kernel_that_writes_its_input(split_k, with_bias):
    """Under CUDA-graph replay each GEMM follows the kernel that writes its activations; every
    output must match the reference for the activations written right before it, with nothing
    stale; with split-K, partial sums added before the output fill landed would be lost (the
    outputs start as NaN)."""
    cfg = {"block_sizes": [16, 64, 128], "split_k": split_k, "swap_ab": True, "num_warps": 4, "num_stages": 3}
    d = generate_scaled_mm_inputs(8, 4096, 4096, device="cuda", with_bias=with_bias, seed=7)
    sources = [generate_scaled_mm_inputs(8, 4096, 4096, device="cuda", seed=20 + i)["a"] for i in range(6)]
    scaled_mm(**d, config=cfg)  # compile outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        outs = []
        for src in sources:
            d["a"].copy_(src)
            outs.append(scaled_mm(**d, config=cfg))
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for src, o in zip(sources, outs, strict=True):
            ref = scaled_mm_ref(src, d["b"], d["scale_a"], d["scale_b"], torch.bfloat16, d["bias"])
            assert rel_error(o, ref) <= TOL


# Qwen3-8B shapes and a TP=2 shard of Qwen3-32B's o/down projections
FORMAT_SHAPES = [(6144, 4096), (4096, 12288), (5120, 4096), (5120, 12800)]


@pytest.mark.parametrize("fmt", ["w8a8_int8", "block_fp8"])
@pytest.mark.parametrize("nk", FORMAT_SHAPES, ids=[f"N{n}K{k}" for n, k in FORMAT_SHAPES])
def test_other_formats_on_real_shapes(fmt, nk):
    n, k = nk
    for m in (1, 4, 17, 32):
        d = generate_scaled_mm_inputs(m, n, k, fmt=fmt, device="cuda", with_bias=(m % 2 == 1), seed=m)
        out = scaled_mm(**d)
        err = rel_error(out, scaled_mm_ref(**d))
        assert err <= tolerance(fmt, torch.bfloat16), (fmt, m, n, k, err)
        for algo in ({"split_k": 4, "swap_ab": False}, {"split_k": 1, "swap_ab": True}):
            cfg = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 3, **algo}
            err = rel_error(scaled_mm(**d, config=cfg), scaled_mm_ref(**d))
            assert err <= tolerance(fmt, torch.bfloat16), (fmt, m, n, k, algo, err)
