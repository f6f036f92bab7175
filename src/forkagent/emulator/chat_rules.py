"""What Chat Completions accepts: its request schema and the rules between fields.

The schema follows the official SDK's request types
(``openai/types/chat/completion_create_params.py`` and the message, content
part and tool params it names); the rules follow OpenAI's API reference and
its reasoning-model guide. Errors carry ``param`` and ``code`` as OpenAI
fills them (``invalid_value``, ``unknown_parameter``, ``unsupported_parameter``...).

DashScope, DeepSeek and local servers (vLLM, llama.cpp: registered model ids
outside OpenAI's naming) take OpenAI's fields plus their own
(``enable_thinking``, ``cache_salt``...) and ignore what they do not know: for
their model ids unknown top-level fields are accepted, the rest is checked alike.
"""

from __future__ import annotations

import re
from typing import Any

from .catalog import Catalog
from .errors import ApiError, invalid
from .policies import Contract
from .profiles import ChatProfile
from .schema import (
    ANY,
    BOOLEAN,
    INTEGER,
    OBJECT,
    STRING,
    ListOf,
    MapOf,
    Obj,
    OneOf,
    Path,
    SchemaError,
    Spec,
    Tagged,
    check_or,
    enum,
    integer,
    json_kind,
    nullable,
    number,
    obj,
)
from .wire import Json, as_dict, dicts

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_REASONING = re.compile(
    r"o\d(?:-[a-z0-9.]+)*|gpt-5(?:-(?:mini|nano|pro|codex))?(?:-\d{4}-\d{2}-\d{2})?"
)
"""Reasoning models that take neither sampling settings nor ``max_tokens`` (the newer gpt-5.x
releases take ``temperature`` with reasoning off, so they are not in this list)."""
NO_REASONING = re.compile(r"gpt-4|gpt-3\.5|chatgpt-4o")
"""Models that refuse ``reasoning_effort``."""


BREAKPOINT = obj("mode", mode=enum("explicit"), ttl=enum("30m", "12h"))
"""OpenAI's explicit cache breakpoint on a content part (both of its APIs)."""
_MARKERS: dict[str, Spec] = {
    "prompt_cache_breakpoint": BREAKPOINT,
    "cache_control": obj("type", type=enum("ephemeral")),
}
"""A content part's cache breakpoint: OpenAI's explicit breakpoints, DashScope's markers."""


def _text_part(marker: str | None) -> Obj:
    fields: dict[str, Spec] = {"type": enum("text"), "text": STRING}
    if marker:
        fields[marker] = _MARKERS[marker]
    return Obj(fields, frozenset({"text"}))


def _message(marker: str | None) -> Tagged:
    text = _text_part(marker)
    plain = OneOf((STRING, ListOf(Tagged({"text": text}))))
    user_parts = Tagged(
        {
            "text": text,
            "image_url": obj(
                "image_url",
                image_url=obj("url", url=STRING, detail=enum("auto", "low", "high")),
            ),
            "input_audio": obj(
                "input_audio", input_audio=obj("data format", data=STRING, format=STRING)
            ),
            "file": obj("file", file=obj(file_data=STRING, file_id=STRING, filename=STRING)),
        }
    )
    call = Tagged(
        {
            "function": obj(
                "id function",
                id=STRING,
                function=obj("name arguments", name=STRING, arguments=STRING),
            ),
            "custom": obj(
                "id custom", id=STRING, custom=obj("name input", name=STRING, input=STRING)
            ),
        }
    )
    return Tagged(
        {
            "system": obj("content", content=plain, name=STRING),
            "developer": obj("content", content=plain, name=STRING),
            "user": obj("content", content=OneOf((STRING, ListOf(user_parts))), name=STRING),
            "assistant": obj(
                content=nullable(
                    OneOf((STRING, ListOf(Tagged({"text": text, "refusal": OBJECT}))))
                ),
                name=STRING,
                tool_calls=ListOf(call),
                refusal=nullable(STRING),
                audio=nullable(OBJECT),
                function_call=nullable(OBJECT),
                reasoning_content=nullable(STRING),
            ),
            "tool": obj("content tool_call_id", content=plain, tool_call_id=STRING),
            "function": obj("name", content=nullable(STRING), name=STRING),
        },
        tag="role",
    )


