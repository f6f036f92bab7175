"""Anthropic Messages API on the official ``anthropic`` SDK.

``render_request``, ``parse_response`` and ``AnthropicStream`` are pure and
need no SDK: the same neutral request always gives the same wire dict, so a
fork child's prefix is byte-identical to its parent's, and the emulator model
reuses them unchanged.

Cache breakpoints (``cache_control``) go on the last system block (or the last
tool when there is no system prompt), on the block that ended the agent's
previous request, on the block that ends the prefix shared with sibling forks,
and on the last block: at most the four allowed (``_cache`` says why), all
with the request's TTL, so the longer-before-shorter TTL rule always holds.

A redacted thinking block keeps its opaque ``data`` in ``ThinkingBlock.signature``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Unpack, get_args

from ..errors import ConfigurationError
from ..messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    JsonValue,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from ..requests import ModelRequest, ModelSettings, ToolSpec
from ..usage import Usage
from ._adapter import AdapterModel
from ._cache import Position, ResponseIds, ephemeral, message_breakpoints
from ._json import as_dict, as_int, as_list, as_str, parse_arguments
from ._retry import DEFAULT_RETRY, RetryPolicy, provider_error, stream_cut
from ._shared import SharedHeads, SharedRenderings
from ._transport import (
    Body,
    ClientOptions,
    Endpoint,
    Transport,
    from_spec,
    stainless_transport,
)
from .base import (
    ModelProfile,
    ModelResponse,
    ResponseComplete,
    ResponseStarted,
    StopReason,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
)

PROVIDER = "anthropic"
ENDPOINT = Endpoint("Anthropic", ("ANTHROPIC_API_KEY",), "ANTHROPIC_BASE_URL")

DEFAULT_MIN_CACHE_TOKENS = 4096
"""For models the table does not know: the largest published minimum, so estimates never
promise a cache hit that a newer model's higher minimum would deny."""

_MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-3-7-sonnet": 1024,
    "claude-sonnet-4": 1024,
    "claude-sonnet-4-0": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-opus-4": 1024,
    "claude-opus-4-0": 1024,
    "claude-opus-4-1": 1024,
    "claude-sonnet-4-6": 2048,
    "claude-3-5-haiku": 2048,
    "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
}
_VERSION_SUFFIX = re.compile(r"-(\d{8}|latest)$")


def min_cache_tokens(model: str) -> int:
    """Shortest prefix the model caches; below it both cache counters stay at 0."""
    return _MIN_CACHE_TOKENS.get(_VERSION_SUFFIX.sub("", model), DEFAULT_MIN_CACHE_TOKENS)


# --- neutral request -> wire ------------------------------------------------------------------


def render_request(
    request: ModelRequest,
    *,
    stream: bool = False,
    max_tokens: int | None = None,
    previous_message_id: str | None = None,
) -> Body:
    """The Messages API body for ``request``; ``max_tokens=0`` makes a pre-warm call."""
    settings = request.settings
    control = ephemeral(settings.cache_ttl)
    system = [_text(b) for b in _system_blocks(request)]
    tools = [_tool(t) for t in request.tools]
    if system or tools:
        (system or tools)[-1]["cache_control"] = control
    # A top-level ``cache_control`` in ``extra`` (automatic caching) marks the last
    # block itself and takes one of the four slots: a fifth marker would be a 400.
    automatic = "cache_control" in settings.extra
    marks = message_breakpoints(request, _markable, last_block=not automatic)
    body: Body = {
        "model": request.model,
        "max_tokens": settings.max_tokens if max_tokens is None else max_tokens,
    }
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    marked = {message for message, _ in marks}
    body["messages"] = [
        {"role": m.role, "content": _content(m.content, i, marks, control)}
        if i in marked
        else _RENDERED.get(m, _unmarked)
        for i, m in enumerate(request.messages)
    ]
    body.update(_settings(settings))
    if stream:
        body["stream"] = True
    if previous_message_id is not None:
        body["diagnostics"] = {"previous_message_id": previous_message_id}
    body.update(settings.extra)
    return body


