"""Events an agent tree emits while it runs (for live views, logs and tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from .messages import JsonValue
from .models.base import ModelResponse
from .requests import ModelRequest

AgentKind: TypeAlias = Literal["main", "fork", "named"]
AgentStatus: TypeAlias = Literal[
    "running", "completed", "failed", "cancelled", "timed_out", "budget_exceeded"
]


@dataclass(frozen=True, slots=True)
class AgentStarted:
    agent_id: str
    parent_id: str | None
    kind: AgentKind
    label: str
    background: bool
    details: dict[str, JsonValue] = field(default_factory=dict)
    """Fork facts: cache-key hash, whether the cache is shared, the fork-or-fresh estimate."""


@dataclass(frozen=True, slots=True)
class RequestSent:
    agent_id: str
    turn: int
    request: ModelRequest


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    agent_id: str
    turn: int
    response: ModelResponse
    seconds: float


@dataclass(frozen=True, slots=True)
class ToolCalled:
    agent_id: str
    tool_use_id: str
    name: str
    args: dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class ToolFinished:
    agent_id: str
    tool_use_id: str
    name: str
    is_error: bool
    preview: str


@dataclass(frozen=True, slots=True)
class AgentMovedToBackground:
    agent_id: str


@dataclass(frozen=True, slots=True)
class NotificationDelivered:
    agent_id: str
    """The agent whose conversation received it."""
    task_id: str


@dataclass(frozen=True, slots=True)
class AgentFinished:
    agent_id: str
    status: AgentStatus
    output: str
    error: str | None = None
    details: dict[str, JsonValue] = field(default_factory=dict)


Event: TypeAlias = (
    AgentStarted
    | RequestSent
    | ResponseReceived
    | ToolCalled
    | ToolFinished
    | AgentMovedToBackground
    | NotificationDelivered
    | AgentFinished
)
