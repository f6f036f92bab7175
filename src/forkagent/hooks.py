"""Hooks: code that runs around sub-agents and tool calls, and may block or add context.

Two kinds share one runner. Python callables (sync or async) are registered
with ``Hooks.add`` / ``Hooks.on``; shell commands come from a settings file in
Claude Code's shape (``.forkagent/settings.json`` or ``.claude/settings.json``)
or from an agent definition's ``hooks`` field::

    {"hooks": {"PreToolUse": [
        {"matcher": "Bash|Write",
         "hooks": [{"type": "command", "command": "./check.sh", "timeout": 30}]}]}}

A command reads the event as JSON on stdin. Exit 2 blocks, with stderr as the
reason; exit 0 may print a JSON object with ``decision: "block"`` / ``reason``
and ``additionalContext`` (or Claude Code's ``hookSpecificOutput``); any other
exit code is an error that is reported but blocks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypeAlias, get_args

from .errors import ConfigurationError
from .messages import JsonValue

HookEvent: TypeAlias = Literal["SubagentStart", "SubagentStop", "PreToolUse", "PostToolUse"]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
TOOL_EVENTS: frozenset[HookEvent] = frozenset({"PreToolUse", "PostToolUse"})
"""Events whose matcher is tested against the tool name; the others match the agent type."""

_FOREIGN_EVENTS = frozenset(
    {
        "UserPromptSubmit",
        "Notification",
        "Stop",
        "SessionStart",
        "SessionEnd",
        "PreCompact",
        "PermissionRequest",
        "PostToolUseFailure",
    }
)
"""Claude Code events with no counterpart here: skipped so a shared settings file still loads."""

_AGENT_EVENT_ALIASES: dict[str, HookEvent] = {"Stop": "SubagentStop"}
"""In an agent definition, ``Stop`` means the end of that agent (as in Claude Code)."""

SETTINGS_FILES = (Path(".claude/settings.json"), Path(".forkagent/settings.json"))
"""Project settings files whose hooks are loaded, in the order they run."""

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class CommandHook:
    """One shell command bound to an event, as written in a settings file."""

    event: HookEvent
    command: str
    matcher: str | None = None
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True, slots=True)
class HookInput:
    """What a hook learns about the event; commands receive ``to_json()`` on stdin."""

    event: HookEvent
    agent_id: str
    agent_type: str
    cwd: Path
    tool_name: str | None = None
    tool_input: Mapping[str, JsonValue] | None = None
    tool_output: JsonValue = None
    tool_use_id: str | None = None
    parent_agent_id: str | None = None
    prompt: str | None = None
    """SubagentStart: the task the child was given."""
    result: str | None = None
    """SubagentStop: the child's final text."""
    stop_hook_active: bool | None = None
    """SubagentStop: True when a hook already sent this child back to work once."""
    session_id: str | None = None

    @property
    def target(self) -> str | None:
        """What a matcher is tested against for this event."""
        return self.tool_name if self.event in TOOL_EVENTS else self.agent_type

    def to_json(self) -> dict[str, JsonValue]:
        """The event in Claude Code's field names, without the unset ones."""
        fields: dict[str, JsonValue] = {
            "hook_event_name": self.event,
            "session_id": self.session_id,
            "cwd": str(self.cwd),
            "agent_id": self.agent_id,
            "agent_type": self.agent_type,
            "parent_agent_id": self.parent_agent_id,
            "tool_name": self.tool_name,
            "tool_input": dict(self.tool_input) if self.tool_input is not None else None,
            "tool_response": self.tool_output,
            "tool_use_id": self.tool_use_id,
            "prompt": self.prompt,
            "result": self.result,
            "stop_hook_active": self.stop_hook_active,
        }
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """The merged verdict of every hook that ran for one event.

    ``blocked``: PreToolUse skips the tool and SubagentStart the child, with
    ``reason`` shown to the model; PostToolUse and SubagentStop pass the
    reason to the model as feedback. ``errors`` never block.
    """

    blocked: bool = False
    reason: str | None = None
    additional_context: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @classmethod
    def block(cls, reason: str) -> HookOutcome:
        return cls(blocked=True, reason=reason)

    @classmethod
    def context(cls, *text: str) -> HookOutcome:
        return cls(additional_context=text)

    @classmethod
    def combine(cls, outcomes: Iterable[HookOutcome]) -> HookOutcome:
        items = list(outcomes)
        reasons = [o.reason for o in items if o.blocked and o.reason]
        return cls(
            blocked=any(o.blocked for o in items),
            reason="\n".join(reasons) or None,
            additional_context=tuple(c for o in items for c in o.additional_context),
            errors=tuple(e for o in items for e in o.errors),
        )


