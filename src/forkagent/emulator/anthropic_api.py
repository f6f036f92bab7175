"""Anthropic Messages API: request parsing, the prompt-cache rules, responses.

The cache key is a running hash over tools -> system -> messages, block by
block, without the ``cache_control`` markers. ``speed`` is mixed in where the
system level starts, and ``tool_choice``, ``thinking`` and the number of
images where the messages level starts, so that changing them invalidates
exactly the levels the provider documents.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from . import anthropic_rules, tokens
from .cache import Block, BlockCache, BlockRules, CacheResult, Layer, Run, chained, digest
from .catalog import Catalog
from .errors import ApiError, ErrorKind, invalid
from .memo import HEAD_MIN_ITEMS, Memo, content_key, head_key, one_request
from .policies import EmulatedRequest
from .profiles import ANTHROPIC_FRAMING_TOKENS, anthropic_min_tokens, anthropic_tool_prompt_tokens
from .wire import (
    Call,
    Json,
    Output,
    SseEvent,
    Turn,
    canonical,
    content_blocks,
    conversation_key,
    dumps,
    joined_text,
    optional,
    require,
)

IMAGE_TOKENS = 1600
"""Tokens billed per image (the real figure depends on its pixel size, about w*h/750)."""
MAX_BREAKPOINTS = 4
_TTLS = ("5m", "1h")
_ERROR_TYPES: Mapping[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "rate_limit": "rate_limit_error",
    "server": "api_error",
    "overloaded": "overloaded_error",
}
_STOP = {
    "end": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
}


def error_body(error: ApiError, request_id: str) -> Json:
    return {
        "type": "error",
        "error": {"type": _ERROR_TYPES[error.kind], "message": error.message},
        "request_id": request_id,
    }


@dataclass(frozen=True, slots=True)
class _Fingerprint:
    """What diagnostics compare between a request and a later one."""

    model: bytes
    tools: bytes
    system: bytes
    messages: tuple[int, bytes]
    """How many message blocks, and one digest of them all: small, as 50,000 of these are
    kept. A later request extends this one when its first that many blocks digest alike."""
    settings: bytes
    cached_tokens: int


class AnthropicApi:
    """State shared by all Anthropic requests of one emulator: cache and fingerprints."""

    _FINGERPRINTS = 50_000

    def __init__(self, cache: BlockCache, catalog: Catalog) -> None:
        self.cache = cache
        self.catalog = catalog
        self._fingerprints: OrderedDict[str, _Fingerprint] = OrderedDict()
        self._lock = threading.Lock()

    def parse(self, call: Call) -> AnthropicTurn:
        return AnthropicTurn(self, call)

    def count_tokens(self, call: Call) -> Json:
        with one_request():  # each long list's head is keyed once, as in a generation request
            if not self.catalog.lenient:
                anthropic_rules.check_count(call.body, self.catalog)
            prompt = _Prompt.parse(call.body, counting=True)
        return {"input_tokens": sum(b.tokens for b in prompt.blocks) + ANTHROPIC_FRAMING_TOKENS}

    def clear(self) -> None:
        with self._lock:
            self._fingerprints.clear()

    def remember(self, message_id: str, fingerprint: _Fingerprint) -> None:
        with self._lock:
            self._fingerprints[message_id] = fingerprint
            while len(self._fingerprints) > self._FINGERPRINTS:
                self._fingerprints.popitem(last=False)

    def recall(self, message_id: str) -> _Fingerprint | None:
        with self._lock:
            return self._fingerprints.get(message_id)


@dataclass(frozen=True, slots=True)
class _Prompt:
    """A Messages request laid out as the cache sees it."""

    blocks: Sequence[Block]
    """A list made for this prompt (not copied into a tuple: a child of a reply with N
    tool calls has 2N blocks)."""
    seeds: Mapping[Layer, bytes]
    model: str
    speed: str | None
    message_start: int
    """Where the messages' blocks begin, after the tools' and the system's."""
    marks: tuple[int, ...]
    """The blocks with a ``cache_control`` marker."""
    runs: tuple[Run, ...]
    """Stretches of blocks known by their content (a long message's head)."""

    @classmethod
    def parse(cls, body: Json, *, counting: bool = False) -> _Prompt:
        model = require(body, "model", str)
        messages = require(body, "messages", list)
        if not messages and not counting:
            raise invalid("messages: at least one message is required")
        tools = optional(body, "tools", list) or []
        blocks = [*_tool_prompt(model, body), *_tool_blocks(tools)] if tools else []
        blocks += _system_blocks(body.get("system"))
        marks = [i for i, b in enumerate(blocks) if b.ttl is not None]
        runs: list[Run] = []
        images = 0
        start = len(blocks)
        for m, message in enumerate(messages):
            part = _message_blocks(m, message)
            images += part.images
            marks += [len(blocks) + i for i in part.marked]
            if part.head is not None:
                runs.append(Run(len(blocks), len(blocks) + part.head[0], part.head[1]))
            blocks += part.blocks
            if part.last:
                blocks += part.last
        top = _mark(body.get("cache_control"), "cache_control")
        found = len(marks) + (top is not None)
        if found > MAX_BREAKPOINTS:
            raise invalid(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {found}."
            )
        if top is not None and blocks:
            last = blocks[-1]
            blocks[-1] = Block(last.layer, last.label, last.content, last.tokens, last.ttl or top)
            marks += [] if marks and marks[-1] == len(blocks) - 1 else [len(blocks) - 1]
        _check_ttl_order([blocks[i] for i in marks])
        speed = optional(body, "speed", str)
        seeds: dict[Layer, bytes] = {
            "system": canonical({"speed": speed}),
            "messages": canonical(
                {
                    "tool_choice": body.get("tool_choice"),
                    "thinking": body.get("thinking"),
                    "images": images,
                }
            ),
        }
        return cls(blocks, seeds, model, speed, start, tuple(marks), tuple(runs))

    def fingerprint(self, cached_tokens: int) -> _Fingerprint:
        before = self.blocks[: self.message_start]
        count = len(self.blocks) - self.message_start
        return _Fingerprint(
            model=canonical([self.model, self.speed]),
            tools=digest(*(b.content for b in before if b.layer == "tools")),
            system=digest(*(b.content for b in before if b.layer == "system")),
            messages=(count, chained(_MESSAGES, self.blocks, self.message_start, self.runs)),
            settings=self.seeds["messages"],
            cached_tokens=cached_tokens,
        )

    def extends(self, messages: tuple[int, bytes]) -> bool:
        """Whether this prompt's messages begin with those a fingerprint was taken of."""
        count, sealed = messages
        start = self.message_start
        if len(self.blocks) - start < count:
            return False
        return chained(_MESSAGES, self.blocks[: start + count], start, self.runs) == sealed


