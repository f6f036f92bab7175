"""What the Messages API accepts: its request schema and the rules between fields.

The schema follows the official SDK's request types
(``anthropic/types/message_create_params.py`` and the block, tool, tool choice
and thinking params it names); the rules follow the API documentation
(tool use, extended thinking, messages). Errors read as the API's do:
``<path>: <what is wrong>``, with pydantic's wording for schema errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .catalog import Catalog
from .errors import ApiError, invalid
from .memo import HEAD_MIN_ITEMS, ByIdentity, Memo, content_key, head_key
from .policies import Contract
from .schema import (
    ANY,
    BOOLEAN,
    INTEGER,
    OBJECT,
    STRING,
    ListOf,
    Obj,
    OneOf,
    SchemaError,
    Spec,
    Tagged,
    check_or,
    enum,
    integer,
    nullable,
    number,
    obj,
)
from .wire import Json, as_dict, dicts

MIN_THINKING_BUDGET = 1024
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")

_CACHE_CONTROL = nullable(obj("type", type=enum("ephemeral"), ttl=enum("5m", "1h")))
_CITATIONS = nullable(ListOf(OBJECT))
_TEXT = obj("text", text=STRING, cache_control=_CACHE_CONTROL, citations=_CITATIONS)
_IMAGE_SOURCE = Tagged(
    {
        "base64": obj(
            "media_type data",
            media_type=enum("image/jpeg", "image/png", "image/gif", "image/webp"),
            data=STRING,
        ),
        "url": obj("url", url=STRING),
        "file": obj("file_id", file_id=STRING),
    }
)
_IMAGE = obj("source", source=_IMAGE_SOURCE, cache_control=_CACHE_CONTROL, transformations=ANY)
_DOCUMENT = obj(
    "source",
    source=Tagged(
        {
            "base64": obj("media_type data", media_type=enum("application/pdf"), data=STRING),
            "text": obj("media_type data", media_type=enum("text/plain"), data=STRING),
            "content": obj("content", content=OneOf((STRING, ListOf(OBJECT)))),
            "url": obj("url", url=STRING),
            "file": obj("file_id", file_id=STRING),
        }
    ),
    title=nullable(STRING),
    context=nullable(STRING),
    citations=nullable(OBJECT),
    cache_control=_CACHE_CONTROL,
)
_SEARCH_RESULT = obj(
    "content source title",
    content=ListOf(Tagged({"text": _TEXT})),
    source=STRING,
    title=STRING,
    citations=nullable(OBJECT),
    cache_control=_CACHE_CONTROL,
)
_SERVER_RESULT = obj("tool_use_id content", open=True, tool_use_id=STRING)
"""Server-tool result blocks are echoed back as the API sent them; their inner shape is the API's."""
_BLOCKS: dict[str, Spec] = {
    "text": _TEXT,
    "image": _IMAGE,
    "document": _DOCUMENT,
    "search_result": _SEARCH_RESULT,
    "thinking": obj("thinking signature", thinking=STRING, signature=STRING),
    "redacted_thinking": obj("data", data=STRING),
    "tool_use": obj(
        "id name input",
        id=STRING,
        name=STRING,
        input=OBJECT,
        caller=ANY,
        toolset_name=nullable(STRING),
        cache_control=_CACHE_CONTROL,
    ),
    "tool_result": obj(
        "tool_use_id",
        tool_use_id=STRING,
        content=OneOf(
            (
                STRING,
                ListOf(
                    Tagged(
                        {
                            "text": _TEXT,
                            "image": _IMAGE,
                            "document": _DOCUMENT,
                            "search_result": _SEARCH_RESULT,
                            "tool_reference": obj("tool_name", open=True, tool_name=STRING),
                        }
                    )
                ),
            )
        ),
        is_error=BOOLEAN,
        toolset_name=nullable(STRING),
        cache_control=_CACHE_CONTROL,
    ),
    "server_tool_use": obj("id name input", open=True, id=STRING, name=STRING, input=OBJECT),
    "container_upload": obj("file_id", file_id=STRING, cache_control=_CACHE_CONTROL),
    **dict.fromkeys(
        (
            "web_search_tool_result",
            "web_fetch_tool_result",
            "code_execution_tool_result",
            "bash_code_execution_tool_result",
            "text_editor_code_execution_tool_result",
            "tool_search_tool_result",
        ),
        _SERVER_RESULT,
    ),
}
_BETA_BLOCKS = (
    "advisor_tool_result",
    "compaction",
    "fallback",
    "mcp_tool_listing",
    "mcp_tool_result",
    "mcp_tool_use",
    "tool_addition",
    "tool_removal",
)
"""Block types only the beta Messages API takes (the SDK's ``types/beta``); their shape is
the beta's."""


