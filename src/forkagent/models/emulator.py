"""``emulator:<model-id>``: a provider adapter talking to the emulator in process.

The model id picks the wire format, as the real provider would: ``claude-*``
Anthropic, ``gpt-*``/``o<digit>*`` OpenAI, ``qwen*`` DashScope, ``deepseek*``
DeepSeek, ``gemini-*`` Gemini. The request is rendered and the reply parsed by
that adapter's own pure functions, and retries, streaming and caching logic
are the adapter's too; only the transport differs: ``Emulator.dispatch``
instead of the SDK, so no network, no SDK and no key are needed. All
``emulator:`` models share ``default_emulator()`` and therefore one cache.
``EmulatorModel(id, url=...)`` sends the same bodies to an emulator served
over HTTP instead (``forkagent.emulator.serve``): how processes elsewhere,
Ray workers for one, share one emulator and its cache.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Literal, TypeAlias

from ..errors import ConfigurationError, UnknownModelError
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
from .openai_responses import Api, OpenAIResponsesModel, default_api

if TYPE_CHECKING:
    import httpx2

    from ..emulator import Emulator, EmulatorReply
    from ..emulator.policies import CallingAgent

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


@functools.cache
def _agent_tagging() -> tuple[str, Callable[[str, str, str, int], str]]:
    """The emulator's agent header and its format, imported once, on the first tagged request
    (an import statement per request costs more than the tag itself)."""
    from ..emulator.policies import AGENT_HEADER, agent_header

    return AGENT_HEADER, agent_header


def _with_caller(headers: dict[str, str]) -> dict[str, str]:
    """The fixed headers, plus which agent is calling (for scripts aimed at one agent)."""
    caller = CALLER.get()
    if caller is None:
        return headers
    name, tag = _agent_tagging()
    return {**headers, name: tag(caller.agent_id, caller.label, caller.kind, caller.turn)}


class _Wire:
    """``Emulator.dispatch`` with the same failure semantics as HTTP through an SDK.

    Bodies are sent ``frozen``: the adapters never change a rendering once made (they
    share them between requests, see ``models/_shared.py``)."""

    def __init__(self, emulator: Emulator, headers: dict[str, str]) -> None:
        from ..emulator.policies import CallingAgent

        self._emulator = emulator
        self._headers = headers
        self._tagged = CallingAgent.tagged

    def _agent(self) -> CallingAgent | None:
        """The calling agent, handed to the emulator as it would read it from the header
        ``_with_caller`` writes for HTTP: no header to format and parse per request."""
        caller = CALLER.get()
        if caller is None:
            return None
        return self._tagged(caller.agent_id, caller.label, caller.kind, caller.turn)

    async def call(self, path: str, body: Body) -> Body:
        from ..emulator import EmulatedDisconnect

        try:
            reply = await self._emulator.dispatch(
                "POST", path, body, self._headers, frozen=True, agent=self._agent()
            )
        except EmulatedDisconnect as cut:
            raise connection_error(PROVIDER, cut) from cut
        return _checked(reply)

    async def events(self, path: str, body: Body) -> AsyncGenerator[Body, None]:
        """The reply's stream events; a cut yields what was sent before it, then fails."""
        from ..emulator import EmulatedDisconnect

        try:
            reply = await self._emulator.dispatch(
                "POST", path, body, self._headers, frozen=True, agent=self._agent()
            )
        except EmulatedDisconnect as cut:
            for sent in cut.events:
                if data := _data(sent):
                    yield data
            raise connection_error(PROVIDER, cut) from cut
        for event in as_list(_checked(reply).get("events")):
            if data := _data(event):
                yield data


class _HttpWire:
    """The same calls to an emulator served over HTTP; a dropped connection is a
    ``connection_error`` as through an SDK, an error status the provider's error."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        import httpx2

        self._client = httpx2.AsyncClient(base_url=url, timeout=600.0)
        self._headers = headers
        self._errors: tuple[type[Exception], ...] = (httpx2.TransportError,)

    async def call(self, path: str, body: Body) -> Body:
        try:
            reply = await self._client.post(path, json=body, headers=_with_caller(self._headers))
        except self._errors as cut:
            raise connection_error(PROVIDER, cut) from cut
        payload = as_dict(reply.json())
        if reply.status_code >= 400:
            raise provider_error(PROVIDER, reply.status_code, payload, dict(reply.headers))
        return payload

    async def events(self, path: str, body: Body) -> AsyncGenerator[Body, None]:
        headers = _with_caller(self._headers)
        try:
            async with self._client.stream("POST", path, json=body, headers=headers) as reply:
                if reply.status_code >= 400:
                    payload = as_dict(json.loads(await reply.aread()))
                    raise provider_error(PROVIDER, reply.status_code, payload, dict(reply.headers))
                async for data in _sse_data(reply):
                    yield data
        except self._errors as cut:
            raise connection_error(PROVIDER, cut) from cut

    async def aclose(self) -> None:
        await self._client.aclose()


async def _sse_data(reply: httpx2.Response) -> AsyncGenerator[Body, None]:
    """The JSON payload of each server-sent event; ``[DONE]`` and comments carry nothing."""
    async for line in reply.aiter_lines():
        if line.startswith("data:") and (text := line[5:].strip()).startswith("{"):
            yield as_dict(json.loads(text))


def _checked(reply: EmulatorReply) -> Body:
    if reply.status >= 400:
        raise provider_error(PROVIDER, reply.status, reply.body, reply.headers)
    return reply.body


def _data(event: object) -> Body:
    """An SSE event's JSON payload; ``[DONE]`` and other text carry nothing."""
    data = event.get("data") if isinstance(event, dict) else None
    return data if isinstance(data, dict) else {}