_MESSAGES = digest(b"messages")
"""Where the running key of a prompt's messages (its fingerprint) starts."""


def _tool_prompt(model: str, body: Json) -> list[Block]:
    """The tool-use system prompt, ahead of the tools: part of the cached prefix.

    Its content is fixed, so that changing ``tool_choice`` only invalidates the
    messages level, as documented; its size follows the model and tool choice.
    """
    choice = body.get("tool_choice")
    forced = isinstance(choice, dict) and choice.get("type") in ("any", "tool")
    size = anthropic_tool_prompt_tokens(model, forced=forced)
    return [Block("tools", "tool-use system prompt", b"tool-use system prompt", size, None)]


def _tool_blocks(tools: list[Any]) -> list[Block]:
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid(f"tools.{i}: Input should be a valid dictionary")
        bare = {k: v for k, v in tool.items() if k != "cache_control"}
        text = dumps(bare)
        ttl = _mark(tool.get("cache_control"), f"tools.{i}.cache_control")
        out.append(Block("tools", f"tools[{i}]", text.encode(), tokens.count(text), ttl))
    return out


def _system_blocks(system: Any) -> list[Block]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    if not isinstance(system, list):
        raise invalid("system: Input should be a valid string or list of text blocks")
    return [_block("system", f"system[{i}]", None, b)[0] for i, b in enumerate(system)]


@dataclass(frozen=True, slots=True)
class _Part:
    """One message's blocks, the images they hold and which carry a marker."""

    blocks: tuple[Block, ...]
    images: int
    marked: tuple[int, ...]
    """Positions in ``blocks`` and then ``last``."""
    head: tuple[int, Hashable] | None = None
    """How many of the first blocks are the message's head, and its content key."""
    last: tuple[Block, ...] = ()
    """A long message's last block, after its kept head's ``blocks``: the prompt's list
    takes both, so the head (N blocks for a child of a reply with N calls) is not
    copied into a tuple of its own first."""


