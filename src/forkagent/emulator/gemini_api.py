"""Gemini ``generateContent`` (v1beta, the Developer API as google-genai sends it).

Implicit prefix caching from the model's minimum, explicit ``cachedContents``
(model + system + tools + contents, used by name), and the strict turn rules:
user and model alternate, and a function call is answered by as many function
responses in the next user turn.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import gemini_rules, tokens
from .cache import CacheResult, Layer, PrefixCache, PrefixRules, Segment
from .catalog import Catalog
from .errors import ApiError, ErrorKind, invalid
from .log import BreakpointOutcome
from .memo import one_request
from .policies import EmulatedRequest
from .profiles import CacheSettings, gemini_min_tokens
from .timing import Clock
from .wire import Call, Json, Output, SseEvent, Turn, conversation_key, dumps, optional

IMPLICIT_UNIT = 64
_STATUS: Mapping[ErrorKind, str] = {
    "invalid_request": "INVALID_ARGUMENT",
    "authentication": "UNAUTHENTICATED",
    "not_found": "NOT_FOUND",
    "rate_limit": "RESOURCE_EXHAUSTED",
    "server": "INTERNAL",
    "overloaded": "UNAVAILABLE",
}
_FINISH = {"end": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS", "stop_sequence": "STOP"}
_RESERVED_WITH_CACHE = ("systemInstruction", "tools", "toolConfig")


def error_status(error: ApiError) -> int:
    return 503 if error.kind == "overloaded" else error.status


def error_body(error: ApiError) -> Json:
    status = error_status(error)
    return {"error": {"code": status, "message": error.message, "status": _STATUS[error.kind]}}


@dataclass(frozen=True, slots=True)
class _CachedContent:
    name: str
    model: str
    display_name: str
    segments: tuple[Segment, ...]
    created: float
    """Wall-clock seconds, for the timestamps the API shows."""
    expires_at: float
    """On the emulator's clock."""
    lifetime: float

    @property
    def tokens(self) -> int:
        return sum(len(s.tokens) for s in self.segments)

    def to_json(self) -> Json:
        created = _timestamp(self.created)
        return {
            "name": self.name,
            "model": self.model,
            "displayName": self.display_name,
            "createTime": created,
            "updateTime": created,
            "expireTime": _timestamp(self.created + self.lifetime),
            "usageMetadata": {"totalTokenCount": self.tokens},
        }


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class GeminiApi:
    """State of the Gemini routes: the implicit cache and the named caches."""

    def __init__(
        self, prefixes: PrefixCache, settings: CacheSettings, clock: Clock, catalog: Catalog
    ) -> None:
        self.catalog = catalog
        self.prefixes = prefixes
        self.settings = settings
        self.clock = clock
        self._caches: dict[str, _CachedContent] = {}
        self._names = itertools.count(1)
        self._lock = threading.Lock()

    def parse(self, call: Call, *, stream: bool) -> GeminiTurn:
        return GeminiTurn(self, _camel_call(call), stream=stream)

    def count_tokens(self, call: Call) -> Json:
        call = _camel_call(call)
        if not self.catalog.lenient:
            gemini_rules.check_count(call.body, _model(call), self.catalog)
        request = call.body.get("generateContentRequest") or call.body
        cached = self.cache_for(request, _model(call))
        segments = _segments(request)
        total = sum(len(s.tokens) for s in segments) + (cached.tokens if cached else 0)
        return {"totalTokens": total, "cachedContentTokenCount": cached.tokens if cached else 0}

    def create_cache(self, call: Call) -> Json:
        body = _camel_call(call).body
        model = _bare_model(str(body.get("model") or ""))
        if not model:
            raise invalid("model: Field required")
        contents = optional(body, "contents", list) or []
        _check_turns(contents)
        segments = tuple(_segments(body))
        total = sum(len(s.tokens) for s in segments)
        minimum = gemini_min_tokens(model)
        if total < minimum:
            raise invalid(
                f"Cached content is too small. total_token_count={total}, "
                f"min_total_token_count={minimum}"
            )
        lifetime = _lifetime(body, self.settings.gemini_explicit_ttl)
        name = f"cachedContents/emu{next(self._names):06d}"
        entry = _CachedContent(
            name=name,
            model=f"models/{model}",
            display_name=str(body.get("displayName") or ""),
            segments=segments,
            created=time.time(),
            expires_at=self.clock() + lifetime,
            lifetime=lifetime,
        )
        with self._lock:
            self._caches[name] = entry
        return entry.to_json()

    def get_cache(self, name: str) -> Json:
        return self._lookup(name).to_json()

    def list_caches(self) -> Json:
        with self._lock:
            names = list(self._caches)
        live = [self._caches[n].to_json() for n in names if self._alive(n)]
        return {"cachedContents": live}

    def delete_cache(self, name: str) -> Json:
        self._lookup(name)
        with self._lock:
            self._caches.pop(name, None)
        return {}

    def clear(self) -> None:
        with self._lock:
            self._caches.clear()

    def _alive(self, name: str) -> bool:
        with self._lock:
            entry = self._caches.get(name)
        return entry is not None and self.clock() < entry.expires_at

    def _lookup(self, name: str) -> _CachedContent:
        if not self._alive(name):
            raise ApiError("not_found", f"CachedContent not found (or permission denied): {name}")
        with self._lock:
            return self._caches[name]

    def cache_for(self, body: Json, model: str) -> _CachedContent | None:
        name = body.get("cachedContent")
        if name is None:
            return None
        entry = self._lookup(str(name))
        if set(_RESERVED_WITH_CACHE) & {k for k, v in body.items() if v}:
            raise invalid(
                "CachedContent can not be used with GenerateContent request setting "
                "system_instruction, tools or tool_config."
            )
        if entry.model != f"models/{model}":
            raise invalid(
                f"Model used by GenerateContent request (models/{model}) and CachedContent "
                f"({entry.model}) has to be the same."
            )
        return entry


