"""Tool filters: from a tool's name and arguments, may this call run?

A filter sees only the name and the JSON arguments, so it works the same for
every provider. A denied call is never executed; its reason is shown to the
model as the tool's error result, and says what the agent may do instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import ConfigurationError
from ..messages import JsonValue

READ_TOOLS = frozenset({"Read", "Glob", "Grep"})
"""Built-in tools that only read."""
EDIT_TOOLS = frozenset({"Write", "Edit"})
"""Built-in tools that change one file, named by ``file_path``."""
SHELL_TOOL = "Bash"

ENVELOPE_KEYS = frozenset({"arguments", "args", "input", "parameters", "params", "kwargs"})
"""Keys under which a provider adapter might leave the real arguments nested."""


@dataclass(frozen=True, slots=True)
class FilterDecision:
    allowed: bool
    reason: str = ""
    """For a denial: written for the model, says what is allowed."""

    @classmethod
    def allow(cls, reason: str = "") -> FilterDecision:
        return cls(True, reason)

    @classmethod
    def deny(cls, reason: str) -> FilterDecision:
        return cls(False, reason)


@runtime_checkable
class ToolFilter(Protocol):
    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision: ...


class AllowAll:
    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        return FilterDecision.allow()


class AllowTools:
    """Only the named tools (an agent's ``tools`` list)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        if tool_named(tool_name, self.names):
            return FilterDecision.allow()
        allowed = ", ".join(sorted(self.names)) or "none"
        return FilterDecision.deny(
            f"`{tool_name}` is not available to this agent; it may use: {allowed}"
        )


class DenyTools:
    """Every tool but the named ones (an agent's ``disallowed_tools``)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        if tool_named(tool_name, self.names):
            return FilterDecision.deny(
                f"`{tool_name}` is not available to this agent; use the other tools"
            )
        return FilterDecision.allow()


class _AllOf:
    def __init__(self, filters: tuple[ToolFilter, ...]) -> None:
        self.filters = filters

    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        for tool_filter in self.filters:
            decision = tool_filter.check(tool_name, args)
            if not decision.allowed:
                return decision
        return FilterDecision.allow()


class _AnyOf:
    def __init__(self, filters: tuple[ToolFilter, ...]) -> None:
        self.filters = filters

    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        reasons = []
        for tool_filter in self.filters:
            decision = tool_filter.check(tool_name, args)
            if decision.allowed:
                return decision
            reasons.append(decision.reason)
        return FilterDecision.deny(" / ".join(reasons) or f"`{tool_name}` is not allowed")


def all_of(*filters: ToolFilter) -> ToolFilter:
    """Allowed only when every filter allows; the first denial is the answer."""
    return _AllOf(filters)


def any_of(*filters: ToolFilter) -> ToolFilter:
    """Allowed when some filter allows; otherwise every reason is given."""
    return _AnyOf(filters)


class ReadOnlyFilter:
    """Read tools, plus shell commands the classifier calls read-only."""

    def __init__(
        self, read_tools: Iterable[str] = READ_TOOLS, shell_tool: str = SHELL_TOOL
    ) -> None:
        self.read_tools = frozenset(read_tools)
        self.shell_tool = shell_tool
        self.allowed = f"This agent may only read: {_names(self.read_tools)} and read-only `{shell_tool}` commands."

    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        if tool_name in self.read_tools:
            return FilterDecision.allow()
        if tool_name == self.shell_tool:
            return _shell_decision(tool_name, args, self.allowed)
        return FilterDecision.deny(f"`{tool_name}` is not available. {self.allowed}")


class MemoryDirFilter:
    """For a fork that maintains one memory directory: read anything, write only there.

    The directory is resolved once here; each ``file_path`` is resolved on every
    call, so a symlink (or a directory swapped for one) cannot lead outside.
    """

    def __init__(
        self,
        memory_dir: str | os.PathLike[str],
        *,
        read_tools: Iterable[str] = READ_TOOLS,
        edit_tools: Iterable[str] = EDIT_TOOLS,
        shell_tool: str = SHELL_TOOL,
    ) -> None:
        try:
            self.memory_dir = Path(memory_dir).resolve(strict=True)
        except (OSError, RuntimeError) as error:
            raise ConfigurationError(
                f"memory directory {memory_dir} cannot be used ({error}); create it first"
            ) from None
        if not self.memory_dir.is_dir():
            raise ConfigurationError(f"memory directory {memory_dir} is not a directory")
        self.read_tools = frozenset(read_tools)
        self.edit_tools = frozenset(edit_tools)
        self.shell_tool = shell_tool
        self.allowed = (
            f"This agent may use {_names(self.read_tools)}, read-only `{shell_tool}` commands, "
            f"and {_names(self.edit_tools)} on files inside {self.memory_dir} "
            "(absolute paths, top-level arguments)."
        )

    def check(self, tool_name: str, args: Mapping[str, JsonValue]) -> FilterDecision:
        nested = sorted(ENVELOPE_KEYS & args.keys())
        if nested:
            return FilterDecision.deny(
                f"`{tool_name}` arguments are wrapped in `{nested[0]}`; pass the tool's fields "
                f"at the top level. {self.allowed}"
            )
        if tool_name in self.read_tools:
            return FilterDecision.allow()
        if tool_name == self.shell_tool:
            return _shell_decision(tool_name, args, self.allowed)
        if tool_name in self.edit_tools:
            problem = self.path_problem(args.get("file_path"))
            if problem:
                return FilterDecision.deny(f"`{tool_name}` {problem}. {self.allowed}")
            return FilterDecision.allow()
        return FilterDecision.deny(f"`{tool_name}` is not available. {self.allowed}")

    def path_problem(self, file_path: JsonValue) -> str | None:
        """Why ``file_path`` may not be written, or None when it is inside the directory."""
        if not isinstance(file_path, str) or not file_path:
            return "needs a `file_path` string"
        path = Path(file_path)
        if "\0" in file_path or not path.is_absolute():
            return f"needs an absolute path; `{file_path}` is not one"
        if ".." in path.parts:
            return f"path `{file_path}` contains `..`"
        try:
            parent = path.parent.resolve(strict=True)
            target = (parent / path.name).resolve()
        except (OSError, RuntimeError):
            return f"cannot write `{file_path}`: its directory does not exist"
        if target == self.memory_dir or not target.is_relative_to(self.memory_dir):
            return f"path `{file_path}` resolves to {target}, which is outside {self.memory_dir}"
        return None


def _shell_decision(tool_name: str, args: Mapping[str, JsonValue], allowed: str) -> FilterDecision:
    command = args.get("command")
    if not isinstance(command, str):
        return FilterDecision.deny(f"`{tool_name}` needs a top-level `command` string. {allowed}")
    from .shell import classify_command  # tree-sitter loads on the first shell check

    verdict = classify_command(command)
    if verdict.read_only:
        return FilterDecision.allow()
    return FilterDecision.deny(f"this command is not read-only: {verdict.reason}. {allowed}")


def tool_named(tool_name: str, names: Iterable[str]) -> bool:
    """Exactly, or through an ``mcp__<server>__*`` entry (every tool of that MCP server)."""
    return any(
        n == tool_name or (n.endswith("__*") and tool_name.startswith(n[:-1])) for n in names
    )


def _names(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in sorted(names)) or "no tools"
