"""OpenAI Chat Completions on the official ``openai`` SDK, and the servers that copy it.

``render_request``, ``parse_response`` and ``ChatStream`` are pure and need no
SDK. A ``ChatDialect`` holds what differs between OpenAI and a compatible
server (see ``compat.py``); everything else is rendered the same way.

Mapping notes:
- A neutral user message becomes one ``tool`` message per tool result, then one
  user message with its own text and images. Tool messages carry text only, so
  a tool result's images move into that user message, ahead of its own blocks.
  Chat Completions has no error flag for tool results: the result's text says it.
- Tool call arguments are sent back as the model wrote them when they were not
  JSON, else as compact JSON in the original key order.
- Thinking is sent back only to servers that take it (``reasoning_field``), and
  read from ``reasoning_content`` or ``reasoning``.
- Explicit cache breakpoints go where Anthropic's do: DashScope's ``cache_control``,
  and ``prompt_cache_breakpoint`` in explicit mode for OpenAI's gpt-5.6 and later.
- Cache writes (``cache_write_tokens``, DashScope's ``cache_creation_input_tokens``)
  count as 5-minute writes in ``Usage``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Unpack

from ..messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    JsonValue,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from ..requests import ModelRequest, ModelSettings
from ..usage import Usage
from ._adapter import AdapterModel
from ._cache import Position, ephemeral, message_breakpoints
from ._json import as_dict, as_int, as_list, as_str, compact, get_int, parse_arguments
from ._retry import DEFAULT_RETRY, RetryPolicy, provider_error, stream_cut
from ._shared import SharedHeads, SharedRenderings
from ._transport import (
    Body,
    ClientOptions,
    Endpoint,
    Transport,
    stainless_transport,
)
from .base import (
    ModelProfile,
    ModelResponse,
    StopReason,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
    Warmup,
)


@dataclass(frozen=True, slots=True)
class ChatDialect:
    """How one Chat Completions server differs from OpenAI's."""

    provider: str
    default_base_url: str | None = None
    """None: the SDK's default (OpenAI's own API)."""
    key_required: bool = True
    """Local engines run without a key unless started with one."""
    max_tokens_field: str = "max_tokens"
    send_cache_key: bool = False
    """Send ``settings.cache_key`` as ``prompt_cache_key`` (OpenAI's cache routing)."""
    cache_markers: bool = False
    """Explicit ``cache_control`` on content parts (DashScope); content is then always a list."""
    breakpoint_models: Callable[[str], bool] | None = None
    """Models that take ``prompt_cache_breakpoint`` on content parts (OpenAI's newer ones): their
    requests go in explicit cache mode, with breakpoints where DashScope's markers go."""
    reasoning_field: str | None = None
    """Assistant field that takes thinking back (DeepSeek's ``reasoning_content``)."""
    warmup: Warmup = "none"
    cache_visible_after: float = 0.0
    min_cache_tokens: int = 0

    def profile(self) -> ModelProfile:
        return ModelProfile(
            provider=self.provider,
            warmup=self.warmup,
            cache_visible_after=self.cache_visible_after,
            min_cache_tokens=self.min_cache_tokens,
        )

    def takes_breakpoints(self, model: str) -> bool:
        return self.breakpoint_models is not None and self.breakpoint_models(model)

    def marker(self, model: str) -> Body | None:
        """The field that makes a content part of ``model``'s requests a cache breakpoint."""
        if self.cache_markers:
            return {"cache_control": ephemeral("5m")}
        if self.takes_breakpoints(model):
            return {"prompt_cache_breakpoint": {"mode": "explicit"}}
        return None

    @property
    def endpoint(self) -> Endpoint:
        """The key in ``<PROVIDER>_API_KEY``, the base URL in ``<PROVIDER>_BASE_URL``."""
        prefix = self.provider.upper().replace("-", "_")
        return Endpoint(
            self.provider,
            (f"{prefix}_API_KEY",),
            f"{prefix}_BASE_URL",
            self.default_base_url,
            self.key_required,
        )


