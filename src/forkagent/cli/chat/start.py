"""How a chat begins: a new session, the last one in this directory, or a given one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import ForkGate, RuntimeOptions
from ..._paths import state_dir
from ...agent import Agent, Session
from ...errors import ConfigurationError
from ...events import Event
from ...permissions import PermissionHandler, PermissionMode, PermissionPolicy
from ...state.registry import AgentRecord, Registry
from ..config import load_defaults
from ..resume import resumed_mode
from ..run import permission_mode_named, split_limits

CHAT_OPTIONS = RuntimeOptions(
    gate=ForkGate(enabled=True, interactive=True), resume_on_notification=False
)
"""Forks are on (someone is there to answer their questions); the chat itself decides when
a background report starts a turn, so that Ctrl+C can interrupt that turn too."""
HISTORY_FILE = "chat_history"
"""What the user typed, across sessions, in the state directory."""


@dataclass(frozen=True, slots=True)
class ChatStart:
    """The command line of ``forkagent chat``."""

    cwd: Path
    model: str | None = None
    permission_mode: str | None = None
    continue_last: bool = False
    resume: str | None = None
    trusted: bool | None = None
    limits: dict[str, float] = field(default_factory=dict)
    """From the command line; they override the config files' limits."""


def history_path() -> Path:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return directory / HISTORY_FILE


def open_session(
    start: ChatStart, handler: PermissionHandler, listeners: Sequence[Callable[[Event], None]]
) -> Session[Any]:
    """A new session on the configured model, or a resumed one on its own model and
    in its recorded permission mode (a tighter one if asked; never a looser one)."""
    defaults = load_defaults(start.cwd)
    limits = {**defaults.limits, **start.limits}
    if start.resume is None and not start.continue_last:
        mode = permission_mode_named(start.permission_mode or defaults.permission_mode, False)
        model = start.model or defaults.model
        return Session(_agent(model, start, mode, handler, listeners, limits))
    if start.model is not None:
        raise ConfigurationError(
            "a resumed session keeps its model (its cached prefix is that model's): drop --model"
        )
    record = Registry().get(start.resume) if start.resume else last_session(start.cwd)
    if record.transcript is None:
        raise ConfigurationError(f"{record.id} was run without a transcript; nothing to resume")
    mode = resumed_mode(record.transcript, start.permission_mode)
    agent = _agent(record.model, start, mode, handler, listeners, limits)
    return Session.resume(agent, record.transcript)


def last_session(cwd: Path) -> AgentRecord:
    """The main agent started last in ``cwd`` that no live process runs."""
    registry = Registry()
    registry.mark_lost()  # a crashed chat's row still says running
    here = str(cwd.resolve())
    found = [
        r
        for r in registry.list(limit=None)
        if r.kind == "main" and r.cwd == here and r.transcript is not None and r.finished
    ]
    if not found:
        raise ConfigurationError(f"no earlier session in {here} to continue")
    return max(found, key=lambda r: r.started_at)


def _agent(
    model: str,
    start: ChatStart,
    mode: PermissionMode,
    handler: PermissionHandler,
    listeners: Sequence[Callable[[Event], None]],
    limits: dict[str, float],
) -> Agent[str]:
    """The chat's main agent; turn and time limits apply to each turn the user starts."""
    main, tree = split_limits(limits)
    return Agent(
        model=model,
        cwd=start.cwd,
        options=CHAT_OPTIONS,
        permissions=PermissionPolicy(mode=mode, handler=handler),
        listeners=listeners,
        limits=main,
        tree_limits=tree,
        load_user_agents=True,
        trust_project=start.trusted,
    )
