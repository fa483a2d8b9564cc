"""hltools.shapes: embedded configs, (N, K) per linear, tensor-parallel sharding, config loading."""

import json

import pytest

from hltools.shapes import LinearShape, linear_shapes, list_models, load_model_config

# (qkv, o, gate_up, down) as (N, K), worked out by hand from the models' config.json (head_dim 128):
# qkv ((q + 2 kv) 128, hidden), o (hidden, q 128), gate_up (2 intermediate, hidden), down (hidden, intermediate)
EXPECTED = {
    "qwen3-1.7b": [(4096, 2048), (2048, 2048), (12288, 2048), (2048, 6144)],
    "qwen3-4b": [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)],
    "qwen3-8b": [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)],
    "qwen3-14b": [(7168, 5120), (5120, 5120), (34816, 5120), (5120, 17408)],
    "qwen3-32b": [(10240, 5120), (5120, 8192), (51200, 5120), (5120, 25600)],
    "llama-3.1-8b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)],
    "llama-3.1-70b": [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)],
}
NAMES = ["qkv", "o", "gate_up", "down"]

TINY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}


def test_list_models_is_the_design_table():
    assert list_models() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_embedded_model_shapes(name):
    shapes = linear_shapes(load_model_config(name))
    assert shapes == [LinearShape(n, *nk) for n, nk in zip(NAMES, EXPECTED[name], strict=True)]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_embedded_config_fields(name):
    c = load_model_config(name)
    qwen = name.startswith("qwen3")
    assert c["model_type"] == ("qwen3" if qwen else "llama")
    assert c["architectures"] == (["Qwen3ForCausalLM"] if qwen else ["LlamaForCausalLM"])
    assert c["vocab_size"] == (151936 if qwen else 128256)
    assert c["head_dim"] == 128
    assert c["hidden_act"] == "silu"
    assert c["torch_dtype"] == "bfloat16"
    for key in (
        "num_hidden_layers",
        "max_position_embeddings",
        "rms_norm_eps",
        "rope_theta",
        "tie_word_embeddings",
    ):
        assert key in c


def test_qwen3_8b_exact():
    shapes = {s.name: (s.n, s.k) for s in linear_shapes(load_model_config("qwen3-8b"))}
    assert shapes == {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288)}


