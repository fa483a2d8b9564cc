"""hlcore.configs: HL_CONFIG_DIR first, then the packaged configs, then the checkout's configs/.

The installed-wheel case (configs inside site-packages) is checked end to end by
packages/hlvllm/tests/test_install.py."""

import json
from pathlib import Path

import pytest

from hlcore import configs

REPO_CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _write(path: Path, payload) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path


def test_env_var_wins(tmp_path, monkeypatch):
    a = _write(tmp_path / "scaled_mm" / "nvidia_h200.json", [{"key": {}, "config": {}}])
    b = _write(tmp_path / "scaled_mm" / "nvidia_h100.json", [])
    c = _write(tmp_path / "rms_norm" / "nvidia_h200.json", [])
    (tmp_path / "README.md").write_text("not a config\n")
    (tmp_path / "scaled_mm" / "notes.txt").write_text("not a config\n")
    _write(tmp_path / "scaled_mm" / "nvidia_h200.stats.json", [])  # a stats sidecar, not a config
    _write(tmp_path / "scaled_mm" / "nvidia_h200.shard0.json", [])  # a stopped --gpus run's shard
    monkeypatch.setenv(configs.ENV_VAR, str(tmp_path))
    assert configs.config_dir() == tmp_path
    assert configs.list_config_files() == sorted([a, b, c])
    assert configs.list_config_files("scaled_mm") == [b, a]
    assert configs.list_config_files("no_such_kernel") == []
    for path in configs.list_config_files():
        json.loads(path.read_text())


def test_env_var_expands_user(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(configs.ENV_VAR, "~/my-configs")
    assert configs.config_dir() == tmp_path / "my-configs"


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_env_var_not_a_directory(tmp_path, monkeypatch, kind):
    target = tmp_path / "nope"
    if kind == "file":
        target.write_text("{}")
    monkeypatch.setenv(configs.ENV_VAR, str(target))
    assert configs.config_dir() == target  # returned as given (a tool may create it) ...
    with pytest.raises(ValueError, match="HL_CONFIG_DIR"):  # ... but reading from it is an error
        configs.list_config_files()


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_env_var_is_unset(monkeypatch, value):
    monkeypatch.setenv(configs.ENV_VAR, value)
    assert configs.config_dir() != Path(value)
    assert (configs.config_dir() / "README.md").is_file()


def test_default_finds_the_shipped_configs(monkeypatch):
    """Editable/dev checkout: the repo-root configs/; installed wheel: hlcore/configs/."""
    monkeypatch.delenv(configs.ENV_VAR, raising=False)
    found = configs.config_dir()
    if configs.PACKAGED_CONFIG_DIR.is_dir():
        assert found == configs.PACKAGED_CONFIG_DIR
    else:
        assert found == REPO_CONFIGS
    assert (found / "README.md").is_file()
    assert configs.shipped_config_dir() == found
    for path in configs.list_config_files():
        assert path.parent.parent == found
        json.loads(path.read_text())  # every shipped config parses


def test_shipped_config_dir_ignores_the_env_var(monkeypatch, tmp_path):
    monkeypatch.delenv(configs.ENV_VAR, raising=False)
    shipped = configs.config_dir()
    monkeypatch.setenv(configs.ENV_VAR, str(tmp_path))
    assert configs.config_dir() == tmp_path
    assert configs.shipped_config_dir() == shipped != tmp_path


def test_nothing_found_is_empty(monkeypatch, tmp_path):
    """No env var, no packaged dir, no checkout: no tuned configs (defaults everywhere), no error."""
    monkeypatch.delenv(configs.ENV_VAR, raising=False)
    monkeypatch.setattr(configs, "PACKAGED_CONFIG_DIR", tmp_path / "absent")
    monkeypatch.setattr(configs, "_checkout_config_dir", lambda: None)
    assert configs.config_dir() == tmp_path / "absent"
    assert configs.list_config_files() == []