def _message(blocks: dict[str, Spec]) -> Obj:
    return obj(
        "role content",
        role=enum("user", "assistant"),
        content=OneOf((STRING, ListOf(Tagged(blocks)))),
    )


_SERVER_TOOLS = (
    "bash_20250124",
    "code_execution_20250522",
    "code_execution_20250825",
    "code_execution_20260120",
    "code_execution_20260521",
    "browser_toolset_20260801",
    "memory_20250818",
    "computer_toolset_20260801",
    "text_editor_20250124",
    "text_editor_20250429",
    "text_editor_20250728",
    "web_search_20250305",
    "web_fetch_20250910",
    "web_search_20260209",
    "web_fetch_20260209",
    "web_fetch_20260309",
    "web_search_20260318",
    "web_fetch_20260318",
    "tool_search_tool_bm25_20251119",
    "tool_search_tool_bm25",
    "tool_search_tool_regex_20251119",
    "tool_search_tool_regex",
)
"""The SDK's versioned server and client tools: their settings differ by version and are
checked by the API, not here (``name`` aside)."""
_CUSTOM_TOOL = obj(
    "name input_schema",
    name=STRING,
    description=STRING,
    input_schema=obj("type", open=True, type=enum("object"), properties=nullable(OBJECT)),
    cache_control=_CACHE_CONTROL,
    strict=BOOLEAN,
    defer_loading=BOOLEAN,
    eager_input_streaming=nullable(BOOLEAN),
    input_examples=ListOf(OBJECT),
    allowed_callers=ListOf(STRING),
)
_BETA_TOOLS = (
    "advisor_20260301",
    "bash_20241022",
    "computer_20241022",
    "computer_20250124",
    "computer_20251124",
    "mcp_toolset",
    "text_editor_20241022",
)


def _tool(kinds: tuple[str, ...]) -> Tagged:
    return Tagged(
        {"custom": _CUSTOM_TOOL, **dict.fromkeys(kinds, obj(open=True))}, default="custom"
    )


_TOOL_CHOICE = Tagged(
    {
        "auto": obj(disable_parallel_tool_use=BOOLEAN),
        "any": obj(disable_parallel_tool_use=BOOLEAN),
        "tool": obj("name", name=STRING, disable_parallel_tool_use=BOOLEAN),
        "none": obj(),
    }
)
_DISPLAY = nullable(enum("summarized", "omitted"))
_THINKING = Tagged(
    {
        "enabled": obj("budget_tokens", budget_tokens=INTEGER, display=_DISPLAY),
        "disabled": obj(),
        "adaptive": obj(display=_DISPLAY),
        "between_tools": obj(),
    }
)
_OUTPUT_FORMAT = nullable(obj("type schema", type=enum("json_schema"), schema=OBJECT))
_BETA = dict.fromkeys(
    (
        "billing_policy",
        "compaction",
        "context_management",
        "fallback_credit_token",
        "fallbacks",
        "mcp_servers",
        "thread",
    ),
    ANY,
)
"""What the SDK's beta client (``client.beta.messages``) sends, with no header to tell it
from a stable request: taken on every request."""
_PROMPT: dict[str, Spec] = {
    "model": STRING,
    "messages": ListOf(_message({**_BLOCKS, **dict.fromkeys(_BETA_BLOCKS, obj(open=True))})),
    "system": OneOf((STRING, ListOf(Tagged({"text": _TEXT})))),
    "tools": ListOf(_tool((*_SERVER_TOOLS, *_BETA_TOOLS))),
    "tool_choice": _TOOL_CHOICE,
    "thinking": _THINKING,
    "cache_control": _CACHE_CONTROL,
    "output_config": obj(
        effort=nullable(enum("low", "medium", "high", "xhigh", "max")), format=_OUTPUT_FORMAT
    ),
    "output_format": _OUTPUT_FORMAT,
    "speed": nullable(enum("standard", "fast")),
    "user_profile_id": STRING,
    "workspace_id": STRING,
    **_BETA,
}
CREATE = Obj(
    {
        **_PROMPT,
        "max_tokens": integer(minimum=0),
        "stream": BOOLEAN,
        "stop_sequences": ListOf(STRING),
        "metadata": obj(user_id=nullable(STRING)),
        "service_tier": enum("auto", "standard_only"),
        "container": ANY,
        "diagnostics": nullable(obj(previous_message_id=nullable(STRING))),
        "inference_geo": nullable(STRING),
        "temperature": number(0, 1),
        "top_p": number(0, 1),
        "top_k": integer(minimum=0),
    },
    frozenset({"model", "messages", "max_tokens"}),
)
"""``temperature``, ``top_p`` and ``top_k`` left the SDK's types but older models still take
them: they are accepted in their documented ranges. ``output_format`` is the structured
outputs beta's spelling of ``output_config.format``."""
COUNT = Obj(_PROMPT, frozenset({"model", "messages"}))
"""``/v1/messages/count_tokens``: the prompt fields only."""


