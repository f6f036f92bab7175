"""OpenAI's Responses API on the official ``openai`` SDK (``client.responses.create``).

``render_request``, ``parse_response`` and ``ResponsesStream`` are pure and need
no SDK. ``openai:<model>`` strings pick the API by model family
(``default_api``): the Responses API, which OpenAI recommends, for the
families that have it (gpt-5*, gpt-4.1*, gpt-4o*, the o-series, codex), Chat
Completions for the rest (older models, audio and search previews).

Mapping notes:
- The system prompt is ``instructions``; tools are function tools with
  ``strict: false`` (the API would otherwise hold schemas to strict mode).
- A neutral user message becomes one ``function_call_output`` item per tool
  result (its images as ``input_image`` parts of the output), then one user
  message with its own text and images. No error flag: the result's text says it.
- An assistant message becomes, in order, its reasoning items, its text as an
  assistant message and its tool calls as ``function_call`` items.
- Reasoning items go back verbatim: a ``ThinkingBlock`` made from one holds
  the item as received (id, summary, ``encrypted_content``) in ``signature``,
  and thinking from other providers is left out.
- Two ways to send a history. Full input (the default): every request sends
  the whole conversation with ``store: false`` (and, for reasoning models,
  ``include: ["reasoning.encrypted_content"]``, so reasoning survives without
  server state). ``chain=True``: responses are stored and a request whose
  history continues a response this model received sends only what came
  after it, with ``previous_response_id``. Fork children share their parent's
  model, so a child's first request is the parent's last response id plus the
  child's own message (placeholders, rules, directive). Either way the server
  sees the same prompt, so the cache reads the same prefix.
- No stop sequences: the Responses API has none (use ``api="chat"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, Unpack

from .._spec import split_base_url
from ..errors import ConfigurationError, InvalidRequestError
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
from ..requests import ModelRequest
from ..usage import Usage
from ._adapter import AdapterModel
from ._cache import ResponseIds
from ._json import as_dict, as_int, as_list, as_str, compact, get_int, parse_arguments
from ._retry import DEFAULT_RETRY, RetryPolicy, provider_error, stream_cut
from ._shared import SharedHeads, SharedRenderings
from ._transport import Body, ClientOptions, Transport
from .base import (
    Model,
    ModelResponse,
    ResponseComplete,
    StopReason,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
)
from .openai import OPENAI, OpenAIModel, image_url, sdk_transport, tool_arguments

Api: TypeAlias = Literal["responses", "chat"]

_RESPONSES_FAMILIES = re.compile(r"(?:ft:)?(?:gpt-5|gpt-4\.1|gpt-4o|o\d|codex-|computer-use)")
_CHAT_ONLY = re.compile(r"audio|realtime|search-preview|transcribe|tts")
_REASONING = re.compile(r"(?:ft:)?(?:o\d|gpt-5(?!-chat)|codex-)")
ENCRYPTED_REASONING = "reasoning.encrypted_content"


def default_api(model: str) -> Api:
    """The API OpenAI recommends for a model: Responses for the families that have it."""
    if _RESPONSES_FAMILIES.match(model) and not _CHAT_ONLY.search(model):
        return "responses"
    return "chat"


def reasons(model: str) -> bool:
    """Reasoning models (o-series, gpt-5 but its chat variant, codex) return reasoning items."""
    return _REASONING.match(model) is not None


# --- neutral request -> wire ------------------------------------------------------------------


def render_request(
    request: ModelRequest,
    *,
    stream: bool = False,
    chain: bool = False,
    previous: tuple[str, int] | None = None,
) -> Body:
    """The Responses body for ``request``.

    ``chain`` asks the server to store the response. ``previous`` is (response id,
    index of the message after the one that response produced): the request then
    continues that stored response and sends only the messages from that index on.
    Without it the whole history is sent.
    """
    settings = request.settings
    body: Body = {"model": request.model}
    if system := request.system_text:
        body["instructions"] = system
    start = 0
    if previous is not None:
        body["previous_response_id"], start = previous
    body["input"] = render_items(request.messages[start:])
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
                "strict": False,
            }
            for t in request.tools
        ]
    body.update(_settings(request, chain=chain))
    if stream:
        body["stream"] = True
    body.update(settings.extra)
    return body


def _settings(request: ModelRequest, *, chain: bool) -> Body:
    settings = request.settings
    if settings.stop_sequences:
        raise ConfigurationError(
            "the OpenAI Responses API takes no stop sequences; "
            "use the Chat Completions API for this model (api='chat')"
        )
    out: Body = {}
    if settings.tool_choice is not None:
        out["tool_choice"] = _tool_choice(settings.tool_choice)
    out["max_output_tokens"] = settings.max_tokens
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if settings.thinking is not None and settings.thinking.type != "disabled":
        out["reasoning"] = {"summary": "auto"}
    if settings.cache_key is not None:
        out["prompt_cache_key"] = settings.cache_key
    out["store"] = chain
    if not chain and reasons(request.model):
        out["include"] = [ENCRYPTED_REASONING]
    return out


def _tool_choice(choice: str) -> JsonValue:
    """``any`` is ``required``; a tool's name forces that function."""
    if choice == "any":
        return "required"
    return choice if choice in ("auto", "none") else {"type": "function", "name": choice}


