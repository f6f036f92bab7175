"""``emulator:<model-id>``: a provider adapter talking to the emulator in process.

The model id picks the wire format, as the real provider would: ``claude-*``
Anthropic, ``gpt-*``/``o<digit>*`` OpenAI, ``qwen*`` DashScope, ``deepseek*``
DeepSeek, ``gemini-*`` Gemini. The request is rendered and the reply parsed by
that adapter's own pure functions, and retries, streaming and caching logic
are the adapter's too; only the transport differs: ``Emulator.dispatch``
instead of the SDK, so no network, no SDK and no key are needed. All
``emulator:`` models share ``default_emulator()`` and therefore one cache.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Literal, TypeAlias

from ..errors import ConfigurationError, UnknownModelError
from ..messages import JsonValue
from ..requests import ModelRequest
from ..usage import Usage
from ._json import as_dict, as_list
from ._retry import DEFAULT_RETRY, RetryPolicy, connection_error, provider_error
from ._transport import Body
from .anthropic import AnthropicModel
from .base import CALLER, Model, ModelResponse, StreamEvent
from .compat import DASHSCOPE, DEEPSEEK
from .gemini import GeminiModel
from .openai import OPENAI, ChatDialect, OpenAIModel

if TYPE_CHECKING:
    from ..emulator import Emulator, EmulatorReply

PROVIDER = "emulator"

Family: TypeAlias = Literal["anthropic", "openai", "dashscope", "deepseek", "gemini"]
_FAMILIES: tuple[tuple[re.Pattern[str], Family], ...] = (
    (re.compile(r"claude-"), "anthropic"),
    (re.compile(r"gpt-|o\d"), "openai"),
    (re.compile(r"qwen"), "dashscope"),
    (re.compile(r"deepseek"), "deepseek"),
    (re.compile(r"gemini-"), "gemini"),
)
_DIALECTS: dict[Family, ChatDialect] = {
    "openai": OPENAI,
    "dashscope": DASHSCOPE,
    "deepseek": DEEPSEEK,
}
_HEADERS: dict[Family, dict[str, str]] = {
    "anthropic": {"x-api-key": "emulator", "anthropic-version": "2023-06-01"},
    "gemini": {"x-goog-api-key": "emulator"},
}
_CHAT_HEADERS = {"authorization": "Bearer emulator"}


def family(model_id: str) -> Family:
    """Whose wire format and cache rules a model id gets."""
    for pattern, name in _FAMILIES:
        if pattern.match(model_id):
            return name
    raise UnknownModelError(
        f"emulator:{model_id}: the emulator cannot tell the provider from the model id; "
        "use an id starting with claude-, gpt-, o<digit>, qwen, deepseek or gemini-"
    )


class _Wire:
    """``Emulator.dispatch`` with the same failure semantics as HTTP through an SDK."""

    def __init__(self, emulator: Emulator, headers: dict[str, str]) -> None:
        self._emulator = emulator
        self._headers = headers

    def headers(self) -> dict[str, str]:
        """The fixed headers, plus which agent is calling (for scripts aimed at one agent)."""
        from ..emulator.policies import AGENT_HEADER, CallingAgent

        caller = CALLER.get()
        if caller is None:
            return self._headers
        tag = CallingAgent(caller.agent_id, caller.label, caller.kind, caller.turn)
        return {**self._headers, AGENT_HEADER: tag.header()}

    async def call(self, path: str, body: Body) -> Body:
        from ..emulator import EmulatedDisconnect

        try:
            reply = await self._emulator.dispatch("POST", path, body, self.headers())
        except EmulatedDisconnect as cut:
            raise connection_error(PROVIDER, cut) from cut
        return _checked(reply)

    async def events(self, path: str, body: Body) -> AsyncGenerator[Body, None]:
        """The reply's stream events; a cut yields what was sent before it, then fails."""
        from ..emulator import EmulatedDisconnect

        try:
            reply = await self._emulator.dispatch("POST", path, body, self.headers())
        except EmulatedDisconnect as cut:
            for event in cut.events:
                if data := _data(event):
                    yield data
            raise connection_error(PROVIDER, cut) from cut
        for event in as_list(_checked(reply).get("events")):
            if data := _data(event):
                yield data