def check_create(body: Json, catalog: Catalog) -> None:
    """Raise the API's 400 (or 404 for the model) for a malformed Messages request."""
    check_or(body, CREATE, _reworded)
    catalog.require("anthropic", body["model"])
    _check_thinking(body)
    _check_prompt(body)


def check_count(body: Json, catalog: Catalog) -> None:
    check_or(body, COUNT, _reworded)
    catalog.require("anthropic", body["model"])
    _check_prompt(body)


def _check_prompt(body: Json) -> None:
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else []):
        if not block["text"]:
            raise invalid(f"system.{i}.text: text content blocks must be non-empty")
    _check_tools(body)
    _check_messages(body["messages"])


def _reworded(error: SchemaError) -> ApiError:
    where = ".".join(str(p) for p in error.path)
    return invalid(f"{where}: {error.message}")


def _thinks(body: Json) -> bool:
    return body.get("thinking", {}).get("type") in ("enabled", "adaptive")


def _check_thinking(body: Json) -> None:
    """Extended thinking: its budget, and the sampling settings it rules out."""
    thinking = body.get("thinking", {})
    if thinking.get("type") == "enabled":
        budget = thinking["budget_tokens"]
        if budget < MIN_THINKING_BUDGET:
            raise invalid(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to "
                f"{MIN_THINKING_BUDGET}"
            )
        if body["max_tokens"] and body["max_tokens"] <= budget:
            raise invalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
    if not _thinks(body):
        return
    if body.get("temperature", 1) != 1:
        raise invalid("`temperature` may only be set to 1 when thinking is enabled.")
    if "top_k" in body:
        raise invalid("`top_k` is not supported when thinking is enabled.")
    if not 0.95 <= body.get("top_p", 1) <= 1:
        raise invalid("`top_p` must be between 0.95 and 1 when thinking is enabled.")
    if body.get("tool_choice", {}).get("type") in ("any", "tool"):
        raise invalid("Thinking may not be enabled when tool_choice forces tool use.")


def _check_tools(body: Json) -> None:
    tools: list[Json] = body.get("tools", [])
    names: set[str] = set()
    for i, tool in enumerate(tools):
        name = str(tool.get("name", ""))
        if tool.get("type", "custom") == "custom" and not _TOOL_NAME.fullmatch(name):
            raise invalid(
                f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )
        if name in names:
            raise invalid("tools: Tool names must be unique.")
        names.add(name)
    choice: Json = body.get("tool_choice", {})
    if choice.get("type") in ("any", "tool") and not tools:
        raise invalid("tool_choice: tool_choice may only be specified while providing tools.")
    if choice.get("type") == "tool" and choice["name"] not in names:
        raise invalid(f"tool_choice.name: Tool '{choice['name']}' not found in provided tools")


def _check_messages(messages: list[Json]) -> None:
    """Non-empty content, and ``tool_use``/``tool_result`` in adjacent turns."""
    if _well_formed(messages, [_shape(_blocks(m)) for m in messages]):
        return
    _raise_malformed(messages)


@dataclass(frozen=True, slots=True)
class _Shape:
    """What the turn rules read in a message's blocks."""

    blocks: int
    empty_text: bool
    uses: frozenset[str]
    results: frozenset[str]
    result_after_other: bool
    """A ``tool_result`` comes after a block of another type."""
    other: bool
    """A block is not a ``tool_result``."""

    def then(self, more: _Shape) -> _Shape:
        """This shape followed by ``more``'s blocks."""
        return _Shape(
            self.blocks + more.blocks,
            self.empty_text or more.empty_text,
            self.uses | more.uses if more.uses else self.uses,  # no copy of a long set for nothing
            self.results | more.results if more.results else self.results,
            self.result_after_other
            or more.result_after_other
            or (self.other and bool(more.results)),
            self.other or more.other,
        )


_SHAPES: Memo[_Shape] = Memo()
"""A long message's shape but its last block's, by content: the N children of a reply with
N tool calls send the same calls and placeholder results, read once for the family."""


def _shape(blocks: list[Json]) -> _Shape:
    if len(blocks) <= HEAD_MIN_ITEMS:
        return _shape_of(blocks)
    key = (head_key(blocks), content_key(blocks[-1]))
    whole = _WHOLE_SHAPES.find(key)
    if whole is None:
        whole = _SHAPES.head(blocks, _shape_of).then(_shape_of(blocks[-1:]))
        _WHOLE_SHAPES.keep(key, len(key[0]) + len(key[1]), whole)
    return whole


