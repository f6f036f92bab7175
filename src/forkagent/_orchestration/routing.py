"""Which route an Agent tool call takes: seed 002's decision table.

| fork  | subagent_type | forking available | route                          |
|-------|---------------|-------------------|--------------------------------|
| true  | any           | yes               | fork (subagent_type ignored)   |
| true  | set           | no                | the named agent                |
| true  | omitted       | no                | general-purpose                |
| false | set           | any               | the named agent                |
| false | omitted       | any               | general-purpose                |

With ``implicit`` (the older seeds' mode), an omitted ``subagent_type``
without ``fork`` forks too, when forking is available.

A ``fork: true`` that cannot be honoured gets a note in the tool result, so
the model learns that forking is unavailable (the field is not even in its
schema then, but a model may send it from habit or an earlier turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GENERAL_PURPOSE = "general-purpose"


@dataclass(frozen=True, slots=True)
class ForkGate:
    """Forking is available only when all three hold."""

    enabled: bool = True
    coordinator: bool = False
    """Coordinator mode plans and delegates; a fork would inherit that role."""
    interactive: bool = True
    """Forks bubble permission questions to the parent, which needs someone to ask."""

    @property
    def open(self) -> bool:
        return self.enabled and not self.coordinator and self.interactive


@dataclass(frozen=True, slots=True)
class Route:
    kind: Literal["fork", "named"]
    agent_type: str | None
    """The named agent to run; None for a fork."""
    note: str | None = None
    """Why the request was routed differently from what it asked, for the model."""


def decide_route(
    *, fork: bool | None, subagent_type: str | None, gate: ForkGate, implicit: bool = False
) -> Route:
    wants_fork = fork is True or (implicit and fork is None and not subagent_type)
    if wants_fork and gate.open:
        ignored = f" (subagent_type {subagent_type!r} ignored)" if subagent_type else ""
        return Route("fork", None, f"forked{ignored}" if ignored else None)
    agent_type = subagent_type or GENERAL_PURPOSE
    note = f"forking is not available in this session; ran as {agent_type}" if fork else None
    return Route("named", agent_type, note)
