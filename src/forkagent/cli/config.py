"""Defaults for ``forkagent run``: flags, then ``FORKAGENT_MODEL``, then config files.

Two TOML files, the project's over the user's::

    # ~/.config/forkagent/config.toml (or $FORKAGENT_CONFIG_DIR/config.toml)
    model = "anthropic:claude-sonnet-4-6"
    permission_mode = "accept_edits"
    max_turns = 40
    max_cost = 2.0

    # <project>/.forkagent/config.toml
    model = "openai:gpt-5.2"
    max_tokens = 400000

A repository is not trusted to loosen what the user allows, so a project file
may set the model and the limits but not the permission mode (a cloned
repository saying ``permission_mode = "bypass"`` would be a side door); the
mode comes from the flag or the user's own file.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agents.loader import CONFIG_DIR_ENV
from ..errors import ConfigurationError

MODEL_ENV = "FORKAGENT_MODEL"
FALLBACK_MODEL = "emulator:claude-sonnet-4-5"
LIMIT_KEYS = ("max_turns", "max_tokens", "max_cost", "max_seconds")
_USER_KEYS = frozenset({"model", "permission_mode", *LIMIT_KEYS})
_PROJECT_KEYS = _USER_KEYS - {"permission_mode"}


@dataclass(frozen=True, slots=True)
class RunDefaults:
    model: str = FALLBACK_MODEL
    permission_mode: str = "default"
    limits: dict[str, float] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    """The files that set something, for error messages."""


def user_config_path() -> Path:
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return Path(os.environ.get(CONFIG_DIR_ENV) or xdg / "forkagent") / "config.toml"


def project_config_path(cwd: Path) -> Path:
    return cwd / ".forkagent" / "config.toml"


def load_defaults(cwd: Path) -> RunDefaults:
    """What the files and the environment set; flags are applied by the caller on top."""
    merged: dict[str, Any] = {}
    sources: list[str] = []
    for path, allowed in (
        (user_config_path(), _USER_KEYS),
        (project_config_path(cwd), _PROJECT_KEYS),
    ):
        values = _read(path, allowed)
        if values:
            merged |= values
            sources.append(str(path))
    model = os.environ.get(MODEL_ENV) or merged.get("model") or FALLBACK_MODEL
    limits = {key: merged[key] for key in LIMIT_KEYS if key in merged}
    return RunDefaults(
        model=str(model),
        permission_mode=str(merged.get("permission_mode", "default")),
        limits=limits,
        sources=tuple(sources),
    )


def _read(path: Path, allowed: frozenset[str]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"{path}: cannot read it as TOML: {exc}") from None
    unknown = sorted(set(data) - allowed)
    if unknown:
        why = (
            "; a project file cannot set permission_mode (use the flag or your own config)"
            if "permission_mode" in unknown and allowed is _PROJECT_KEYS
            else ""
        )
        raise ConfigurationError(
            f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}{why}"
        )
    for key in LIMIT_KEYS:
        value = data.get(key)
        if value is not None and (not isinstance(value, int | float) or value < 0):
            raise ConfigurationError(f"{path}: {key} must be a number >= 0, not {value!r}")
    return data