_WHOLE_SHAPES: Memo[_Shape] = Memo(second_sight=True)
"""A long message's whole shape, by its head's and its last block's content: a message sent
again whole (the reply each child of one reply repeats) gets the same sets, not a new union
of N ids per child."""


def _shape_of(blocks: list[Json]) -> _Shape:
    uses: set[str] = set()
    results: set[str] = set()
    empty_text = after_other = other = False
    for block in blocks:
        kind = block["type"]
        if kind == "tool_result":
            results.add(str(block["tool_use_id"]))
            after_other = after_other or other
            continue
        other = True
        if kind == "text" and not block["text"]:
            empty_text = True
        elif kind == "tool_use":
            uses.add(str(block["id"]))
    return _Shape(len(blocks), empty_text, frozenset(uses), frozenset(results), after_other, other)


def _well_formed(messages: list[Json], shapes: list[_Shape]) -> bool:
    """Whether ``_raise_malformed`` would find nothing: O(messages), set operations in C."""
    last = len(messages) - 1
    for i, (message, shape) in enumerate(zip(messages, shapes, strict=True)):
        final_assistant = i == last and message["role"] == "assistant"
        if not final_assistant and (not shape.blocks or shape.empty_text):
            return False
        if message["role"] == "user":
            uses = (
                shapes[i - 1].uses if i and messages[i - 1]["role"] == "assistant" else frozenset()
            )
            if shape.result_after_other or not _within(shape.results, uses):
                return False
        elif i < last and not _within(shape.uses, shapes[i + 1].results):
            return False
    return True


def _within(part: frozenset[str], whole: frozenset[str]) -> bool:
    """``part <= whole``; for long sets once per pair: the N children of one reply test the
    same sets of its N call ids (their shapes come from ``_SHAPES`` and ``_WHOLE_SHAPES``)."""
    if len(part) <= HEAD_MIN_ITEMS:
        return part <= whole
    return _SUBSETS.get((part, whole), lambda: part <= whole)


_SUBSETS: ByIdentity[bool] = ByIdentity()


def _raise_malformed(messages: list[Json]) -> None:
    """The API's error for the first rule ``messages`` break, block by block."""
    last = len(messages) - 1
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        final_assistant = i == last and message["role"] == "assistant"
        if not blocks and not final_assistant:
            raise invalid(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        for j, block in enumerate(blocks):
            if block["type"] == "text" and not block["text"] and not final_assistant:
                raise invalid(
                    f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
                )
        if message["role"] == "user":
            _check_results(i, blocks, _uses(messages[i - 1]) if i else set())
        elif i < last and (missing := _uses(message) - _results(messages[i + 1])):
            raise invalid(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(sorted(missing))}. Each `tool_use` block "
                "must have a corresponding `tool_result` block in the next message."
            )


def _check_results(index: int, blocks: list[Json], uses: set[str]) -> None:
    seen_other = False
    for j, block in enumerate(blocks):
        if block["type"] != "tool_result":
            seen_other = True
            continue
        if block["tool_use_id"] not in uses:
            raise invalid(
                f"messages.{index}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {block['tool_use_id']}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        if seen_other:
            raise invalid(
                f"messages.{index}: `tool_result` blocks must come first in the content of a "
                "user message, before any other block."
            )


def _blocks(message: Json) -> list[Json]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[Json] = content
    return blocks


def _uses(message: Json) -> set[str]:
    if message["role"] != "assistant":
        return set()
    return {str(b["id"]) for b in _blocks(message) if b["type"] == "tool_use"}


def _results(message: Json) -> set[str]:
    return {str(b["tool_use_id"]) for b in _blocks(message) if b["type"] == "tool_result"}


def contract(body: Json) -> Contract:
    """What the reply must be: a forced tool's call, JSON of the output format, thinking."""
    tools = {
        str(t.get("name")): as_dict(t.get("input_schema"))
        for t in dicts(body.get("tools"))
        if t.get("type", "custom") == "custom"
    }
    choice = as_dict(body.get("tool_choice"))
    forced: tuple[str, ...] = ()
    if choice.get("type") == "tool":
        forced = (str(choice.get("name")),)
    elif choice.get("type") == "any":
        forced = tuple(tools)
    output = as_dict(as_dict(body.get("output_config")).get("format") or body.get("output_format"))
    schema = output.get("schema") if output.get("type") == "json_schema" else None
    return Contract(
        forced_tools=forced,
        tool_schemas=tools,
        output_schema=as_dict(schema) if schema is not None else None,
        thinking=as_dict(body.get("thinking")).get("type") in ("enabled", "adaptive"),
        tools_allowed=choice.get("type") != "none",
    )
