"""What the three wire formats share: the parsed call, the shaped output,
stream events, and the ``Turn`` each format implements for one generation."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Literal, TypeAlias

from ..usage import Usage
from . import tokens
from .cache import PREFIX_WRITE, TTL_SECONDS, CacheResult
from .errors import invalid
from .memo import HEAD_MIN_ITEMS, HeadCheck
from .policies import AGENT_HEADER, CallingAgent, EmulatedRequest, Reply, ToolCall

Json: TypeAlias = dict[str, Any]
StopKind: TypeAlias = Literal["end", "tool_use", "max_tokens", "stop_sequence"]
Visibility: TypeAlias = Literal["start", "end"]


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""One encoder for every call: ``json.dumps`` with options builds a new one each time."""


def canonical(value: Any) -> bytes:
    """Compact JSON that keeps key order: providers hash key order too."""
    return _COMPACT.encode(value).encode()


def dumps(value: Any) -> str:
    return _COMPACT.encode(value)


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request, minus HTTP."""

    method: str
    path: str
    query: Mapping[str, str]
    body: Json
    headers: Mapping[str, str]
    """Lower-cased names."""
    params: Mapping[str, str] = field(default_factory=dict)
    """Named groups of the matched route."""
    frozen: bool = False
    """The caller never changes the body's objects afterwards (``Emulator.dispatch``)."""
    agent: CallingAgent | None = None
    """The calling agent handed over in process (``Emulator.dispatch``); else its header says."""

    def calling_agent(self) -> CallingAgent | None:
        """Which forkagent agent sent the call: as handed over, else from ``AGENT_HEADER``."""
        if self.agent is not None:
            return self.agent
        # No header names none (what ``from_headers`` would find), without parsing.
        return CallingAgent.from_headers(self.headers) if AGENT_HEADER in self.headers else None


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event; ``tokens`` paces it at the simulated output speed."""

    data: Json | str
    event: str | None = None
    tokens: int = 0

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else dumps(self.data)
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {data}\n\n".encode()

    def to_json(self) -> Json:
        return {"event": self.event, "data": self.data}


@dataclass(frozen=True, slots=True)
class NamedCall:
    """A tool call with its final id."""

    id: str
    name: str
    input: Mapping[str, Any]

    @property
    def arguments(self) -> str:
        return dumps(dict(self.input))


@dataclass(frozen=True, slots=True)
class Output:
    """A reply cut to the request's ``max_tokens`` and counted."""

    thinking: str | None
    text: str
    tool_calls: tuple[NamedCall, ...]
    stop: StopKind
    output_tokens: int
    thinking_tokens: int
    stop_sequence: str | None = None
    """The stop sequence the text ended at (not included in it), if it did."""


def shape_output(
    reply: Reply,
    *,
    max_tokens: int | None,
    call_id: str,
    with_thinking: bool,
    stop_sequences: Sequence[str] = (),
) -> Output:
    """Apply the stop sequences (the text ends before the first one, nothing follows it),
    then ``max_tokens`` (thinking, then text; tool calls only if they fit)."""
    if max_tokens == 0:
        return Output(None, "", (), "max_tokens", 0, 0)
    budget = max_tokens if max_tokens is not None else 1 << 30
    thinking = reply.thinking if with_thinking and reply.thinking else None
    thinking_text = tokens.truncate(thinking, budget) if thinking else None
    thinking_tokens = tokens.count(thinking_text) if thinking_text else 0
    budget -= thinking_tokens
    wanted, matched = _until_stop(reply.text, stop_sequences)
    text = tokens.truncate(wanted, budget)
    text_tokens = tokens.count(text)
    budget -= text_tokens
    calls = () if matched else _named(reply.tool_calls, call_id)
    call_tokens = sum(tokens.count(c.name + c.arguments) for c in calls)
    truncated = text != wanted or thinking_text != thinking or call_tokens > budget
    if truncated:
        calls, call_tokens, matched = (), 0, None
    stop: StopKind = (
        "max_tokens"
        if truncated
        else "stop_sequence"
        if matched
        else "tool_use"
        if calls
        else "end"
    )
    total = max(1, thinking_tokens + text_tokens + call_tokens)
    return Output(thinking_text, text, calls, stop, total, thinking_tokens, matched)