_RENDERED: SharedRenderings[Message, Body] = SharedRenderings()
"""Messages without a cache marker, rendered once for every request that sends them."""
_BLOCKS: SharedRenderings[ContentBlock, Body | None] = SharedRenderings()
"""Blocks, rendered once: a marked message (a child's last) copies only its marked blocks."""
_MARKED: dict[str, SharedRenderings[ContentBlock, Body]] = {
    "5m": SharedRenderings(),
    "1h": SharedRenderings(),
}
"""Marked blocks by TTL, rendered once too: the N children of one reply mark the family's
rules, so their last messages start with the very same objects (the emulator then knows
the head by identity, and nothing is copied per child)."""


def _unmarked(message: Message) -> Body:
    return {"role": message.role, "content": _content(message.content, -1, frozenset(), {})}


def can_prewarm(request: ModelRequest) -> bool:
    """``max_tokens: 0`` is refused with thinking on or a forced tool choice."""
    thinking = request.settings.thinking
    return (thinking is None or thinking.type == "disabled") and request.settings.tool_choice in (
        None,
        "auto",
        "none",
    )


def _system_blocks(request: ModelRequest) -> tuple[TextBlock, ...]:
    system = request.system
    blocks = (TextBlock(text=system),) if isinstance(system, str) else system
    return tuple(b for b in blocks if b.text)


def _tool(tool: ToolSpec) -> Body:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def _markable(block: ContentBlock) -> bool:
    """Thinking blocks and empty text cannot carry ``cache_control``."""
    return not isinstance(block, ThinkingBlock) and not (
        isinstance(block, TextBlock) and not block.text
    )


def _content(
    blocks: tuple[ContentBlock, ...], message: int, marks: frozenset[Position], control: Body
) -> list[JsonValue]:
    rendered = _wires(blocks)
    out: list[JsonValue] = list(rendered.wires)
    for at, index in marks:
        if at == message and (place := rendered.place(index)) is not None:
            wire = rendered.wires[place]
            # A message's last block comes once (a new turn, a child's directive); a marked
            # block before it (a fork family's rules) is shared by the siblings.
            last = index == len(blocks) - 1
            out[place] = (
                {**wire, "cache_control": control}
                if last
                else _marked(blocks[index], wire, control)
            )
    return out


def _marked(block: ContentBlock, unmarked: Body, control: Body) -> Body:
    """The block's wire form with ``control``, made once per block object and TTL."""
    by_ttl = _MARKED[str(control.get("ttl", "5m"))]
    return by_ttl.get(block, lambda _: {**unmarked, "cache_control": control})


@dataclass(frozen=True, slots=True)
class _Wires:
    """Blocks rendered, shared (never changed); blocks rendered as nothing are left out."""

    wires: tuple[Body, ...]
    places: tuple[int | None, ...] | None = None
    """Where each block landed in ``wires``; None when none was left out."""

    def place(self, index: int) -> int | None:
        return index if self.places is None else self.places[index]

    def plus(self, more: _Wires) -> _Wires:
        if self.places is None and more.places is None:
            return _Wires(self.wires + more.wires)
        shift = len(self.wires)
        mine = self.places or tuple(range(shift))
        theirs = more.places or tuple(range(len(more.wires)))
        moved = tuple(None if p is None else p + shift for p in theirs)
        return _Wires(self.wires + more.wires, mine + moved)


_HEADS: SharedHeads[ContentBlock, _Wires] = SharedHeads()
"""A long message's blocks but its last, rendered once: every child of a reply with N tool
calls ends with the same N placeholder results and the rules, then its own directive."""


def _wires(blocks: tuple[ContentBlock, ...]) -> _Wires:
    """``blocks`` rendered, a long tuple's head taken from ``_HEADS`` (O(1) in its length)."""
    return _HEADS.render(blocks, _render, _Wires.plus)


def _render(blocks: tuple[ContentBlock, ...]) -> _Wires:
    wires: list[Body] = []
    places: list[int | None] = []
    for block in blocks:
        wire = _BLOCKS.get(block, _block)
        places.append(None if wire is None else len(wires))
        if wire is not None:
            wires.append(wire)
    return _Wires(tuple(wires), None if len(wires) == len(blocks) else tuple(places))


def _block(block: ContentBlock) -> Body | None:
    """One content block; thinking without a signature (from another provider) is left out."""
    if isinstance(block, TextBlock):
        return _text(block)
    if isinstance(block, ImageBlock):
        return _image(block)
    if isinstance(block, ThinkingBlock):
        if block.redacted:
            return {"type": "redacted_thinking", "data": block.signature or block.thinking}
        if block.signature is None:
            return None
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    result: Body = {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": [_text(c) if isinstance(c, TextBlock) else _image(c) for c in block.content],
    }
    if block.is_error:
        result["is_error"] = True
    return result


