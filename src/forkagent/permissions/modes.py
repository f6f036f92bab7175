"""Permission modes and the callback that answers permission questions.

``PermissionPolicy.authorize`` is what the turn loop calls before every tool
call: the filter first (what this agent may do at all), then the mode (what
runs without asking), then the handler (ask someone). Read-only calls never
need asking; in ``bubble`` mode a child's questions go to its parent's handler.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypeAlias, cast

from ..messages import JsonValue
from ..tools.base import Tool, ToolContext
from ..tools.builtin._secrets import is_secret
from .filters import EDIT_TOOLS, SHELL_TOOL, FilterDecision, ToolFilter, all_of

PermissionMode: TypeAlias = Literal["default", "accept_edits", "plan", "bypass", "bubble"]
"""default: ask for anything not read-only. accept_edits: file edits inside the cwd run
without asking, other changes are asked. plan: read-only, changes are denied. bypass:
everything runs. bubble: like default, with the parent's handler answering."""

_LATITUDE: Mapping[PermissionMode, int] = {
    "plan": 0,
    "default": 1,
    "bubble": 1,
    "accept_edits": 2,
    "bypass": 3,
}
"""How much runs without asking; a child never gets more than its parent."""


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A question for the handler: may this agent make this call?"""

    agent_id: str
    tool_name: str
    args: Mapping[str, JsonValue]
    reason: str
    """Why it needs approval (for a shell command, why it is not read-only)."""


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    allowed: bool
    reason: str = ""

    @classmethod
    def allow(cls, reason: str = "") -> PermissionDecision:
        return cls(True, reason)

    @classmethod
    def deny(cls, reason: str = "") -> PermissionDecision:
        return cls(False, reason)


HandlerAnswer: TypeAlias = PermissionDecision | bool
PermissionHandler: TypeAlias = Callable[
    [PermissionRequest], HandlerAnswer | Awaitable[HandlerAnswer]
]
"""Answers a request, sync or async: a ``PermissionDecision`` or a plain bool."""


@dataclass(frozen=True)
class PermissionPolicy:
    mode: PermissionMode = "default"
    handler: PermissionHandler | None = None
    filter: ToolFilter | None = None
    add_dirs: tuple[Path, ...] = ()
    """Directories besides the working directory that tools may read without asking
    (Claude Code's ``additionalDirectories``, ``--add-dir``)."""
    allow_secrets: bool = False
    """Let tools read credential files (``.env``, ``~/.ssh``, cloud credentials...), which
    are refused in every mode otherwise, inside the working directory too."""

    async def authorize(
        self, tool: Tool, args: Mapping[str, JsonValue], ctx: ToolContext
    ) -> FilterDecision:
        if self.filter is not None:
            decision = self.filter.check(tool.name, args)
            if not decision.allowed:
                return decision
        target = _target_path(tool, args, ctx.cwd)
        if target is not None and not self.allow_secrets and is_secret(target):
            return FilterDecision.deny(
                f"{target} is a credentials file, and credentials stay out of an agent's "
                "reach; the user can allow them with PermissionPolicy(allow_secrets=True)"
            )
        if self.mode == "bypass":
            return FilterDecision.allow()
        needs = approval_needed(tool, args)
        if needs is None and target is not None and not self._readable(target, ctx.cwd):
            needs = f"it reads {target}, outside the working directory and the added ones"
            if self.mode == "plan" and self.handler is None:
                return FilterDecision.deny(
                    f"plan mode reads only inside the working directory ({ctx.cwd}) and "
                    f"the added directories, and {needs}"
                )
            return await self._ask(PermissionRequest(ctx.agent_id, tool.name, args, needs))
        if needs is None:
            return FilterDecision.allow()
        if self.mode == "plan":
            return FilterDecision.deny(
                f"plan mode allows only reading, and {needs}. Keep researching with read-only "
                "tools and present the plan instead of making changes."
            )
        if self.mode == "accept_edits" and edits_inside(tool, args, ctx.cwd):
            return FilterDecision.allow()
        return await self._ask(PermissionRequest(ctx.agent_id, tool.name, args, needs))

    def for_child(
        self, mode: PermissionMode | None = None, filter: ToolFilter | None = None
    ) -> PermissionPolicy:
        """A child's policy. Filters add up; a mode with more latitude than the parent's
        is ignored (the child keeps the parent's). ``bubble`` and an inherited mode keep
        the parent's handler; another explicit mode has none, so its questions are denied."""
        if filter is None or self.filter is None:
            child_filter = filter or self.filter
        else:
            child_filter = all_of(self.filter, filter)
        if mode is None or _LATITUDE[mode] > _LATITUDE[self.mode]:
            mode, handler = self.mode, self.handler
        else:
            handler = self.handler if mode == "bubble" else None
        return replace(self, mode=mode, handler=handler, filter=child_filter)

    def _readable(self, target: Path, cwd: Path) -> bool:
        roots = (cwd, *self.add_dirs)
        return any(target.is_relative_to(root.resolve()) for root in roots)

    async def _ask(self, request: PermissionRequest) -> FilterDecision:
        if self.handler is None:
            return FilterDecision.deny(
                f"`{request.tool_name}` needs approval ({request.reason}), but this agent has "
                "no one to ask. The user can allow such calls by giving the policy a "
                "handler, using mode 'bubble' to ask the parent's handler, or using mode "
                "'accept_edits' or 'bypass'."
            )
        try:
            answer = self.handler(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as error:
            return FilterDecision.deny(
                f"the permission handler failed ({type(error).__name__}: {error}); "
                f"`{request.tool_name}` was not run"
            )
        return _as_filter_decision(request.tool_name, answer)


def _as_filter_decision(tool_name: str, answer: object) -> FilterDecision:
    if isinstance(answer, bool):
        answer = PermissionDecision(answer)
    if not isinstance(answer, PermissionDecision):
        return FilterDecision.deny(
            f"the permission handler gave no decision for `{tool_name}`; it was not run"
        )
    if answer.allowed:
        return FilterDecision.allow(answer.reason)
    because = f": {answer.reason}" if answer.reason else ""
    return FilterDecision.deny(f"the user did not allow `{tool_name}`{because}")


def tighter_mode(first: PermissionMode | str, second: PermissionMode | str) -> PermissionMode:
    """Of two modes, the one that allows less (``plan`` over ``default`` over ``bypass``)."""
    a, b = cast(PermissionMode, first), cast(PermissionMode, second)
    return a if _LATITUDE[a] <= _LATITUDE[b] else b


def approval_needed(tool: Tool, args: Mapping[str, JsonValue]) -> str | None:
    """None for a read-only call; otherwise why it needs approval."""
    if tool.read_only:
        return None
    if tool.name == SHELL_TOOL:
        command = args.get("command")
        if not isinstance(command, str):
            return "the shell call has no `command` string"
        from .shell import classify_command  # tree-sitter loads on the first shell check

        verdict = classify_command(command)
        return None if verdict.read_only else f"the command is not read-only: {verdict.reason}"
    return f"`{tool.name}` can change things"


_PATH_ARGS = {
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "Grep": "path",
    "Glob": "path",
}
"""The argument that names the file or directory a built-in tool reads or writes."""


def _target_path(tool: Tool, args: Mapping[str, JsonValue], cwd: Path) -> Path | None:
    """The resolved path (symlinks and ``..`` followed) a file tool would touch, if any."""
    given = args.get(_PATH_ARGS.get(tool.name, ""))
    if not isinstance(given, str) or not given or "\0" in given:
        return None
    path = Path(given).expanduser()
    try:
        return (path if path.is_absolute() else cwd / path).resolve()
    except (OSError, RuntimeError):
        return None


def edits_inside(tool: Tool, args: Mapping[str, JsonValue], cwd: Path) -> bool:
    """A Write/Edit whose file (after resolving symlinks and ``..``) is inside ``cwd``."""
    file_path = args.get("file_path")
    if tool.name not in EDIT_TOOLS or not isinstance(file_path, str) or "\0" in file_path:
        return False
    root = cwd.resolve()
    path = Path(file_path).expanduser()
    try:
        target = (path if path.is_absolute() else root / path).resolve()
    except (OSError, RuntimeError):
        return False
    return target.is_relative_to(root)
