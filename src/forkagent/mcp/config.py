"""MCP server configuration in the shape the ecosystem already writes (Claude Code's ``.mcp.json``).

::

    {"mcpServers": {
        "orders": {"command": "python", "args": ["orders.py"], "env": {"TOKEN": "${ORDERS_TOKEN}"}},
        "docs": {"type": "http", "url": "https://docs.example/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN:-anonymous}"}}}}

``${VAR}`` and ``${VAR:-default}`` are expanded from the environment in
``command``, ``args``, ``env``, ``url`` and ``headers``. A repository's
``.mcp.json`` starts programs, so it is read only for a trusted directory
(``forkagent.permissions.trust``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigurationError

PROJECT_FILE = ".mcp.json"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class McpServer:
    """One server: a command to run (stdio) or a URL (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    trusted: bool = True
    """Whether its ``readOnlyHint`` annotations count (a repository's servers: only when trusted)."""
    timeout: float = 60.0
    """Seconds one tool call may take."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise ConfigurationError(
                f"MCP server name {self.name!r}: use letters, digits, - and _ (it becomes "
                f"part of tool names, mcp__{self.name}__<tool>)"
            )
        if (self.command is None) == (self.url is None):
            raise ConfigurationError(f"MCP server {self.name!r}: give a command or a url, not both")

    @property
    def key(self) -> tuple[object, ...]:
        """Servers with the same key are one process, shared by whoever names it."""
        return (self.command, self.args, tuple(sorted(self.env.items())), self.url)


def parse_servers(data: object, *, source: str, trusted: bool = True) -> list[McpServer]:
    """Servers from an ``mcpServers`` mapping; a bad entry is a ``ConfigurationError`` naming it."""
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{source}: mcpServers must be an object of name -> server")
    return [_server(str(name), entry, source, trusted) for name, entry in data.items()]


def load_project_servers(directory: Path | str, *, trusted: bool) -> list[McpServer]:
    """The servers of ``directory/.mcp.json``; none for an untrusted directory (they run code)."""
    path = Path(directory) / PROJECT_FILE
    if not trusted or not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{path}: expected an object with mcpServers")
    return parse_servers(data.get("mcpServers", {}), source=str(path), trusted=True)


def _server(name: str, entry: object, source: str, trusted: bool) -> McpServer:
    where = f"{source}: server {name!r}"
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{where} must be an object")
    kind = entry.get("type", "http" if "url" in entry else "stdio")
    if kind not in ("stdio", "http", "streamable-http"):
        raise ConfigurationError(f"{where}: type {kind!r} is not supported (stdio or http)")
    if kind == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command:
            raise ConfigurationError(f"{where}: a stdio server needs a command")
        args = entry.get("args", [])
        if not isinstance(args, list):
            raise ConfigurationError(f"{where}: args must be a list of strings")
        return McpServer(
            name,
            command=_expand(command),
            args=tuple(_expand(str(a)) for a in args),
            env={str(k): _expand(str(v)) for k, v in _mapping(entry, "env", where).items()},
            trusted=trusted,
        )
    url = entry.get("url")
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"{where}: an http server needs a url")
    headers = {str(k): _expand(str(v)) for k, v in _mapping(entry, "headers", where).items()}
    return McpServer(name, url=_expand(url), headers=headers, trusted=trusted)


def _mapping(entry: Mapping[str, object], key: str, where: str) -> Mapping[str, object]:
    value = entry.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where}: {key} must be an object")
    return value


def _expand(text: str) -> str:
    def value(found: re.Match[str]) -> str:
        name, default = found.group(1), found.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        raise ConfigurationError(
            f"${{{name}}} is not set (write ${{{name}:-default}} for a default)"
        )

    return _VARIABLE.sub(value, text)
