"""The model protocol every adapter and test model implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from ..messages import AssistantMessage, JsonValue
from ..requests import ModelRequest
from ..usage import Usage

StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "error"
]
HistoryStyle: TypeAlias = Literal["tool_result", "alternating"]
"""``tool_result``: Anthropic/OpenAI; ``alternating``: Gemini's strict user/model turns."""
Warmup: TypeAlias = Literal["none", "first_response_starts", "first_response_ends"]
"""When a provider's cache entry becomes readable by a sibling request."""


class ModelResponse(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    message: AssistantMessage
    stop_reason: StopReason = "end_turn"
    usage: Usage = Usage()
    model: str = ""
    response_id: str | None = None
    cache_diagnosis: dict[str, JsonValue] | None = None
    """The provider's own explanation of a cache miss, when it sends one."""
    details: dict[str, JsonValue] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUseStarted:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    """The provider began its reply (Anthropic's ``message_start``), before any content.

    A provider whose cache entry is readable once the response has begun makes it
    readable here: fan-out releases a family's waiting siblings at this event.
    """


@dataclass(frozen=True, slots=True)
class ResponseComplete:
    response: ModelResponse


StreamEvent: TypeAlias = (
    ResponseStarted | TextDelta | ThinkingDelta | ToolUseStarted | ResponseComplete
)


@dataclass(frozen=True, slots=True)
class Caller:
    """The agent a model request is made for; the emulator's scripts can aim at it."""

    agent_id: str
    label: str
    kind: str
    turn: int


CALLER: ContextVar[Caller | None] = ContextVar("forkagent_caller", default=None)
"""Set by the turn loop around each request; real providers never see it."""


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What the orchestration needs to know about a provider's wire and cache."""

    provider: str
    history_style: HistoryStyle = "tool_result"
    warmup: Warmup = "none"
    cache_visible_after: float = 0.0
    """Seconds after the warm-up event before the entry can be read (DeepSeek builds its disk
    cache after the response ends): siblings are released that much later."""
    supports_prewarm: bool = False
    min_cache_tokens: int = 0
    caches: bool = True
    """False for models with no prompt cache (the test models): reading nothing is no break."""
    context_window: int | None = None
    """Overrides the window ``models.context`` knows for the model's name (test models set it)."""


class Model(ABC):
    """An LLM endpoint. Implementations must be deterministic in what they send."""

    profile: ModelProfile

    @property
    @abstractmethod
    def name(self) -> str:
        """The model id sent to the provider."""

    @property
    def spec(self) -> str:
        """``provider:model``, the string that resolves back to this model."""
        return f"{self.profile.provider}:{self.name}"

    @abstractmethod
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the complete reply."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream a reply; the last event is always ``ResponseComplete``.

        The default streams nothing but the complete response.
        """
        yield ResponseComplete(await self.request(request))

    @property
    def context_window(self) -> int | None:
        """Tokens one request may hold (prompt and output); None when unknown."""
        from .context import context_limits

        if self.profile.context_window is not None:
            return self.profile.context_window
        limits = context_limits(self.name)
        return limits.window if limits else None

    def can_prewarm(self, request: ModelRequest) -> bool:
        """Whether ``prewarm`` would send ``request`` (some settings are refused by the API)."""
        return self.profile.supports_prewarm

    async def prewarm(self, request: ModelRequest) -> Usage | None:
        """Write the cache for ``request``'s prefix without generating; None if unsupported."""
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections."""