def render_items(messages: Sequence[Message]) -> list[JsonValue]:
    """Input items for a stretch of history; each message's items depend on it alone, so
    they are rendered once for every request that sends the message (``_ITEMS``)."""
    items: list[JsonValue] = []
    for message in messages:
        items += _ITEMS.get(message, _message_items)
    return items


def _message_items(message: Message) -> tuple[Body, ...]:
    if isinstance(message, UserMessage):
        return _user_items(message.content).items()
    return tuple(_assistant_items(message))


@dataclass(frozen=True, slots=True)
class _UserItems:
    """A user message's blocks rendered: tool outputs, and the parts of its user item."""

    outputs: tuple[Body, ...]
    parts: tuple[Body, ...]

    def plus(self, more: _UserItems) -> _UserItems:
        return _UserItems(self.outputs + more.outputs, self.parts + more.parts)

    def items(self) -> tuple[Body, ...]:
        if not self.parts:
            return self.outputs
        only_text = len(self.parts) == 1 and self.parts[0]["type"] == "input_text"
        content: JsonValue = self.parts[0]["text"] if only_text else list(self.parts)
        return (*self.outputs, {"role": "user", "content": content})


_ITEMS: SharedRenderings[Message, tuple[Body, ...]] = SharedRenderings()
"""Each message's items, rendered once: siblings and successive turns send the same objects."""
_USER_HEADS: SharedHeads[ContentBlock, _UserItems] = SharedHeads()
"""A long user message's blocks but its last, rendered once: every child of a reply with N
tool calls ends with the same N placeholder outputs and the rules, then its own directive."""


def _user_items(blocks: tuple[ContentBlock, ...]) -> _UserItems:
    """``blocks`` rendered, a long tuple's head taken from ``_USER_HEADS`` (O(1) in its length)."""
    return _USER_HEADS.render(blocks, _render_user, _UserItems.plus)


def _render_user(blocks: tuple[ContentBlock, ...]) -> _UserItems:
    outputs: list[Body] = []
    parts: list[Body] = []
    for block in blocks:
        if isinstance(block, ToolResultBlock):
            outputs.append(_tool_output(block))
        elif isinstance(block, TextBlock | ImageBlock):
            parts.append(_input_part(block))
    return _UserItems(tuple(outputs), tuple(parts))


def _tool_output(block: ToolResultBlock) -> Body:
    images = any(isinstance(c, ImageBlock) for c in block.content)
    output: JsonValue = [_input_part(c) for c in block.content] if images else block.text
    return {"type": "function_call_output", "call_id": block.tool_use_id, "output": output}


