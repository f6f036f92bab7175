"""What the OpenAI Responses API accepts: its request schema and the rules between fields.

The schema follows the official SDK's request types
(``openai/types/responses/response_create_params.py``, ``input_token_count_params.py``
and the input item, content part, tool, text config and reasoning params they name).
Function tools, messages, function calls and their outputs, reasoning items and
item references are checked field by field; the other item and tool types (the
built-in tools and their calls) are checked by their ``type`` only. Errors are
Chat Completions' (``chat_rules.reworded``): OpenAI words both APIs alike.

Where the real API's behaviour is uncertain the emulator accepts (listed in
docs/emulator.md, Validation): a function tool without ``parameters`` or
``strict``, an ``input_image`` without ``detail``, an ``output_text`` without
``annotations``, ``tool_choice`` without ``tools``.
"""

from __future__ import annotations

import re

from .catalog import Catalog
from .chat_rules import (
    BREAKPOINT,
    NAME,
    NO_REASONING,
    check_format,
    forced,
    function_name,
    is_reasoning,
    not_in_tools,
    pattern_error,
    reworded,
)
from .errors import invalid
from .policies import Contract
from .schema import (
    ANY,
    BOOLEAN,
    OBJECT,
    STRING,
    ListOf,
    MapOf,
    Obj,
    OneOf,
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

MIN_OUTPUT_TOKENS = 16
"""The API refuses a smaller ``max_output_tokens``."""
_THINKS = re.compile(r"o\d|gpt-5(?!-chat)")
"""Models that reason unless told ``reasoning.effort: "none"``."""
_STATUS = nullable(enum("in_progress", "completed", "incomplete"))
_PHASE = nullable(enum("commentary", "final_answer"))


def _by_type(*kinds: str) -> dict[str, Spec]:
    """Item or tool types accepted by their ``type`` alone (built-in tools and their calls)."""
    return {kind: obj(open=True) for kind in kinds}


_INPUT_TEXT = obj("text", text=STRING, prompt_cache_breakpoint=nullable(BREAKPOINT))
_IMAGE_FIELDS: dict[str, Spec] = {
    "detail": nullable(enum("low", "high", "auto", "original")),
    "file_id": nullable(STRING),
    "image_url": nullable(STRING),
    "prompt_cache_breakpoint": nullable(BREAKPOINT),
}
_FILE_FIELDS: dict[str, Spec] = {
    "detail": enum("auto", "low", "high"),
    "file_data": nullable(STRING),
    "file_id": nullable(STRING),
    "file_url": nullable(STRING),
    "filename": nullable(STRING),
    "prompt_cache_breakpoint": nullable(BREAKPOINT),
}
_INPUT_PARTS = Tagged(
    {"input_text": _INPUT_TEXT, "input_image": Obj(_IMAGE_FIELDS), "input_file": Obj(_FILE_FIELDS)}
)
"""What a user, system or developer message and a function's output may hold."""
_OUTPUT_PARTS = Tagged(
    {
        "output_text": obj(
            "text", text=STRING, annotations=ListOf(OBJECT), logprobs=ListOf(OBJECT)
        ),
        "refusal": obj("refusal", refusal=STRING),
    }
)
"""What an assistant message may hold."""


def _message(parts: Tagged, **extra: Spec) -> Obj:
    fields: dict[str, Spec] = {
        "type": enum("message"),
        "content": OneOf((STRING, ListOf(parts))),
        "status": _STATUS,
        "phase": _PHASE,
        **extra,
    }
    return Obj(fields, frozenset({"content"}))


_ITEM = Tagged(
    {
        "message": Tagged(
            {
                "user": _message(_INPUT_PARTS),
                "system": _message(_INPUT_PARTS),
                "developer": _message(_INPUT_PARTS),
                "assistant": _message(_OUTPUT_PARTS, id=STRING),
            },
            tag="role",
        ),
        "function_call": Obj(
            {
                "id": STRING,
                "call_id": STRING,
                "name": STRING,
                "arguments": STRING,
                "namespace": STRING,
                "status": _STATUS,
                "caller": nullable(OBJECT),
                "async": BOOLEAN,
            },
            frozenset({"call_id", "name", "arguments"}),
        ),
        "function_call_output": obj(
            "call_id output",
            id=nullable(STRING),
            call_id=STRING,
            output=OneOf((STRING, ListOf(_INPUT_PARTS))),
            name=nullable(STRING),
            namespace=nullable(STRING),
            status=_STATUS,
            caller=nullable(OBJECT),
        ),
        "reasoning": obj(
            "id summary",
            id=STRING,
            summary=ListOf(obj("text", type=enum("summary_text"), text=STRING)),
            content=ListOf(obj("text", type=enum("reasoning_text"), text=STRING)),
            encrypted_content=nullable(STRING),
            status=_STATUS,
        ),
        "item_reference": obj("id", id=STRING),
        **_by_type(
            "file_search_call",
            "computer_call",
            "computer_call_output",
            "web_search_call",
            "tool_search_call",
            "tool_search_output",
            "additional_tools",
            "configuration_update",
            "compaction",
            "image_generation_call",
            "code_interpreter_call",
            "local_shell_call",
            "local_shell_call_output",
            "shell_call",
            "shell_call_output",
            "apply_patch_call",
            "apply_patch_call_output",
            "mcp_list_tools",
            "mcp_approval_request",
            "mcp_approval_response",
            "mcp_call",
            "custom_tool_call_output",
            "custom_tool_call",
            "compaction_trigger",
            "program",
            "program_output",
        ),
    },
    default="message",
)
_TOOL = Tagged(
    {
        "function": Obj(
            {
                "name": STRING,
                "description": nullable(STRING),
                "parameters": nullable(OBJECT),
                "strict": nullable(BOOLEAN),
                "output_schema": nullable(OBJECT),
                "defer_loading": BOOLEAN,
                "allowed_callers": nullable(ListOf(enum("direct", "programmatic"))),
                "async": BOOLEAN,
            },
            frozenset({"name"}),
        ),
        "custom": obj("name", open=True, name=STRING),
        **_by_type(
            "file_search",
            "computer",
            "computer_use_preview",
            "web_search",
            "web_search_2025_08_26",
            "web_search_preview",
            "web_search_preview_2025_03_11",
            "mcp",
            "code_interpreter",
            "programmatic_tool_calling",
            "image_generation",
            "local_shell",
            "shell",
            "namespace",
            "tool_search",
            "apply_patch",
        ),
    }
)
_TOOL_CHOICE = OneOf(
    (
        enum("none", "auto", "required"),
        Tagged(
            {
                "function": obj("name", name=STRING),
                "custom": obj("name", name=STRING),
                "allowed_tools": obj(
                    "mode tools", mode=enum("auto", "required"), tools=ListOf(OBJECT)
                ),
                "mcp": obj("server_label", server_label=STRING, name=nullable(STRING)),
                **_by_type(
                    "file_search",
                    "web_search_preview",
                    "web_search_preview_2025_03_11",
                    "computer",
                    "computer_use_preview",
                    "computer_use",
                    "image_generation",
                    "code_interpreter",
                    "programmatic_tool_calling",
                    "apply_patch",
                    "shell",
                ),
            }
        ),
    )
)
_TEXT = obj(
    format=Tagged(
        {
            "text": obj(),
            "json_object": obj(),
            "json_schema": obj(
                "name schema",
                name=STRING,
                schema=OBJECT,
                description=STRING,
                strict=nullable(BOOLEAN),
            ),
        }
    ),
    verbosity=nullable(enum("low", "medium", "high")),
)
_REASONING = nullable(
    obj(
        effort=nullable(enum("none", "minimal", "low", "medium", "high", "xhigh", "max")),
        summary=nullable(enum("auto", "concise", "detailed")),
        generate_summary=nullable(enum("auto", "concise", "detailed")),
        context=nullable(enum("auto", "current_turn", "all_turns")),
        mode=STRING,
    )
)
_INCLUDE = enum(
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
_PROMPT_FIELDS: dict[str, Spec] = {
    "model": STRING,
    "input": OneOf((STRING, ListOf(_ITEM))),
    "instructions": nullable(STRING),
    "previous_response_id": nullable(STRING),
    "conversation": nullable(OneOf((STRING, obj("id", id=STRING)))),
    "tools": ListOf(_TOOL),
    "tool_choice": _TOOL_CHOICE,
    "parallel_tool_calls": nullable(BOOLEAN),
    "text": nullable(_TEXT),
    "reasoning": _REASONING,
    "truncation": nullable(enum("auto", "disabled")),
}
"""What both ``responses.create`` and ``responses.input_tokens.count`` take."""
_CREATE_FIELDS: dict[str, Spec] = {
    **_PROMPT_FIELDS,
    "stream": nullable(BOOLEAN),
    "stream_options": nullable(obj(include_obfuscation=BOOLEAN)),
    "background": nullable(BOOLEAN),
    "background_options": obj(
        completion_window=enum("soonest", "2h", "8h"), continuation_id=STRING
    ),
    "include": nullable(ListOf(_INCLUDE)),
    "max_output_tokens": nullable(integer(minimum=MIN_OUTPUT_TOKENS)),
    "max_tool_calls": nullable(integer(minimum=1)),
    "temperature": nullable(number(0, 2)),
    "top_p": nullable(number(0, 1)),
    "top_logprobs": nullable(integer(0, 20)),
    "metadata": nullable(MapOf(STRING)),
    "store": nullable(BOOLEAN),
    "user": STRING,
    "safety_identifier": nullable(STRING),
    "service_tier": nullable(
        enum("auto", "default", "flex", "scale", "priority", "fast", "ultrafast")
    ),
    "prompt_cache_key": nullable(STRING),
    "prompt_cache_retention": nullable(enum("in_memory", "in-memory", "24h")),
    "prompt_cache_options": obj(
        comparison_response_id=nullable(STRING),
        mode=enum("implicit", "explicit"),
        prewarm=BOOLEAN,
        ttl=enum("30m", "12h"),
    ),
    "prompt": nullable(obj("id", id=STRING, variables=nullable(MapOf(ANY)), version=STRING)),
    "context_management": nullable(ListOf(obj("type", open=True, type=STRING))),
    "moderation": nullable(OBJECT),
    "access_programs": OBJECT,
    "image": OBJECT,
}
_COUNT_FIELDS: dict[str, Spec] = {**_PROMPT_FIELDS, "personality": STRING}

CREATE = Obj(_CREATE_FIELDS, frozenset({"model"}))
COUNT = Obj(_COUNT_FIELDS)
_LOCAL_CREATE = Obj(_CREATE_FIELDS, frozenset({"model"}), open=True)
_LOCAL_COUNT = Obj(_COUNT_FIELDS, open=True)
"""Registered ids outside OpenAI's naming (a local server's model) may take their own fields."""


def check_create(body: Json, catalog: Catalog) -> None:
    """Raise OpenAI's 400 (or its 404 for the model) for a malformed ``responses.create``."""
    _check(body, catalog, CREATE, _LOCAL_CREATE)


def check_count(body: Json, catalog: Catalog) -> None:
    """The same for ``responses.input_tokens.count`` (whose ``model`` is optional)."""
    _check(body, catalog, COUNT, _LOCAL_COUNT)


def _check(body: Json, catalog: Catalog, spec: Obj, local: Obj) -> None:
    """The schema (``local`` for registered ids outside OpenAI's naming), the model id,
    then the rules between fields."""
    model = body.get("model")
    own = not isinstance(model, str) or catalog.in_scheme("openai", model)
    check_or(body, spec if own else local, reworded)
    if isinstance(model, str):
        catalog.require("openai", model)
        if own:
            _check_model_fit(body, model)
    _check_tools(body)
    _check_text(body)


def _check_model_fit(body: Json, model: str) -> None:
    """Reasoning models take no sampling settings; older models take no ``reasoning``."""
    if is_reasoning(model):
        for name in ("temperature", "top_p"):
            if body.get(name) not in (None, 1):
                raise invalid(
                    f"Unsupported parameter: '{name}' is not supported with this model.",
                    param=name,
                    code="unsupported_parameter",
                )
    elif NO_REASONING.match(model) and as_dict(body.get("reasoning")).get("effort") is not None:
        raise invalid(
            "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
            param="reasoning.effort",
            code="unsupported_parameter",
        )


def _check_tools(body: Json) -> None:
    """Function names follow the pattern; a ``tool_choice`` names a declared tool."""
    names: dict[str, set[str]] = {"function": set(), "custom": set()}
    for i, tool in enumerate(dicts(body.get("tools"))):
        if tool["type"] == "function" and not NAME.fullmatch(tool["name"]):
            raise pattern_error(f"tools[{i}].name")
        if tool["type"] in names:
            names[tool["type"]].add(tool["name"])
    choice = as_dict(body.get("tool_choice"))
    kind = choice.get("type")
    if kind in names and choice["name"] not in names[kind]:
        raise not_in_tools(kind, choice["name"])
    if kind == "allowed_tools":
        for tool in dicts(choice["tools"]):
            if tool.get("type") == "function" and function_name(tool) not in names["function"]:
                raise not_in_tools("function", function_name(tool))


def _check_text(body: Json) -> None:
    """A schema's name follows the pattern; JSON mode needs the word 'json' in the prompt."""
    format = as_dict(as_dict(body.get("text")).get("format"))
    params = ("text.format", "text.format.name")
    check_format(format.get("type"), format.get("name"), params, ("input", _prompt_text(body)))


def _prompt_text(body: Json) -> str:
    """The instructions and every message's text: where JSON mode looks for 'json'."""
    texts = [str(body.get("instructions") or "")]
    given = body.get("input")
    for item in [{"content": given}] if isinstance(given, str) else dicts(given):
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        else:
            texts += [str(p.get("text", "")) for p in dicts(content)]
    return "\n".join(texts)


def contract(body: Json) -> Contract:
    """What the reply must be: a call of a forced function, JSON of ``text.format``,
    reasoning first on a reasoning model."""
    tools = {
        str(t.get("name")): as_dict(t.get("parameters"))
        for t in dicts(body.get("tools"))
        if t.get("type") == "function"
    }
    format = as_dict(as_dict(body.get("text")).get("format"))
    return Contract(
        forced_tools=forced(body.get("tool_choice"), tuple(tools)),
        tool_schemas=tools,
        output_schema=as_dict(format.get("schema"))
        if format.get("type") == "json_schema"
        else None,
        json_object=format.get("type") == "json_object",
        thinking=_reasons(body),
        tools_allowed=body.get("tool_choice") != "none",
    )


def _reasons(body: Json) -> bool:
    """Whether the model reasons: a reasoning model unless ``effort`` is ``none``, any model
    given an ``effort``."""
    effort = as_dict(body.get("reasoning")).get("effort")
    if effort is not None:
        return bool(effort != "none")
    return _THINKS.match(str(body.get("model"))) is not None
