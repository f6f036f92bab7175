"""The Responses API route, strict: malformed requests get OpenAI's status and error shape,
and default replies honour the request's contract.

Everything goes through the official openai SDK over loopback HTTP; malformed bodies
are sent with the client's own ``post`` (the SDK sends whatever body it is given).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pydantic
import pytest
from _emu_helpers import CLOSE, changed
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseFunctionToolCall,
    ResponseReasoningItem,
)

from forkagent.emulator import Emulator, Latency, serve
from forkagent.emulator.responses_rules import COUNT, CREATE
from forkagent.emulator.schema import ListOf, OneOf, Spec, Tagged

Body = dict[str, Any]
CLOSE_SCHEMA: Body = CLOSE["input_schema"]
LOOKUP_SCHEMA: Body = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
}
TOOLS: list[FunctionToolParam] = [
    {"type": "function", "name": "lookup", "parameters": LOOKUP_SCHEMA, "strict": False},
    {"type": "function", "name": "close", "parameters": CLOSE_SCHEMA, "strict": False},
]
BASE: Body = {"model": "gpt-4.1", "input": "Close ticket A."}
CALL: Body = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}
OUTPUT: Body = {"type": "function_call_output", "call_id": "call_1", "output": "open"}
HI: Body = {"role": "user", "content": "hi"}


def user(*parts: Any) -> Body:
    return {"role": "user", "content": list(parts)}


def schema_format(**fields: Any) -> Body:
    return {"format": {"type": "json_schema", "name": "ticket", "schema": CLOSE_SCHEMA, **fields}}


# (case, body, status, param, code)
CASES: list[tuple[str, Body, int, str, str | None]] = [
    ("unknown top-level field", changed(BASE, colour="blue"), 400, "colour", "unknown_parameter"),
    (
        "unknown model",
        changed(BASE, model="invalid-model-name"),
        404,
        "model",
        "model_not_found",
    ),
    ("missing model", changed(BASE, model=None), 400, "model", "missing_required_parameter"),
    ("input of a wrong type", changed(BASE, input=42), 400, "input", "invalid_type"),
    (
        "unknown role",
        changed(BASE, input=[{"role": "robot", "content": "hi"}]),
        400,
        "input[0].role",
        "invalid_value",
    ),
    (
        "message without content",
        changed(BASE, input=[{"role": "user"}]),
        400,
        "input[0].content",
        "missing_required_parameter",
    ),
    (
        "unknown field in a message",
        changed(BASE, input=[{"role": "user", "content": "hi", "colour": "blue"}]),
        400,
        "input[0].colour",
        "unknown_parameter",
    ),
    (
        "unknown item type",
        changed(BASE, input=[{"type": "video", "url": "x"}]),
        400,
        "input[0].type",
        "invalid_value",
    ),
    (
        "chat-style text part",
        changed(BASE, input=[user({"type": "text", "text": "hi"})]),
        400,
        "input[0].content[0].type",
        "invalid_value",
    ),
    (
        "output_text in a user message",
        changed(BASE, input=[user({"type": "output_text", "text": "hi"})]),
        400,
        "input[0].content[0].type",
        "invalid_value",
    ),
    (
        "input_text in an assistant message",
        changed(
            BASE,
            input=[
                user({"type": "input_text", "text": "hi"}),
                {"role": "assistant", "content": [{"type": "input_text", "text": "hello"}]},
            ],
        ),
        400,
        "input[1].content[0].type",
        "invalid_value",
    ),
    (
        "input_text without text",
        changed(BASE, input=[user({"type": "input_text"})]),
        400,
        "input[0].content[0].text",
        "missing_required_parameter",
    ),
    (
        "image detail out of its values",
        changed(
            BASE,
            input=[user({"type": "input_image", "image_url": "https://x/a.png", "detail": "max"})],
        ),
        400,
        "input[0].content[0].detail",
        "invalid_value",
    ),
    (
        "function_call without call_id",
        changed(BASE, input=[HI, {k: v for k, v in CALL.items() if k != "call_id"}]),
        400,
        "input[1].call_id",
        "missing_required_parameter",
    ),
    (
        "function_call arguments as an object",
        changed(BASE, input=[HI, {**CALL, "arguments": {}}]),
        400,
        "input[1].arguments",
        "invalid_type",
    ),
    (
        "function_call_output answering no call",
        changed(BASE, input=[HI, OUTPUT]),
        400,
        "input",
        None,
    ),
    (
        "function_call left unanswered",
        changed(BASE, input=[HI, CALL, {"role": "user", "content": "go on"}]),
        400,
        "input",
        None,
    ),
    (
        "reasoning item without summary",
        changed(BASE, input=[{"type": "reasoning", "id": "rs_1"}]),
        400,
        "input[0].summary",
        "missing_required_parameter",
    ),
    (
        "item_reference without id",
        changed(BASE, input=[{"type": "item_reference"}]),
        400,
        "input[0].id",
        "missing_required_parameter",
    ),
    (
        "unknown field in a function tool",
        changed(BASE, tools=[{"type": "function", "name": "lookup", "parameter": {}}]),
        400,
        "tools[0].parameter",
        "unknown_parameter",
    ),
    (
        "function tool without name",
        changed(BASE, tools=[{"type": "function", "parameters": LOOKUP_SCHEMA}]),
        400,
        "tools[0].name",
        "missing_required_parameter",
    ),
    (
        "function name out of its pattern",
        changed(BASE, tools=[{"type": "function", "name": "look up", "parameters": LOOKUP_SCHEMA}]),
        400,
        "tools[0].name",
        "invalid_value",
    ),
    (
        "chat-style function tool",
        changed(BASE, tools=[{"type": "function", "function": {"name": "lookup"}}]),
        400,
        "tools[0].name",
        "missing_required_parameter",
    ),
    (
        "unknown tool type",
        changed(BASE, tools=[{"type": "browser"}]),
        400,
        "tools[0].type",
        "invalid_value",
    ),
    (
        "tool_choice naming a missing function",
        changed(BASE, tools=TOOLS, tool_choice={"type": "function", "name": "reopen"}),
        400,
        "tool_choice",
        "invalid_value",
    ),
    (
        "tool_choice any (Anthropic's word)",
        changed(BASE, tools=TOOLS, tool_choice="any"),
        400,
        "tool_choice",
        "invalid_value",
    ),
    (
        "allowed_tools listing a missing function",
        changed(
            BASE,
            tools=TOOLS,
            tool_choice={
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "reopen"}],
            },
        ),
        400,
        "tool_choice",
        "invalid_value",
    ),
    (
        "json_schema without schema",
        changed(BASE, text={"format": {"type": "json_schema", "name": "ticket"}}),
        400,
        "text.format.schema",
        "missing_required_parameter",
    ),
    (
        "json_schema without name",
        changed(BASE, text={"format": {"type": "json_schema", "schema": CLOSE_SCHEMA}}),
        400,
        "text.format.name",
        "missing_required_parameter",
    ),
    (
        "json_schema name out of its pattern",
        changed(BASE, text=schema_format(name="a ticket")),
        400,
        "text.format.name",
        "invalid_value",
    ),
    (
        "chat-style response_format",
        changed(BASE, response_format={"type": "json_object"}),
        400,
        "response_format",
        "unknown_parameter",
    ),
    (
        "json_object without the word json",
        changed(BASE, text={"format": {"type": "json_object"}}),
        400,
        "input",
        "invalid_value",
    ),
    (
        "unknown text format",
        changed(BASE, text={"format": {"type": "yaml"}}),
        400,
        "text.format.type",
        "invalid_value",
    ),
    (
        "unknown reasoning effort",
        changed(BASE, model="gpt-5", reasoning={"effort": "extreme"}),
        400,
        "reasoning.effort",
        "invalid_value",
    ),
    (
        "reasoning effort on a model that does not reason",
        changed(BASE, model="gpt-4o", reasoning={"effort": "low"}),
        400,
        "reasoning.effort",
        "unsupported_parameter",
    ),
    (
        "temperature on a reasoning model",
        changed(BASE, model="gpt-5", temperature=0.2),
        400,
        "temperature",
        "unsupported_parameter",
    ),
    (
        "temperature above 2",
        changed(BASE, temperature=3),
        400,
        "temperature",
        "integer_above_max_value",
    ),
    ("top_p below 0", changed(BASE, top_p=-0.1), 400, "top_p", "decimal_below_min_value"),
    (
        "max_output_tokens below 16",
        changed(BASE, max_output_tokens=8),
        400,
        "max_output_tokens",
        "integer_below_min_value",
    ),
    (
        "max_output_tokens as a string",
        changed(BASE, max_output_tokens="100"),
        400,
        "max_output_tokens",
        "invalid_type",
    ),
    (
        "chat-style max_tokens",
        changed(BASE, max_tokens=100),
        400,
        "max_tokens",
        "unknown_parameter",
    ),
    ("unknown include", changed(BASE, include=["everything"]), 400, "include[0]", "invalid_value"),
    (
        "unknown truncation",
        changed(BASE, truncation="sometimes"),
        400,
        "truncation",
        "invalid_value",
    ),
    (
        "unknown cache retention",
        changed(BASE, prompt_cache_retention="forever"),
        400,
        "prompt_cache_retention",
        "invalid_value",
    ),
    (
        "metadata value not a string",
        changed(BASE, metadata={"k": 1}),
        400,
        "metadata.k",
        "invalid_type",
    ),
    ("store as a string", changed(BASE, store="yes"), 400, "store", "invalid_type"),
]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_malformed_requests_get_openais_error(
    oai: openai.OpenAI, body: Body, status: int, param: str, code: str | None
) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        oai.post("/responses", body=body, cast_to=object)
    error = raised.value
    assert error.status_code == status
    assert isinstance(error.body, dict)
    assert set(error.body) == {"message", "type", "param", "code"}
    expected_type = "invalid_request_error"
    assert error.body["type"] == expected_type
    assert (error.body["param"], error.body["code"]) == (param, code)
    assert error.body["message"]


def test_a_well_formed_request_with_every_part_is_served(oai: openai.OpenAI) -> None:
    """What a rich client sends (instructions, content parts of every kind, a call and its
    output, tools, settings) passes."""
    body: Body = {
        "model": "gpt-4.1",
        "instructions": "You review tickets.",
        "input": [
            {"role": "developer", "content": "Be exact."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Compare A and B."},
                    {"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"},
                    {"type": "input_file", "file_data": "data:application/pdf;base64,AA=="},
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
            },
            CALL,
            {**OUTPUT, "output": [{"type": "input_text", "text": "open"}]},
        ],
        "tools": [*TOOLS, {"type": "web_search"}],
        "tool_choice": "auto",
        "temperature": 0.3,
        "top_p": 0.9,
        "max_output_tokens": 256,
        "metadata": {"team": "support"},
        "prompt_cache_key": "tickets",
        "prompt_cache_retention": "24h",
        "text": {"verbosity": "low"},
        "store": False,
    }
    reply = Response.model_validate(oai.post("/responses", body=body, cast_to=object))
    assert reply.status == "completed"


# Bodies the strict emulator refuses only for their validity (not for what it cannot parse).
LENIENT = [
    "unknown top-level field",
    "unknown model",
    "unknown field in a message",
    "function_call left unanswered",
    "unknown tool type",
    "tool_choice naming a missing function",
    "json_schema name out of its pattern",
    "temperature on a reasoning model",
    "temperature above 2",
    "max_output_tokens below 16",
    "unknown include",
]


@pytest.fixture(scope="module")
def lenient_client() -> Iterator[openai.OpenAI]:
    with serve(Emulator(latency=Latency(0, 1e6), lenient=True)) as running:
        base = running.url + "/v1"
        with openai.OpenAI(base_url=base, api_key="test-key", max_retries=0) as client:
            yield client


@pytest.mark.parametrize("case", LENIENT)
def test_lenient_mode_accepts_them(lenient_client: openai.OpenAI, case: str) -> None:
    body = next(b for name, b, *_ in CASES if name == case)
    reply = lenient_client.post("/responses", body=body, cast_to=object)
    assert isinstance(reply, dict)
    assert reply["object"] == "response"


def test_input_tokens_validate_too(oai: openai.OpenAI) -> None:
    counted = oai.responses.input_tokens.count(model="gpt-4.1", input="hello", tools=TOOLS)
    assert counted.input_tokens > 0
    with pytest.raises(openai.BadRequestError) as raised:
        oai.post("/responses/input_tokens", body={**BASE, "max_output_tokens": 64}, cast_to=object)
    assert (raised.value.param, raised.value.code) == ("max_output_tokens", "unknown_parameter")
    with pytest.raises(openai.NotFoundError) as missing:
        oai.responses.input_tokens.count(model="invalid-model-name", input="hello")
    assert missing.value.code == "model_not_found"


def _calls(response: Response) -> list[ResponseFunctionToolCall]:
    return [item for item in response.output if isinstance(item, ResponseFunctionToolCall)]


@pytest.mark.parametrize(
    ("choice", "allowed"),
    [
        ("required", {"lookup", "close"}),
        ({"type": "function", "name": "close"}, {"close"}),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "close"}],
            },
            {"close"},
        ),
    ],
    ids=["required", "named", "allowed_tools"],
)
def test_a_forced_tool_choice_calls_an_allowed_tool(
    oai: openai.OpenAI, choice: Any, allowed: set[str]
) -> None:
    reply = oai.post(
        "/responses", body={**BASE, "tools": TOOLS, "tool_choice": choice}, cast_to=object
    )
    response = Response.model_validate(reply)
    calls = _calls(response)
    assert calls
    assert {c.name for c in calls} <= allowed
    schemas = {"lookup": LOOKUP_SCHEMA, "close": CLOSE_SCHEMA}
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), schemas[call.name])


def test_a_streamed_forced_call_carries_valid_arguments(oai: openai.OpenAI) -> None:
    with oai.responses.stream(
        model="gpt-4.1",
        input="Close ticket A.",
        tools=TOOLS,
        tool_choice={"type": "function", "name": "close"},
    ) as stream:
        final = stream.get_final_response()
    (call,) = _calls(final)
    jsonschema.validate(json.loads(call.arguments), CLOSE_SCHEMA)


class Ticket(pydantic.BaseModel):
    id: str
    priority: int = pydantic.Field(ge=1, le=5)
    tags: list[str]
    owner: str | None


def test_structured_output_is_json_of_the_schema(oai: openai.OpenAI) -> None:
    reply = oai.post(
        "/responses", body={**BASE, "text": schema_format(strict=True)}, cast_to=object
    )
    text = Response.model_validate(reply).output_text
    jsonschema.validate(json.loads(text), CLOSE_SCHEMA)
    parsed = oai.responses.parse(model="gpt-4.1", input="Open a ticket.", text_format=Ticket)
    assert isinstance(parsed.output_parsed, Ticket)


def test_json_mode_answers_a_json_object(oai: openai.OpenAI) -> None:
    reply = oai.responses.create(
        model="gpt-4.1", input="Answer in JSON.", text={"format": {"type": "json_object"}}
    )
    assert isinstance(json.loads(reply.output_text), dict)


def test_reasoning_models_reason_first(oai: openai.OpenAI) -> None:
    def reasoned(**params: Any) -> bool:
        reply = oai.responses.create(input="Close ticket A.", **params)
        first = isinstance(reply.output[0], ResponseReasoningItem)
        assert reply.usage is not None
        assert (reply.usage.output_tokens_details.reasoning_tokens > 0) == first
        return first

    assert reasoned(model="gpt-5")
    assert reasoned(model="o4-mini", reasoning={"effort": "low"})
    assert not reasoned(model="gpt-5", reasoning={"effort": "none"})
    assert not reasoned(model="gpt-4.1")


def test_a_registered_model_id_is_served(emu: Emulator, oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="house-responses-model", input="hi")
    emu.register_model("house-responses-model")
    reply = oai.post(
        "/responses",
        body={"model": "house-responses-model", "input": "hi", "top_k": 5},
        cast_to=object,
    )
    assert isinstance(reply, dict)
    assert reply["status"] == "completed"


def _variants(spec: Spec) -> set[str]:
    """The tags of a list-of-tagged-union field (``input``, ``tools``)."""
    if isinstance(spec, OneOf):
        return set().union(*(_variants(option) for option in spec.options))
    if isinstance(spec, ListOf) and isinstance(spec.item, Tagged):
        return set(spec.item.variants)
    return set()


def _sdk_tags(union: Any) -> set[str]:
    """The ``type`` literals of a union of the SDK's TypedDicts."""
    return {
        arg
        for member in typing.get_args(union)
        for arg in _literals(typing.get_type_hints(member)["type"])
        if isinstance(arg, str)
    }


def _literals(hint: Any) -> set[object]:
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    return {v for arg in typing.get_args(hint) for v in _literals(arg)}


def test_the_schema_takes_everything_the_sdk_sends() -> None:
    """The spec follows the SDK's request types: no field, item or tool type it can send is
    refused as unknown."""
    from openai.types.responses import ResponseInputItemParam, ToolParam
    from openai.types.responses.input_token_count_params import InputTokenCountParams
    from openai.types.responses.response_create_params import ResponseCreateParamsStreaming

    assert set(ResponseCreateParamsStreaming.__annotations__) <= set(CREATE.fields)
    assert set(InputTokenCountParams.__annotations__) <= set(COUNT.fields)
    assert _sdk_tags(ResponseInputItemParam) <= _variants(CREATE.fields["input"])
    assert _sdk_tags(ToolParam) <= _variants(CREATE.fields["tools"])
