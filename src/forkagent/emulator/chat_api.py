"""OpenAI Chat Completions and the compatible providers: requests, responses, streams.

The model id picks the cache rules (``openai_cache``): OpenAI's automatic prefix cache (1024 tokens,
then 128-token steps, routed by ``prompt_cache_key`` and the first 256
tokens) or its explicit ``prompt_cache_breakpoint`` parts, DashScope for
``qwen*`` (explicit ``cache_control`` blocks or the implicit cache), DeepSeek
for ``deepseek*`` (64-token units from token 0).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Mapping
from typing import Any

from . import chat_rules, tokens
from .cache import BlockCache, CacheResult, Layer, PrefixCache
from .catalog import Catalog
from .errors import ApiError, ErrorKind, invalid
from .memo import one_request
from .openai_cache import OpenAICaches, OpenAICacheTurn, Part, cache_part
from .policies import EmulatedRequest
from .profiles import CacheSettings, ChatProfile, chat_profile
from .wire import (
    Call,
    Json,
    Output,
    SseEvent,
    canonical,
    content_blocks,
    conversation_key,
    dumps,
    joined_text,
    optional,
    require,
)

_ROLES = ("system", "developer", "user", "assistant", "tool")
_MARKERS: Mapping[ChatProfile, str] = {
    "openai": "prompt_cache_breakpoint",
    "dashscope": "cache_control",
}
"""The content-part field each provider takes as an explicit cache breakpoint."""
_BREAKPOINT_TTLS = ("30m", "12h")
_ERRORS: Mapping[ErrorKind, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "not_found": ("invalid_request_error", "not_found"),
    "rate_limit": ("requests", "rate_limit_exceeded"),
    "server": ("server_error", None),
    "overloaded": ("server_error", "overloaded"),
}
_FINISH = {"end": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop_sequence": "stop"}


def error_status(error: ApiError) -> int:
    """OpenAI has no 529: an overloaded engine answers 503."""
    return 503 if error.kind == "overloaded" else error.status


def error_body(error: ApiError) -> Json:
    kind, code = _ERRORS[error.kind]
    return {
        "error": {
            "message": error.message,
            "type": kind,
            "param": error.param,
            "code": error.code or code,
        }
    }


class ChatApi(OpenAICaches):
    """State of the OpenAI-compatible routes: caches and OpenAI's request routing."""

    def __init__(
        self,
        blocks: BlockCache,
        prefixes: PrefixCache,
        settings: CacheSettings,
        catalog: Catalog,
    ) -> None:
        super().__init__(blocks, prefixes, settings)
        self.catalog = catalog

    def parse(self, call: Call) -> ChatTurn:
        return ChatTurn(self, call)