_GPT_VERSION = re.compile(r"gpt-(\d+)(?:\.(\d+))?")


def takes_breakpoints(model: str) -> bool:
    """gpt-5.6 and later take ``prompt_cache_options`` and per-part ``prompt_cache_breakpoint``."""
    version = _GPT_VERSION.match(model)
    return version is not None and (int(version[1]), int(version[2] or 0)) >= (5, 6)


OPENAI = ChatDialect(
    provider="openai",
    max_tokens_field="max_completion_tokens",
    send_cache_key=True,
    breakpoint_models=takes_breakpoints,
    warmup="first_response_starts",
    min_cache_tokens=1024,
)


# --- neutral request -> wire ------------------------------------------------------------------


def render_request(request: ModelRequest, dialect: ChatDialect, *, stream: bool = False) -> Body:
    """The Chat Completions body for ``request`` as ``dialect`` wants it."""
    settings = request.settings
    renderer = _Renderer(request, dialect)
    body: Body = {"model": request.model, "messages": renderer.messages()}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in request.tools
        ]
    body.update(_settings(settings, dialect))
    if dialect.takes_breakpoints(request.model):
        body["prompt_cache_options"] = {"mode": "explicit"}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(settings.extra)
    return body


def _settings(settings: ModelSettings, dialect: ChatDialect) -> Body:
    out: Body = {}
    if (choice := settings.tool_choice) is not None:
        out["tool_choice"] = (
            {"type": "function", "function": {"name": choice}}
            if choice not in ("auto", "any", "none")
            else "required"
            if choice == "any"
            else choice
        )
    out[dialect.max_tokens_field] = settings.max_tokens
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if settings.stop_sequences:
        out["stop"] = list(settings.stop_sequences)
    if dialect.send_cache_key and settings.cache_key is not None:
        out["prompt_cache_key"] = settings.cache_key
    return out


def _markable(block: ContentBlock) -> bool:
    """Blocks that become a content part of their own (tool calls and thinking do not)."""
    if isinstance(block, TextBlock):
        return bool(block.text)
    if isinstance(block, ToolResultBlock):
        return any(isinstance(c, TextBlock) for c in block.content)
    return isinstance(block, ImageBlock)


class _Renderer:
    def __init__(self, request: ModelRequest, dialect: ChatDialect) -> None:
        self._request = request
        self._dialect = dialect
        self._marker = dialect.marker(request.model)
        marks = message_breakpoints(request, _markable) if self._marker else frozenset()
        self._marks: frozenset[Position] = marks

    def messages(self) -> list[JsonValue]:
        out: list[JsonValue] = []
        system = self._system()
        if system is not None:
            out.append(system)
        marked = {message for message, _ in self._marks}
        config = (self._dialect.reasoning_field, self._marker is not None)
        shared = _RENDERED.get(config)
        if shared is None:
            shared = _RENDERED[config] = SharedRenderings()
        for index, message in enumerate(self._request.messages):
            if index not in marked:
                out += shared.get(message, self._unmarked)
            elif isinstance(message, UserMessage):
                out += self._user(message, index)
            else:
                out.append(self._assistant(message, index))
        return out

    def _unmarked(self, message: Message) -> list[Body]:
        if isinstance(message, UserMessage):
            return self._user(message, -1)
        return [self._assistant(message, -1)]

    def _system(self) -> Body | None:
        system = self._request.system
        blocks = (TextBlock(text=system),) if isinstance(system, str) else system
        parts = [_text_part(b.text) for b in blocks if b.text]
        if not parts:
            return None
        self._mark(parts[-1], True)
        return {"role": "system", "content": self._content(parts)}

    def _user(self, message: UserMessage, index: int) -> list[Body]:
        """A tool message per tool result, then the user's parts; marked parts are copies."""
        rendered = _user_wire(message.content, self._marker is not None)
        tools = list(rendered.tools)
        parts = list(rendered.parts)
        for at, position in self._marks:
            place = rendered.places[position] if at == index else None
            if place is not None and place[0] == "tool":
                tools[place[1]] = self._marked_tool(tools[place[1]])
            elif place is not None:
                parts[place[1]] = self._mark({**parts[place[1]]}, True)
        if parts:
            tools.append({"role": "user", "content": self._content(parts)})
        return tools

    def _marked_tool(self, tool: Body) -> Body:
        """A copy of a tool message whose last text part carries the marker."""
        content = as_list(tool["content"])
        last = self._mark({**as_dict(content[-1])}, True)
        return {**tool, "content": [*content[:-1], last]}

    def _assistant(self, message: AssistantMessage, index: int) -> Body:
        parts = [
            self._mark(_text_part(b.text), (index, i) in self._marks)
            for i, b in enumerate(message.content)
            if isinstance(b, TextBlock) and b.text
        ]
        out: Body = {"role": "assistant", "content": self._content(parts) if parts else None}
        calls = [_tool_call(b) for b in message.content if isinstance(b, ToolUseBlock)]
        if calls:
            out["tool_calls"] = calls
        thinking = "".join(b.thinking for b in message.content if isinstance(b, ThinkingBlock))
        if self._dialect.reasoning_field and thinking:
            out[self._dialect.reasoning_field] = thinking
        return out

    def _content(self, parts: list[Body]) -> JsonValue:
        return _joined(parts, markers=self._marker is not None)

    def _mark(self, part: Body, marked: bool) -> Body:
        if marked and self._marker is not None:
            part.update(self._marker)
        return part