def _until_stop(text: str, stop_sequences: Sequence[str]) -> tuple[str, str | None]:
    """``text`` up to the earliest stop sequence in it, and that sequence."""
    found = [(text.find(s), s) for s in stop_sequences if s and s in text]
    if not found:
        return text, None
    at, sequence = min(found)
    return text[:at], sequence


def _named(calls: tuple[ToolCall, ...], prefix: str) -> tuple[NamedCall, ...]:
    return tuple(
        NamedCall(id=c.id or f"{prefix}{i:02d}", name=c.name, input=c.input)
        for i, c in enumerate(calls)
    )


class Turn(ABC):
    """One generation request of some wire format, parsed and validated."""

    route: str
    profile: str
    model: str
    stream: bool
    max_tokens: int | None
    request: EmulatedRequest
    visibility: Visibility = "start"
    visible_delay: float = 0.0
    with_thinking: bool = False
    stop_sequences: tuple[str, ...] = ()
    choices: int = 1
    """How many completions the request asks for (OpenAI's ``n``)."""
    id_prefix: str = "msg_emu"
    call_prefix: str = "call_emu"

    @abstractmethod
    def account(self, now: float, writer: int, message_id: str) -> CacheResult:
        """Run the provider's cache rules for this request at its start time."""

    def usage(self, result: CacheResult, output: Output) -> Usage:
        """The neutral usage, for the request log.

        Breakpoint writes are billed by their TTL (longer than an hour counts as
        1 h, shorter as 5 min); automatic prefix caches write for free, so what
        they wrote counts as plain input.
        """
        billed = {ttl: n for ttl, n in result.written.items() if ttl != PREFIX_WRITE}
        long = sum(n for ttl, n in billed.items() if TTL_SECONDS[ttl] >= TTL_SECONDS["1h"])
        return Usage(
            input_tokens=result.total_tokens - result.read_tokens - sum(billed.values()),
            output_tokens=output.output_tokens * self.choices,
            cache_read_tokens=result.read_tokens,
            cache_write_5m_tokens=sum(billed.values()) - long,
            cache_write_1h_tokens=long,
            requests=1,
        )

    @abstractmethod
    def render(self, message_id: str, result: CacheResult, output: Output) -> Json:
        """The non-streaming response body."""

    @abstractmethod
    def events(self, message_id: str, result: CacheResult, output: Output) -> list[SseEvent]:
        """The streamed response, event by event."""


def require(body: Json, key: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(key)
    if value is None:
        raise invalid(f"{key}: Field required")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise invalid(f"{key}: Input should be a valid {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "string", int: "integer", list: "list", dict: "dictionary"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def optional(body: Json, key: str, kind: type | tuple[type, ...]) -> Any:
    return None if body.get(key) is None else require(body, key, kind)


def content_blocks(content: Any) -> list[Json] | None:
    """A message's ``content`` as a list of blocks (a string is one text block); None if neither."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and (
        _all_objects(content) if len(content) <= HEAD_MIN_ITEMS else _long_all_objects(content)
    ):
        return content
    return None


def _all_objects(items: list[Any]) -> bool:
    return all(map(isinstance, items, repeat(dict)))


_long_all_objects = HeadCheck(_all_objects)


def joined_text(blocks: list[Json]) -> str:
    """The text of the text blocks, run together."""
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


CONVERSATION_HEADER = "x-emulator-conversation"


def conversation_key(headers: Mapping[str, str], *parts: str) -> str:
    """The header if the client names its conversation, else a digest of its opening."""
    if named := headers.get(CONVERSATION_HEADER):
        return named
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def as_dict(value: Any) -> Json:
    """``value`` if it is an object, else empty: for reading bodies lenient mode let through."""
    return value if isinstance(value, dict) else {}


def dicts(value: Any) -> list[Json]:
    """The objects of a list (nothing for anything else)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
