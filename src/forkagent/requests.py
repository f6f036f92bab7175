"""The neutral model request, its canonical bytes and block fingerprints.

Providers hash the request prefix block by block (tools, then system, then
messages). ``request_blocks`` lays a request out the same way in canonical
JSON, so two requests can be compared the way a provider's cache sees them.
Canonical JSON keeps the order of fields as declared and of tool inputs as
produced (providers hash key order too); it never depends on hash seeds.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetPydanticSchema
from pydantic_core import CoreSchema, core_schema

from .messages import ContentBlock, JsonValue, Message, TextBlock

Layer: TypeAlias = Literal["tools", "system", "messages"]
_LAYER_ORDER: tuple[Layer, ...] = ("tools", "system", "messages")
CacheTTL: TypeAlias = Literal["5m", "1h"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolSpec(_Frozen):
    """A tool as the model sees it."""

    name: str
    description: str
    input_schema: dict[str, JsonValue]


class ThinkingConfig(_Frozen):
    type: Literal["enabled", "adaptive", "disabled"] = "adaptive"
    budget_tokens: int | None = None


class ModelSettings(_Frozen):
    """Request settings. Everything here is part of what decides the cache."""

    max_tokens: int = 4096
    temperature: float | None = None
    top_p: float | None = None
    thinking: ThinkingConfig | None = None
    tool_choice: str | None = None
    """``auto``, ``any``, ``none`` or a tool name; ``None`` means the provider default."""
    stop_sequences: tuple[str, ...] = ()
    cache_key: str | None = None
    """Provider cache-routing key (OpenAI ``prompt_cache_key``); children inherit it."""
    cache_ttl: CacheTTL = "5m"
    extra: dict[str, JsonValue] = Field(default_factory=dict)
    """Provider-specific pass-through (``cache_salt``, ``id_slot``, ...)."""


def _messages_schema(source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
    """Validated into a tuple, as before; serialized from any sequence of messages.

    The runtime builds requests without validating them (as ``model_construct``
    would) around a shared ``HistoryView``, which must dump byte for byte like the
    equal tuple.
    """
    as_tuple = handler.generate_schema(tuple[Message, ...])
    return core_schema.json_or_python_schema(
        json_schema=as_tuple,
        python_schema=as_tuple,
        serialization=core_schema.plain_serializer_function_ser_schema(
            tuple, return_schema=as_tuple
        ),
    )


Messages: TypeAlias = Annotated[Sequence[Message], GetPydanticSchema(_messages_schema)]
"""An immutable sequence of messages: a tuple, or a ``HistoryView`` sharing a family's prefix."""


class BlockPosition(_Frozen):
    message: int
    block: int


class ModelRequest(_Frozen):
    model: str
    system: str | tuple[TextBlock, ...] = ""
    tools: tuple[ToolSpec, ...] = ()
    messages: Messages = ()
    settings: ModelSettings = ModelSettings()
    shared_prefix_end: BlockPosition | None = None
    """Last block of a prefix shared with sibling requests: adapters put a cache breakpoint here."""

    @property
    def system_text(self) -> str:
        if isinstance(self.system, str):
            return self.system
        return "\n\n".join(b.text for b in self.system)

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json"))


_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""One encoder for every call: ``json.dumps`` with options builds a new one each time."""


def canonical_json(value: JsonValue) -> bytes:
    return _CANONICAL.encode(value).encode()


@dataclass(frozen=True, slots=True)
class CanonicalBlock:
    layer: Layer
    label: str
    """Where the block sits, for people: ``tools[2]``, ``messages[5].content[1]``."""
    data: bytes


_TOOL_JSON: OrderedDict[int, tuple[ToolSpec, bytes]] = OrderedDict()
"""``tool_json`` of the last ``_TOOL_JSON_KEPT`` tools, by id; each kept with its tool, so
the id stays that tool's while it is here. Ordered, so that the oldest goes in one call
(``popitem``), which another thread's insertion cannot interrupt as it would an iteration."""
_TOOL_JSON_KEPT = 256


