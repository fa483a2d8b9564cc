"""hltools.provenance.git_commit: the checkout's HEAD, else HL_COMMIT (installed wheels on the GPU)."""

import subprocess

from hltools import provenance


def test_commit_from_env_when_not_in_a_checkout(monkeypatch):
    def no_git(*args, **kwargs):
        raise OSError("no git here")

    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setenv("HL_COMMIT", "fc34e6a")
    assert provenance.git_commit() == "fc34e6a"
    monkeypatch.delenv("HL_COMMIT")
    assert provenance.git_commit() is None


def test_checkout_head_wins_over_env(monkeypatch):
    monkeypatch.setenv("HL_COMMIT", "not-this")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert provenance.git_commit() == head