_TOOL = Tagged(
    {
        "function": obj(
            "function",
            function=obj(
                "name",
                name=STRING,
                description=STRING,
                parameters=OBJECT,
                strict=nullable(BOOLEAN),
            ),
        ),
        "custom": obj("custom", custom=obj("name", open=True, name=STRING)),
    }
)
_TOOL_CHOICE = OneOf(
    (
        enum("none", "auto", "required"),
        Tagged(
            {
                "function": obj("function", function=obj("name", name=STRING)),
                "custom": obj("custom", custom=obj("name", name=STRING)),
                "allowed_tools": obj("allowed_tools", allowed_tools=OBJECT),
            }
        ),
    )
)
_RESPONSE_FORMAT = Tagged(
    {
        "text": obj(),
        "json_object": obj(),
        "json_schema": obj(
            "json_schema",
            json_schema=obj(
                "name", name=STRING, description=STRING, schema=OBJECT, strict=nullable(BOOLEAN)
            ),
        ),
    }
)


def _request(marker: str | None, *, open: bool) -> Obj:
    fields: dict[str, Spec] = {
        "model": STRING,
        "messages": ListOf(_message(marker), min_items=1),
        "stream": nullable(BOOLEAN),
        "stream_options": nullable(obj(include_usage=BOOLEAN, include_obfuscation=BOOLEAN)),
        "max_tokens": nullable(integer(minimum=1)),
        "max_completion_tokens": nullable(integer(minimum=1)),
        "temperature": nullable(number(0, 2)),
        "top_p": nullable(number(0, 1)),
        "n": nullable(integer(1, 128)),
        "presence_penalty": nullable(number(-2, 2)),
        "frequency_penalty": nullable(number(-2, 2)),
        "logprobs": nullable(BOOLEAN),
        "top_logprobs": nullable(integer(0, 20)),
        "logit_bias": nullable(MapOf(integer(-100, 100))),
        "stop": nullable(OneOf((STRING, ListOf(STRING, max_items=4)))),
        "seed": nullable(INTEGER),
        "tools": ListOf(_TOOL),
        "tool_choice": _TOOL_CHOICE,
        "parallel_tool_calls": BOOLEAN,
        "response_format": _RESPONSE_FORMAT,
        "reasoning_effort": nullable(enum("none", "minimal", "low", "medium", "high", "xhigh")),
        "verbosity": nullable(enum("low", "medium", "high")),
        "user": STRING,
        "safety_identifier": STRING,
        "prompt_cache_key": STRING,
        "prompt_cache_retention": nullable(enum("in-memory", "in_memory", "24h")),
        "prompt_cache_options": nullable(obj(mode=enum("implicit", "explicit"), ttl=enum("30m"))),
        "store": nullable(BOOLEAN),
        "metadata": nullable(MapOf(STRING)),
        "service_tier": nullable(enum("auto", "default", "flex", "scale", "priority")),
        "modalities": nullable(ListOf(enum("text", "audio"))),
        "audio": nullable(OBJECT),
        "prediction": nullable(OBJECT),
        "web_search_options": OBJECT,
        "moderation": ANY,
        "functions": ListOf(OBJECT),
        "function_call": OneOf((STRING, OBJECT)),
    }
    return Obj(fields, frozenset({"model", "messages"}), open)


CREATE = _request("prompt_cache_breakpoint", open=False)
_DASHSCOPE = _request("cache_control", open=True)
_COMPATIBLE = _request(None, open=True)


def check_create(body: Json, profile: ChatProfile, catalog: Catalog) -> None:
    """Raise OpenAI's 400 (or 404 for the model) for a malformed request."""
    model = body.get("model")
    local = isinstance(model, str) and not catalog.in_scheme("openai", model)
    openai = profile == "openai" and not local
    spec = CREATE if openai else _DASHSCOPE if profile == "dashscope" else _COMPATIBLE
    check_or(body, spec, reworded)
    catalog.require("openai", body["model"])
    if openai:
        _check_model_fit(body)
    _check_options(body)
    _check_tools(body)