def _input_part(block: TextBlock | ImageBlock) -> Body:
    if isinstance(block, TextBlock):
        return {"type": "input_text", "text": block.text}
    return {"type": "input_image", "image_url": image_url(block), "detail": "auto"}


def _assistant_items(message: AssistantMessage) -> list[Body]:
    out: list[Body] = []
    for block in message.content:
        if isinstance(block, ThinkingBlock) and (item := reasoning_item(block)) is not None:
            out.append(item)
    text = message.text
    if text:
        out.append({"role": "assistant", "content": text})
    out += [
        {
            "type": "function_call",
            "call_id": b.id,
            "name": b.name,
            "arguments": tool_arguments(b),
        }
        for b in message.tool_uses
    ]
    return out


def reasoning_item(block: ThinkingBlock) -> Body | None:
    """The reasoning item a thinking block came from, verbatim; None if it came from elsewhere."""
    try:
        item = json.loads(block.signature or "")
    except ValueError:
        return None
    return item if isinstance(item, dict) and item.get("type") == "reasoning" else None


# --- wire -> neutral response -----------------------------------------------------------------


def parse_response(body: Mapping[str, JsonValue]) -> ModelResponse:
    """A Responses ``response`` object (or a stream's final one) as a ``ModelResponse``."""
    content: list[ContentBlock] = []
    refused = False
    for raw in as_list(body.get("output")):
        item = as_dict(raw)
        kind = as_str(item.get("type"))
        if kind == "reasoning":
            summary = "".join(as_str(as_dict(s).get("text")) for s in as_list(item.get("summary")))
            content.append(ThinkingBlock(thinking=summary, signature=compact(item)))
        elif kind == "message":
            for part in map(as_dict, as_list(item.get("content"))):
                refused = refused or part.get("type") == "refusal"
                if text := as_str(part.get("text")) or as_str(part.get("refusal")):
                    content.append(TextBlock(text=text))
        elif kind == "function_call":
            arguments, raw_text = parse_arguments(as_str(item.get("arguments")))
            content.append(
                ToolUseBlock(
                    id=as_str(item.get("call_id")),
                    name=as_str(item.get("name")),
                    input=arguments,
                    raw_arguments=raw_text,
                )
            )
    message = AssistantMessage(content=tuple(content))
    return ModelResponse(
        message=message,
        stop_reason=_stop_reason(body, message, refused),
        usage=parse_usage(body),
        model=as_str(body.get("model")),
        response_id=as_str(body.get("id")) or None,
    )


def _stop_reason(
    body: Mapping[str, JsonValue], message: AssistantMessage, refused: bool
) -> StopReason:
    reason = as_str(as_dict(body.get("incomplete_details")).get("reason"))
    if reason == "max_output_tokens":
        return "max_tokens"
    if refused or reason == "content_filter":
        return "refusal"
    return "tool_use" if message.tool_uses else "end_turn"


def parse_usage(body: Mapping[str, JsonValue]) -> Usage:
    """``input_tokens`` includes the cached (read) and newly written tokens."""
    usage = as_dict(body.get("usage"))
    read = get_int(usage, "input_tokens_details", "cached_tokens")
    written = get_int(usage, "input_tokens_details", "cache_write_tokens")
    return Usage(
        input_tokens=max(0, as_int(usage.get("input_tokens")) - read - written),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_5m_tokens=written,
        requests=1,
    )