class ChatTurn(OpenAICacheTurn):
    """One ``POST /v1/chat/completions``."""

    route = "/v1/chat/completions"
    id_prefix = "chatcmpl-emu"
    call_prefix = "call_emu"

    def __init__(self, api: ChatApi, call: Call) -> None:
        body = call.body
        self._caches = api
        self._body = body
        if not api.catalog.lenient:
            model = body.get("model")
            profile = chat_profile(model) if isinstance(model, str) else "openai"
            with one_request(frozen=call.frozen):
                chat_rules.check_create(body, profile, api.catalog)
        self.model = require(body, "model", str)
        messages = require(body, "messages", list)
        if not messages:
            raise invalid("messages: at least one message is required")
        _check_messages(messages)
        self.profile = chat_profile(self.model)
        limit = optional(body, "max_completion_tokens", int)
        self.max_tokens = limit if limit is not None else optional(body, "max_tokens", int)
        if self.max_tokens is not None and self.max_tokens < 1:
            raise invalid("max_tokens: must be at least 1")
        self.stream = bool(body.get("stream", False))
        stop, n = body.get("stop"), body.get("n")
        self.stop_sequences = (
            (stop,)
            if isinstance(stop, str)
            else tuple(map(str, stop if isinstance(stop, list) else ()))
        )
        self.choices = n if isinstance(n, int) and n > 0 else 1
        options = optional(body, "stream_options", dict) or {}
        self._include_usage = bool(options.get("include_usage"))
        contract = chat_rules.contract(body, self.profile)
        self.with_thinking = self.profile != "openai" or contract.thinking
        self._mode, self._ttl = (
            cache_options(body) if self.profile == "openai" else ("implicit", "30m")
        )
        self._parts = _parts(body, messages, _MARKERS.get(self.profile), self._ttl)
        marked = any(p.ttl for p in self._parts)
        self._explicit = marked or self._mode == "explicit"
        if self.profile != "openai":
            self.visibility = "end"
        if self.profile == "deepseek":
            self.visible_delay = api.settings.deepseek_build_delay
        self._created = int(time.time())
        self.request = dataclasses.replace(_view(call, self.model, messages), contract=contract)

    def _usage_json(self, result: CacheResult, output: Output) -> Json:
        read = result.read_tokens
        details: Json = {"cached_tokens": read}
        completion = output.output_tokens * self.choices
        usage: Json = {
            "prompt_tokens": result.total_tokens,
            "completion_tokens": completion,
            "total_tokens": result.total_tokens + completion,
        }
        if self.profile == "openai":
            details["audio_tokens"] = 0
        if self._explicit and self.profile == "openai":
            details["cache_write_tokens"] = result.written_tokens
        elif self._explicit:
            written = result.written_tokens
            details["cache_creation_input_tokens"] = written
            details["cache_creation"] = {"ephemeral_5m_input_tokens": written}
            details["cache_type"] = "ephemeral"
        if self.profile == "deepseek":
            usage["prompt_cache_hit_tokens"] = read
            usage["prompt_cache_miss_tokens"] = result.total_tokens - read
        usage["prompt_tokens_details"] = details
        usage["completion_tokens_details"] = {
            "reasoning_tokens": output.thinking_tokens * self.choices
        }
        return usage

    def _head(self, message_id: str, kind: str) -> Json:
        return {"id": message_id, "object": kind, "created": self._created, "model": self.model}

    def render(self, message_id: str, result: CacheResult, output: Output) -> Json:
        message: Json = {"role": "assistant", "content": output.text or None, "refusal": None}
        if output.thinking and self.profile != "openai":
            message["reasoning_content"] = output.thinking
        if output.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in output.tool_calls
            ]
        choices = [
            {
                "index": i,
                "message": message,
                "logprobs": None,
                "finish_reason": _FINISH[output.stop],
            }
            for i in range(self.choices)
        ]
        body = self._head(message_id, "chat.completion")
        body |= {"choices": choices, "usage": self._usage_json(result, output)}
        body["system_fingerprint"] = "fp_emulator"
        return body

    def events(self, message_id: str, result: CacheResult, output: Output) -> list[SseEvent]:
        deltas: list[tuple[Json, int]] = [({"role": "assistant", "content": ""}, 0)]
        if output.thinking and self.profile != "openai":
            deltas += [
                ({"reasoning_content": p}, tokens.count(p)) for p in tokens.pieces(output.thinking)
            ]
        deltas += [({"content": p}, tokens.count(p)) for p in tokens.pieces(output.text)]
        for index, c in enumerate(output.tool_calls):
            opening = {
                "index": index,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": ""},
            }
            deltas.append(({"tool_calls": [opening]}, tokens.count(c.name)))
            deltas.append(
                (
                    {"tool_calls": [{"index": index, "function": {"arguments": c.arguments}}]},
                    tokens.count(c.arguments),
                )
            )
        events = [
            self._chunk(message_id, i, delta, None, weight)
            for i in range(self.choices)
            for delta, weight in deltas
        ]
        events += [
            self._chunk(message_id, i, {}, _FINISH[output.stop], 0) for i in range(self.choices)
        ]
        if self._include_usage:
            last = self._head(message_id, "chat.completion.chunk")
            last |= {"choices": [], "usage": self._usage_json(result, output)}
            events.append(SseEvent(last))
        events.append(SseEvent("[DONE]"))
        return events

    def _chunk(
        self, message_id: str, index: int, delta: Json, finish: str | None, weight: int
    ) -> SseEvent:
        chunk = self._head(message_id, "chat.completion.chunk")
        chunk["choices"] = [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        ]
        if self._include_usage:
            chunk["usage"] = None
        return SseEvent(chunk, tokens=weight)


def _check_messages(messages: list[Any]) -> None:
    """Roles, and tool messages answering exactly the preceding tool calls."""
    expected: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise invalid(f"messages[{i}]: role must be one of {', '.join(_ROLES)}")
        role = message["role"]
        if role == "tool":
            if message.get("tool_call_id") not in expected:
                raise invalid(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                    code="invalid_value",
                )
            expected.discard(message["tool_call_id"])
            continue
        if expected:
            raise invalid(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(expected))}",
                param=f"messages.[{i}].role",
                code="invalid_value",
            )
        calls = message.get("tool_calls") or [] if role == "assistant" else []
        expected = {str(c.get("id")) for c in calls if isinstance(c, dict)}


