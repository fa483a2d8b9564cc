"""The generic aux-kernel configs and the rules that pick them (pure Python, no kernels run)."""

import itertools

import pytest

from hlcore import aux_configs as ac

HIDDENS = [1000, 1024, 2048, 2560, 4096, 5120, 7168, 8192, 16384, 28672]
TOKENS = [1, 2, 3, 32, 33, 255, 256, 1000, 8192]
PICKERS = {
    "per_token_fp8_quant": ac.pick_per_token_fp8_quant_config,
    "per_token_int8_quant": ac.pick_per_token_int8_quant_config,
    "rms_norm": ac.pick_rms_norm_config,
    "fused_add_rms_norm": ac.pick_fused_add_rms_norm_config,
    "silu_and_mul": ac.pick_silu_and_mul_config,
    "per_token_group_fp8_quant": ac.pick_per_token_group_fp8_quant_config,
}


@pytest.mark.parametrize("kernel", sorted(PICKERS))
def test_picked_config_is_one_of_the_generic_set(kernel):
    family = list(ac.ALL_CONFIGS[kernel].values())
    assert 5 <= len(family) <= 8
    for m, h in itertools.product(TOKENS, HIDDENS):
        cfg = PICKERS[kernel](m, h)
        assert cfg in family, (kernel, m, h, cfg)
        assert all(b & (b - 1) == 0 for b in cfg["block_sizes"]), cfg  # powers of two
        assert 1 <= cfg["num_warps"] <= 8


def test_row_rule():
    assert ac.pick_row_config_name(1, 4096) == "row1_w4"
    assert ac.pick_row_config_name(32, 8192) == "row1_w8"
    assert ac.pick_row_config_name(1, 1000) == "row1_w2"
    assert ac.pick_row_config_name(1000, 2048) == "row4_w4"  # many tokens, small rows
    assert ac.pick_row_config_name(1000, 4096) == "row1_w4"
    assert ac.pick_row_config_name(1, 28672) == "row1_loop4096_w8"
    # the picked config never changes with num_tokens below MANY_TOKENS: one compile per hidden
    for h in HIDDENS:
        assert len({ac.pick_row_config_name(m, h) for m in range(1, ac.MANY_TOKENS)}) == 1


def test_silu_block_covers_small_d_and_group_rows_grow():
    assert ac.pick_silu_and_mul_config(1, 200)["block_sizes"] == [1, 256]
    assert ac.pick_silu_and_mul_config(4096, 14336)["block_sizes"] == [4, 1024]
    rows = [ac.pick_per_token_group_fp8_quant_config(m, 4096)["block_sizes"][0] for m in TOKENS]
    assert rows == sorted(rows) and rows[0] == 1


@pytest.mark.parametrize("kernel", sorted(PICKERS))
def test_bad_sizes_raise(kernel):
    with pytest.raises(ValueError, match="num_tokens must be >= 0 and hidden > 0"):
        PICKERS[kernel](1, 0)


def test_config_json_accepts_dict_json_and_rejects_other():
    assert ac.config_json({"num_warps": 2, "block_sizes": [1]}, "x") == '{"block_sizes": [1], "num_warps": 2}'
    assert ac.config_json('{"a": 1}', "x") == '{"a": 1}'
    with pytest.raises(ValueError, match="rms_norm: config must be"):
        ac.config_json(3, "rms_norm")
