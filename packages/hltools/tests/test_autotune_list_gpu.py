"""``hltools autotune --list --gpu NAME`` on a CPU: the keys marked done come from NAME's config file
(by default the shipped one), not from this machine's (absent) GPU; a NAME that is neither a SM90 GPU
nor a config file's exits 2 naming the known ones."""

import json

import pytest
import torch
from typer.testing import CliRunner

from hlcore import config_store as cs
from hlcore.configs import config_dir
from hltools.cli import app

runner = CliRunner()
QWEN3_8B_NK = {(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)}  # qkv, o, gate_up, down (TP 1)
DECODE_M = (1, 2, 4, 8, 16, 24, 32)
FALLBACK = "done (fallback: vLLM's kernel)"


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("HL_CONFIG_DIR", raising=False)
    monkeypatch.delenv("HL_MAX_HELION_SIZE", raising=False)


def _rows(output: str) -> list[list[str]]:
    """The table's data rows, split into cells."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 6 and cells[0] in ("fp8_dynamic", "w8a8_int8", "block_fp8"):
            rows.append(cells)
    return rows


def test_list_gpu_marks_the_shipped_h200_keys_done(no_gpu):
    shipped = cs.config_file_path(cs.SCALED_MM_KERNEL, "nvidia_h200", config_dir())
    entries = cs.read_config_file(shipped).entries
    assert len(entries) > 100  # the shipped H200 file: Qwen3-8B / 1.7B (and more) keys in 3 formats
    assert cs.key_id(cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1)) in entries

    # The Qwen3-8B fp8 keys the file marks "fallback": true, read from the JSON itself.
    items = json.loads(shipped.read_text())
    marked = {
        (item["key"]["n"], item["key"]["k"], item["key"]["m"])
        for item in items
        if "key" in item
        and item.get("fallback") is True
        and item["key"].get("format") == "fp8_dynamic"
        and (item["key"]["n"], item["key"]["k"]) in QWEN3_8B_NK
        and item["key"]["m"] in DECODE_M
    }
    assert 0 < len(marked) < 28  # some keys lose to vLLM's kernel, not all

    result = runner.invoke(app, ["autotune", "--model", "qwen3-8b", "--list", "--gpu", "nvidia_h200"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert len(rows) == 28  # 4 (N, K) x M in 1,2,4,8,16,24,32
    assert {(int(r[1]), int(r[2])) for r in rows} == QWEN3_8B_NK
    for r in rows:
        expected = FALLBACK if (int(r[1]), int(r[2]), int(r[3])) in marked else "done"
        assert r[5] == expected, r
    assert sum(r[5] == FALLBACK for r in rows) == len(marked)
    summary = " ".join(result.output.split())  # the path may wrap
    assert f"28 keys, 28 done ({len(marked)} of them fallback: vLLM's kernel runs there) in" in summary
    assert "nvidia_h200.json" in summary
    assert "no such file" not in summary


def test_list_gpu_takes_a_raw_gpu_name_and_output(no_gpu, tmp_path):
    result = runner.invoke(
        app,
        ["autotune", "--model", "qwen3-8b", "--list", "--gpu", "NVIDIA H100 PCIe", "--output", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    summary = " ".join(result.output.split())
    assert "28 keys, 0 done in" in summary and "nvidia_h100_pcie.json (no such file yet)" in summary
    assert all(r[5] == "to tune" for r in _rows(result.output))


def test_gpu_needs_list(no_gpu, tmp_path):
    result = runner.invoke(
        app, ["autotune", "--model", "qwen3-8b", "--gpu", "nvidia_h200", "--output", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "--gpu" in result.output and "only with --list" in " ".join(result.output.split())
    assert list(tmp_path.iterdir()) == []


def test_list_marks_a_fallback_key_in_any_file(no_gpu, tmp_path):
    """A hand-written file: one plain key, one marked "fallback": true, the rest to tune."""
    path = cs.config_file_path(cs.SCALED_MM_KERNEL, "nvidia_h100_pcie", tmp_path)
    path.parent.mkdir(parents=True)
    config = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 2, "split_k": 1, "swap_ab": True}
    cs.write_json_atomic(
        path,
        [
            {"key": cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1), "config": config},
            {"key": cs.scaled_mm_key("fp8_dynamic", 4096, 12288, 2), "config": config, "fallback": True},
        ],
    )
    result = runner.invoke(
        app,
        ["autotune", "--model", "qwen3-8b", "--list", "--gpu", "nvidia_h100_pcie", "--output", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    status = {(int(r[1]), int(r[2]), int(r[3])): r[5] for r in _rows(result.output)}
    assert status[(6144, 4096, 1)] == "done"
    assert status[(4096, 12288, 2)] == FALLBACK
    assert sum(s == "to tune" for s in status.values()) == 26
    summary = " ".join(result.output.split())
    assert "28 keys, 2 done (1 of them fallback: vLLM's kernel runs there) in" in summary


@pytest.mark.parametrize("listing", [["--list"], []])
def test_unknown_gpu_exits_2_naming_the_known_ones(no_gpu, tmp_path, listing):
    result = runner.invoke(
        app, ["autotune", "--model", "qwen3-8b", *listing, "--gpu", "bogus_gpu", "--output", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "Invalid value for --gpu: unknown GPU 'bogus_gpu'; known: " in message
    for name in ("nvidia_h100_pcie", "nvidia_h100_sxm", "nvidia_h200"):
        assert name in message
    assert "keys" not in message  # nothing listed
    assert list(tmp_path.iterdir()) == []


def test_a_config_file_makes_its_gpu_known(no_gpu, tmp_path):
    """Not a SM90 GPU, but --output (or HL_CONFIG_DIR) holds its file: listed against that file."""
    args = ["autotune", "--model", "qwen3-8b", "--list", "--gpu", "NVIDIA A100-SXM4-80GB"]
    unknown = runner.invoke(app, [*args, "--output", str(tmp_path)])
    assert unknown.exit_code == 2 and "unknown GPU 'NVIDIA A100-SXM4-80GB'" in " ".join(
        unknown.output.split()
    )
    path = cs.config_file_path(cs.SCALED_MM_KERNEL, "nvidia_a100_sxm", tmp_path)
    path.parent.mkdir(parents=True)
    config = {"block_sizes": [16, 64, 128], "num_warps": 4, "num_stages": 2, "split_k": 1, "swap_ab": True}
    cs.write_json_atomic(path, [{"key": cs.scaled_mm_key("fp8_dynamic", 6144, 4096, 1), "config": config}])
    result = runner.invoke(app, [*args, "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "28 keys, 1 done in" in " ".join(result.output.split())


@pytest.mark.parametrize("flag,layout", [([], "tma"), (["--block-scale-a", "row"], "row")])
def test_list_counts_a_block_key_done_only_on_the_layout_a_run_would_tune(no_gpu, monkeypatch, flag, layout):
    """--list marks a Block_FP8 key done as the run would count it: tuned on the layout the command
    resolves (``auto``: the dispatch mode's, ``tma`` in capture mode, the default); a key of the other
    layout shows "to tune" (a run tunes it again), and its fallback mark with it. Read from the
    shipped file itself: which Qwen3-1.7B / Qwen3-8B Block_FP8 keys it holds on which layout."""
    monkeypatch.delenv("HL_DISPATCH_AT", raising=False)
    items = json.loads(cs.config_file_path(cs.SCALED_MM_KERNEL, "nvidia_h200", config_dir()).read_text())
    layout_of = {
        (item["key"]["n"], item["key"]["k"], item["key"]["m"]): item.get("block_scale_a", "row")
        for item in items
        if "key" in item and item["key"].get("format") == "block_fp8"
    }
    for model in ("qwen3-8b", "qwen3-1.7b"):
        args = ["autotune", "--model", model, "--formats", "block_fp8", "--list", "--gpu", "nvidia_h200"]
        result = runner.invoke(app, [*args, *flag])
        assert result.exit_code == 0, result.output
        rows = _rows(result.output)
        assert len(rows) == 28
        for r in rows:
            key = (int(r[1]), int(r[2]), int(r[3]))
            assert (r[5] != "to tune") == (layout_of.get(key) == layout), (model, r)
        n_done = sum(r[5] != "to tune" for r in rows)
        summary = " ".join(result.output.split())
        assert f"28 keys, {n_done} done" in summary and f"on {layout} scale_a" in summary
    # the shipped file holds Qwen3-8B's keys on tma and Qwen3-1.7B's on row: both cases occur
    assert {"tma", "row"} <= set(layout_of.values())
