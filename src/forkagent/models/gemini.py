"""Google Gemini (``generateContent``) on the official ``google-genai`` SDK.

``render_request``, ``render_cache``, ``parse_response`` and ``GeminiStream``
are pure and need no SDK; they speak the REST JSON (camelCase), which the SDK
transport turns into its types and back.

Mapping notes:
- Gemini wants strict user/model turns: consecutive neutral messages of one
  role are merged into one content. In a user turn the function responses come
  first, then images returned by tools, then the message's own text and images.
- A function response names its function: the name is taken from the call with
  the same id earlier in the history. Calls without an id get
  ``<responseId>_<n>``.
- A thought signature on a part that is not itself a thought (Gemini puts them
  on function calls) is kept as an empty ``ThinkingBlock`` right before the
  block it belongs to, and put back on that part when rendering.
- Explicit caching: a ``CachedContent`` holds system, tools and the contents of
  the shared prefix; a request that uses it sends only the rest, with
  ``cachedContent`` and no ``systemInstruction``/``tools``/``toolConfig``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Protocol, Unpack

from pydantic import BaseModel

from ..errors import InvalidRequestError
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
)
from ..requests import ModelRequest, ModelSettings, canonical_json
from ..usage import Usage
from ._adapter import AdapterModel
from ._json import as_dict, as_list, as_str, get_int
from ._retry import DEFAULT_RETRY, RetryPolicy, provider_error, stream_cut
from ._shared import SharedHeads, SharedRenderings
from ._transport import (
    DEFAULT_TIMEOUT,
    Body,
    ClientOptions,
    Endpoint,
    SdkErrors,
    from_spec,
    missing_sdk,
)
from .base import (
    ModelProfile,
    ModelResponse,
    StopReason,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
)

if TYPE_CHECKING:
    from google.genai import types as gtypes

PROVIDER = "gemini"
ENDPOINT = Endpoint("Gemini", ("GOOGLE_API_KEY", "GEMINI_API_KEY"), "GOOGLE_GEMINI_BASE_URL")
"""The SDK's own order: ``GOOGLE_API_KEY`` wins when both are set."""


def min_cache_tokens(model: str) -> int:
    """Google's table: 4096 for the Pro models, 1024 for Flash and the rest."""
    return 4096 if "pro" in model else 1024


# --- neutral request -> wire ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CachedPrefix:
    """A ``CachedContent`` holding system, tools and the first ``contents`` wire contents."""

    name: str
    contents: int


@dataclass(slots=True)
class _Content:
    role: str
    parts: list[Body]
    last_message: int
    """Index of the last neutral message merged into this content."""


def render_request(request: ModelRequest, *, cached: CachedPrefix | None = None) -> Body:
    """The ``generateContent`` body (the model goes in the URL, not here)."""
    contents = _contents(request)
    body: Body = {}
    if cached is None:
        body.update(_prefix(request))
    body["contents"] = [_wire(c) for c in contents[cached.contents if cached else 0 :]]
    if config := _generation_config(request.settings):
        body["generationConfig"] = config
    if cached is not None:
        body["cachedContent"] = cached.name
    body.update(request.settings.extra)
    return body


def render_cache(request: ModelRequest, contents: int) -> Body:
    """The ``cachedContents`` body for system, tools and the first ``contents`` contents."""
    body: Body = {"model": f"models/{request.model}"}
    body.update(_prefix(request))
    body["contents"] = [_wire(c) for c in _contents(request)[:contents]]
    body["ttl"] = "3600s" if request.settings.cache_ttl == "1h" else "300s"
    return body


def shared_contents(request: ModelRequest) -> int:
    """How many wire contents lie wholly inside the prefix shared with sibling forks.

    A content that reaches past the end of the shared prefix is left out, so the
    cached part and the request part each keep user/model alternation.
    """
    end = request.shared_prefix_end
    if end is None or end.message >= len(request.messages):
        return 0
    whole = end.block >= len(request.messages[end.message].content) - 1
    limit = end.message if whole else end.message - 1
    count = 0
    for content in _contents(request):
        if content.last_message > limit:
            break
        count += 1
    return count


def _prefix(request: ModelRequest) -> Body:
    out: Body = {}
    system = request.system
    texts = [system] if isinstance(system, str) else [b.text for b in system]
    if parts := [{"text": t} for t in texts if t]:
        out["systemInstruction"] = {"parts": parts}
    if request.tools:
        declarations: list[JsonValue] = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.input_schema}
            for t in request.tools
        ]
        out["tools"] = [{"functionDeclarations": declarations}]
    if (config := _tool_config(request.settings.tool_choice)) is not None:
        out["toolConfig"] = config
    return out