def _message_blocks(index: int, message: Any) -> _Part:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise invalid(f"messages.{index}: role must be 'user' or 'assistant'")
    role = message["role"]
    contents = _contents(message)
    if len(contents) <= HEAD_MIN_ITEMS:
        return _counted(index, role, contents, 0)
    key = (index, role, head_key(contents))
    head = _HEADS.find(key)
    if head is None:
        head = _counted(index, role, contents[:-1], 0)
        _HEADS.keep(key, len(key[2]), head)
    last = _counted(index, role, contents[-1:], len(contents) - 1)
    shift = len(head.blocks)
    return _Part(
        head.blocks,
        head.images + last.images,
        head.marked + tuple(shift + i for i in last.marked),
        (shift, (role, key[2])),
        last.blocks,
    )


_HEADS: Memo[_Part] = Memo(second_sight=True)
"""A long message's blocks but its last, by place, role and content: every child of a reply
with N tool calls ends with the same N placeholder results and rules before its directive."""


def _counted(index: int, role: str, contents: list[Json], first: int) -> _Part:
    """Blocks ``first``, ``first + 1``... of message ``index``."""
    blocks: list[Block] = []
    images = 0
    for j, b in enumerate(contents, first):
        block, held = _block("messages", f"messages[{index}].content[{j}]", role, b)
        blocks.append(block)
        images += held
    marked = tuple(i for i, b in enumerate(blocks) if b.ttl is not None)
    return _Part(tuple(blocks), images, marked)


def _contents(message: Json) -> list[Json]:
    blocks = content_blocks(message.get("content"))
    if blocks is None:
        raise invalid("messages: content must be a string or a list of content blocks")
    return blocks


_DERIVED: Memo[tuple[bytes, int, int]] = Memo()
"""A block's canonical bytes, tokens and images, by its role and content: the children of a
fork family send the same N tool calls and N placeholder results each, and every turn of a
conversation sends its history again."""


def _block(layer: Layer, label: str, role: str | None, block: Any) -> tuple[Block, int]:
    """The block as the cache sees it, and the images it holds."""
    if not isinstance(block, dict) or "type" not in block:
        raise invalid(f"{label}: content blocks need a type")
    ttl = _mark(block.get("cache_control"), f"{label}.cache_control")
    key = content_key(block)
    derived = _DERIVED.find((role, key))
    if derived is None:
        derived = _derive(role, block)
        _DERIVED.keep((role, key), len(key), derived)
    content, size, images = derived
    return Block(layer, label, content, size, ttl), images


def _derive(role: str | None, block: Json) -> tuple[bytes, int, int]:
    bare = {k: v for k, v in block.items() if k != "cache_control"}
    payload = {"role": role, **bare} if role else bare
    return canonical(payload), _block_tokens(bare), _images(bare)


def _block_tokens(block: Json) -> int:
    kind = block.get("type")
    if kind == "text":
        return tokens.count(str(block.get("text", "")))
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "thinking":
        return tokens.count(str(block.get("thinking", "")))
    if kind == "tool_use":
        return tokens.count(str(block.get("name", ""))) + tokens.count(dumps(block.get("input")))
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return sum(_block_tokens(b) for b in content if isinstance(b, dict))
        return tokens.count(str(content))
    return tokens.count(dumps(block))


def _images(block: Json) -> int:
    if block.get("type") == "image":
        return 1
    content = block.get("content")
    if block.get("type") == "tool_result" and isinstance(content, list):
        return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "image")
    return 0


