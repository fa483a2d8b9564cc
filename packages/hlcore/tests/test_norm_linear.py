"""hlcore.norm_linear.rms_norm_fp8_linear: (residual add +) RMSNorm, per-token fp8 quantization and
the FP8_Dynamic GEMM in one kernel, against the fp32 reference of the unfused chain (Helion's eager
mode and the GPU: vLLM's quantizer semantics, hlcore.norm_quant's references) and, under Triton's
CPU interpreter (whose fp8/bf16 casts round wrongly), against the interpreter's own two-kernel
path's quantized bytes (hlcore.norm_quant's Helion kernel) in fp32."""

import os

import pytest
import torch

from hlcore.formats import get_format
from hlcore.norm_linear import (
    config_from_scaled_mm,
    rms_norm_fp8_linear,
    rms_norm_fp8_linear_ref,
    rms_norm_w8a16_linear,
    rms_norm_w8a16_linear_ref,
)
from hlcore.norm_quant import fused_add_rms_norm_fp8_quant, rms_norm_fp8_quant
from hlcore.scaled_mm import scaled_mm_ref
from hlcore.testing import rel_error, tolerance

GPU = os.environ.get("HL_TEST_GPU") == "1" and torch.cuda.is_available()
FP8_EXACT = os.environ.get("HELION_INTERPRET") == "1" or GPU
DEVICE = "cuda" if GPU else "cpu"
EPS = 1e-6
#: block_sizes = [block_m, block_n, block_k, stats_block_k]
PLAIN = {"block_sizes": [16, 32, 64, 64], "split_k": 1, "swap_ab": False, "num_warps": 4, "num_stages": 1}
SWAP = {**PLAIN, "swap_ab": True}


def _inputs(m, n, k, seed=0, out_dtype=torch.bfloat16, bias=False):
    gen = torch.Generator().manual_seed(seed)
    scale_rows = torch.exp(torch.randn((m, 1), generator=gen))
    x = (torch.randn((m, k), generator=gen) * scale_rows).to(torch.bfloat16)
    residual = (torch.randn((m, k), generator=gen) * scale_rows).to(torch.bfloat16)
    norm_weight = (1 + 0.2 * torch.randn((k,), generator=gen)).to(torch.bfloat16)
    w = (torch.randn((n, k), generator=gen) * 0.05).to(torch.bfloat16)
    w_q, scale_b = get_format("fp8_dynamic").quantize_weight(w)
    b = (torch.randn((n,), generator=gen) * 0.5).to(out_dtype) if bias else None
    dev = torch.device(DEVICE)
    move = lambda t: None if t is None else t.to(dev)  # noqa: E731
    return move(x), move(residual), move(norm_weight), move(w_q).t(), move(scale_b), move(b)


def _ref(x, residual, norm_weight, b, scale_b, out_dtype, bias):
    if FP8_EXACT:
        return rms_norm_fp8_linear_ref(x, norm_weight, EPS, b, scale_b, residual, out_dtype, bias)
    if residual is not None:
        q, scale_a, new_residual = fused_add_rms_norm_fp8_quant(x, residual, norm_weight, EPS)
    else:
        (q, scale_a), new_residual = rms_norm_fp8_quant(x, norm_weight, EPS), None
    return scaled_mm_ref(q, b, scale_a, scale_b.reshape(-1), out_dtype, bias), new_residual