def cache_options(body: Json) -> tuple[str, str]:
    """``prompt_cache_options``: the mode (``implicit`` by default) and the request's TTL."""
    options = optional(body, "prompt_cache_options", dict) or {}
    mode, ttl = options.get("mode", "implicit"), options.get("ttl", "30m")
    if mode not in ("implicit", "explicit"):
        raise invalid("prompt_cache_options.mode: Input should be 'implicit' or 'explicit'")
    if ttl != "30m":
        raise invalid("prompt_cache_options.ttl: Input should be '30m'")
    return mode, ttl


def _parts(body: Json, messages: list[Json], marker: str | None, ttl: str) -> list[Part]:
    parts = [
        cache_part("tools", f"tools[{i}]", {"tool": tool}, f"<|tool|>{dumps(tool)}", None)
        for i, tool in enumerate(optional(body, "tools", list) or [])
    ]
    if (schema := body.get("response_format")) is not None:
        parts.append(
            cache_part("tools", "response_format", {"response_format": schema}, dumps(schema), None)
        )
    for i, message in enumerate(messages):
        parts += _message_parts(i, message, marker, ttl)
    return parts


def _message_parts(index: int, message: Json, marker: str | None, ttl: str) -> list[Part]:
    role = message["role"]
    layer: Layer = "system" if role in ("system", "developer") else "messages"
    header = f"<|{role}|>"
    extra: Json = {"tool_call_id": message["tool_call_id"]} if role == "tool" else {}
    if extra:
        header += f"{message['tool_call_id']}\n"
    out: list[Part] = []
    for j, part in enumerate(_content(message)):
        label = f"messages[{index}].content[{j}]"
        bare = {k: v for k, v in part.items() if k not in _MARKERS.values()}
        text = header if j == 0 else ""
        text += _part_text(bare)
        mark = breakpoint_ttl(part, marker, label, ttl)
        out.append(cache_part(layer, label, {"role": role, **extra, **bare}, text, mark))
    if calls := message.get("tool_calls"):
        text = ("" if out else header) + dumps(calls)
        out.append(
            cache_part(
                layer,
                f"messages[{index}].tool_calls",
                {"role": role, "tool_calls": calls},
                text,
                None,
            )
        )
    if not out:
        out.append(cache_part(layer, f"messages[{index}]", {"role": role}, header, None))
    return out


def breakpoint_ttl(part: Json, marker: str | None, label: str, default_ttl: str) -> str | None:
    """The TTL of the part's breakpoint (DashScope's last 5 minutes), or None without one."""
    value = part.get(marker) if marker else None
    if marker == "cache_control" or value is None:
        return "5m" if isinstance(value, dict) else None
    where = f"{label}.{marker}"
    if not isinstance(value, dict) or value.get("mode") != "explicit":
        raise invalid(f"{where}.mode: Input should be 'explicit'")
    ttl = value.get("ttl", default_ttl)
    if ttl not in _BREAKPOINT_TTLS:
        raise invalid(f"{where}.ttl: Input should be '30m' or '12h'")
    return str(ttl)


def _content(message: Json) -> list[Json]:
    content = message.get("content")
    blocks = [] if content is None else content_blocks(content)
    if blocks is None:
        raise invalid("messages: content must be a string or a list of content parts")
    return blocks


def _part_text(part: Json) -> str:
    if part.get("type") == "text":
        return str(part.get("text", ""))
    return f"<{part.get('type')} {hashlib.sha256(canonical(part)).hexdigest()[:16]}>"


def _view(call: Call, model: str, messages: list[Json]) -> EmulatedRequest:
    system = "".join(_text(m) for m in messages if m.get("role") in ("system", "developer"))
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    last = messages[-1]
    tools = call.body.get("tools") or []
    return EmulatedRequest(
        provider="openai",
        model=model,
        system=system,
        last_user_text=_text(last) if last.get("role") == "user" else "",
        tool_names=tuple(
            str(t.get("function", {}).get("name", "")) for t in tools if isinstance(t, dict)
        ),
        message_count=len(messages),
        conversation=conversation_key(call.headers, model, system, _text(first_user or {})),
        body=call.body,
        agent=call.calling_agent(),
    )


def _text(message: Json) -> str:
    return joined_text(_content(message))