def _mark(value: Any, where: str) -> str | None:
    """The TTL a ``cache_control`` value asks for, or None without one."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        raise invalid(f"{where}: type must be 'ephemeral'")
    ttl = value.get("ttl", "5m")
    if ttl not in _TTLS:
        raise invalid(f"{where}.ttl: Input should be '5m' or '1h'")
    return str(ttl)


def _check_ttl_order(blocks: list[Block]) -> None:
    """``blocks``: the marked ones."""
    ttls = [b.ttl for b in blocks if b.ttl is not None]
    if any(a == "5m" and b == "1h" for a, b in pairwise(ttls)):
        raise invalid(
            "a cache_control block with ttl='1h' cannot come after one with ttl='5m': "
            "longer TTLs must come first"
        )


class AnthropicTurn(Turn):
    """One ``POST /v1/messages``."""

    route = "/v1/messages"
    profile = "anthropic"
    id_prefix = "msg_emu"
    call_prefix = "toolu_emu"

    def __init__(self, api: AnthropicApi, call: Call) -> None:
        body = call.body
        self._api = api
        with one_request(frozen=call.frozen):
            if not api.catalog.lenient:
                anthropic_rules.check_create(body, api.catalog)
            self._prompt: _Prompt | None = _Prompt.parse(body)
            self.model = self._prompt.model
            self.request = self._view(call)  # in the scope: its text reuses the parse's keys
        max_tokens: int = require(body, "max_tokens", int)
        self.max_tokens = max_tokens
        self.stream = bool(body.get("stream", False))
        self.stop_sequences = tuple(str(s) for s in optional(body, "stop_sequences", list) or ())
        thinking = optional(body, "thinking", dict) or {}
        self.with_thinking = thinking.get("type") in ("enabled", "adaptive")
        self._check_prewarm(body, max_tokens)
        diagnostics = optional(body, "diagnostics", dict)
        self._previous: str | None = diagnostics.get("previous_message_id") if diagnostics else None
        self._wants_diagnostics = diagnostics is not None
        self._diagnosis: Json | None = None

    def _check_prewarm(self, body: Json, max_tokens: int) -> None:
        if max_tokens < 0:
            raise invalid("max_tokens: Input should be greater than or equal to 0")
        if max_tokens != 0:
            return
        choice = body.get("tool_choice") or {}
        if self.stream:
            raise invalid("max_tokens: 0 (cache pre-warming) cannot be used with stream")
        if self.with_thinking:
            raise invalid("max_tokens: 0 (cache pre-warming) cannot be used with thinking")
        if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
            raise invalid(
                "max_tokens: 0 (cache pre-warming) cannot be used with a forced tool_choice"
            )
        output = body.get("output_config")
        if (isinstance(output, dict) and output.get("format")) or body.get("output_format"):
            raise invalid(
                "max_tokens: 0 (cache pre-warming) cannot be used with structured outputs"
            )

    def _view(self, call: Call) -> EmulatedRequest:
        messages = call.body["messages"]
        system = call.body.get("system") or ""
        system_text = (
            system
            if isinstance(system, str)
            else "".join(b.get("text", "") for b in system if isinstance(b, dict))
        )
        first_user: Json = next((m for m in messages if m.get("role") == "user"), {})
        last = messages[-1] if messages[-1].get("role") == "user" else {}
        last_text = _text_of(last)
        first_text = last_text if first_user is last else _text_of(first_user)
        return EmulatedRequest(
            provider="anthropic",
            model=self.model,
            system=system_text,
            last_user_text=last_text,
            tool_names=tuple(
                str(t.get("name", "")) for t in call.body.get("tools") or [] if isinstance(t, dict)
            ),
            message_count=len(messages),
            conversation=conversation_key(call.headers, self.model, system_text, first_text),
            body=call.body,
            agent=call.calling_agent(),
            contract=anthropic_rules.contract(call.body),
        )

    def account(self, now: float, writer: int, message_id: str) -> CacheResult:
        # The prompt's blocks are let go here: a response being streamed no longer needs
        # them, and N children of one reply in flight would each keep O(N) of them alive.
        prompt, self._prompt = self._prompt, None
        if prompt is None:
            raise RuntimeError("a Messages turn is accounted once")
        rules = BlockRules(min_tokens=anthropic_min_tokens(self.model))
        result = self._api.cache.evaluate(
            self.model,
            prompt.blocks,
            prompt.seeds,
            rules,
            now=now,
            writer=writer,
            extra_tokens=ANTHROPIC_FRAMING_TOKENS,
            marks=prompt.marks,
            runs=prompt.runs,
        )
        fingerprint = prompt.fingerprint(result.cached_prefix_tokens)
        if self._wants_diagnostics:
            self._diagnosis = self._diagnose(prompt, fingerprint, result)
        self._api.remember(message_id, fingerprint)
        return result

    def _diagnose(self, prompt: _Prompt, now: _Fingerprint, result: CacheResult) -> Json | None:
        """``diagnostics`` of the response: null when the prefix was kept."""
        if self._previous is None:
            return None
        before = self._api.recall(self._previous)
        if before is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        missed = max(0, before.cached_tokens - result.read_tokens)
        reason: str | None = None
        if now.model != before.model:
            reason = "model_changed"
        elif now.tools != before.tools:
            reason = "tools_changed"
        elif now.system != before.system:
            reason = "system_changed"
        elif not prompt.extends(before.messages):
            reason = "messages_changed"
        elif now.settings != before.settings:
            return {"cache_miss_reason": {"type": "unavailable"}}
        if reason is None:
            return None
        return {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": missed}}

    def _usage_json(self, result: CacheResult, output_tokens: int) -> Json:
        return {
            "input_tokens": result.total_tokens - result.cached_prefix_tokens,
            "cache_creation_input_tokens": result.written_tokens,
            "cache_read_input_tokens": result.read_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": result.written.get("5m", 0),
                "ephemeral_1h_input_tokens": result.written.get("1h", 0),
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def _message(
        self, message_id: str, content: list[Json], stop: str | None, sequence: str | None = None
    ) -> Json:
        message: Json = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": sequence,
        }
        if self._wants_diagnostics:
            message["diagnostics"] = self._diagnosis
        return message

    def render(self, message_id: str, result: CacheResult, output: Output) -> Json:
        content: list[Json] = []
        if output.thinking:
            content.append(_thinking(output.thinking))
        if output.text:
            content.append({"type": "text", "text": output.text})
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.input)}
            for c in output.tool_calls
        ]
        message = self._message(message_id, content, _STOP[output.stop], output.stop_sequence)
        message["usage"] = self._usage_json(result, output.output_tokens)
        return message

    def events(self, message_id: str, result: CacheResult, output: Output) -> list[SseEvent]:
        start = self._message(message_id, [], None)
        start["usage"] = self._usage_json(result, 1)
        events = [
            SseEvent({"type": "message_start", "message": start}, "message_start"),
            SseEvent({"type": "ping"}, "ping"),
        ]
        index = 0
        if output.thinking:
            thinking = _thinking(output.thinking)
            deltas = [
                {"type": "thinking_delta", "thinking": p} for p in tokens.pieces(output.thinking)
            ]
            deltas.append({"type": "signature_delta", "signature": thinking["signature"]})
            events += _block_events(index, {**thinking, "thinking": "", "signature": ""}, deltas)
            index += 1
        if output.text:
            deltas = [{"type": "text_delta", "text": p} for p in tokens.pieces(output.text)]
            events += _block_events(index, {"type": "text", "text": ""}, deltas)
            index += 1
        for c in output.tool_calls:
            start_block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _json_pieces(c.arguments)
            ]
            events += _block_events(index, start_block, deltas)
            index += 1
        final = self._usage_json(result, output.output_tokens)
        del final["cache_creation"], final["service_tier"]
        events.append(
            SseEvent(
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": _STOP[output.stop],
                        "stop_sequence": output.stop_sequence,
                    },
                    "usage": final,
                },
                "message_delta",
            )
        )
        events.append(SseEvent({"type": "message_stop"}, "message_stop"))
        return events


def _block_events(index: int, block: Json, deltas: list[Json]) -> list[SseEvent]:
    events = [
        SseEvent(
            {"type": "content_block_start", "index": index, "content_block": block},
            "content_block_start",
        )
    ]
    events += [
        SseEvent(
            {"type": "content_block_delta", "index": index, "delta": d},
            "content_block_delta",
            tokens=_delta_tokens(d),
        )
        for d in deltas
    ]
    events.append(SseEvent({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return events


def _delta_tokens(delta: Json) -> int:
    text = delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
    return tokens.count(str(text))


def _json_pieces(arguments: str, size: int = 24) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or ["{}"]


def _thinking(text: str) -> Json:
    signature = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return {"type": "thinking", "thinking": text, "signature": signature}


def _text_of(message: Json) -> str:
    if not message:
        return ""
    blocks = _contents(message)
    if len(blocks) <= HEAD_MIN_ITEMS:
        return joined_text(blocks)
    return _HEAD_TEXTS.head(blocks, joined_text) + joined_text(blocks[-1:])


_HEAD_TEXTS: Memo[str] = Memo()
"""The text of a long message's blocks but its last, by content (a fork family's placeholders
and rules, before each child's directive)."""