class GeminiTurn(Turn):
    """One ``:generateContent`` or ``:streamGenerateContent`` call."""

    route = "/v1beta/models/{model}:generateContent"
    profile = "gemini"
    visibility = "end"
    id_prefix = "emu-resp-"
    call_prefix = "emu-call-"

    def __init__(self, api: GeminiApi, call: Call, *, stream: bool) -> None:
        body = call.body
        self._api = api
        self.model = _model(call)
        if not api.catalog.lenient:
            with one_request(frozen=call.frozen):
                gemini_rules.check_generate(body, self.model, api.catalog)
        self.stream = stream
        contents = optional(body, "contents", list)
        if not contents:
            raise invalid("contents is not specified")
        self._cached = api.cache_for(body, self.model)
        _check_turns(contents)
        config = optional(body, "generationConfig", dict) or {}
        self.max_tokens = config.get("maxOutputTokens")
        self.stop_sequences = tuple(map(str, config.get("stopSequences") or ()))
        count = config.get("candidateCount")
        self.choices = count if isinstance(count, int) and count > 0 else 1
        thinking = config.get("thinkingConfig") or {}
        self.with_thinking = bool(thinking.get("includeThoughts"))
        self._segments = _segments(body)
        self.request = dataclasses.replace(
            _view(call, self.model, contents), contract=gemini_rules.contract(body)
        )

    def account(self, now: float, writer: int, message_id: str) -> CacheResult:
        if self._cached is not None:
            return self._explicit(self._cached)
        rules = PrefixRules(
            gemini_min_tokens(self.model), IMPLICIT_UNIT, self._api.settings.gemini_implicit_ttl
        )
        return self._api.prefixes.evaluate(
            f"gemini\0{self.model}", self._segments, rules, now=now, writer=writer
        )

    def _explicit(self, cached: _CachedContent) -> CacheResult:
        total = cached.tokens + sum(len(s.tokens) for s in self._segments)
        outcome = BreakpointOutcome(
            position=cached.tokens,
            label=cached.name,
            layer=None,
            ttl=None,
            prefix_tokens=cached.tokens,
            read_tokens=cached.tokens,
            written_tokens=0,
        )
        return CacheResult(
            total_tokens=total,
            read_tokens=cached.tokens,
            cached_prefix_tokens=cached.tokens,
            outcomes=(outcome,),
        )

    def _usage_json(self, result: CacheResult, output: Output) -> Json:
        n = self.choices
        usage: Json = {
            "promptTokenCount": result.total_tokens,
            "candidatesTokenCount": (output.output_tokens - output.thinking_tokens) * n,
            "totalTokenCount": result.total_tokens + output.output_tokens * n,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": result.total_tokens}],
        }
        if result.read_tokens:
            usage["cachedContentTokenCount"] = result.read_tokens
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": result.read_tokens}]
        if output.thinking_tokens:
            usage["thoughtsTokenCount"] = output.thinking_tokens * n
        return usage

    def _response(self, message_id: str, parts: list[Json], finish: str | None) -> Json:
        """A response (or stream chunk) with ``candidateCount`` identical candidates."""
        candidates: list[Json] = [
            {"content": {"parts": parts, "role": "model"}, "index": i} for i in range(self.choices)
        ]
        if finish is not None:
            for candidate in candidates:
                candidate["finishReason"] = finish
        return {"candidates": candidates, "modelVersion": self.model, "responseId": message_id}

    def render(self, message_id: str, result: CacheResult, output: Output) -> Json:
        parts = [p for p, _ in _output_parts(output, whole=True)]
        body = self._response(message_id, parts, _FINISH[output.stop])
        body["usageMetadata"] = self._usage_json(result, output)
        return body

    def events(self, message_id: str, result: CacheResult, output: Output) -> list[SseEvent]:
        parts = _output_parts(output, whole=False) or [({"text": ""}, 0)]
        chunks = [self._response(message_id, [part], None) for part, _ in parts]
        last = chunks[-1]
        for candidate in last["candidates"]:
            candidate["finishReason"] = _FINISH[output.stop]
        last["usageMetadata"] = self._usage_json(result, output)
        return [SseEvent(c, tokens=w) for c, (_, w) in zip(chunks, parts, strict=True)]