@pytest.mark.parametrize(
    "m,n,k,config,with_residual",
    [
        (1, 96, 256, PLAIN, True),
        (1, 96, 256, SWAP, False),
        (3, 64, 384, SWAP, True),
        (3, 64, 384, PLAIN, False),
        (33, 64, 128, PLAIN, True),
        (33, 64, 128, SWAP, True),
    ],
    ids=["M1-add", "M1-swap-norm", "M3-swap-add", "M3-norm", "M33-add", "M33-swap-add"],
)
def test_within_tolerance_of_the_unfused_chain(m, n, k, config, with_residual):
    x, residual, norm_weight, b, scale_b, bias = _inputs(m, n, k, seed=m + k, bias=m == 3)
    residual = residual if with_residual else None
    out, new_residual = rms_norm_fp8_linear(
        x, norm_weight, EPS, b, scale_b, residual, bias=bias, config=config
    )
    ref, ref_residual = _ref(x, residual, norm_weight, b, scale_b, torch.bfloat16, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_error(out, ref) <= tolerance("fp8_dynamic", torch.bfloat16)
    if with_residual:
        # h = x + residual, written once per element by the first N tile's programs
        assert torch.equal(new_residual, ref_residual)
    else:
        assert new_residual is None


def test_split_k_and_several_statistics_tiles():
    x, residual, norm_weight, b, scale_b, bias = _inputs(
        5, 64, 256, seed=7, out_dtype=torch.float32, bias=True
    )
    cfg = {**PLAIN, "block_sizes": [16, 64, 64, 64], "split_k": 2}  # 2 chunks of 2 K tiles; 4 stats tiles
    out, new_residual = rms_norm_fp8_linear(
        x, norm_weight, EPS, b, scale_b, residual, torch.float32, bias, config=cfg
    )
    ref, ref_residual = _ref(x, residual, norm_weight, b, scale_b, torch.float32, bias)
    assert rel_error(out, ref) <= tolerance("fp8_dynamic", torch.float32)
    assert torch.equal(new_residual, ref_residual)  # each K chunk's residual written once


def test_exact_bytes_in_eager_mode():
    """Where casts round as on the GPU, the fused kernel's result is the unfused chain's to fp32
    rounding of the GEMM (the same quantized bytes and scales)."""
    if not FP8_EXACT:
        pytest.skip("Triton's CPU interpreter rounds fp8 casts wrongly")
    x, residual, norm_weight, b, scale_b, _ = _inputs(4, 64, 256, seed=11)
    out, _ = rms_norm_fp8_linear(x, norm_weight, EPS, b, scale_b, residual, torch.float32, config=PLAIN)
    ref, _ = rms_norm_fp8_linear_ref(x, norm_weight, EPS, b, scale_b, residual, torch.float32)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_a_zero_row_gives_zeros():
    x, _, norm_weight, b, scale_b, _ = _inputs(3, 64, 128, seed=3)
    x[1] = 0  # rms = sqrt(eps): y = 0, scale = 1 / (448 * 512), q = 0
    out, _ = rms_norm_fp8_linear(x, norm_weight, EPS, b, scale_b, config=PLAIN)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.isfinite(out).all()


def test_strided_x_and_empty_m():
    x, residual, norm_weight, b, scale_b, _ = _inputs(2, 64, 128, seed=5)
    wide = torch.zeros((2, 200), dtype=x.dtype, device=x.device)
    wide[:, :128] = x
    out, _ = rms_norm_fp8_linear(wide[:, :128], norm_weight, EPS, b, scale_b, config=PLAIN)
    torch.testing.assert_close(out, rms_norm_fp8_linear(x, norm_weight, EPS, b, scale_b, config=PLAIN)[0])
    empty, empty_residual = rms_norm_fp8_linear(
        x[:0], norm_weight, EPS, b, scale_b, residual[:0], config=PLAIN
    )
    assert empty.shape == (0, 64) and empty_residual.shape == (0, 128)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"x": lambda t: t.float()}, "x must be a 2-D"),
        ({"residual": lambda t: t[:, :64]}, "residual must be [M, K]"),
        ({"norm_weight": lambda t: t[:64]}, "norm_weight must be a 1-D [K]"),
        ({"b": lambda t: t.t().contiguous().t().contiguous()}, "b must be column-major"),
        ({"scale_b": lambda t: t[:10]}, "scale_b must be a per-channel"),
    ],
    ids=["x-dtype", "residual-shape", "norm-weight-shape", "b-layout", "scale-b-size"],
)
def test_bad_input_names_the_tensor(change, message):
    x, residual, norm_weight, b, scale_b, _ = _inputs(2, 64, 128, seed=1)
    args = {"x": x, "residual": residual, "norm_weight": norm_weight, "b": b, "scale_b": scale_b}
    for name, fn in change.items():
        args[name] = fn(args[name])
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        rms_norm_fp8_linear(
            args["x"], args["norm_weight"], EPS, args["b"], args["scale_b"], args["residual"], config=PLAIN
        )


def test_config_from_scaled_mm_appends_the_statistics_tile():
    gemm = {"block_sizes": [16, 64, 128], "split_k": 4, "num_warps": 4}
    assert config_from_scaled_mm(gemm) == {**gemm, "block_sizes": [16, 64, 128, 512]}
    import helion  # a helion.Config and JSON text are taken as well (hlcore.aux_configs.config_json)

    assert config_from_scaled_mm(helion.Config(**gemm), 256)["block_sizes"] == [16, 64, 128, 256]
    assert config_from_scaled_mm('{"block_sizes": [32, 64, 128]}')["block_sizes"] == [32, 64, 128, 512]