def _tool_config(choice: str | None) -> Body | None:
    if choice is None:
        return None
    if choice in ("auto", "any", "none"):
        return {"functionCallingConfig": {"mode": choice.upper()}}
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice]}}


def _generation_config(settings: ModelSettings) -> Body:
    config: Body = {"maxOutputTokens": settings.max_tokens}
    if settings.temperature is not None:
        config["temperature"] = settings.temperature
    if settings.top_p is not None:
        config["topP"] = settings.top_p
    if settings.stop_sequences:
        config["stopSequences"] = list(settings.stop_sequences)
    if (thinking := settings.thinking) is not None:
        if thinking.type == "disabled":
            config["thinkingConfig"] = {"thinkingBudget": 0}
        else:
            budget = thinking.budget_tokens if thinking.type == "enabled" else None
            config["thinkingConfig"] = {
                "includeThoughts": True,
                "thinkingBudget": -1 if budget is None else budget,
            }
    return config


def _contents(request: ModelRequest) -> list[_Content]:
    names: dict[str, str] = {}
    out: list[_Content] = []
    for index, message in enumerate(request.messages):
        parts = _parts(message, names)
        if not parts:
            continue
        role = "user" if message.role == "user" else "model"
        if out and out[-1].role == role:
            out[-1].parts.extend(parts)
            out[-1].last_message = index
        else:
            out.append(_Content(role, parts, index))
    return out


def _wire(content: _Content) -> Body:
    return {"role": content.role, "parts": content.parts}


def _parts(message: Message, names: dict[str, str]) -> list[Body]:
    """The message's parts (a new list: merging turns extends it); records the names of the
    calls an assistant message makes. Renderings are shared between requests."""
    if isinstance(message, AssistantMessage):
        parts, defined = _MODEL_PARTS.get(message, _model_parts_of)
        names.update(defined)
        return list(parts)
    rendered = _USER_PARTS.get(message, lambda m: _user_parts(m.content, names))
    if not rendered.named_as(names):  # rendered after other calls of those ids: again
        rendered = _user_parts(message.content, names)
    return rendered.parts()


@dataclass(frozen=True, slots=True)
class _UserParts:
    """A user message's blocks rendered (shared, never changed), in Gemini's order: function
    responses, the images tools returned, then the message's own text and images."""

    responses: tuple[Body, ...]
    images: tuple[Body, ...]
    own: tuple[Body, ...]
    ids: tuple[str, ...]
    """The tool results' call ids..."""
    names: tuple[str, ...]
    """...and the function names their responses were rendered with."""

    def named_as(self, names: Mapping[str, str]) -> bool:
        """Whether ``names`` gives every call id the name it was rendered with (in C)."""
        return tuple(map(names.get, self.ids, repeat(""))) == self.names

    def plus(self, more: _UserParts) -> _UserParts:
        return _UserParts(
            self.responses + more.responses,
            self.images + more.images,
            self.own + more.own,
            self.ids + more.ids,
            self.names + more.names,
        )

    def parts(self) -> list[Body]:
        return [*self.responses, *self.images, *self.own]


def _model_parts_of(
    message: AssistantMessage,
) -> tuple[tuple[Body, ...], tuple[tuple[str, str], ...]]:
    defined: dict[str, str] = {}
    parts = _model_parts(message.content, defined)
    return tuple(parts), tuple(defined.items())


_MODEL_PARTS: SharedRenderings[
    AssistantMessage, tuple[tuple[Body, ...], tuple[tuple[str, str], ...]]
] = SharedRenderings()
"""An assistant message's parts and the calls it names, rendered once per message object."""
_USER_PARTS: SharedRenderings[Message, _UserParts] = SharedRenderings()
"""A user message's parts, rendered once per message object (and again if its calls' names
differ)."""
_USER_HEADS: SharedHeads[ContentBlock, _UserParts] = SharedHeads()
"""A long user message's blocks but its last, rendered once: every child of a reply with N
tool calls ends with the same N placeholder results and the rules, then its directive."""


def _user_parts(blocks: tuple[ContentBlock, ...], names: Mapping[str, str]) -> _UserParts:
    """``blocks`` rendered, a long tuple's head from ``_USER_HEADS`` (O(1) Python work in N)."""
    return _USER_HEADS.render(
        blocks,
        lambda b: _render_user(b, names),
        _UserParts.plus,
        fits=lambda head: head.named_as(names),
    )