def _param(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else part
    return out


def reworded(error: SchemaError) -> ApiError:
    """A schema error in OpenAI's words and codes."""
    param = _param(error.path)
    problem = error.problem
    if problem == "unknown_field":
        if len(error.path) == 1:
            message = f"Unrecognized request argument supplied: {param}"
        else:
            message = f"Unknown parameter: '{param}'."
        return invalid(message, param=param, code="unknown_parameter")
    if problem == "missing":
        message = f"Missing required parameter: '{param}'."
        return invalid(message, param=param, code="missing_required_parameter")
    if problem in ("enum", "tag"):
        allowed = ", ".join(f"'{c}'" for c in error.bound)
        message = f"Invalid value: '{error.value}'. Supported values are: {allowed}."
        return invalid(message, param=param, code="invalid_value")
    if problem == "type":
        expected = " or ".join(_KIND_WORDS.get(k, k) for k in error.bound)
        message = f"Invalid type for '{param}': expected {expected}, but got {_kind_word(error.value)} instead."
        return invalid(message, param=param, code="invalid_type")
    if problem == "too_short":
        message = (
            f"Invalid '{param}': empty array. Expected an array with minimum length "
            f"{error.bound}, but got an empty array instead."
        )
        return invalid(message, param=param, code="empty_array")
    kind = "integer" if isinstance(error.value, int) else "decimal"
    side = "below_min" if problem == "below_min" else "above_max"
    words = "below minimum" if side == "below_min" else "above maximum"
    relation = ">=" if side == "below_min" else "<="
    message = (
        f"Invalid '{param}': {kind} {words} value. Expected a value {relation} "
        f"{error.bound:g}, but got {error.value} instead."
    )
    return invalid(message, param=param, code=f"{kind}_{side}_value")


_KIND_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a decimal",
    "boolean": "a boolean",
    "object": "an object",
    "array": "an array",
    "null": "null",
}


def _kind_word(value: Any) -> str:
    return _KIND_WORDS[json_kind(value)]


def is_reasoning(model: str) -> bool:
    return _REASONING.fullmatch(model) is not None


def _check_model_fit(body: Json) -> None:
    """Settings a model family refuses (reasoning models: no ``max_tokens``, no sampling)."""
    model = body["model"]
    if is_reasoning(model):
        if body.get("max_tokens") is not None:
            raise invalid(
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                param="max_tokens",
                code="unsupported_parameter",
            )
        for name in ("temperature", "top_p"):
            if body.get(name) not in (None, 1):
                raise invalid(
                    f"Unsupported value: '{name}' does not support {body[name]} with this "
                    "model. Only the default (1) value is supported.",
                    param=name,
                    code="unsupported_value",
                )
        if body.get("stop") is not None:
            raise invalid(
                "Unsupported parameter: 'stop' is not supported with this model.",
                param="stop",
                code="unsupported_parameter",
            )
    elif NO_REASONING.match(model) and body.get("reasoning_effort") is not None:
        raise invalid(
            "Unsupported parameter: 'reasoning_effort' is not supported with this model.",
            param="reasoning_effort",
            code="unsupported_parameter",
        )


def _check_options(body: Json) -> None:
    if body.get("stream_options") is not None and not body.get("stream"):
        raise invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )
    if body.get("top_logprobs") is not None and not body.get("logprobs"):
        raise invalid(
            "Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
            "'top_logprobs' is used.",
            param="top_logprobs",
            code="invalid_value",
        )
    response_format = as_dict(body.get("response_format"))
    check_format(
        response_format.get("type"),
        as_dict(response_format.get("json_schema")).get("name"),
        ("response_format", "response_format.json_schema.name"),
        ("messages", _all_text(body)),
    )