def _text(block: TextBlock) -> Body:
    return {"type": "text", "text": block.text}


def _image(image: ImageBlock) -> Body:
    if image.data is not None:
        source: Body = {"type": "base64", "media_type": image.media_type, "data": image.data}
    else:
        source = {"type": "url", "url": image.url}
    return {"type": "image", "source": source}


def _settings(settings: ModelSettings) -> Body:
    out: Body = {}
    if (thinking := settings.thinking) is not None:
        config: Body = {"type": thinking.type}
        if thinking.type == "enabled":
            if thinking.budget_tokens is None:
                raise ConfigurationError(
                    "thinking type 'enabled' needs budget_tokens; or use type 'adaptive'"
                )
            config["budget_tokens"] = thinking.budget_tokens
        out["thinking"] = config
    if settings.tool_choice is not None:
        choice = settings.tool_choice
        out["tool_choice"] = (
            {"type": choice}
            if choice in ("auto", "any", "none")
            else {"type": "tool", "name": choice}
        )
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if settings.stop_sequences:
        out["stop_sequences"] = list(settings.stop_sequences)
    return out


# --- wire -> neutral response -----------------------------------------------------------------

_STOP_REASONS: dict[str, StopReason] = {
    **{reason: reason for reason in get_args(StopReason)},
    "model_context_window_exceeded": "max_tokens",
}


def parse_response(body: Mapping[str, JsonValue]) -> ModelResponse:
    """A Messages API response (or a stream folded into one) as a ``ModelResponse``."""
    content = tuple(b for raw in as_list(body.get("content")) if (b := _parse_block(as_dict(raw))))
    diagnostics = as_dict(body.get("diagnostics"))
    reason = diagnostics.get("cache_miss_reason")
    details: Body = {}
    if body.get("stop_sequence") is not None:
        details["stop_sequence"] = body["stop_sequence"]
    return ModelResponse(
        message=AssistantMessage(content=content),
        stop_reason=_stop_reason(body.get("stop_reason")),
        usage=parse_usage(body.get("usage")),
        model=as_str(body.get("model")),
        response_id=as_str(body.get("id")) or None,
        cache_diagnosis=reason if isinstance(reason, dict) else None,
        details=details,
    )


def parse_usage(usage: JsonValue) -> Usage:
    """Usage; cache writes are split by TTL, and writes without a split count as 5 minutes."""
    data = as_dict(usage)
    split = as_dict(data.get("cache_creation"))
    write_1h = as_int(split.get("ephemeral_1h_input_tokens"))
    write_5m = as_int(split.get("ephemeral_5m_input_tokens"))
    write_5m += max(0, as_int(data.get("cache_creation_input_tokens")) - write_5m - write_1h)
    return Usage(
        input_tokens=as_int(data.get("input_tokens")),
        output_tokens=as_int(data.get("output_tokens")),
        cache_read_tokens=as_int(data.get("cache_read_input_tokens")),
        cache_write_5m_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
        requests=1,
    )


def _parse_block(raw: Body) -> ContentBlock | None:
    kind = raw.get("type")
    if kind == "text":
        return TextBlock(text=as_str(raw.get("text")))
    if kind == "thinking":
        return ThinkingBlock(
            thinking=as_str(raw.get("thinking")), signature=as_str(raw.get("signature")) or None
        )
    if kind == "redacted_thinking":
        return ThinkingBlock(thinking="", signature=as_str(raw.get("data")), redacted=True)
    if kind == "tool_use":
        given = raw.get("input")
        arguments, raw_text = (
            parse_arguments(given) if isinstance(given, str) else (as_dict(given), None)
        )
        return ToolUseBlock(
            id=as_str(raw.get("id")),
            name=as_str(raw.get("name")),
            input=arguments,
            raw_arguments=raw_text,
        )
    return None


def _stop_reason(value: JsonValue) -> StopReason:
    return _STOP_REASONS.get(value, "end_turn") if isinstance(value, str) else "end_turn"


