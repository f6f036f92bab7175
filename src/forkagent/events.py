"""Events an agent tree emits while it runs (for live views, logs and tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from .messages import JsonValue
from .models.base import ModelResponse
from .requests import ModelRequest

if TYPE_CHECKING:  # telemetry imports this module: a runtime import would be a cycle
    from .telemetry.cache import CacheReport

NOTIFICATION_TAG = "task-notification"
"""The tag around a child's result when it is added to its parent's conversation."""

AgentKind: TypeAlias = Literal["main", "fork", "named"]
FinalStatus: TypeAlias = Literal[
    "completed",
    "failed",
    "cancelled",
    "interrupted",
    "timed_out",
    "budget_exceeded",
    "truncated",
]
"""How an agent ended. The one vocabulary: tasks, events, transcripts and the registry all use it.

``cancelled``: stopped on purpose (``Session.cancel``, ``forkagent stop``);
``interrupted``: its process was told to end (Ctrl-C, SIGTERM, SIGHUP) and it
can be resumed; ``truncated``: its last reply was cut at ``max_tokens``.
"""
AgentStatus: TypeAlias = Literal["running", FinalStatus]
TranscriptStatus: TypeAlias = Literal[AgentStatus, "background"]
"""``background``: a sync child was moved to the background and keeps running."""
RecordStatus: TypeAlias = Literal[AgentStatus, "lost"]
"""``lost``: the owning process ended without reporting how the agent ended."""
FINAL_STATUSES: frozenset[str] = frozenset({*get_args(FinalStatus), "lost"})
"""Every status after which nothing more happens to the agent."""


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
    prewarm: bool = False
    """A ``max_tokens: 0`` request that writes ``request``'s cache before the turn's own request."""


@dataclass(frozen=True, slots=True)
class OutputDelta:
    """A piece of a streamed reply, as it arrives (agents with streaming on)."""

    agent_id: str
    turn: int
    text: str
    thinking: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A streamed reply began a tool call; its arguments follow in the complete response."""

    agent_id: str
    turn: int
    tool_use_id: str
    name: str


@dataclass(frozen=True, slots=True)
class Compacted:
    """An agent's history was replaced by a summary (written by fork ``summary_agent``)
    and its latest turns."""

    agent_id: str
    summary_agent: str
    messages_before: int
    messages_after: int
    tokens_before: int


@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """A response and its usage; ``turn`` counts the agent's turns so far.

    A pre-warm (``prewarm``) is billed like any response and is counted in the
    agent's usage, but it is not a turn: its ``turn`` is that of the request it
    warmed, its message is empty and its stop reason ``max_tokens``.
    """

    agent_id: str
    turn: int
    response: ModelResponse
    seconds: float
    """From the request's sending to its reply; a fork sibling's wait for its family's
    leader comes before and is not counted."""
    prewarm: bool = False
    cost: float | None = None
    """USD of ``response.usage``, priced once by the runtime as its budget counts it:
    ``forkagent.pricing.cost(request.model, response.usage)``, the model name sent
    in the request. None when that model's price is unknown, and in an event built
    without it (a replay, a test): a listener that needs a cost then prices the
    usage itself, with the same function, rather than pricing every response again."""


@dataclass(frozen=True, slots=True)
class CacheReported:
    """How response ``turn`` used the prompt cache and, if it read less than it could, why.

    Emitted right after its ``ResponseReceived``; see ``forkagent.telemetry``.
    """

    agent_id: str
    turn: int
    report: CacheReport


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
    | OutputDelta
    | ToolCallStarted
    | ResponseReceived
    | CacheReported
    | ToolCalled
    | ToolFinished
    | AgentMovedToBackground
    | Compacted
    | NotificationDelivered
    | AgentFinished
)
