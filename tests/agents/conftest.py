from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the real user's agent directories or subagent model override."""
    monkeypatch.setenv("FORKAGENT_CONFIG_DIR", str(tmp_path / "user-config"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-home"))
    monkeypatch.delenv("FORKAGENT_SUBAGENT_MODEL", raising=False)