class _MessagesTransport:
    """The ``Transport`` of the Anthropic and Chat Completions adapters."""

    def __init__(self, wire: _Wire | _HttpWire, path: str) -> None:
        self._wire = wire
        self._path = path

    async def send(self, body: Body) -> Body:
        return await self._wire.call(self._path, body)

    def stream(self, body: Body) -> AsyncGenerator[Body, None]:
        return self._wire.events(self._path, body)

    async def aclose(self) -> None:
        if isinstance(self._wire, _HttpWire):
            await self._wire.aclose()


class _GeminiTransport:
    """The ``GeminiTransport`` of the Gemini adapter."""

    def __init__(self, wire: _Wire | _HttpWire) -> None:
        self._wire = wire

    async def generate(self, model: str, body: Body) -> Body:
        return await self._wire.call(f"/v1beta/models/{model}:generateContent", body)

    def stream(self, model: str, body: Body) -> AsyncGenerator[Body, None]:
        return self._wire.events(f"/v1beta/models/{model}:streamGenerateContent?alt=sse", body)

    async def create_cache(self, body: Body) -> Body:
        return await self._wire.call("/v1beta/cachedContents", body)

    async def aclose(self) -> None:
        if isinstance(self._wire, _HttpWire):
            await self._wire.aclose()


@dataclasses.dataclass(frozen=True, slots=True)
class EmulatorOptions:
    """An ``EmulatorModel``'s own options, so another process can build the same model."""

    retry: RetryPolicy = DEFAULT_RETRY
    diagnostics: bool = False
    explicit_cache: bool = False
    api: Api | None = None
    chain: bool = False


class EmulatorModel(Model):
    """A model served by the emulator, with the real adapter's rendering, parsing and retries.

    ``emulator`` defaults to the process-wide ``default_emulator()``; ``url``
    (an emulator served over HTTP) replaces it. ``diagnostics`` applies to Claude ids,
    ``explicit_cache`` to Gemini ids; OpenAI ids speak the API ``api`` names (default:
    ``default_api``, as ``openai:`` models do), and on the Responses API ``chain`` sends
    ``previous_response_id``.
    """

    def __init__(
        self,
        model_id: str,
        emulator: Emulator | None = None,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        diagnostics: bool = False,
        explicit_cache: bool = False,
        api: Api | None = None,
        chain: bool = False,
        url: str | None = None,
    ) -> None:
        from ..emulator import default_emulator

        kind = family(model_id)
        if diagnostics and kind != "anthropic":
            raise ConfigurationError("diagnostics=True needs a Claude model id (claude-...)")
        if explicit_cache and kind != "gemini":
            raise ConfigurationError("explicit_cache=True needs a Gemini model id (gemini-...)")
        responses = kind == "openai" and (api or default_api(model_id)) == "responses"
        if chain and not responses:
            raise ConfigurationError("chain=True needs an OpenAI model on the Responses API")
        if url is not None and emulator is not None:
            raise ConfigurationError("give an EmulatorModel either an emulator or its url")
        headers = _HEADERS.get(kind, _CHAT_HEADERS)
        self.url = url
        self.emulator: Emulator | None = None
        wire: _Wire | _HttpWire
        if url is None:
            self.emulator = emulator or default_emulator()
            wire = _Wire(self.emulator, headers)
        else:
            wire = _HttpWire(url, headers)
        self.options = EmulatorOptions(retry, diagnostics, explicit_cache, api, chain)
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
        elif responses:
            self.adapter = OpenAIResponsesModel(
                model_id,
                chain=chain,
                retry=retry,
                transport=_MessagesTransport(wire, "/v1/responses"),
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
        if kind == "deepseek" and self.emulator is not None:  # this emulator's own delay
            delay = self.emulator.settings.deepseek_build_delay
            self.profile = dataclasses.replace(self.profile, cache_visible_after=delay)

    @property
    def name(self) -> str:
        return self.adapter.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        return await self.adapter.request(request)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        # The adapter's own stream, not a generator around it: one layer less per event.
        return self.adapter.stream(request)

    def can_prewarm(self, request: ModelRequest) -> bool:
        return self.adapter.can_prewarm(request)

    async def prewarm(self, request: ModelRequest) -> Usage | None:
        return await self.adapter.prewarm(request)

    async def aclose(self) -> None:
        await self.adapter.aclose()


def emulator_model(name: str) -> EmulatorModel:
    """``emulator:<model-id>``."""
    return EmulatorModel(name)


__all__ = ["EmulatorModel", "EmulatorOptions", "family"]