@pytest.mark.parametrize("alias", ["Qwen3-8B", "QWEN3-8b", "Qwen/Qwen3-8B", " qwen3-8b "])
def test_name_lookup_is_case_insensitive(alias):
    assert load_model_config(alias) == load_model_config("qwen3-8b")


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tensor_parallel_shards_n_of_column_and_k_of_row_parallel(name, tp):
    (qkv_n, h), (_, o_k), (gu_n, _), (_, d_k) = EXPECTED[name]
    got = {s.name: (s.n, s.k) for s in linear_shapes(load_model_config(name), tp=tp)}
    assert got == {
        "qkv": (qkv_n // tp, h),
        "o": (h, o_k // tp),
        "gate_up": (gu_n // tp, h),
        "down": (h, d_k // tp),
    }


def test_tp8_llama70b_numbers():
    got = {s.name: (s.n, s.k) for s in linear_shapes(load_model_config("llama-3.1-70b"), tp=8)}
    assert got == {"qkv": (1280, 8192), "o": (8192, 1024), "gate_up": (7168, 8192), "down": (8192, 3584)}


def test_kv_heads_replicated_when_tp_exceeds_them():
    # vLLM QKVParallelLinear: 64 q heads / 16 = 4 per rank, 8 kv heads < 16 ranks -> 1 (replicated)
    qkv = linear_shapes(load_model_config("llama-3.1-70b"), tp=16)[0]
    assert (qkv.n, qkv.k) == ((4 + 2 * 1) * 128, 8192)


@pytest.mark.parametrize(
    ("config", "tp", "match"),
    [
        (load_model_config("qwen3-8b"), 3, "does not divide num_attention_heads = 32"),
        (load_model_config("qwen3-14b"), 16, "does not divide num_attention_heads = 40"),
        ({**TINY, "intermediate_size": 510}, 4, "does not divide intermediate_size = 510"),
        (
            {**TINY, "num_attention_heads": 6, "num_key_value_heads": 3},
            2,
            "does not divide num_key_value_heads = 3",
        ),
        ({**TINY, "num_attention_heads": 12, "num_key_value_heads": 3}, 4, "neither divides the other"),
    ],
)
def test_tp_not_divisible_raises(config, tp, match):
    with pytest.raises(ValueError, match=match):
        linear_shapes(config, tp=tp)


@pytest.mark.parametrize("tp", [0, -2, 1.5, True])
def test_bad_tp_raises(tp):
    with pytest.raises(ValueError, match="tensor parallel size must be a positive integer"):
        linear_shapes(load_model_config("qwen3-8b"), tp=tp)


def test_head_dim_defaults_to_hidden_over_heads():
    config = {k: v for k, v in TINY.items() if k != "head_dim"}  # 256 / 4 heads = 64
    assert [(s.n, s.k) for s in linear_shapes(config)] == [(512, 256), (256, 256), (1024, 256), (256, 512)]
    config = {**config, "num_attention_heads": 8, "num_key_value_heads": 8}  # MHA: 256 / 8 = 32
    assert linear_shapes(config)[0] == LinearShape("qkv", (8 + 16) * 32, 256)


def test_kv_heads_default_to_q_heads():
    config = {k: v for k, v in TINY.items() if k != "num_key_value_heads"}
    assert linear_shapes(config)[0] == LinearShape("qkv", (4 + 2 * 4) * 64, 256)


@pytest.mark.parametrize("missing", ["hidden_size", "intermediate_size", "num_attention_heads"])
def test_missing_field_raises(missing):
    config = {k: v for k, v in TINY.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        linear_shapes(config)


def test_config_json_path_and_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert load_model_config(tmp_path / "config.json") == TINY
    assert load_model_config(str(tmp_path)) == TINY
    assert [(s.n, s.k) for s in linear_shapes(load_model_config(tmp_path))] == [
        (512, 256),
        (256, 256),
        (1024, 256),
        (256, 512),
    ]


def test_directory_without_config_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model_config(tmp_path)


def test_invalid_json_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_model_config(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model_config(path)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"intermediate_size": None}, "missing field 'intermediate_size' (a positive integer)"),
        ({"hidden_size": "4096"}, "field 'hidden_size' must be a positive integer; got '4096'"),
        (
            {"head_dim": None, "hidden_size": 250},
            "no head_dim, and hidden_size 250 is not divisible by 4 heads",
        ),
    ],
)
def test_config_json_without_a_shape_field_names_the_file_and_the_field(tmp_path, change, match):
    config = {k: v for k, v in {**TINY, **change}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as info:
        load_model_config(tmp_path)
    assert str(info.value) == f"{tmp_path / 'config.json'}: {match}"


@pytest.mark.parametrize("name", ["/no/such/dir", "./no-such/config.json", "~/no-such-folder", "x.json"])
def test_a_path_that_does_not_exist_says_so(name):
    with pytest.raises(ValueError) as info:
        load_model_config(name)
    assert str(info.value) == f"path {name!r} does not exist"


def test_a_path_in_an_existing_folder_says_so(tmp_path):
    with pytest.raises(ValueError, match="^path .* does not exist$"):
        load_model_config(str(tmp_path / "qwen3-8b"))


def test_unknown_model_lists_embedded_names():
    with pytest.raises(ValueError, match="unknown model 'mistral-7b'") as info:
        load_model_config("mistral-7b")
    for name in EXPECTED:
        assert name in str(info.value)


def test_unknown_hf_id_is_no_path_and_no_embedded_model():
    with pytest.raises(ValueError, match="unknown model 'Qwen/Qwen3-99B': no such path, and not an embedded"):
        load_model_config("Qwen/Qwen3-99B")