@pytest.mark.skipif(os.environ.get("HELION_INTERPRET") == "1", reason="reads Helion's generated code")
@pytest.mark.parametrize("activation", ["fp8", "w8a16"])
def test_each_block_size_tiles_the_loop_it_names(activation, monkeypatch):
    """block_sizes = [block_m, block_n, block_k, stats_block_k] as documented, whatever order Helion
    numbers them in: in the code of the config the public call launches, the statistics loops over
    the whole row step by stats_block_k and the GEMM's K loop by block_k (a mix-up ran the H200 out
    of shared memory: a 512-wide K tile, 16-wide statistics)."""
    import re

    import helion

    from hlcore import norm_linear

    class Launched(Exception):
        pass

    launched = []

    def kernel_for(act, text):
        launched.append(text)
        raise Launched  # this test reads the launched config; the others check the results

    monkeypatch.setattr(norm_linear, "_kernel_for", kernel_for)
    m, n, k = 3, 64, 512
    x, residual, norm_weight, b, scale_b, _ = _inputs(m, n, k, seed=2)
    fn = rms_norm_fp8_linear if activation == "fp8" else rms_norm_w8a16_linear
    config = {"block_sizes": [16, 32, 64, 256], "split_k": 2, "swap_ab": False}
    with pytest.raises(Launched):
        fn(x, norm_weight, EPS, b, scale_b, residual, config=config)
    helion_config = helion.Config.from_json(launched[-1])
    args = [x, residual, norm_weight, EPS, b.t(), scale_b.reshape(n, 1), None, torch.bfloat16]
    if activation == "w8a16":
        args.append(torch.float32)
    body = norm_linear._BODIES[activation]
    code = helion.kernel(body, configs=[helion_config]).bind(tuple(args)).to_triton_code(helion_config)
    sizes = {name: int(v) for name, v in re.findall(r"(_BLOCK_SIZE_\d+) = tl.constexpr\((\d+)\)", code)}
    loops = re.findall(r"tl\.range\((.*), (_BLOCK_SIZE_\d+)\)", code)  # (start, end; step)
    row_loops = {sizes[step] for bounds, step in loops if bounds == f"0, {k}"}
    chunk_loops = {sizes[step] for bounds, step in loops if bounds != f"0, {k}"}
    assert row_loops == {256} and chunk_loops == {64}, (loops, sizes)


# --------------------------------------------------------------------------------------------
# rms_norm_w8a16_linear: the activation kept in bf16 (no quantization)
# --------------------------------------------------------------------------------------------
#: Only roundings of bf16 operands and the output separate it from the fp32 reference (~2^-8
#: relative per element; Triton's interpreter truncates bf16 casts): far inside fp8_dynamic's
#: tolerance, which the W8A8 chain's activation quantization needs.
W8A16_TOLERANCE = 0.01
#: Helion 1.5.0's eager hl.dot of bf16 (or fp32) operands is torch.mm(out_dtype=...), which has no CPU
#: kernel in torch 2.11: the W8A16 kernel runs in Triton's interpreter and on the GPU only.
needs_codegen = pytest.mark.skipif(
    os.environ.get("HELION_INTERPRET") == "1", reason="Helion's eager hl.dot of bf16 has no CPU kernel"
)


@needs_codegen
@pytest.mark.parametrize(
    "m,n,k,config,with_residual",
    [(1, 96, 256, PLAIN, True), (3, 64, 384, SWAP, False), (33, 64, 128, PLAIN, True)],
    ids=["M1-add", "M3-swap-norm", "M33-add"],
)
def test_w8a16_within_tolerance_of_the_unquantized_chain(m, n, k, config, with_residual):
    x, residual, norm_weight, b, scale_b, bias = _inputs(m, n, k, seed=m + k + 1, bias=m == 3)
    residual = residual if with_residual else None
    out, new_residual = rms_norm_w8a16_linear(
        x, norm_weight, EPS, b, scale_b, residual, bias=bias, config=config
    )
    ref, _ = rms_norm_w8a16_linear_ref(x, norm_weight, EPS, b, scale_b, residual, torch.bfloat16, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert rel_error(out, ref) <= W8A16_TOLERANCE
    # no activation quantization: nearer the unquantized layer than the W8A8 chain is
    w8a8, _ = rms_norm_fp8_linear_ref(x, norm_weight, EPS, b, scale_b, residual, torch.float32, bias)
    assert rel_error(out, ref) < rel_error(w8a8, ref)
    if with_residual:
        assert torch.equal(new_residual, _ref(x, residual, norm_weight, b, scale_b, torch.bfloat16, bias)[1])
    else:
        assert new_residual is None


@needs_codegen
def test_w8a16_split_k_takes_the_row_statistics_in_their_own_pass():
    x, residual, norm_weight, b, scale_b, bias = _inputs(
        5, 128, 512, seed=9, out_dtype=torch.float32, bias=True
    )
    cfg = {**PLAIN, "block_sizes": [16, 64, 64, 128], "split_k": 4}
    out, _ = rms_norm_w8a16_linear(x, norm_weight, EPS, b, scale_b, residual, torch.float32, bias, config=cfg)
    ref, _ = rms_norm_w8a16_linear_ref(x, norm_weight, EPS, b, scale_b, residual, torch.float32, bias)
    assert rel_error(out, ref) <= W8A16_TOLERANCE
    one, _ = rms_norm_w8a16_linear(
        x, norm_weight, EPS, b, scale_b, residual, torch.float32, bias, config=PLAIN
    )
    assert rel_error(out, one) <= 1e-5  # same sums, other order
