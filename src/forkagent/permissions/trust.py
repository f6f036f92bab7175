"""Workspace trust: what a repository ships runs only once its directory is trusted.

A cloned repository can ship hooks (``.claude/settings.json``,
``.forkagent/settings.json``, an agent file's ``hooks:``) and MCP servers
(``.mcp.json``): shell commands that would run on every matching tool call,
with the user's API key in reach. Like Claude Code and the editors, forkagent
runs none of them until the user trusts the directory. Agent definitions
still load untrusted (they are prompts); only their hooks wait.

Decisions are kept in ``<state dir>/trust.json`` (mode 0600), one entry per
resolved directory path. Trusting a directory covers the directories below
it (a monorepo is trusted once); revoking removes only the exact entry. The
user's own configuration and hooks passed in code need no trust.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from .._paths import state_dir
from ..errors import ConfigurationError

TRUST_FILE = "trust.json"
PROJECT_EXECUTABLES = (
    Path(".claude/settings.json"),
    Path(".forkagent/settings.json"),
    Path(".mcp.json"),
)
"""Files whose contents can start programs; agent files with ``hooks:`` count too."""


def trust_file() -> Path:
    return state_dir() / TRUST_FILE


def is_trusted(directory: Path | str) -> bool:
    """Whether the user trusted ``directory`` or a directory above it."""
    target = _resolved(directory)
    return any(target == folder or folder in target.parents for folder in _decisions())


def trust(directory: Path | str) -> Path:
    """Record that the user trusts ``directory`` (and everything below it); returns it resolved."""
    target = _resolved(directory)
    decisions = _read()
    decisions[str(target)] = datetime.now(UTC).isoformat(timespec="seconds")
    _write(decisions)
    return target


def revoke(directory: Path | str) -> bool:
    """Forget the decision for exactly ``directory``; False when there was none."""
    decisions = _read()
    found = decisions.pop(str(_resolved(directory)), None) is not None
    if found:
        _write(decisions)
    return found


def trusted_directories() -> list[tuple[Path, str]]:
    """Every trusted directory with when it was trusted, sorted by path."""
    return sorted((Path(path), when) for path, when in _read().items())


def untrusted_reason(directory: Path | str, found: Iterable[str]) -> str:
    """The one message an untrusted run gets about what it did not start."""
    what = ", ".join(found)
    return (
        f"{_resolved(directory)} is not trusted, so its {what} did not run. If you trust "
        f"this repository: `forkagent trust {directory}` (or `--trust` for one run)."
    )


def project_executables(directory: Path | str) -> list[str]:
    """The files in ``directory`` that would start programs if it were trusted."""
    root = Path(directory)
    return [str(relative) for relative in PROJECT_EXECUTABLES if (root / relative).is_file()]


def _decisions() -> list[Path]:
    return [Path(path) for path in _read()]


def _resolved(directory: Path | str) -> Path:
    return Path(directory).expanduser().resolve()


def _read() -> dict[str, str]:
    path = trust_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return {}  # nothing decided (an unusable state directory is reported where it is used)
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"{path} cannot be read ({exc}); remove it and trust your directories again"
        ) from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path} is not a JSON object; remove it and trust again")
    return {str(k): str(v) for k, v in data.items()}


def _write(decisions: dict[str, str]) -> None:
    path = trust_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(decisions, out, indent=2, sort_keys=True)
    os.replace(temporary, path)
