"""What a named agent is: its prompt, the tools it may use, its model and its limits."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..hooks import CommandHook, parse_hook_config
from ..permissions.filters import tool_named

PermissionMode: TypeAlias = Literal["default", "accept_edits", "plan", "bypass", "bubble"]
Isolation: TypeAlias = Literal["worktree"]

INHERIT = "inherit"
"""The model value meaning "the parent's exact model string"."""
ALL_TOOLS = "*"
AGENT_TOOL = "Agent"
BUILT_IN = "built-in"
"""The ``source`` of the definitions that ship with the library."""

TOOL_ALIASES: dict[str, str] = {"Task": AGENT_TOOL}
"""Older Claude Code names of tools that exist here under another name."""

PERMISSION_MODE_ALIASES: dict[str, PermissionMode] = {
    "acceptEdits": "accept_edits",
    "bypassPermissions": "bypass",
}
"""Claude Code's spelling of the permission modes, accepted as written."""


def canonical_tool_name(name: str) -> str:
    return TOOL_ALIASES.get(name, name)


class AgentDefinition(BaseModel):
    """A named agent. Immutable: a loaded definition is shared by every spawn of it.

    ``tools`` is ``None`` for every available tool, or the names allowed;
    ``disallowed_tools`` is removed from either. ``permission_mode`` and
    ``model`` of ``None`` / ``"inherit"`` take the parent's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"^\S+$")
    description: str = Field(min_length=1)
    system_prompt: str = ""
    tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] = ()
    model: str = INHERIT
    permission_mode: PermissionMode | None = None
    max_turns: int | None = Field(default=None, ge=1)
    background: bool = False
    isolation: Isolation | None = None
    hooks: tuple[CommandHook, ...] = ()
    initial_prompt: str | None = None
    mcp_servers: tuple[str, ...] | dict[str, Any] = ()
    """MCP servers this agent starts (sharing a running one): names of configured servers,
    or Claude Code's inline ``{name: {command, args, ...}}``."""
    source: str = BUILT_IN
    """The file it was loaded from, or ``"built-in"``."""

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        """``None`` or a ``*`` among the names means every tool."""
        if value is None:
            return None
        names = _tool_names(value)
        return None if ALL_TOOLS in names else names

    @field_validator("disallowed_tools", mode="before")
    @classmethod
    def _disallowed_tools(cls, value: Any) -> Any:
        names = _tool_names(value) if value is not None else ()
        if ALL_TOOLS in names:
            raise ValueError("'*' cannot be disallowed; to give no tools, set tools to []")
        return names

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        return INHERIT if value is None or value == "" else value

    @field_validator("permission_mode", mode="before")
    @classmethod
    def _permission_mode(cls, value: Any) -> Any:
        return PERMISSION_MODE_ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks(cls, value: Any) -> Any:
        """The settings-file shape (a mapping by event) or already parsed commands."""
        if value is None:
            return ()
        return parse_hook_config(value, for_agent=True) if isinstance(value, dict) else value

    def allows_tool(self, name: str) -> bool:
        """Listed by name, or as ``mcp__<server>__*`` (every tool of that MCP server)."""
        name = canonical_tool_name(name)
        listed = self.tools is None or tool_named(name, self.tools)
        return listed and not tool_named(name, self.disallowed_tools)

    @property
    def can_spawn_agents(self) -> bool:
        """False when the Agent tool is not in this agent's pool."""
        return self.allows_tool(AGENT_TOOL)


def _tool_names(value: Any) -> tuple[str, ...]:
    """Claude Code's comma-separated string or a list, with old names mapped."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ValueError("expected a comma-separated string or a list of tool names")
    return tuple(canonical_tool_name(n.strip()) for n in names if n.strip())
