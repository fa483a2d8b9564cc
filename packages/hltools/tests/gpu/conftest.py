"""Shared by the hltools GPU tests."""

import json

import pytest

#: A tiny Qwen3-style model: qkv (512, 256), o (256, 256), gate_up (1024, 256), down (256, 512).
TINY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}


@pytest.fixture
def tiny_model_config(tmp_path):
    """Path of a ``config.json`` holding :data:`TINY` (what ``--model`` takes)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return path