def _render_user(blocks: tuple[ContentBlock, ...], names: Mapping[str, str]) -> _UserParts:
    responses: list[Body] = []
    images: list[Body] = []
    own: list[Body] = []
    ids: list[str] = []
    for block in blocks:
        if isinstance(block, ToolResultBlock):
            ids.append(block.tool_use_id)
            responses.append(_function_response(block, names.get(block.tool_use_id, "")))
            images += [_image(c) for c in block.content if isinstance(c, ImageBlock)]
        elif isinstance(block, TextBlock):
            own.append({"text": block.text})
        elif isinstance(block, ImageBlock):
            own.append(_image(block))
    used = tuple(names.get(i, "") for i in ids)
    return _UserParts(tuple(responses), tuple(images), tuple(own), tuple(ids), used)


def _model_parts(blocks: tuple[ContentBlock, ...], names: dict[str, str]) -> list[Body]:
    out: list[Body] = []
    signature: str | None = None
    for block in blocks:
        part: Body
        if isinstance(block, ThinkingBlock):
            if block.redacted:
                continue
            if not block.thinking:
                signature = block.signature
                continue
            part = {"text": block.thinking, "thought": True}
            signature = block.signature
        elif isinstance(block, TextBlock):
            part = {"text": block.text}
        elif isinstance(block, ToolUseBlock):
            names[block.id] = block.name
            part = {"functionCall": {"id": block.id, "name": block.name, "args": block.input}}
        else:
            continue
        if signature is not None:
            part["thoughtSignature"] = signature
            signature = None
        out.append(part)
    if signature is not None:
        out.append({"text": "", "thoughtSignature": signature})
    return out


def _function_response(block: ToolResultBlock, name: str) -> Body:
    key = "error" if block.is_error else "output"
    return {
        "functionResponse": {"id": block.tool_use_id, "name": name, "response": {key: block.text}}
    }


def _image(image: ImageBlock) -> Body:
    if image.data is not None:
        return {"inlineData": {"mimeType": image.media_type, "data": image.data}}
    return {"fileData": {"mimeType": image.media_type, "fileUri": image.url}}


# --- wire -> neutral response -----------------------------------------------------------------

_FINISH_REASONS: dict[str, StopReason] = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "refusal",
    "RECITATION": "refusal",
    "BLOCKLIST": "refusal",
    "PROHIBITED_CONTENT": "refusal",
    "SPII": "refusal",
    "MALFORMED_FUNCTION_CALL": "error",
}


def parse_response(body: Mapping[str, JsonValue]) -> ModelResponse:
    """A ``generateContent`` response (or a stream folded into one) as a ``ModelResponse``."""
    candidate = as_dict(next(iter(as_list(body.get("candidates"))), None))
    response_id = as_str(body.get("responseId"))
    blocks: list[ContentBlock] = []
    calls = 0
    for raw in as_list(as_dict(candidate.get("content")).get("parts")):
        part = as_dict(raw)
        if part.get("functionCall") is not None:
            call = as_dict(part["functionCall"])
            fallback = f"{response_id or 'call'}_{calls}"
            calls += 1
            block: ContentBlock | None = ToolUseBlock(
                id=as_str(call.get("id")) or fallback,
                name=as_str(call.get("name")),
                input=as_dict(call.get("args")),
            )
        elif part.get("thought"):
            blocks.append(_thought(part))
            continue
        elif part.get("text"):
            block = TextBlock(text=as_str(part["text"]))
        else:
            block = None
        if signature := as_str(part.get("thoughtSignature")):
            blocks.append(ThinkingBlock(thinking="", signature=signature))
        if block is not None:
            blocks.append(block)
    stop = _FINISH_REASONS.get(as_str(candidate.get("finishReason")), "end_turn")
    return ModelResponse(
        message=AssistantMessage(content=tuple(blocks)),
        stop_reason="tool_use" if calls and stop == "end_turn" else stop,
        usage=parse_usage(body),
        model=as_str(body.get("modelVersion")),
        response_id=response_id or None,
    )


def _thought(part: Body) -> ThinkingBlock:
    return ThinkingBlock(
        thinking=as_str(part.get("text")), signature=as_str(part.get("thoughtSignature")) or None
    )


def parse_usage(body: Mapping[str, JsonValue]) -> Usage:
    """``promptTokenCount`` includes the cached tokens; thoughts are billed as output."""
    prompt = get_int(body, "usageMetadata", "promptTokenCount")
    prompt += get_int(body, "usageMetadata", "toolUsePromptTokenCount")
    cached = get_int(body, "usageMetadata", "cachedContentTokenCount")
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=get_int(body, "usageMetadata", "candidatesTokenCount")
        + get_int(body, "usageMetadata", "thoughtsTokenCount"),
        cache_read_tokens=cached,
        requests=1,
    )


