"""``--model`` as a user names it (issue 23, "any model"): a path, an embedded name, a Hugging Face id
from the local cache or by its base model, offline; the format from the checkpoint's
``quantization_config`` or its id; MoE models' dense layers only."""

import json

import huggingface_hub.constants
import pytest
import torch
from typer.testing import CliRunner

from hltools import model_source as ms
from hltools.cli import app
from hltools.shapes import UnknownLayer, linear_shapes, load_model_config, only_layers

runner = CliRunner()

FP8_DYNAMIC_CT = {  # RedHatAI's compressed-tensors FP8-dynamic checkpoints
    "quant_method": "compressed-tensors",
    "config_groups": {
        "group_0": {
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
            "targets": ["Linear"],
        }
    },
}
W8A8_CT = {
    "quant_method": "compressed-tensors",
    "config_groups": {
        "group_0": {
            "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
            "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
        }
    },
}
BLOCK_CT = {
    "quant_method": "compressed-tensors",
    "config_groups": {
        "group_0": {
            "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
            "input_activations": {
                "num_bits": 8,
                "type": "float",
                "strategy": "group",
                "group_size": 128,
                "dynamic": True,
            },
        }
    },
}


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache in ``tmp_path``; ``put(repo_id, config)`` adds a snapshot's
    config.json in the hub's layout (refs/main -> snapshots/<rev>/)."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))

    def put(repo_id, config):
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("abc123")
        snap = repo / "snapshots" / "abc123"
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(json.dumps(config))
        return snap / "config.json"

    return put


