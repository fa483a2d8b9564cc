"""The format registry (hlcore.formats) against independent facts: names, scale shapes and bytes
of real quantized tensors, the hlcore.quant references, the tolerance table, checkpoint configs;
the error measures of hlcore.numerics; format names listed once in hlcore's sources."""

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from hlcore import formats, numerics, quant, testing
from hlcore import scaled_mm as sm
from hlcore import scaled_mm_config as smc
from hlcore.formats import FORMAT_NAMES, FORMATS, get_format, scaled_mm_bytes

NAMES = ["fp8_dynamic", "w8a8_int8", "block_fp8"]
SHAPES = [(1, 40, 96), (3, 200, 300), (17, 128, 64), (0, 24, 130)]  # (M, N, K), awkward on purpose

# What a checkpoint's config.json holds (compressed-tensors W8A8 and vLLM's block fp8), written out.
CT_FP8 = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 8,
                "type": "float",
                "symmetric": True,
                "strategy": "channel",
                "dynamic": False,
            },
            "input_activations": {
                "num_bits": 8,
                "type": "float",
                "symmetric": True,
                "strategy": "token",
                "dynamic": True,
            },
        }
    },
}
BLOCK_FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def test_names_titles_and_order():
    assert tuple(NAMES) == FORMAT_NAMES and list(FORMATS) == NAMES
    assert [FORMATS[n].title for n in NAMES] == ["FP8_Dynamic", "W8A8_INT8", "Block_FP8"]
    assert all(FORMATS[n].name == n for n in NAMES)
    assert smc.SCALED_MM_FORMATS == FORMAT_NAMES  # the picker asks the registry
    assert sm.FORMATS is FORMATS and sm.BLOCK_SIZE == (128, 128)


def test_unknown_format_error_lists_the_supported_ones():
    for bad in ("fp4", "FP8_Dynamic", None, 3):
        with pytest.raises(
            ValueError, match=r"who: unknown format .*fmt must be one of: fp8_dynamic, w8a8_int8, block_fp8"
        ):
            get_format(bad, "who")
    with pytest.raises(ValueError, match="scaled_mm_bytes: unknown format 'int4'"):
        scaled_mm_bytes("int4", 1, 1, 1)
    with pytest.raises(ValueError, match="generate_scaled_mm_inputs: unknown format 'fp4'"):
        sm.generate_scaled_mm_inputs(1, 16, 16, fmt="fp4")
    with pytest.raises(ValueError, match="pick_scaled_mm_config: unknown format 'fp4'"):
        smc.pick_scaled_mm_config("fp4", 1, 16, 16)


def test_records_are_read_only():
    f = FORMATS["block_fp8"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.group_size = 64
    with pytest.raises(TypeError):
        f.tolerances["bfloat16"] = 1.0
    with pytest.raises(TypeError):
        f.hf_quantization_config["quant_method"] = "other"
    with pytest.raises(TypeError):
        FORMATS["fp4"] = f


@pytest.mark.parametrize("name,expected", [("fp8_dynamic", CT_FP8), ("block_fp8", BLOCK_FP8)])
def test_quantization_config_is_a_fresh_copy(name, expected):
    config = FORMATS[name].quantization_config()
    assert config == expected
    config["weight_block_size"] = [1, 1]  # a copy: the record is unchanged
    config.setdefault("config_groups", {}).clear()
    assert FORMATS[name].quantization_config() == expected


def test_int8_quantization_config_differs_only_in_type():
    fp8, int8 = CT_FP8, FORMATS["w8a8_int8"].quantization_config()
    group = int8["config_groups"]["group_0"]
    assert int8["format"] == "int-quantized"
    assert group["weights"]["type"] == group["input_activations"]["type"] == "int"
    for side in ("weights", "input_activations"):
        group[side]["type"] = "float"
    int8["format"] = "float-quantized"
    assert int8 == fp8


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mnk", SHAPES, ids=[f"M{m}N{n}K{k}" for m, n, k in SHAPES])
def test_bytes_moved_equals_the_tensors_of_one_call(name, mnk):
    """The bytes formula counts exactly the bytes of A, B, both scale tensors and the output of
    real quantized inputs (bf16 out: 2 bytes, fp32 out: 4)."""
    m, n, k = mnk
    d = sm.generate_scaled_mm_inputs(m, n, k, fmt=name, seed=3)
    operands = sum(t.numel() * t.element_size() for t in (d["a"], d["b"], d["scale_a"], d["scale_b"]))
    assert FORMATS[name].bytes_moved(m, n, k) == operands + 2 * m * n
    assert scaled_mm_bytes(name, m, n, k, out_bytes=4) == operands + 4 * m * n


def test_bytes_moved_by_hand():
    # block_fp8, M=2, N=256, K=384, fp32 out: A 768 + B 98304 + scale_a 4*2*3 + scale_b 4*2*3 + out 4*2*256
    assert scaled_mm_bytes("block_fp8", 2, 256, 384, out_bytes=4) == 768 + 98304 + 24 + 24 + 2048
    # per token / per channel: scale_a [M] + scale_b [N] fp32
    assert scaled_mm_bytes("fp8_dynamic", 2, 64, 128) == 2 * 128 + 64 * 128 + 4 * (2 + 64) + 2 * 2 * 64
    assert scaled_mm_bytes("w8a8_int8", 2, 64, 128) == scaled_mm_bytes("fp8_dynamic", 2, 64, 128)


@pytest.mark.parametrize("name", NAMES)
def test_quantizers_give_the_documented_dtypes_and_scale_shapes(name):
    f = FORMATS[name]
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 300, generator=g), torch.randn(200, 300, generator=g)
    a, scale_a = f.quantize_activation(x)
    w_q, scale_b = f.quantize_weight(w)
    dtype = {"fp8_dynamic": torch.float8_e4m3fn, "w8a8_int8": torch.int8, "block_fp8": torch.float8_e4m3fn}[
        name
    ]
    assert a.dtype == w_q.dtype == dtype == getattr(torch, f.operand_dtype)
    assert scale_a.dtype == scale_b.dtype == torch.float32
    assert tuple(scale_a.shape) == f.scale_a_shape(5, 300) == {"block_fp8": (5, 3)}.get(name, (5, 1))
    assert tuple(scale_b.shape) == f.scale_b_shape(200, 300) == {"block_fp8": (2, 3)}.get(name, (200, 1))