def tool_json(tool: ToolSpec) -> bytes:
    """A tool's canonical JSON, rendered once per (frozen) tool object.

    Every request of an agent, and of each fork family it starts, carries the same
    specs, and their schemas are most of its fixed bytes: the built-in tools' are
    about 9 kB, 100 us to dump and encode each time.
    """
    found = _TOOL_JSON.get(id(tool))
    if found is not None and found[0] is tool:
        return found[1]
    data = canonical_json(tool.model_dump(mode="json"))
    if len(_TOOL_JSON) >= _TOOL_JSON_KEPT:
        _TOOL_JSON.popitem(last=False)  # the oldest
    _TOOL_JSON[id(tool)] = (tool, data)
    return data


def request_blocks(request: ModelRequest) -> list[CanonicalBlock]:
    """The request's cacheable content in provider hash order."""
    blocks = [
        CanonicalBlock("tools", f"tools[{i}]", tool_json(t)) for i, t in enumerate(request.tools)
    ]
    system = (
        (TextBlock(text=request.system),) if isinstance(request.system, str) else request.system
    )
    blocks += [
        CanonicalBlock("system", f"system[{i}]", canonical_json(b.model_dump(mode="json")))
        for i, b in enumerate(system)
        if b.text
    ]
    for m, message in enumerate(request.messages):
        for b, block in enumerate(message.content):
            data = canonical_block(message.role, block)
            blocks.append(CanonicalBlock("messages", f"messages[{m}].content[{b}]", data))
    return blocks


def canonical_block(role: str, block: ContentBlock) -> bytes:
    """A message's block as ``request_blocks`` renders it: its role, then its fields."""
    if type(block) is TextBlock:  # the usual block: its two fields as the encoder writes them
        text = _CANONICAL.encode  # a string alone is encoded at once (no dump, no dict)
        return (
            f'{{"role":{text(role)},"type":{text(block.type)},"text":{text(block.text)}}}'.encode()
        )
    return canonical_json({"role": role, **block.model_dump(mode="json")})


def prefix_fingerprints(request: ModelRequest) -> list[str]:
    """Running digest after each block: equal at ``i`` means equal prefixes up to ``i``."""
    running = hashlib.sha256(canonical_json(_header(request)))
    out: list[str] = []
    for block in request_blocks(request):
        running.update(hashlib.sha256(block.data).digest())
        out.append(running.copy().hexdigest())
    return out


def _header(request: ModelRequest) -> dict[str, JsonValue]:
    """Model and settings: a change here invalidates the cache without moving any block."""
    return {"model": request.model, "settings": request.settings.model_dump(mode="json")}


@dataclass(frozen=True, slots=True)
class Difference:
    """Where two requests stop sharing a prefix."""

    layer: Literal["model", "settings", "tools", "system", "messages"]
    block_index: int | None
    label: str
    byte_offset: int
    detail: str


def first_difference(before: ModelRequest, after: ModelRequest) -> Difference | None:
    """The first place ``after`` departs from ``before``'s prefix, or None if it extends it."""
    if before.model != after.model:
        return Difference("model", None, "model", 0, f"{before.model!r} -> {after.model!r}")
    if before.settings != after.settings:
        changed = [
            name
            for name in ModelSettings.model_fields
            if getattr(before.settings, name) != getattr(after.settings, name)
        ]
        return Difference("settings", None, "settings", 0, "changed: " + ", ".join(changed))
    old, new = request_blocks(before), request_blocks(after)
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a.data != b.data:
            offset = next(
                (i for i, (x, y) in enumerate(zip(a.data, b.data, strict=False)) if x != y),
                min(len(a.data), len(b.data)),
            )
            # A block added or removed shifts the next layer into place: blame the earlier layer.
            at = min(a, b, key=lambda block: _LAYER_ORDER.index(block.layer))
            return Difference(
                at.layer, index, at.label, offset, f"{at.label} differs at byte {offset}"
            )
    if len(new) < len(old):
        missing = old[len(new)]
        return Difference(missing.layer, len(new), missing.label, 0, "request is shorter")
    return None