def _output_parts(output: Output, *, whole: bool) -> list[tuple[Json, int]]:
    """Response parts (whole, or cut into stream pieces) with their token weights."""

    def cut(text: str) -> list[str]:
        return [text] if whole else tokens.pieces(text)

    parts: list[tuple[Json, int]] = []
    if output.thinking:
        parts += [({"text": p, "thought": True}, tokens.count(p)) for p in cut(output.thinking)]
    if output.text:
        parts += [({"text": p}, tokens.count(p)) for p in cut(output.text)]
    for c in output.tool_calls:
        call: Json = {"name": c.name, "args": dict(c.input)}
        if not c.id.startswith(GeminiTurn.call_prefix):
            call["id"] = c.id
        parts.append(({"functionCall": call}, tokens.count(c.name + c.arguments)))
    return parts


_OPAQUE = frozenset(
    {
        "args",
        "response",
        "parameters",
        "parametersJsonSchema",
        "responseSchema",
        "responseJsonSchema",
    }
)
"""Fields whose value is the caller's own JSON (a Struct) or a schema: kept exactly as sent."""


def _camel_call(call: Call) -> Call:
    """The call with every field name in lowerCamelCase.

    The API reads a field under its JSON name or its proto name (proto3 JSON
    mapping), and google-genai sends some nested ones in snake_case
    (``inlineData.mime_type``, ``thinkingConfig.include_thoughts``,
    ``parameters_json_schema``); one spelling also gives one cache key.
    """
    return dataclasses.replace(call, body=_camel_fields(call.body))


def _camel_fields(value: Any) -> Any:
    if isinstance(value, list):
        return [_camel_fields(v) for v in value]
    if not isinstance(value, dict):
        return value
    named = {_camel(k): v for k, v in value.items()}
    return {k: v if k in _OPAQUE else _camel_fields(v) for k, v in named.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _model(call: Call) -> str:
    return _bare_model(call.params.get("model", ""))


def _bare_model(model: str) -> str:
    return model.removeprefix("models/")


def _lifetime(body: Json, default: float) -> float:
    ttl = body.get("ttl")
    if isinstance(ttl, str) and ttl.endswith("s"):
        try:
            return float(ttl[:-1])
        except ValueError:
            raise invalid(f"ttl: invalid duration {ttl!r}") from None
    return default


def _check_turns(contents: list[Any]) -> None:
    """Gemini's multi-turn rules; the messages are the API's own."""
    previous: str | None = None
    pending_calls = 0
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            raise invalid(f"contents[{i}]: must be an object")
        role = content.get("role") or "user"
        if role not in ("user", "model"):
            raise invalid("Please use a valid role: user, model.")
        if role == previous:
            raise invalid("Please ensure that multiturn requests alternate between user and model.")
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        responses = sum(1 for p in parts if "functionResponse" in p)
        if role == "user":
            if pending_calls and responses != pending_calls:
                raise invalid(
                    "Please ensure that the number of function response parts is equal to "
                    "the number of function call parts of the function call turn."
                )
            if responses and not pending_calls:
                raise invalid(
                    "Please ensure that function response turn comes immediately after a "
                    "function call turn."
                )
        pending_calls = sum(1 for p in parts if "functionCall" in p) if role == "model" else 0
        previous = role


def _segments(body: Json) -> list[Segment]:
    """The prompt in order (tools, system, contents), tokenized per piece."""
    out = [
        _segment("tools", f"tools[{i}]", f"<|tool|>{dumps(tool)}")
        for i, tool in enumerate(body.get("tools") or [])
    ]
    if config := body.get("toolConfig"):
        out.append(_segment("tools", "toolConfig", dumps(config)))
    if system := body.get("systemInstruction"):
        out.append(_segment("system", "systemInstruction", "<|system|>" + _parts_text(system)))
    for i, content in enumerate(body.get("contents") or []):
        role = content.get("role") or "user"
        out.append(_segment("messages", f"contents[{i}]", f"<|{role}|>" + _parts_text(content)))
    return out


def _segment(layer: Layer, label: str, text: str) -> Segment:
    return Segment(label, layer, tokens.encode(text))


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content.get("parts") or [] if isinstance(content, dict) else []
    return "".join(
        str(p["text"]) if set(p) == {"text"} else dumps(p) for p in parts if isinstance(p, dict)
    )


def _view(call: Call, model: str, contents: list[Json]) -> EmulatedRequest:
    system = _parts_text(call.body.get("systemInstruction") or "")
    users = [c for c in contents if (c.get("role") or "user") == "user"]
    last = contents[-1]
    last_text = ""
    if (last.get("role") or "user") == "user":
        last_text = "".join(
            str(p.get("text", "")) for p in last.get("parts") or [] if isinstance(p, dict)
        )
    names = [
        str(d.get("name", ""))
        for tool in call.body.get("tools") or []
        for d in tool.get("functionDeclarations") or []
    ]
    first = _parts_text(users[0]) if users else ""
    return EmulatedRequest(
        provider="gemini",
        model=model,
        system=system,
        last_user_text=last_text,
        tool_names=tuple(names),
        message_count=len(contents),
        conversation=conversation_key(call.headers, model, system, first),
        body=call.body,
        agent=call.calling_agent(),
    )