def _joined(parts: list[Body], *, markers: bool) -> JsonValue:
    """A lone text part is sent as a plain string, unless markers are on: then moving a
    marker changes nothing but the marker."""
    if not markers and len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


_RENDERED: dict[tuple[str | None, bool], SharedRenderings[Message, list[Body]]] = {}
"""Messages without a marker, rendered once per (thinking field, markers on): siblings and an
agent's successive turns send the same message objects. Never changed after rendering."""


@dataclass(frozen=True, slots=True)
class _UserWire:
    """A user message's blocks rendered without markers (shared, never changed)."""

    tools: tuple[Body, ...]
    """A tool message per tool result."""
    parts: tuple[Body, ...]
    """The text and image parts, with the tool results' images, in order."""
    places: tuple[tuple[Literal["tool", "part"], int] | None, ...]
    """Where each block landed, for a marker; None for a block that cannot carry one."""

    def plus(self, more: _UserWire) -> _UserWire:
        tools, parts = len(self.tools), len(self.parts)
        moved = tuple(
            None if p is None else (p[0], p[1] + (tools if p[0] == "tool" else parts))
            for p in more.places
        )
        return _UserWire(self.tools + more.tools, self.parts + more.parts, self.places + moved)


_USER_HEADS: dict[bool, SharedHeads[ContentBlock, _UserWire]] = {
    False: SharedHeads(),
    True: SharedHeads(),
}
"""A long user message's blocks but its last, rendered once (markers off, on): every child
of a reply with N tool calls ends with the same N placeholder results and the rules."""


def _user_wire(blocks: tuple[ContentBlock, ...], markers: bool) -> _UserWire:
    """``blocks`` rendered, a long tuple's head taken from ``_USER_HEADS`` (O(1) in its length)."""
    return _USER_HEADS[markers].render(blocks, lambda b: _render_user(b, markers), _UserWire.plus)


def _render_user(blocks: tuple[ContentBlock, ...], markers: bool) -> _UserWire:
    tools: list[Body] = []
    parts: list[Body] = []
    places: list[tuple[Literal["tool", "part"], int] | None] = []
    for block in blocks:
        if isinstance(block, ToolResultBlock):
            places.append(("tool", len(tools)) if _markable(block) else None)
            tools.append(_tool_message(block, markers))
            parts += [_image_part(c) for c in block.content if isinstance(c, ImageBlock)]
        elif isinstance(block, TextBlock | ImageBlock):
            places.append(("part", len(parts)))
            parts.append(_part(block))
        else:
            places.append(None)
    return _UserWire(tuple(tools), tuple(parts), tuple(places))