@pytest.mark.parametrize(
    "qc,fmt",
    [
        (FP8_DYNAMIC_CT, "fp8_dynamic"),
        (W8A8_CT, "w8a8_int8"),
        (BLOCK_CT, "block_fp8"),
        (
            {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
            "block_fp8",
        ),
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8_dynamic"),
        ({"quant_method": "fp8", "activation_scheme": "static"}, None),  # static scales: not ours
        ({"quant_method": "awq", "bits": 4}, None),
    ],
)
def test_format_of_config(qc, fmt):
    assert ms.format_of_config({"quantization_config": qc}) == fmt


def test_format_of_config_static_input_is_not_dynamic():
    qc = json.loads(json.dumps(FP8_DYNAMIC_CT))
    qc["config_groups"]["group_0"]["input_activations"]["dynamic"] = False
    assert ms.format_of_config({"quantization_config": qc}) is None


@pytest.mark.parametrize(
    "name,base,fmt",
    [
        ("RedHatAI/Qwen3-8B-FP8-dynamic", "qwen3-8b", "fp8_dynamic"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b", "fp8_dynamic"),
        ("RedHatAI/Qwen3-1.7B-quantized.w8a8", "qwen3-1.7b", "w8a8_int8"),
        ("someone/Qwen3-32B-FP8-block", "qwen3-32b", "block_fp8"),
        ("Qwen/Qwen3-8B-FP8", "qwen3-8b", None),  # "FP8" alone names no one format
        ("mistralai/Mistral-7B-Instruct-v0.3", None, None),
    ],
)
def test_base_model_and_format_of_name(name, base, fmt):
    assert ms.base_model_name(name) == base
    assert ms.format_of_name(name) == fmt


def test_hf_id_by_base_model_says_so(hf_cache):
    source = ms.resolve_model("RedHatAI/Qwen3-8B-FP8-dynamic")
    assert source.config == load_model_config("qwen3-8b")
    assert source.source == "embedded model qwen3-8b"
    assert source.fmt == "fp8_dynamic"
    assert any("using the embedded qwen3-8b config (its base model)" in n for n in source.notes)
    # the format is said by the command that uses it (not when --formats is given)
    assert not any("fp8_dynamic" in n for n in source.notes)


def test_hf_id_from_the_local_cache_wins_and_gives_its_format(hf_cache):
    config = {**load_model_config("qwen3-4b"), "quantization_config": W8A8_CT}
    config["hidden_size"] = 2048  # not the embedded qwen3-8b: the cached file is what is read
    path = hf_cache("RedHatAI/Qwen3-8B-FP8-dynamic", config)
    source = ms.resolve_model("RedHatAI/Qwen3-8B-FP8-dynamic")
    assert source.config["hidden_size"] == 2048
    assert str(path) in source.source
    assert source.fmt == "w8a8_int8"  # the config's quantization_config, not the id's words
    assert source.notes == []


def test_unknown_hf_id_names_what_was_tried(hf_cache):
    with pytest.raises(
        ValueError,
        match=r"not in the local Hugging Face cache, .*\(hf download mistralai/Mistral-7B-v0\.1 config\.json",
    ):
        ms.resolve_model("mistralai/Mistral-7B-v0.1")


def test_embedded_name_and_path_unchanged(tmp_path):
    assert ms.resolve_model("Qwen3-8B").source == "embedded model qwen3-8b"
    (tmp_path / "config.json").write_text(json.dumps(load_model_config("qwen3-4b")))
    source = ms.resolve_model(str(tmp_path))
    assert source.config == load_model_config("qwen3-4b") and source.fmt is None


QWEN3_MOE = {  # Qwen3-30B-A3B's fields that set the shapes
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}


def test_moe_model_has_its_dense_layers_only_and_a_note(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_MOE))
    assert [s.name for s in linear_shapes(QWEN3_MOE)] == ["qkv", "o"]
    assert [(s.n, s.k) for s in linear_shapes(QWEN3_MOE)] == [(32 * 128 + 2 * 4 * 128, 2048), (2048, 4096)]
    source = ms.resolve_model(str(tmp_path / "config.json"))
    assert any("mixture-of-experts" in n and "(qkv, o)" in n for n in source.notes)
    dense = {**QWEN3_MOE, "mlp_only_layers": [0]}
    assert [s.name for s in linear_shapes(dense)] == ["qkv", "o", "gate_up", "down"]
    with pytest.raises(
        UnknownLayer, match=r"^no dense \['gate_up'\] in this model \(its MLPs are mixture-of"
    ):
        only_layers(linear_shapes(QWEN3_MOE), ["o", "gate_up"])  # --layer on its experts' MLP
    with pytest.raises(
        UnknownLayer,
        match=r"^unknown layer\(s\) \['up'\]; no dense \['down'\] .*; choose from \['qkv', 'o'\]$",
    ):
        only_layers(linear_shapes(QWEN3_MOE), ["up", "down"])  # a typo and an experts' layer, each named
    assert [s.name for s in only_layers(linear_shapes(dense), ["down", "qkv"])] == ["qkv", "down"]


def test_cli_takes_an_hf_id_and_its_format_offline(hf_cache, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = runner.invoke(
        app, ["autotune", "--model", "RedHatAI/Qwen3-8B-FP8-dynamic", "--list"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    # on stderr with the model's notes: stdout keeps the table alone
    # not cached: the embedded config, the format from the id's words, and the message says so
    assert "format fp8_dynamic: from the words of the id RedHatAI/Qwen3-8B-FP8-dynamic" in result.stderr
    assert "format fp8_dynamic: from" not in result.stdout
    assert "w8a8_int8" not in result.output and "6144" in result.output  # qwen3-8b's qkv N
    explicit = runner.invoke(
        app,
        ["autotune", "--model", "RedHatAI/Qwen3-8B-FP8-dynamic", "--list", "--formats", "w8a8_int8"],
        env={"COLUMNS": "200"},
    )
    assert (
        explicit.exit_code == 0
        and "w8a8_int8" in explicit.output
        and "fp8_dynamic" not in explicit.output  # no word of the name's format when --formats is given
    )


def test_cli_says_the_format_came_from_the_cached_quantization_config(hf_cache, monkeypatch):
    """A cached config's quantization_config names the format, over words of the id that name another."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hf_cache(
        "RedHatAI/Qwen3-8B-W8A8", {**load_model_config("qwen3-8b"), "quantization_config": FP8_DYNAMIC_CT}
    )
    result = runner.invoke(
        app, ["autotune", "--model", "RedHatAI/Qwen3-8B-W8A8", "--list"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "format fp8_dynamic: from the quantization_config of RedHatAI/Qwen3-8B-W8A8" in result.stderr
    assert "w8a8_int8" not in result.output


def test_cli_says_when_a_checkpoint_names_no_format(hf_cache, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(
        app, ["autotune", "--model", "Qwen/Qwen3-8B-FP8", "--list"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "format fp8_dynamic: Qwen/Qwen3-8B-FP8 names no format (--formats overrides)" in result.stderr
    plain = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--list"], env={"COLUMNS": "200"})
    assert plain.exit_code == 0 and "names no format" not in plain.output


def test_an_id_naming_an_embedded_model_reads_the_cache_first_else_says_it_uses_the_embedded(hf_cache):
    """``Org/Name`` whose name is an embedded model's: the cached config.json when there is one (a
    fine-tune sharing the name is read as it is), else the embedded config with a note; a bare
    embedded name is silent."""
    source = ms.resolve_model("Qwen/Qwen3-8B")
    assert source.config == load_model_config("qwen3-8b") and source.source == "embedded model qwen3-8b"
    assert source.notes == [
        "Qwen/Qwen3-8B: not in the Hugging Face cache; using the embedded qwen3-8b config"
    ]
    assert ms.resolve_model("qwen3-8b").notes == []
    config = {**load_model_config("qwen3-8b"), "hidden_size": 2048}
    hf_cache("someone/Qwen3-8B", config)
    source = ms.resolve_model("someone/Qwen3-8B")
    assert source.config["hidden_size"] == 2048 and source.source.startswith("Hugging Face cache (")
    assert source.notes == []
