"""System prompts, rendered once per agent and then kept as bytes (LESSONS 17)."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

DEFAULT_SYSTEM_PROMPT = """You are a capable software agent working in the user's project.
Use your tools to read, search, change and check files; prefer doing over describing.
When the work splits into independent parts, start sub-agents with the Agent tool and
let several run at once; fork (fork: true) when a part needs what you already know.
Keep answers short and concrete, and say which files you changed."""


def render_system_prompt(base: str, cwd: Path) -> str:
    """The prompt plus an environment section. Called once; the result is reused verbatim."""
    environment = (
        "# Environment\n"
        f"Working directory: {cwd}\n"
        f"Platform: {platform.system().lower()}\n"
        f"Date: {datetime.date.today().isoformat()}"
    )
    return f"{base.strip()}\n\n{environment}" if base.strip() else environment