def _tool_message(block: ToolResultBlock, markers: bool) -> Body:
    parts = [_text_part(c.text) for c in block.content if isinstance(c, TextBlock)]
    content: JsonValue = _joined(parts, markers=markers) if parts else ""
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": content}


def _part(block: TextBlock | ImageBlock) -> Body:
    return _text_part(block.text) if isinstance(block, TextBlock) else _image_part(block)


def _text_part(text: str) -> Body:
    return {"type": "text", "text": text}


def _image_part(image: ImageBlock) -> Body:
    return {"type": "image_url", "image_url": {"url": image_url(image)}}


def image_url(image: ImageBlock) -> str | None:
    """The image's URL, or a ``data:`` URL of its inline bytes (both OpenAI APIs take either)."""
    return f"data:{image.media_type};base64,{image.data}" if image.data is not None else image.url


def tool_arguments(block: ToolUseBlock) -> str:
    """A tool call's arguments as the model wrote them when they were not JSON, else compact."""
    return block.raw_arguments if block.raw_arguments is not None else compact(block.input)


def _tool_call(block: ToolUseBlock) -> Body:
    return {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": tool_arguments(block)},
    }


# --- wire -> neutral response -----------------------------------------------------------------

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def parse_response(body: Mapping[str, JsonValue]) -> ModelResponse:
    """A chat completion (or a stream folded into one) as a ``ModelResponse``."""
    choice = as_dict(next(iter(as_list(body.get("choices"))), None))
    message = as_dict(choice.get("message"))
    reasoning = as_str(message.get("reasoning_content")) or as_str(message.get("reasoning"))
    content: list[ContentBlock] = [ThinkingBlock(thinking=reasoning)] if reasoning else []
    refusal = as_str(message.get("refusal"))
    if text := as_str(message.get("content")) or refusal:
        content.append(TextBlock(text=text))
    for raw in as_list(message.get("tool_calls")):
        call = as_dict(raw)
        function = as_dict(call.get("function"))
        arguments, raw_text = parse_arguments(as_str(function.get("arguments")))
        content.append(
            ToolUseBlock(
                id=as_str(call.get("id")),
                name=as_str(function.get("name")),
                input=arguments,
                raw_arguments=raw_text,
            )
        )
    finish = as_str(choice.get("finish_reason"))
    return ModelResponse(
        message=AssistantMessage(content=tuple(content)),
        stop_reason="refusal" if refusal else _FINISH_REASONS.get(finish, "end_turn"),
        usage=parse_usage(body),
        model=as_str(body.get("model")),
        response_id=as_str(body.get("id")) or None,
    )


def parse_usage(body: Mapping[str, JsonValue]) -> Usage:
    """Usage from whichever fields the server reports.

    Cache reads: ``prompt_tokens_details.cached_tokens`` (OpenAI, DashScope,
    vLLM, SGLang), ``prompt_cache_hit_tokens`` (DeepSeek) or llama.cpp's
    ``timings.cache_n``. Writes: ``cache_write_tokens`` (OpenAI) or
    ``cache_creation_input_tokens`` (DashScope). ``prompt_tokens`` includes both.
    """
    usage = as_dict(body.get("usage"))
    details = as_dict(usage.get("prompt_tokens_details"))
    read = (
        as_int(details.get("cached_tokens"))
        or as_int(usage.get("prompt_cache_hit_tokens"))
        or get_int(body, "timings", "cache_n")
    )
    written = (
        as_int(details.get("cache_write_tokens"))
        or as_int(details.get("cache_creation_input_tokens"))
        or as_int(usage.get("cache_creation_input_tokens"))
    )
    return Usage(
        input_tokens=max(0, as_int(usage.get("prompt_tokens")) - read - written),
        output_tokens=as_int(usage.get("completion_tokens")),
        cache_read_tokens=read,
        cache_write_5m_tokens=written,
        requests=1,
    )


