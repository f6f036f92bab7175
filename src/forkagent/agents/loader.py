"""Agent definitions from markdown files with YAML frontmatter, in Claude Code's format.

A file's frontmatter holds the settings and its body is the system prompt.
Directories are read from the lowest precedence to the highest, and a later
definition replaces an earlier one of the same name::

    built-in < ~/.claude/agents < ~/.config/forkagent/agents
             < <project>/.claude/agents < <project>/.forkagent/agents
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ConfigurationError
from .builtin import BUILTIN_AGENTS
from .definition import AgentDefinition
from .registry import AgentCatalog, LoadError

CONFIG_DIR_ENV = "FORKAGENT_CONFIG_DIR"

FRONTMATTER_FIELDS: dict[str, str] = {
    "name": "name",
    "description": "description",
    "tools": "tools",
    "disallowedTools": "disallowed_tools",
    "disallowed_tools": "disallowed_tools",
    "model": "model",
    "permissionMode": "permission_mode",
    "permission_mode": "permission_mode",
    "maxTurns": "max_turns",
    "max_turns": "max_turns",
    "background": "background",
    "isolation": "isolation",
    "hooks": "hooks",
    "initialPrompt": "initial_prompt",
    "mcpServers": "mcp_servers",
    "mcp_servers": "mcp_servers",
    "initial_prompt": "initial_prompt",
}
"""Frontmatter key -> definition field; Claude Code's camelCase and snake_case both load."""

_COSMETIC_FIELDS = frozenset({"color"})
"""Claude Code display settings: ignored without a warning."""

_FRONTMATTER = re.compile(r"\A\ufeff?---[ \t]*\n(.*?)^---[ \t]*$\n?(.*)\Z", re.S | re.M)
"""Files are read with universal newlines, so ``\r\n`` arrives as ``\n``."""
_PLAIN_SCALAR_LINE = re.compile(r"^([A-Za-z_][\w-]*):[ \t]+([^\s'\"\[{|>&*!%@`].*)$")


def user_agent_dirs() -> list[Path]:
    """The user's directories, lowest precedence first."""
    claude_home = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    config = Path(os.environ.get(CONFIG_DIR_ENV) or xdg / "forkagent")
    return [claude_home / "agents", config / "agents"]


def project_agent_dirs(project_dir: Path | str) -> list[Path]:
    """The project's directories, lowest precedence first (``.forkagent`` wins)."""
    root = Path(project_dir)
    return [root / ".claude" / "agents", root / ".forkagent" / "agents"]


def load_agents(
    project_dir: Path | str | None = None,
    user_dir: Path | str | None = None,
    *,
    user: bool = True,
) -> AgentCatalog:
    """The built-ins plus every definition file found; broken files land in ``.errors``.

    ``user_dir`` replaces the user-level directories (handy for tests and tools
    that must not read the home directory); ``user=False`` reads none of them.
    """
    dirs: list[Path] = []
    if user:
        dirs = [Path(user_dir)] if user_dir is not None else user_agent_dirs()
    if project_dir is not None:
        dirs += project_agent_dirs(project_dir)
    found = _Loaded()
    for directory in dirs:
        found.add_dir(directory)
    return AgentCatalog(
        [*BUILTIN_AGENTS, *found.definitions], errors=found.errors, warnings=found.warnings
    )


def load_agent_file(path: Path | str) -> AgentDefinition:
    """One definition file; any problem raises ``ConfigurationError`` naming the field."""
    parsed = _parse_file(Path(path))
    if not parsed.definitions:
        raise ConfigurationError("; ".join(str(e) for e in parsed.errors))
    return parsed.definitions[0]


@dataclass
class _Loaded:
    """What one file or several directories gave."""

    definitions: list[AgentDefinition] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    warnings: list[LoadError] = field(default_factory=list)

    def add_dir(self, directory: Path) -> None:
        """Load every ``*.md`` of one directory; a name used twice in it is an error."""
        seen: dict[str, Path] = {}
        for path in sorted(directory.glob("*.md")) if directory.is_dir() else []:
            parsed = _parse_file(path)
            self.errors += parsed.errors
            self.warnings += parsed.warnings
            for definition in parsed.definitions:
                if definition.name in seen:
                    reason = (
                        f"agent {definition.name!r} is already defined in {seen[definition.name]}"
                    )
                    self.errors.append(LoadError(path, "name", reason))
                    continue
                seen[definition.name] = path
                self.definitions.append(definition)


def _parse_file(path: Path) -> _Loaded:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return _Loaded(errors=[LoadError(path, None, f"cannot be read: {exc}")])
    match = _FRONTMATTER.match(text)
    if match is None:
        reason = "no YAML frontmatter: the file must start with a '---' line and close it"
        return _Loaded(errors=[LoadError(path, None, reason)])
    header, body = match.groups()
    try:
        data = _load_yaml(header)
    except yaml.YAMLError as exc:
        return _Loaded(
            errors=[LoadError(path, None, f"invalid YAML frontmatter: {_yaml_reason(exc)}")]
        )
    if not isinstance(data, dict):
        return _Loaded(
            errors=[LoadError(path, None, "the frontmatter must be a mapping of fields")]
        )
    return _build(path, data, body.strip())


def _load_yaml(header: str) -> Any:
    """Parse; on failure retry with Claude Code-style unquoted values quoted.

    Claude Code writes descriptions like ``description: Use it when: ...``,
    which strict YAML rejects (a ``: `` inside a plain value).
    """
    try:
        return yaml.safe_load(header)
    except yaml.YAMLError as original:
        try:
            return yaml.safe_load(_quote_plain_values(header))
        except yaml.YAMLError:
            raise original from None


def _quote_plain_values(header: str) -> str:
    def quote(line: str) -> str:
        m = _PLAIN_SCALAR_LINE.match(line)
        return f"{m[1]}: {json.dumps(m[2].rstrip())}" if m and ": " in m[2] else line

    return "\n".join(quote(line) for line in header.splitlines())


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc)
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} (line {mark.line + 2})" if mark is not None else str(problem)


def _build(path: Path, data: dict[Any, Any], body: str) -> _Loaded:
    """Map frontmatter keys to fields, validate, and turn pydantic's errors into LoadErrors."""
    parsed = _Loaded()
    fields: dict[str, Any] = {"system_prompt": body, "source": str(path)}
    written: dict[str, str] = {}
    for key, value in data.items():
        target = FRONTMATTER_FIELDS.get(str(key))
        if target is not None:
            fields[target] = value
            written[target] = str(key)
        elif key not in _COSMETIC_FIELDS:
            parsed.warnings.append(LoadError(path, str(key), "not used by forkagent; ignored"))
    try:
        parsed.definitions.append(AgentDefinition.model_validate(fields))
    except ValidationError as exc:
        parsed.errors += _field_errors(path, exc.errors(), written)
    return parsed


def _field_errors(
    path: Path, errors: Iterable[Mapping[str, Any]], written: dict[str, str]
) -> list[LoadError]:
    out: list[LoadError] = []
    for error in errors:
        name = str(error["loc"][0]) if error["loc"] else None
        reason = str(error["msg"]).removeprefix("Value error, ")
        out.append(LoadError(path, written.get(name or "", name), reason))
    return out
