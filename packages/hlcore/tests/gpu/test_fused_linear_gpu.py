"""block_fp8_linear compiled on a CUDA GPU: Qwen3-8B shapes with the shipped configs, against the
fp32 reference of the unfused chain and the two-kernel path; CUDA-graph replay equals eager."""

import pytest
import torch

from hlcore.formats import get_format
from hlcore.fused_linear import block_fp8_linear, block_fp8_linear_ref
from hlcore.quant_kernels import per_token_group_fp8_quant
from hlcore.scaled_mm import scaled_mm
from hlcore.testing import rel_error, tolerance

pytestmark = pytest.mark.gpu

QWEN3_8B = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)]
TOL = tolerance("block_fp8", torch.bfloat16)


def _inputs(m, n, k, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn((m, k), generator=gen) * torch.exp(torch.randn((m, 1), generator=gen))).to(
        torch.bfloat16
    )
    w_q, scale_b = get_format("block_fp8").quantize_weight(
        (torch.randn((n, k), generator=gen) * 0.05).to(torch.bfloat16)
    )
    return x.cuda(), w_q.cuda().t(), scale_b.cuda()


@pytest.mark.parametrize("nk", QWEN3_8B, ids=[f"N{n}K{k}" for n, k in QWEN3_8B])
def test_shipped_configs_on_qwen3_8b(nk):
    n, k = nk
    for m in (1, 2, 8, 24, 32):
        x, b, scale_b = _inputs(m, n, k, seed=m)
        out = block_fp8_linear(x, b, scale_b)
        assert rel_error(out, block_fp8_linear_ref(x, b, scale_b)) <= TOL, (m, n, k)
        a, scale_a = per_token_group_fp8_quant(x)
        two = scaled_mm(a, b, scale_a, scale_b, torch.bfloat16, block_size=(128, 128))
        assert rel_error(out, two) <= TOL, (m, n, k)  # same picked config; split-K atomics may reorder


def test_cuda_graph_replay_equals_eager():
    cfg = {"block_sizes": [16, 64, 128], "split_k": 1, "swap_ab": True, "num_warps": 4, "num_stages": 3}
    x, b, scale_b = _inputs(4, 4096, 4096, seed=3)
    eager = block_fp8_linear(x, b, scale_b, config=cfg)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        block_fp8_linear(x, b, scale_b, config=cfg)
        with torch.cuda.graph(graph, stream=stream):
            captured = block_fp8_linear(x, b, scale_b, config=cfg)
    torch.cuda.current_stream().wait_stream(stream)
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    x2, _, _ = _inputs(4, 4096, 4096, seed=4)
    x.copy_(x2)  # new activations in the captured input buffer
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(captured, block_fp8_linear_ref(x2, b, scale_b)) <= TOL
