"""What the emulated model says.

Replies are neutral (text, tool calls, thinking); each wire module renders
them in its provider's format. A policy is any callable from the parsed
request to a reply; scripted replies (queued per conversation, matched on the
last user text, or global) are served before the policy is asked.
"""

from __future__ import annotations

import inspect
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Provider: TypeAlias = Literal["anthropic", "openai", "gemini"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    """Left ``None``, the emulator makes a deterministic id in the provider's style."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A model turn: thinking first, then text, then tool calls."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        calls = tuple(
            ToolCall(name=c["name"], input=c.get("input", {}), id=c.get("id"))
            for c in data.get("tool_calls", ())
        )
        return cls(text=data.get("text", ""), tool_calls=calls, thinking=data.get("thinking"))


@dataclass(frozen=True, slots=True)
class EmulatedRequest:
    """The parts of a wire request a policy decides on."""

    provider: Provider
    model: str
    system: str
    last_user_text: str
    tool_names: tuple[str, ...]
    message_count: int
    conversation: str
    """``x-emulator-conversation`` header, else a digest of model, system and first user turn."""
    body: Mapping[str, Any]


Policy: TypeAlias = Callable[[EmulatedRequest], Reply | Awaitable[Reply]]


def default_policy(request: EmulatedRequest) -> Reply:
    """A short deterministic acknowledgement of the last user text."""
    words = request.last_user_text.split()
    if not words:
        return Reply(text="OK.")
    summary = " ".join(words[:12]) + (" ..." if len(words) > 12 else "")
    return Reply(text=f"Understood: {summary}")


async def ask(policy: Policy, request: EmulatedRequest) -> Reply:
    reply = policy(request)
    if inspect.isawaitable(reply):
        return await reply
    return reply


class Script:
    """Queued replies, consumed before the policy: matched, per conversation, global."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._global: deque[Reply] = deque()
        self._by_conversation: dict[str, deque[Reply]] = {}
        self._by_match: list[tuple[str, deque[Reply]]] = []

    def add(
        self,
        replies: Iterable[Reply | str],
        *,
        conversation: str | None = None,
        match: str | None = None,
    ) -> None:
        """Queue replies; ``match`` is a substring of the last user text."""
        queued = [Reply(text=r) if isinstance(r, str) else r for r in replies]
        with self._lock:
            if match is not None:
                self._by_match.append((match, deque(queued)))
            elif conversation is not None:
                self._by_conversation.setdefault(conversation, deque()).extend(queued)
            else:
                self._global.extend(queued)

    def take(self, request: EmulatedRequest) -> Reply | None:
        with self._lock:
            for text, queue in self._by_match:
                if queue and text in request.last_user_text:
                    return queue.popleft()
            mine = self._by_conversation.get(request.conversation)
            if mine:
                return mine.popleft()
            return self._global.popleft() if self._global else None

    def pending(self) -> int:
        with self._lock:
            queues = [self._global, *self._by_conversation.values()]
            queues += [q for _, q in self._by_match]
            return sum(len(q) for q in queues)

    def clear(self) -> None:
        with self._lock:
            self._global.clear()
            self._by_conversation.clear()
            self._by_match.clear()