class GeminiStream:
    """Folds ``streamGenerateContent`` chunks into one response; deltas pass on as they come."""

    def __init__(self) -> None:
        self._head: Body = {}
        self._parts: list[Body] = []
        self._finish: str | None = None
        self._calls = 0

    def feed(self, event: Mapping[str, JsonValue]) -> list[StreamEvent]:
        if "error" in event:
            raise provider_error(PROVIDER, None, dict(event))
        for key in ("responseId", "modelVersion", "usageMetadata"):
            if event.get(key) is not None:
                self._head[key] = event[key]
        candidate = as_dict(next(iter(as_list(event.get("candidates"))), None))
        if finish := as_str(candidate.get("finishReason")):
            self._finish = finish
        out: list[StreamEvent] = []
        for raw in as_list(as_dict(candidate.get("content")).get("parts")):
            out += self._add(dict(as_dict(raw)))
        return out

    def finish(self) -> ModelResponse:
        if self._finish is None:
            raise stream_cut(PROVIDER, "no finishReason")
        candidate: Body = {"content": {"parts": self._parts}, "finishReason": self._finish}
        return parse_response({**self._head, "candidates": [candidate]})

    def _add(self, part: Body) -> list[StreamEvent]:
        if part.get("functionCall") is not None:
            self._parts.append(part)
            call = as_dict(part["functionCall"])
            fallback = f"{as_str(self._head.get('responseId')) or 'call'}_{self._calls}"
            self._calls += 1
            return [ToolUseStarted(as_str(call.get("id")) or fallback, as_str(call.get("name")))]
        text = as_str(part.get("text"))
        last = self._parts[-1] if self._parts else None
        if (
            last is not None
            and "text" in last
            and bool(last.get("thought")) == bool(part.get("thought"))
            and "thoughtSignature" not in last
        ):
            last["text"] = as_str(last["text"]) + text
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
        else:
            self._parts.append(part)
        if not text:
            return []
        return [ThinkingDelta(text) if part.get("thought") else TextDelta(text)]


# --- transport and model ------------------------------------------------------------------------


class GeminiTransport(Protocol):
    """Carries Gemini REST bodies: generation, its stream, and cache creation."""

    async def generate(self, model: str, body: Body) -> Body:
        """The ``generateContent`` response."""

    def stream(self, model: str, body: Body) -> AsyncGenerator[Body, None]:
        """The ``streamGenerateContent`` chunks."""

    async def create_cache(self, body: Body) -> Body:
        """The created ``CachedContent`` (its ``name`` at least)."""

    async def aclose(self) -> None:
        """Release connections."""


@dataclass(slots=True)
class _CacheEntry:
    prefix: CachedPrefix | None
    """None: the server would not cache this prefix (too short, say); send it whole."""
    expires: float


class GeminiModel(AdapterModel[GeminiTransport]):
    """A Gemini model through ``google.genai.Client``.

    ``explicit_cache=True`` makes one ``CachedContent`` per distinct shared
    prefix (a family of forks) and sends each member only what follows it.
    Without it, Gemini's implicit caching applies.
    """

    def __init__(
        self,
        name: str,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        explicit_cache: bool = False,
        transport: GeminiTransport | None = None,
        **client: Unpack[ClientOptions],
    ) -> None:
        profile = ModelProfile(
            provider=PROVIDER,
            history_style="alternating",
            # An explicit cache exists before any member of the family is sent.
            warmup="none" if explicit_cache else "first_response_ends",
            min_cache_tokens=min_cache_tokens(name),
        )
        base_url = None if transport else ENDPOINT.custom_url(client.get("base_url"))
        super().__init__(name, profile, retry, transport or _SdkTransport(client), base_url)
        self._explicit = explicit_cache
        self._caches: dict[str, _CacheEntry] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def request(self, request: ModelRequest) -> ModelResponse:
        body = await self._body(request)
        return parse_response(await self._send(lambda: self._transport.generate(self._name, body)))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        body = await self._body(request)
        async for event in self._stream(
            lambda: self._transport.stream(self._name, body), GeminiStream
        ):
            yield event

    async def _body(self, request: ModelRequest) -> Body:
        count = shared_contents(request) if self._explicit else 0
        if not count:
            return render_request(request)
        return render_request(request, cached=await self._cached(request, count))

    async def _cached(self, request: ModelRequest, count: int) -> CachedPrefix | None:
        """The family's cache, made by the first member that needs it; siblings wait for it."""
        body = render_cache(request, count)
        key = hashlib.sha256(canonical_json(body)).hexdigest()
        async with self._locks.setdefault(key, asyncio.Lock()):
            entry = self._caches.get(key)
            if entry is None or entry.expires <= time.monotonic():
                self._forget_expired()
                entry = await self._create(body, count)
                self._caches[key] = entry
        return entry.prefix

    def _forget_expired(self) -> None:
        """Drop families whose cache has run out, so a long run does not pile them up."""
        now = time.monotonic()
        for key in [k for k, e in self._caches.items() if e.expires <= now]:
            del self._caches[key]
            if not self._locks[key].locked():
                del self._locks[key]

    async def _create(self, body: Body, count: int) -> _CacheEntry:
        lifetime = float(as_str(body["ttl"]).rstrip("s"))
        expires = time.monotonic() + lifetime * 0.9
        try:
            created = await self._send(lambda: self._transport.create_cache(body))
        except InvalidRequestError:
            return _CacheEntry(None, expires)
        return _CacheEntry(CachedPrefix(as_str(created.get("name")), count), expires)


