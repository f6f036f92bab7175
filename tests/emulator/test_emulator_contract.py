"""Default replies honour the request's contract, through the official SDKs over HTTP:
forced tool choices, structured outputs, thinking and unknown models."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import jsonschema
import openai
import pydantic
import pytest
from _emu_helpers import CLOSE, OPUS_41, TOOL
from google import genai
from google.genai import errors, types
from hypothesis import given
from hypothesis import strategies as st

from forkagent.emulator import Emulator
from forkagent.emulator.sample import sample

HELLO: list[Any] = [{"role": "user", "content": "Close ticket A."}]


class Ticket(pydantic.BaseModel):
    id: str
    priority: int = pydantic.Field(ge=1, le=5)
    tags: list[str]
    owner: str | None


SCHEMAS: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": "integer", "minimum": 10, "maximum": 20, "multipleOf": 3},
    {"type": "number", "exclusiveMinimum": 0.5},
    {"type": ["null", "boolean"]},
    {"enum": ["a", "b"]},
    {"const": {"x": 1}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3},
    {"type": "string", "minLength": 12, "maxLength": 14},
    {"type": "string", "format": "date-time"},
    {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"a": {"type": "string"}}}]},
    {
        "allOf": [
            {"properties": {"a": {"type": "string"}}},
            {"properties": {"b": {"type": "integer"}}},
        ]
    },
    {
        "type": "object",
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
        "properties": {"root": {"$ref": "#/$defs/node"}},
    },
    Ticket.model_json_schema(),
    CLOSE["input_schema"],
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_sampled_values_are_valid_against_their_schema(schema: dict[str, Any]) -> None:
    jsonschema.validate(sample(schema), schema)
    assert sample(schema) == sample(schema)


def _tool_input(message: anthropic.types.Message) -> tuple[str, object]:
    calls = [b for b in message.content if b.type == "tool_use"]
    assert len(calls) == 1
    assert message.stop_reason == "tool_use"
    return calls[0].name, calls[0].input


def test_anthropic_forced_tool_choice_calls_an_allowed_tool(claude: anthropic.Anthropic) -> None:
    tools: Any = [TOOL, CLOSE]
    anyone = claude.messages.create(
        model=OPUS_41, max_tokens=256, messages=HELLO, tools=tools, tool_choice={"type": "any"}
    )
    name, arguments = _tool_input(anyone)
    assert name == "lookup"
    jsonschema.validate(arguments, TOOL["input_schema"])
    named = claude.messages.create(
        model=OPUS_41,
        max_tokens=256,
        messages=HELLO,
        tools=tools,
        tool_choice={"type": "tool", "name": "close"},
    )
    name, arguments = _tool_input(named)
    assert name == "close"
    jsonschema.validate(arguments, CLOSE["input_schema"])


def test_anthropic_structured_output_is_json_of_the_schema(claude: anthropic.Anthropic) -> None:
    schema = Ticket.model_json_schema()
    reply = claude.messages.create(
        model=OPUS_41,
        max_tokens=512,
        messages=HELLO,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert reply.content[0].type == "text"
    Ticket.model_validate_json(reply.content[0].text)


def test_anthropic_thinking_comes_first_and_signed(claude: anthropic.Anthropic) -> None:
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    reply = claude.messages.create(
        model=OPUS_41, max_tokens=2048, messages=HELLO, thinking=thinking
    )
    first = reply.content[0]
    assert first.type == "thinking"
    assert first.thinking
    assert first.signature
    assert reply.content[1].type == "text"
    with claude.messages.stream(
        model=OPUS_41, max_tokens=2048, messages=HELLO, thinking=thinking
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].type == "thinking"
    assert streamed.content[0].signature == first.signature


def test_anthropic_scripted_replies_stay_as_they_are(
    claude: anthropic.Anthropic, emu: Emulator
) -> None:
    emu.script("plain words")
    tools: Any = [TOOL]
    reply = claude.messages.create(
        model=OPUS_41, max_tokens=256, messages=HELLO, tools=tools, tool_choice={"type": "any"}
    )
    assert [b.type for b in reply.content] == ["text"]


def test_anthropic_unknown_model_is_not_found(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        claude.messages.create(model="invalid-model-name", max_tokens=64, messages=HELLO)
    assert raised.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "model: invalid-model-name"},
        "request_id": raised.value.body["request_id"],  # type: ignore[index]
    }


FUNCTIONS: Any = [
    {"type": "function", "function": {"name": "lookup", "parameters": TOOL["input_schema"]}},
    {"type": "function", "function": {"name": "close", "parameters": CLOSE["input_schema"]}},
]


def test_openai_required_tool_choice_calls_a_tool(oai: openai.OpenAI) -> None:
    required = oai.chat.completions.create(
        model="gpt-4.1", messages=HELLO, tools=FUNCTIONS, tool_choice="required"
    )
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    named = oai.chat.completions.create(
        model="gpt-4.1",
        messages=HELLO,
        tools=FUNCTIONS,
        tool_choice={"type": "function", "function": {"name": "close"}},
    )
    calls = named.choices[0].message.tool_calls or []
    call = calls[0]
    assert isinstance(call, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "close"
    jsonschema.validate(json.loads(call.function.arguments), CLOSE["input_schema"])


def test_openai_structured_output_parses(oai: openai.OpenAI) -> None:
    parsed = oai.chat.completions.parse(model="gpt-4.1", messages=HELLO, response_format=Ticket)
    assert isinstance(parsed.choices[0].message.parsed, Ticket)
    mode = oai.chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format={"type": "json_object"},
    )
    assert isinstance(json.loads(mode.choices[0].message.content or ""), dict)


def test_openai_reasoning_models_report_reasoning_tokens(oai: openai.OpenAI) -> None:
    def reasoning(**params: Any) -> int:
        usage = oai.chat.completions.create(messages=HELLO, **params).usage
        assert usage is not None
        assert usage.completion_tokens_details is not None
        return usage.completion_tokens_details.reasoning_tokens or 0

    assert reasoning(model="gpt-5") > 0
    assert reasoning(model="gpt-4.1") == 0
    assert reasoning(model="gpt-5", reasoning_effort="none") == 0


def test_openai_unknown_model_is_not_found(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        oai.chat.completions.create(model="invalid-model-name", messages=HELLO)
    assert raised.value.code == "model_not_found"


def _declarations() -> list[types.Tool]:
    return [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name="lookup", parameters_json_schema=TOOL["input_schema"]
                ),
                types.FunctionDeclaration(
                    name="close", parameters_json_schema=CLOSE["input_schema"]
                ),
            ]
        )
    ]


def test_gemini_mode_any_calls_an_allowed_function(gemini: genai.Client) -> None:
    calling = types.FunctionCallingConfig(
        mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["close"]
    )
    reply = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="Close ticket A.",
        config=types.GenerateContentConfig(
            tools=_declarations(),
            tool_config=types.ToolConfig(function_calling_config=calling),
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        ),
    )
    calls = reply.function_calls or []
    assert [c.name for c in calls] == ["close"]
    jsonschema.validate(calls[0].args, CLOSE["input_schema"])


def test_gemini_structured_output_parses(gemini: genai.Client) -> None:
    reply = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="A ticket, please.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=Ticket
        ),
    )
    assert isinstance(reply.parsed, Ticket)
    raw = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="A ticket, please.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=CLOSE["input_schema"]
        ),
    )
    jsonschema.validate(json.loads(raw.text or ""), CLOSE["input_schema"])


def test_gemini_include_thoughts_yields_a_thought(gemini: genai.Client) -> None:
    reply = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="Hello.",
        config=types.GenerateContentConfig(
            thinking_config=types.ThinkingConfig(include_thoughts=True)
        ),
    )
    assert reply.candidates
    content = reply.candidates[0].content
    assert content is not None
    parts = content.parts or []
    assert parts[0].thought
    assert reply.usage_metadata is not None
    assert (reply.usage_metadata.thoughts_token_count or 0) > 0


def test_gemini_unknown_model_is_not_found(gemini: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(model="invalid-model-name", contents="Hello.")
    assert raised.value.code == 404
    assert raised.value.status == "NOT_FOUND"


def _schemas() -> st.SearchStrategy[dict[str, Any]]:
    """JSON schemas of the kinds structured outputs and tool inputs use, nested."""
    leaves = st.one_of(
        st.builds(
            lambda low, span: {"type": "integer", "minimum": low, "maximum": low + span},
            st.integers(-50, 50),
            st.integers(0, 20),
        ),
        st.builds(
            lambda low: {"type": "number", "exclusiveMinimum": low},
            st.floats(-10, 10, allow_nan=False),
        ),
        st.builds(
            lambda shortest, extra: {
                "type": "string",
                "minLength": shortest,
                "maxLength": shortest + extra,
            },
            st.integers(0, 30),
            st.integers(0, 5),
        ),
        st.sampled_from(
            [
                {"type": "boolean"},
                {"type": "null"},
                {"type": "string", "format": "date-time"},
                {"type": "string", "format": "email"},
                {"enum": ["red", "green", 3]},
                {"const": "fixed"},
            ]
        ),
    )

    def nest(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        names = st.text("abcdefgh", min_size=1, max_size=6)
        return st.one_of(
            st.builds(
                lambda props, strict: {
                    "type": "object",
                    "properties": props,
                    "required": sorted(props) if strict else [],
                    "additionalProperties": False,
                },
                st.dictionaries(names, inner, max_size=4),
                st.booleans(),
            ),
            st.builds(
                lambda item, least: {"type": "array", "items": item, "minItems": least},
                inner,
                st.integers(0, 3),
            ),
            st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
            inner.filter(
                lambda a: a.get("type") not in (None, "null") and isinstance(a["type"], str)
            ).map(lambda a: {**a, "type": [a["type"], "null"]}),
        )

    return st.recursive(leaves, nest, max_leaves=12)


@given(_schemas())
def test_any_sampled_value_is_valid_against_its_schema(schema: dict[str, Any]) -> None:
    jsonschema.validate(sample(schema), schema)