def _checked(reply: EmulatorReply) -> Body:
    if reply.status >= 400:
        raise provider_error(PROVIDER, reply.status, reply.body, reply.headers)
    return reply.body


def _data(event: JsonValue) -> Body:
    """An SSE event's JSON payload; ``[DONE]`` and other text carry nothing."""
    return as_dict(as_dict(event).get("data"))


class _MessagesTransport:
    """The ``Transport`` of the Anthropic and Chat Completions adapters."""

    def __init__(self, wire: _Wire, path: str) -> None:
        self._wire = wire
        self._path = path

    async def send(self, body: Body) -> Body:
        return await self._wire.call(self._path, body)

    def stream(self, body: Body) -> AsyncGenerator[Body, None]:
        return self._wire.events(self._path, body)

    async def aclose(self) -> None:
        return None


class _GeminiTransport:
    """The ``GeminiTransport`` of the Gemini adapter."""

    def __init__(self, wire: _Wire) -> None:
        self._wire = wire

    async def generate(self, model: str, body: Body) -> Body:
        return await self._wire.call(f"/v1beta/models/{model}:generateContent", body)

    def stream(self, model: str, body: Body) -> AsyncGenerator[Body, None]:
        return self._wire.events(f"/v1beta/models/{model}:streamGenerateContent?alt=sse", body)

    async def create_cache(self, body: Body) -> Body:
        return await self._wire.call("/v1beta/cachedContents", body)

    async def aclose(self) -> None:
        return None


class EmulatorModel(Model):
    """A model served by the emulator, with the real adapter's rendering, parsing and retries.

    ``emulator`` defaults to the process-wide ``default_emulator()``.
    ``diagnostics`` applies to Claude ids, ``explicit_cache`` to Gemini ids.
    """

    def __init__(
        self,
        model_id: str,
        emulator: Emulator | None = None,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        diagnostics: bool = False,
        explicit_cache: bool = False,
    ) -> None:
        from ..emulator import default_emulator

        kind = family(model_id)
        if diagnostics and kind != "anthropic":
            raise ConfigurationError("diagnostics=True needs a Claude model id (claude-...)")
        if explicit_cache and kind != "gemini":
            raise ConfigurationError("explicit_cache=True needs a Gemini model id (gemini-...)")
        self.emulator = emulator or default_emulator()
        wire = _Wire(self.emulator, _HEADERS.get(kind, _CHAT_HEADERS))
        self.adapter: Model
        if kind == "anthropic":
            self.adapter = AnthropicModel(
                model_id,
                retry=retry,
                diagnostics=diagnostics,
                transport=_MessagesTransport(wire, "/v1/messages"),
            )
        elif kind == "gemini":
            self.adapter = GeminiModel(
                model_id,
                retry=retry,
                explicit_cache=explicit_cache,
                transport=_GeminiTransport(wire),
            )
        else:
            self.adapter = OpenAIModel(
                model_id,
                dialect=_DIALECTS[kind],
                retry=retry,
                transport=_MessagesTransport(wire, "/v1/chat/completions"),
            )
        self.family = kind
        self.profile = dataclasses.replace(self.adapter.profile, provider=PROVIDER)
        if kind == "deepseek":  # the delay this emulator was set up with
            delay = self.emulator.settings.deepseek_build_delay
            self.profile = dataclasses.replace(self.profile, cache_visible_after=delay)

    @property
    def name(self) -> str:
        return self.adapter.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        return await self.adapter.request(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.adapter.stream(request):
            yield event

    def can_prewarm(self, request: ModelRequest) -> bool:
        return self.adapter.can_prewarm(request)

    async def prewarm(self, request: ModelRequest) -> Usage | None:
        return await self.adapter.prewarm(request)

    async def aclose(self) -> None:
        await self.adapter.aclose()


def emulator_model(name: str) -> EmulatorModel:
    """``emulator:<model-id>``."""
    return EmulatorModel(name)


__all__ = ["EmulatorModel", "family"]