HookResult: TypeAlias = "HookOutcome | Awaitable[HookOutcome | None] | None"
HookCallback: TypeAlias = Callable[[HookInput], HookResult]
"""A Python hook; it returns an outcome, or ``None`` for "nothing to say"."""


@dataclass(frozen=True, slots=True)
class _Registration:
    event: HookEvent
    matcher: re.Pattern[str] | None
    action: HookCallback | CommandHook
    project_dir: Path | None = None
    """Exported to commands as FORKAGENT_PROJECT_DIR / CLAUDE_PROJECT_DIR."""

    def matches(self, target: str | None) -> bool:
        return self.matcher is None or (target is not None and bool(self.matcher.fullmatch(target)))


class Hooks:
    """A set of hooks; ``run`` executes the matching ones concurrently and merges them."""

    def __init__(self, registrations: Iterable[_Registration] = ()) -> None:
        self._registrations = list(registrations)

    def __len__(self) -> int:
        return len(self._registrations)

    def add(self, event: HookEvent, callback: HookCallback, *, matcher: str | None = None) -> None:
        """Run ``callback`` on ``event`` for targets that fully match the ``matcher`` regex."""
        self._registrations.append(_Registration(_check_event(event), _compile(matcher), callback))

    def on(
        self, event: HookEvent, *, matcher: str | None = None
    ) -> Callable[[HookCallback], HookCallback]:
        """Decorator form of ``add``."""

        def register(callback: HookCallback) -> HookCallback:
            self.add(event, callback, matcher=matcher)
            return callback

        return register

    def merged(self, other: Hooks) -> Hooks:
        """A new set with both; this one's hooks are listed (and their results merged) first."""
        return Hooks([*self._registrations, *other._registrations])

    @classmethod
    def from_commands(
        cls, commands: Iterable[CommandHook], *, project_dir: Path | None = None
    ) -> Hooks:
        return cls(_Registration(c.event, _compile(c.matcher), c, project_dir) for c in commands)

    @classmethod
    def from_settings(cls, project_dir: Path | str) -> Hooks:
        """The hooks of the project's settings files; a broken one raises ``ConfigurationError``."""
        root = Path(project_dir)
        hooks = cls()
        for relative in SETTINGS_FILES:
            path = root / relative
            if path.is_file():
                commands = _read_settings(path)
                hooks = hooks.merged(cls.from_commands(commands, project_dir=root))
        return hooks

    async def run(
        self,
        event: HookEvent,
        hook_input: HookInput,
        *,
        command_allowed: Callable[[str], bool] | None = None,
    ) -> HookOutcome:
        """Run the matching hooks; ``command_allowed`` vets shell commands (plan mode runs
        only read-only ones). Python callables are the caller's own code and always run."""
        if hook_input.event != event:
            raise ValueError(f"hook input is for {hook_input.event}, not {event}")
        matching = [
            r
            for r in self._registrations
            if r.event == event
            and r.matches(hook_input.target)
            and (
                command_allowed is None
                or not isinstance(r.action, CommandHook)
                or command_allowed(r.action.command)
            )
        ]
        if not matching:
            return HookOutcome()
        return HookOutcome.combine(
            await asyncio.gather(*(_run_one(r, hook_input) for r in matching))
        )


def parse_hook_config(data: object, *, for_agent: bool = False) -> tuple[CommandHook, ...]:
    """Commands from the settings-file shape; a ``ValueError`` says where it is wrong.

    ``for_agent`` reads an agent definition's ``hooks`` field, where ``Stop`` is
    that agent's own end (``SubagentStop``).
    """
    if not isinstance(data, Mapping):
        raise ValueError("expected a mapping of event name to a list of {matcher, hooks} entries")
    commands: list[CommandHook] = []
    for name, groups in data.items():
        event = _event_named(str(name), for_agent)
        if event is None:
            continue
        if not isinstance(groups, list):
            raise ValueError(f"{name}: expected a list of {{matcher, hooks}} entries")
        for i, group in enumerate(groups):
            commands.extend(_parse_group(event, group, f"{name}[{i}]"))
    return tuple(commands)


def _event_named(name: str, for_agent: bool) -> HookEvent | None:
    if for_agent and name in _AGENT_EVENT_ALIASES:
        return _AGENT_EVENT_ALIASES[name]
    return None if name in _FOREIGN_EVENTS else _check_event(name)


