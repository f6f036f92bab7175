"""Where forkagent keeps what outlives a process: below every layer that needs it."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """Where forkagent keeps transcripts, the registry and trust decisions.

    ``$FORKAGENT_HOME`` if set, else ``$XDG_STATE_HOME/forkagent``, else
    ``~/.local/state/forkagent``.
    """
    if home := os.environ.get("FORKAGENT_HOME"):
        return Path(home).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base).expanduser() / "forkagent"
