"""Suite-wide isolation: no test reads the real home directory or writes outside tmp,
and none depends on the terminal it runs in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Output that rich or click wraps must not depend on the width of whoever runs the suite.
os.environ["COLUMNS"] = "100"
os.environ["LINES"] = "40"
os.environ.pop("FORCE_COLOR", None)
os.environ["NO_COLOR"] = "1"
os.environ["LC_ALL"] = os.environ["LANG"] = "C.UTF-8"


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point every per-user location (agent files, transcripts, registry) at a temp dir."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FORKAGENT_HOME", str(home / "forkagent"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    monkeypatch.setenv("FORKAGENT_CONFIG_DIR", str(home / ".config" / "forkagent"))
    monkeypatch.delenv("FORKAGENT_SUBAGENT_MODEL", raising=False)
    monkeypatch.delenv("FORKAGENT_MODEL", raising=False)
    assert Path(str(home)).is_dir()