def check_format(
    kind: object, name: object, params: tuple[str, str], prompt: tuple[str, str]
) -> None:
    """A ``json_schema`` format's name follows the pattern; JSON mode needs the word 'json'
    in the prompt. ``params`` are the format's and its name's, ``prompt`` the prompt's
    param and its text."""
    if kind == "json_schema" and not NAME.fullmatch(str(name)):
        raise pattern_error(params[1])
    if kind == "json_object" and "json" not in prompt[1].lower():
        raise invalid(
            f"'{prompt[0]}' must contain the word 'json' in some form, to use '{params[0]}' "
            "of type 'json_object'.",
            param=prompt[0],
            code="invalid_value",
        )


def _all_text(body: Json) -> str:
    texts = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(p.get("text", "")) for p in content]
    return "\n".join(texts)


def pattern_error(param: str) -> ApiError:
    return invalid(
        f"Invalid '{param}': string does not match pattern. Expected a string that matches "
        "the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
        param=param,
        code="invalid_value",
    )


def _check_tools(body: Json) -> None:
    tools: list[Json] = body.get("tools", [])
    names = set()
    for i, tool in enumerate(tools):
        if tool["type"] != "function":
            continue
        name = tool["function"]["name"]
        if not NAME.fullmatch(name):
            raise pattern_error(f"tools[{i}].function.name")
        names.add(name)
    for field in ("tool_choice", "parallel_tool_calls"):
        if field in body and not tools:
            raise invalid(
                f"Invalid value for '{field}': '{field}' is only allowed when 'tools' are "
                "specified.",
                param=field,
                code="invalid_value",
            )
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice["type"] == "function":
        name = choice["function"]["name"]
        if name not in names:
            raise not_in_tools("function", name)


def not_in_tools(kind: str, name: str) -> ApiError:
    """A ``tool_choice`` naming a tool the request does not declare."""
    return invalid(
        f"Invalid value for 'tool_choice': {kind} '{name}' is not among the {kind}s in 'tools'.",
        param="tool_choice",
        code="invalid_value",
    )


def contract(body: Json, profile: ChatProfile) -> Contract:
    """What the reply must be: a call of a required tool, JSON of the response format, reasoning."""
    tools = {
        str(as_dict(t.get("function")).get("name")): as_dict(
            as_dict(t.get("function")).get("parameters")
        )
        for t in dicts(body.get("tools"))
        if t.get("type") == "function"
    }
    response_format = as_dict(body.get("response_format"))
    schema = as_dict(response_format.get("json_schema")).get("schema")
    return Contract(
        forced_tools=forced(body.get("tool_choice"), tuple(tools)),
        tool_schemas=tools,
        output_schema=as_dict(schema) if response_format.get("type") == "json_schema" else None,
        json_object=response_format.get("type") == "json_object",
        thinking=_reasons(body, profile),
        tools_allowed=body.get("tool_choice") != "none",
    )


def forced(choice: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """The functions a ``tool_choice`` forces, on Chat Completions and the Responses API
    alike (which name a function as ``function.name`` and as ``name``, and nest
    ``allowed_tools`` or not)."""
    if choice == "required":
        return names
    choice = as_dict(choice)
    if choice.get("type") == "function":
        return (function_name(choice),)
    allowed = as_dict(choice.get("allowed_tools")) or choice
    if choice.get("type") == "allowed_tools" and allowed.get("mode") == "required":
        listed = [function_name(t) for t in dicts(allowed.get("tools"))]
        return tuple(n for n in listed if n in names)
    return ()


def function_name(named: Json) -> str:
    """A function's name, as Chat Completions (``function.name``) or Responses (``name``)
    spell it."""
    return str(as_dict(named.get("function")).get("name", named.get("name")))


def _reasons(body: Json, profile: ChatProfile) -> bool:
    """Whether the model reasons before it answers (hence reports reasoning tokens)."""
    model = str(body.get("model"))
    if profile == "dashscope":
        return body.get("enable_thinking") is True
    if profile == "deepseek":
        thinking = as_dict(body.get("thinking")).get("type")
        return "reasoner" in model or thinking == "enabled"
    effort = body.get("reasoning_effort")
    if effort is not None:
        return bool(effort != "none")
    return is_reasoning(model)