class ResponsesStream:
    """Folds Responses stream events: deltas are passed on, the final response is parsed."""

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._final: Mapping[str, JsonValue] | None = None

    def feed(self, event: Mapping[str, JsonValue]) -> list[StreamEvent]:
        kind = as_str(event.get("type"))
        if kind == "error":
            raise provider_error(self._provider, None, {"error": dict(event)})
        if kind == "response.failed":
            error = as_dict(as_dict(event.get("response")).get("error"))
            raise provider_error(self._provider, None, {"error": error})
        if kind in ("response.completed", "response.incomplete"):
            self._final = as_dict(event.get("response"))
        if kind == "response.output_text.delta":
            return [TextDelta(as_str(event.get("delta")))]
        if kind == "response.reasoning_summary_text.delta":
            return [ThinkingDelta(as_str(event.get("delta")))]
        item = as_dict(event.get("item"))
        if kind == "response.output_item.added" and item.get("type") == "function_call":
            return [ToolUseStarted(id=as_str(item.get("call_id")), name=as_str(item.get("name")))]
        return []

    def finish(self) -> ModelResponse:
        if self._final is None:
            raise stream_cut(self._provider, "no response.completed")
        return parse_response(self._final)


# --- the model ----------------------------------------------------------------------------------


class OpenAIResponsesModel(AdapterModel[Transport]):
    """An OpenAI model on the Responses API, through ``openai.AsyncOpenAI``.

    ``chain=True`` stores responses and sends ``previous_response_id`` with only the
    new part of a history (see the module notes); a chained request the API refuses
    is sent once more in full, since the stored response may be gone (expired,
    deleted, another project's). The key and base URL come as for ``OpenAIModel``;
    ``transport`` replaces the SDK (the emulator model uses it).
    """

    def __init__(
        self,
        name: str,
        *,
        chain: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        transport: Transport | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        transport, base_url = sdk_transport(OPENAI, "responses.create", transport, client)
        super().__init__(name, OPENAI.profile(), retry, transport, base_url)
        self.chain = chain
        self._ids = ResponseIds()

    async def request(self, request: ModelRequest) -> ModelResponse:
        previous = self._previous(request)
        try:
            response = await self._request(request, previous)
        except InvalidRequestError:
            if previous is None:
                raise
            response = await self._request(request, None)  # the stored response may be gone
        return self._remember(request, response)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        previous = self._previous(request)
        try:
            async for event in self._events(request, previous):
                yield event
        except InvalidRequestError:  # refused before any output: sent again, in full
            if previous is None:
                raise
            async for event in self._events(request, None):
                yield event

    async def _request(
        self, request: ModelRequest, previous: tuple[str, int] | None
    ) -> ModelResponse:
        body = render_request(request, chain=self.chain, previous=previous)
        return parse_response(await self._send(lambda: self._transport.send(body)))

    async def _events(
        self, request: ModelRequest, previous: tuple[str, int] | None
    ) -> AsyncIterator[StreamEvent]:
        body = render_request(request, stream=True, chain=self.chain, previous=previous)
        async for event in self._stream(
            lambda: self._transport.stream(body), lambda: ResponsesStream(OPENAI.provider)
        ):
            if isinstance(event, ResponseComplete):
                self._remember(request, event.response)
            yield event

    def _previous(self, request: ModelRequest) -> tuple[str, int] | None:
        """The stored response this history continues, and where the new part starts."""
        if not self.chain:
            return None
        found = self._ids.previous(request)
        if found is None:
            return None
        last = max(i for i, m in enumerate(request.messages) if m.role == "assistant")
        return found, last + 1

    def _remember(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        if self.chain:
            self._ids.remember(request, response)
        return response


def openai_model(name: str, api: Api | None = None) -> Model:
    """``openai:<model>[@<base url>]`` on the API ``default_api`` picks (or ``api``)."""
    model, url = split_base_url(name)
    if (api or default_api(model)) == "responses":
        return OpenAIResponsesModel(model, base_url=url)
    return OpenAIModel(model, base_url=url)


__all__ = [
    "Api",
    "OpenAIResponsesModel",
    "ResponsesStream",
    "default_api",
    "openai_model",
    "parse_response",
    "parse_usage",
    "reasoning_item",
    "render_items",
    "render_request",
]