def _parse_group(event: HookEvent, group: object, where: str) -> list[CommandHook]:
    if not isinstance(group, Mapping) or not isinstance(group.get("hooks"), list):
        raise ValueError(f"{where}: expected {{matcher: ..., hooks: [...]}}")
    matcher = group.get("matcher")
    if matcher is not None and not isinstance(matcher, str):
        raise ValueError(f"{where}.matcher: expected a string (a regular expression)")
    try:
        _compile(matcher)
    except re.error as exc:
        raise ValueError(f"{where}.matcher: invalid regular expression: {exc}") from None
    return [
        _parse_command(event, matcher, h, f"{where}.hooks[{j}]")
        for j, h in enumerate(group["hooks"])
    ]


def _parse_command(event: HookEvent, matcher: str | None, hook: object, where: str) -> CommandHook:
    if not isinstance(hook, Mapping):
        raise ValueError(f"{where}: expected {{type: command, command: ...}}")
    if hook.get("type", "command") != "command":
        raise ValueError(f"{where}.type: only 'command' hooks are supported, not {hook['type']!r}")
    command = hook.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"{where}.command: expected a non-empty string")
    timeout = hook.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ValueError(f"{where}.timeout: expected a positive number of seconds")
    return CommandHook(event=event, command=command, matcher=matcher, timeout=float(timeout))


def _read_settings(path: Path) -> tuple[CommandHook, ...]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        return parse_hook_config(data.get("hooks", {}))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path}: hooks cannot be loaded: {exc}") from None


def _check_event(event: str) -> HookEvent:
    if event not in HOOK_EVENTS:
        raise ValueError(f"unknown hook event {event!r}; supported: {', '.join(HOOK_EVENTS)}")
    return event


def _compile(matcher: str | None) -> re.Pattern[str] | None:
    """No matcher, ``""`` and ``"*"`` match everything; otherwise a full-match regex."""
    return None if matcher in (None, "", "*") else re.compile(matcher)


async def _run_one(registration: _Registration, hook_input: HookInput) -> HookOutcome:
    action = registration.action
    if isinstance(action, CommandHook):
        return await _run_command(action, hook_input, registration.project_dir)
    try:
        result = action(hook_input)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        name = getattr(action, "__qualname__", repr(action))
        return HookOutcome(errors=(f"hook {name} raised {type(exc).__name__}: {exc}",))
    return result if isinstance(result, HookOutcome) else HookOutcome()


async def _run_command(
    hook: CommandHook, hook_input: HookInput, project_dir: Path | None
) -> HookOutcome:
    root = str(project_dir or hook_input.cwd)
    env = {**os.environ, "FORKAGENT_PROJECT_DIR": root, "CLAUDE_PROJECT_DIR": root}
    try:
        proc = await asyncio.create_subprocess_shell(
            hook.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=hook_input.cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return HookOutcome(errors=(f"hook command {hook.command!r} could not start: {exc}",))
    payload = json.dumps(hook_input.to_json(), default=str).encode()
    try:
        out, err = await asyncio.wait_for(proc.communicate(payload), hook.timeout)
    except asyncio.CancelledError:  # the run ends (Ctrl-C, a signal, a stop): so does the hook
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.communicate()
        return HookOutcome(
            errors=(f"hook command {hook.command!r} timed out after {hook.timeout:g}s",)
        )
    return _command_outcome(
        hook.command, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    )


def _command_outcome(command: str, code: int | None, stdout: str, stderr: str) -> HookOutcome:
    if code == 2:
        return HookOutcome.block(stderr.strip() or f"blocked by hook command {command!r}")
    if code != 0:
        detail = f": {stderr.strip()}" if stderr.strip() else ""
        return HookOutcome(errors=(f"hook command {command!r} exited with {code}{detail}",))
    text = stdout.strip()
    if not text.startswith("{"):
        return HookOutcome()
    try:
        data = json.loads(text)
    except ValueError as exc:
        return HookOutcome(errors=(f"hook command {command!r} printed invalid JSON: {exc}",))
    return _json_outcome(command, data) if isinstance(data, dict) else HookOutcome()


def _json_outcome(command: str, data: dict[str, JsonValue]) -> HookOutcome:
    """Read both the plain shape and Claude Code's ``hookSpecificOutput``."""
    specific = data.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    denied = specific.get("permissionDecision") == "deny"
    blocked = data.get("decision") == "block" or denied
    context = [c for c in (data.get("additionalContext"), specific.get("additionalContext")) if c]
    outcome = HookOutcome(additional_context=tuple(str(c) for c in context))
    if not blocked:
        return outcome
    reason = data.get("reason") or specific.get("permissionDecisionReason")
    return replace(
        outcome, blocked=True, reason=str(reason or f"blocked by hook command {command!r}")
    )