@dataclass
class _CallParts:
    """One streamed tool call, its name and arguments arriving in pieces."""

    id: str
    name: str = ""
    arguments: str = ""

    def wire(self) -> Body:
        return {"id": self.id, "function": {"name": self.name, "arguments": self.arguments}}


class ChatStream:
    """Folds Chat Completions chunks into one completion; deltas are passed on as they come."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._head: Body = {}
        self._text = ""
        self._reasoning = ""
        self._calls: dict[int, _CallParts] = {}
        self._finish: str | None = None

    def feed(self, event: Mapping[str, JsonValue]) -> list[StreamEvent]:
        if "error" in event:
            raise provider_error(self._provider, None, dict(event))
        for key in ("id", "model", "usage", "timings"):
            if event.get(key) is not None:
                self._head[key] = event[key]
        out: list[StreamEvent] = []
        for raw in as_list(event.get("choices")):
            choice = as_dict(raw)
            out += self._delta(as_dict(choice.get("delta")))
            if finish := as_str(choice.get("finish_reason")):
                self._finish = finish
        return out

    def finish(self) -> ModelResponse:
        if self._finish is None:
            raise stream_cut(self._provider, "no finish_reason")
        message: Body = {"content": self._text, "reasoning_content": self._reasoning}
        if self._calls:
            message["tool_calls"] = [self._calls[i].wire() for i in sorted(self._calls)]
        choice: Body = {"message": message, "finish_reason": self._finish}
        return parse_response({**self._head, "choices": [choice]})

    def _delta(self, delta: Body) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if reasoning := as_str(delta.get("reasoning_content")) or as_str(delta.get("reasoning")):
            self._reasoning += reasoning
            out.append(ThinkingDelta(reasoning))
        if text := as_str(delta.get("content")):
            self._text += text
            out.append(TextDelta(text))
        for raw in as_list(delta.get("tool_calls")):
            piece = as_dict(raw)
            function = as_dict(piece.get("function"))
            index = as_int(piece.get("index"))
            call = self._calls.get(index)
            if call is None:
                call = self._calls[index] = _CallParts(as_str(piece.get("id")))
                out.append(ToolUseStarted(id=call.id, name=as_str(function.get("name"))))
            call.name += as_str(function.get("name"))
            call.arguments += as_str(function.get("arguments"))
        return out


# --- the model ----------------------------------------------------------------------------------


def sdk_transport(
    dialect: ChatDialect, method: str, given: Transport | None, client: ClientOptions
) -> tuple[Transport, str | None]:
    """``given``, else the ``openai`` SDK's ``method`` for the dialect's server; and the base
    URL a model string must name (None when it is the default, or no SDK is used)."""
    if given is not None:
        return given, None
    endpoint = dialect.endpoint
    base_url = endpoint.custom_url(client.get("base_url"))
    return stainless_transport(dialect.provider, "openai", method, endpoint, client), base_url


class OpenAIModel(AdapterModel[Transport]):
    """A Chat Completions model through ``openai.AsyncOpenAI``, for OpenAI or a compatible server.

    The API key and base URL come from the arguments, else from the dialect's
    environment variables; a missing key fails here, before any request.
    ``transport`` replaces the SDK (the emulator model uses it).
    """

    def __init__(
        self,
        name: str,
        *,
        dialect: ChatDialect = OPENAI,
        retry: RetryPolicy = DEFAULT_RETRY,
        transport: Transport | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        transport, base_url = sdk_transport(dialect, "chat.completions.create", transport, client)
        super().__init__(name, dialect.profile(), retry, transport, base_url)
        self.dialect = dialect

    async def request(self, request: ModelRequest) -> ModelResponse:
        body = render_request(request, self.dialect)
        return parse_response(await self._send(lambda: self._transport.send(body)))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        body = render_request(request, self.dialect, stream=True)
        async for event in self._stream(
            lambda: self._transport.stream(body), lambda: ChatStream(self.dialect.provider)
        ):
            yield event


__all__ = [
    "OPENAI",
    "ChatDialect",
    "ChatStream",
    "OpenAIModel",
    "parse_response",
    "parse_usage",
    "render_request",
]