@pytest.mark.parametrize(
    "name,act,weight",
    [
        ("fp8_dynamic", quant.per_token_fp8_quant_ref, quant.per_channel_fp8_quant_ref),
        ("w8a8_int8", quant.per_token_int8_quant_ref, quant.per_token_int8_quant_ref),
        (
            "block_fp8",
            lambda x: quant.per_token_group_fp8_quant_ref(x, 128),
            lambda w: quant.per_block_fp8_quant_ref(w, (128, 128)),
        ),
    ],
)
def test_quantizers_are_the_hlcore_quant_references(name, act, weight):
    f = FORMATS[name]
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(3, 260, generator=g) * 4, torch.randn(130, 260, generator=g) * 0.05
    for (q, s), (q_ref, s_ref) in ((f.quantize_activation(x), act(x)), (f.quantize_weight(w), weight(w))):
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)) and torch.equal(s, s_ref)


@pytest.mark.parametrize("name", NAMES)
def test_tolerance_table(name):
    expected = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3, torch.float32: 1e-4}
    for dtype, tol in expected.items():
        assert FORMATS[name].tolerance(dtype) == FORMATS[name].tolerance(str(dtype)[6:]) == tol
        assert numerics.tolerance(name, dtype) == testing.tolerance(name, dtype) == tol
        assert testing.TOLERANCES[(name, dtype)] == tol
    with pytest.raises(ValueError, match=rf"no tolerance for format '{name}' with out_dtype torch.int32"):
        FORMATS[name].tolerance(torch.int32)
    with pytest.raises(ValueError, match="no tolerance for format 'fp4'"):
        numerics.tolerance("fp4", torch.bfloat16)


@pytest.mark.parametrize("name", NAMES)
def test_scaled_mm_format_of_generated_inputs(name):
    d = sm.generate_scaled_mm_inputs(2, 40, 136, fmt=name, seed=2)
    assert d["block_size"] == FORMATS[name].block_size
    assert sm.scaled_mm_format(d["a"], d["block_size"]) == name
    args = (d["a"], d["b"], d["scale_a"], d["scale_b"], d["out_dtype"], d["bias"], d["block_size"])
    assert sm.check_scaled_mm_args(*args) == name


def test_rel_error_and_max_abs_error():
    ref = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    assert numerics.rel_error(ref * 1.01, ref) == pytest.approx(0.01, rel=1e-12)
    assert numerics.rel_error(ref + torch.tensor([[0.0, 0.5], [0.0, 0.0]]), ref) == pytest.approx(0.1)
    assert numerics.rel_error(torch.empty(0, 3), torch.empty(0, 3)) == 0.0
    assert numerics.rel_error(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0])) == float("inf")
    assert numerics.rel_error(torch.tensor([0.0, 2.0]), torch.zeros(2)) == 2.0  # zero ref: absolute
    with pytest.raises(ValueError, match=r"rel_error: shapes differ: out \(2,\) vs ref \(3,\)"):
        numerics.rel_error(torch.zeros(2), torch.zeros(3))
    assert numerics.max_abs_error(ref * 1.5, ref) == 2.0
    assert numerics.max_abs_error(torch.empty(0), torch.empty(0)) == 0.0
    # hlcore.testing re-exports the same functions (tests and other packages import them there)
    assert testing.rel_error is numerics.rel_error and testing.max_abs_error is numerics.max_abs_error
    assert testing.tolerance is numerics.tolerance


def _literal_name_lists(path: Path) -> list[int]:
    """Line numbers of list/tuple/set literals in ``path`` holding two or more format names."""
    names = set(NAMES)
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            found = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
            if len(found) >= 2:
                lines.append(node.lineno)
    return lines


def test_format_names_are_listed_once_in_hlcore():
    src = Path(formats.__file__).parent
    listed = {p.name: lines for p in sorted(src.glob("*.py")) if (lines := _literal_name_lists(p))}
    assert listed == {"formats.py": [_literal_name_lists(Path(formats.__file__))[0]]}, listed