_CONFIG_FIELDS = ("systemInstruction", "tools", "toolConfig", "cachedContent", "safetySettings")


class _SdkTransport:
    """REST bodies through ``google.genai``: validated into its types, answers dumped back.

    Validating from JSON (not from dicts) makes the SDK decode base64 fields
    such as thought signatures and image data instead of re-encoding them.
    """

    def __init__(self, options: ClientOptions) -> None:
        key = ENDPOINT.key(options.get("api_key"))
        try:
            import httpx2
            from google import genai
            from google.genai import errors, types
        except ImportError as error:
            raise missing_sdk("google-genai", "gemini") from error
        http = types.HttpOptions(
            base_url=ENDPOINT.base_url(options.get("base_url")),
            api_version="v1beta",
            timeout=int(options.get("timeout", DEFAULT_TIMEOUT) * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
            httpx_async_client=options.get("http_client"),
        )
        self._client = genai.Client(api_key=key, http_options=http).aio
        self._errors = SdkErrors(
            provider=PROVIDER,
            key_hint=ENDPOINT.key_hint,
            status_error=errors.APIError,
            connection_errors=(httpx2.TransportError,),
            status_field="code",
            body_field="details",
        )

    async def generate(self, model: str, body: Body) -> Body:
        contents, config = _sdk_request(body)
        with self._errors.translated():
            reply = await self._client.models.generate_content(
                model=model, contents=contents, config=config
            )
            return _dump(reply)

    async def stream(self, model: str, body: Body) -> AsyncGenerator[Body, None]:
        contents, config = _sdk_request(body)
        with self._errors.translated():
            chunks = await self._client.models.generate_content_stream(
                model=model, contents=contents, config=config
            )
            async for chunk in chunks:
                yield _dump(chunk)

    async def create_cache(self, body: Body) -> Body:
        from google.genai import types

        config = types.CreateCachedContentConfig.model_validate_json(
            _json({k: v for k, v in body.items() if k != "model"})
        )
        with self._errors.translated():
            created = await self._client.caches.create(model=as_str(body["model"]), config=config)
            return _dump(created)

    async def aclose(self) -> None:
        await self._client.aclose()


def _sdk_request(body: Body) -> tuple[list[gtypes.Content], gtypes.GenerateContentConfig]:
    from google.genai import types

    contents = [types.Content.model_validate_json(_json(c)) for c in as_list(body.get("contents"))]
    config: Body = {k: body[k] for k in _CONFIG_FIELDS if k in body}
    config.update(as_dict(body.get("generationConfig")))
    config["automaticFunctionCalling"] = {"disable": True}
    handled = {*_CONFIG_FIELDS, "contents", "generationConfig"}
    if rest := {k: v for k, v in body.items() if k not in handled}:
        config["httpOptions"] = {"extraBody": rest}
    return contents, types.GenerateContentConfig.model_validate_json(_json(config))


def _json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def _dump(model: BaseModel) -> Body:
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("sdkHttpResponse", None)
    return data


gemini_model = from_spec(GeminiModel)
"""``gemini:<model>[@<base url>]``."""


__all__ = [
    "CachedPrefix",
    "GeminiModel",
    "GeminiStream",
    "GeminiTransport",
    "min_cache_tokens",
    "parse_response",
    "parse_usage",
    "render_cache",
    "render_request",
    "shared_contents",
]