class AnthropicStream:
    """Folds Messages API stream events into one response; deltas are passed on as they come."""

    def __init__(self) -> None:
        self._message: Body = {}
        self._usage: Body = {}
        self._blocks: dict[int, Body] = {}
        self._stopped = False

    def feed(self, event: Mapping[str, JsonValue]) -> list[StreamEvent]:
        kind = event.get("type")
        index = as_int(event.get("index"))
        if kind == "message_start":
            self._message = dict(as_dict(event.get("message")))
            self._usage = dict(as_dict(self._message.get("usage")))
            return [ResponseStarted()]
        if kind == "content_block_start":
            block = dict(as_dict(event.get("content_block")))
            self._blocks[index] = block
            if block.get("type") == "tool_use":
                block["input"] = ""
                return [ToolUseStarted(id=as_str(block.get("id")), name=as_str(block.get("name")))]
        elif kind == "content_block_delta":
            return self._delta(self._blocks.setdefault(index, {}), as_dict(event.get("delta")))
        elif kind == "message_delta":
            self._message.update(as_dict(event.get("delta")))
            self._usage.update(
                {k: v for k, v in as_dict(event.get("usage")).items() if v is not None}
            )
        elif kind == "message_stop":
            self._stopped = True
        elif kind == "error":
            raise provider_error(PROVIDER, None, dict(event))
        return []

    def finish(self) -> ModelResponse:
        if not self._stopped:
            raise stream_cut(PROVIDER, "no message_stop event")
        content = [self._blocks[i] for i in sorted(self._blocks)]
        return parse_response({**self._message, "content": content, "usage": self._usage})

    @staticmethod
    def _delta(block: Body, delta: Body) -> list[StreamEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            text = as_str(delta.get("text"))
            block["text"] = as_str(block.get("text")) + text
            return [TextDelta(text)]
        if kind == "thinking_delta":
            text = as_str(delta.get("thinking"))
            block["thinking"] = as_str(block.get("thinking")) + text
            return [ThinkingDelta(text)]
        if kind == "signature_delta":
            block["signature"] = as_str(delta.get("signature"))
        elif kind == "input_json_delta":
            block["input"] = as_str(block.get("input")) + as_str(delta.get("partial_json"))
        return []


# --- the model ----------------------------------------------------------------------------------


class AnthropicModel(AdapterModel[Transport]):
    """A Claude model through ``anthropic.AsyncAnthropic``.

    ``diagnostics=True`` asks the API to explain cache misses against the
    response this history continues; the answer lands in
    ``ModelResponse.cache_diagnosis``. ``transport`` replaces the SDK (the
    emulator model uses it); without it, the API key is required up front.
    """

    def __init__(
        self,
        name: str,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        diagnostics: bool = False,
        transport: Transport | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        profile = ModelProfile(
            provider=PROVIDER,
            warmup="first_response_starts",
            supports_prewarm=True,
            min_cache_tokens=min_cache_tokens(name),
        )
        base_url = None if transport else ENDPOINT.custom_url(client.get("base_url"))
        transport = transport or stainless_transport(
            PROVIDER, "anthropic", "messages.create", ENDPOINT, client
        )
        super().__init__(name, profile, retry, transport, base_url)
        self._ids = ResponseIds() if diagnostics else None

    async def request(self, request: ModelRequest) -> ModelResponse:
        body = render_request(request, previous_message_id=self._previous(request))
        reply = await self._send(lambda: self._transport.send(body))
        return self._remember(request, parse_response(reply))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        body = render_request(request, stream=True, previous_message_id=self._previous(request))
        async for event in self._stream(lambda: self._transport.stream(body), AnthropicStream):
            if isinstance(event, ResponseComplete):
                self._remember(request, event.response)
            yield event

    def can_prewarm(self, request: ModelRequest) -> bool:
        return can_prewarm(request)

    async def prewarm(self, request: ModelRequest) -> Usage | None:
        """Write the cache up to the last block without generating (None where the API refuses)."""
        if not can_prewarm(request):
            return None
        body = render_request(request, max_tokens=0)
        reply = await self._send(lambda: self._transport.send(body))
        return parse_usage(reply.get("usage"))

    def _previous(self, request: ModelRequest) -> str | None:
        return self._ids.previous(request) if self._ids is not None else None

    def _remember(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        if self._ids is not None:
            self._ids.remember(request, response)
        return response


anthropic_model = from_spec(AnthropicModel)
"""``anthropic:<model>[@<base url>]``."""


__all__ = [
    "AnthropicModel",
    "AnthropicStream",
    "can_prewarm",
    "min_cache_tokens",
    "parse_response",
    "parse_usage",
    "render_request",
]
