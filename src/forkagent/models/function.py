"""Test models: replies written by a function, or taken from a script.

Both record every request they receive, so a test can assert what an agent
actually sent (for example that a moved-to-background child repeated none).
"""

from __future__ import annotations

import inspect
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeAlias

from ..errors import ScriptExhaustedError
from ..messages import AssistantMessage, TextBlock, ThinkingBlock, ToolUseBlock, UserMessage
from ..requests import ModelRequest
from ..usage import Usage
from .base import (
    Model,
    ModelProfile,
    ModelResponse,
    ResponseComplete,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
)

Reply: TypeAlias = AssistantMessage | ModelResponse | str
ReplyFunction: TypeAlias = Callable[[ModelRequest], Reply | Awaitable[Reply]]
ScriptItem: TypeAlias = Reply | BaseException | ReplyFunction


class _RecordingModel(Model):
    def __init__(self, name: str, context_window: int | None = None) -> None:
        self._name = name
        self.profile = ModelProfile(provider="test", caches=False, context_window=context_window)
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return _as_response(await self._reply(request), request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The reply word by word, as a provider streams it, so streaming code can be tested."""
        response = await self.request(request)
        for block in response.message.content:
            if isinstance(block, TextBlock):
                for word in _words(block.text):
                    yield TextDelta(word)
            elif isinstance(block, ThinkingBlock):
                for word in _words(block.thinking):
                    yield ThinkingDelta(word)
            elif isinstance(block, ToolUseBlock):
                yield ToolUseStarted(block.id, block.name)
        yield ResponseComplete(response)

    async def _reply(self, request: ModelRequest) -> Reply:
        raise NotImplementedError


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


class FunctionModel(_RecordingModel):
    """Each reply is ``function(request)``; the function may be async."""

    def __init__(
        self, function: ReplyFunction, *, name: str = "function", context_window: int | None = None
    ) -> None:
        super().__init__(name, context_window)
        self._function = function

    async def _reply(self, request: ModelRequest) -> Reply:
        return await _call(self._function, request)


class ScriptedModel(_RecordingModel):
    """Replies from a queue, in order. Running out raises ``ScriptExhaustedError``.

    An item may be a reply, an exception to raise, or a function of the request.
    """

    def __init__(
        self,
        replies: Iterable[ScriptItem],
        *,
        name: str = "scripted",
        context_window: int | None = None,
    ) -> None:
        super().__init__(name, context_window)
        self._script: deque[ScriptItem] = deque(replies)
        self._total = len(self._script)

    @property
    def remaining(self) -> int:
        return len(self._script)

    def add(self, *replies: ScriptItem) -> None:
        self._script.extend(replies)
        self._total += len(replies)

    def assert_all_used(self) -> None:
        if self._script:
            raise AssertionError(
                f"{self.name}: {len(self._script)} of {self._total} scripted replies were not used"
            )

    async def _reply(self, request: ModelRequest) -> Reply:
        if not self._script:
            raise ScriptExhaustedError(
                f"{self.name} has no reply left for request {len(self.requests)} "
                f"(it was scripted with {self._total}); add replies or end the run sooner"
            )
        item = self._script.popleft()
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return await _call(item, request)
        return item


async def _call(function: ReplyFunction, request: ModelRequest) -> Reply:
    result = function(request)
    return await result if inspect.isawaitable(result) else result


def _as_response(reply: Reply, request: ModelRequest) -> ModelResponse:
    if isinstance(reply, ModelResponse):
        return reply
    message = (
        AssistantMessage(content=(TextBlock(text=reply),)) if isinstance(reply, str) else reply
    )
    return ModelResponse(
        message=message,
        stop_reason="tool_use" if message.tool_uses else "end_turn",
        usage=Usage(
            input_tokens=rough_tokens(len(request.canonical_bytes())),
            output_tokens=rough_tokens(len(message.model_dump_json())),
            requests=1,
        ),
        model=request.model,
    )


def rough_tokens(n_bytes: int) -> int:
    """About four bytes a token: good enough for test models' usage figures."""
    return (n_bytes + 3) // 4


def test_model(name: str) -> Model:
    """``test:<anything>``: answers each user message by echoing it."""

    def echo(request: ModelRequest) -> str:
        last = request.messages[-1] if request.messages else None
        text = last.text if isinstance(last, UserMessage) else ""
        return f"[{name}] {text}" if text else f"[{name}] done"

    return FunctionModel(echo, name=name)
