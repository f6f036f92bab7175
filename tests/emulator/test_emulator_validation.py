"""Strict validation: malformed requests get each real API's status and error shape.

Anthropic and OpenAI cases go through the official SDKs' own request methods
over loopback HTTP (the SDKs send whatever body they are given); Gemini cases
are raw HTTP, because google-genai checks its types before sending.
"""

from __future__ import annotations

import typing
from typing import Any

import anthropic
import openai
import pytest
from _emu_helpers import OPUS_41, TOOL, changed, http

from forkagent.emulator import Emulator, Latency, RunningServer, anthropic_rules, chat_rules
from forkagent.emulator.schema import ListOf, Obj, OneOf, Tagged

Body = dict[str, Any]
USE = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"ticket": "A"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "open"}
CLAUDE: Body = {
    "model": OPUS_41,
    "max_tokens": 2048,
    "messages": [{"role": "user", "content": "hello"}],
}


def said(*content: Any, role: str = "user") -> list[Body]:
    """One message of these blocks (a string is a text block)."""
    blocks = [{"type": "text", "text": c} if isinstance(c, str) else c for c in content]
    return [{"role": role, "content": blocks}]


# (case, body, status, a piece of the message)
ANTHROPIC_CASES: list[tuple[str, Body, int, str]] = [
    (
        "unknown block type",
        changed(CLAUDE, messages=said({"type": "video", "url": "x"})),
        400,
        "messages.0.content.0.type: Input tag 'video'",
    ),
    (
        "tool_result answering no tool_use",
        changed(CLAUDE, messages=said(RESULT)),
        400,
        "unexpected `tool_use_id`",
    ),
    (
        "tool_use left unanswered",
        changed(
            CLAUDE,
            tools=[TOOL],
            messages=[*said("hi"), *said(USE, role="assistant"), *said("go on")],
        ),
        400,
        "without `tool_result` blocks",
    ),
    (
        "tool_result after text",
        changed(
            CLAUDE,
            tools=[TOOL],
            messages=[
                *said("hi"),
                *said(USE, role="assistant"),
                *said({"type": "text", "text": "here"}, RESULT),
            ],
        ),
        400,
        "must come first",
    ),
    (
        "temperature above 1",
        changed(CLAUDE, temperature=1.5),
        400,
        "temperature: Input should be less",
    ),
    ("top_k negative", changed(CLAUDE, top_k=-1), 400, "top_k: Input should be greater"),
    ("unknown model", changed(CLAUDE, model="invalid-model-name"), 404, "invalid-model-name"),
    ("misspelt model", changed(CLAUDE, model="claude-sonet-4-6"), 404, "claude-sonet-4-6"),
    ("unknown top-level field", changed(CLAUDE, colour="blue"), 400, "colour: Extra inputs"),
    (
        "thinking budget below 1024",
        changed(CLAUDE, thinking={"type": "enabled", "budget_tokens": 512}),
        400,
        "budget_tokens: Input should be greater than or equal to 1024",
    ),
    (
        "thinking budget not below max_tokens",
        changed(CLAUDE, thinking={"type": "enabled", "budget_tokens": 2048}),
        400,
        "`max_tokens` must be greater than `thinking.budget_tokens`",
    ),
    (
        "thinking with temperature",
        changed(CLAUDE, thinking={"type": "adaptive"}, temperature=0.5),
        400,
        "`temperature` may only be set to 1",
    ),
    (
        "thinking with a forced tool",
        changed(CLAUDE, thinking={"type": "adaptive"}, tools=[TOOL], tool_choice={"type": "any"}),
        400,
        "tool_choice forces tool use",
    ),
    ("duplicate tool names", changed(CLAUDE, tools=[TOOL, TOOL]), 400, "Tool names must be unique"),
    (
        "tool_choice naming a missing tool",
        changed(CLAUDE, tools=[TOOL], tool_choice={"type": "tool", "name": "close"}),
        400,
        "Tool 'close' not found",
    ),
    (
        "tool_choice without tools",
        changed(CLAUDE, tool_choice={"type": "any"}),
        400,
        "tool_choice may only be specified while providing tools",
    ),
    (
        "tool name with a space",
        changed(CLAUDE, tools=[{**TOOL, "name": "look up"}]),
        400,
        "tools.0.custom.name",
    ),
    (
        "tool schema not an object",
        changed(CLAUDE, tools=[{**TOOL, "input_schema": {"type": "array"}}]),
        400,
        "tools.0.input_schema.type",
    ),
    ("missing max_tokens", changed(CLAUDE, max_tokens=None), 400, "max_tokens: Field required"),
    (
        "max_tokens as text",
        changed(CLAUDE, max_tokens="100"),
        400,
        "max_tokens: Input should be a valid integer",
    ),
    (
        "system role in messages",
        changed(CLAUDE, messages=[{"role": "system", "content": "x"}]),
        400,
        "messages.0.role",
    ),
    (
        "empty text block",
        changed(CLAUDE, messages=said({"type": "text", "text": ""})),
        400,
        "must be non-empty",
    ),
    ("empty content", changed(CLAUDE, messages=said()), 400, "non-empty content"),
    (
        "empty system block",
        changed(CLAUDE, system=[{"type": "text", "text": ""}]),
        400,
        "system.0.text: text content blocks must be non-empty",
    ),
    (
        "image of an unknown media type",
        changed(
            CLAUDE,
            messages=said(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/bmp", "data": "AA=="},
                }
            ),
        ),
        400,
        "media_type",
    ),
    (
        "cache_control with an unknown ttl",
        changed(
            CLAUDE,
            messages=said(
                {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "10m"}}
            ),
        ),
        400,
        "cache_control.ttl",
    ),
    (
        "image block in system",
        changed(CLAUDE, system=[{"type": "image", "source": {"type": "url", "url": "x"}}]),
        400,
        "system.0.type",
    ),
    ("stop_sequences as a string", changed(CLAUDE, stop_sequences="END"), 400, "stop_sequences"),
    ("unknown metadata field", changed(CLAUDE, metadata={"team": "a"}), 400, "metadata.team"),
    (
        "messages not a list",
        changed(CLAUDE, messages="hello"),
        400,
        "messages: Input should be a valid list",
    ),
    (
        "thinking of an unknown type",
        changed(CLAUDE, thinking={"type": "deep"}),
        400,
        "thinking.type",
    ),
]


ANTHROPIC_MORE: list[tuple[str, Body, int, str]] = [
    ("missing model", changed(CLAUDE, model=None), 400, "model: Field required"),
    ("model as a number", changed(CLAUDE, model=4), 400, "model: Input should be a valid string"),
    ("missing messages", changed(CLAUDE, messages=None), 400, "messages: Field required"),
    (
        "negative max_tokens",
        changed(CLAUDE, max_tokens=-1),
        400,
        "max_tokens: Input should be greater",
    ),
    (
        "stream as text",
        changed(CLAUDE, stream="yes"),
        400,
        "stream: Input should be a valid boolean",
    ),
    ("unknown service tier", changed(CLAUDE, service_tier="gold"), 400, "service_tier"),
    ("unknown speed", changed(CLAUDE, speed="warp"), 400, "speed"),
    (
        "unknown tool_choice type",
        changed(CLAUDE, tools=[TOOL], tool_choice={"type": "some"}),
        400,
        "tool_choice.type",
    ),
    (
        "tool_choice tool without a name",
        changed(CLAUDE, tools=[TOOL], tool_choice={"type": "tool"}),
        400,
        "tool_choice.name: Field required",
    ),
    (
        "thinking without a budget",
        changed(CLAUDE, thinking={"type": "enabled"}),
        400,
        "thinking.budget_tokens: Field required",
    ),
    ("system as a number", changed(CLAUDE, system=7), 400, "system: Input should be a valid"),
    (
        "metadata user_id as a number",
        changed(CLAUDE, metadata={"user_id": 7}),
        400,
        "metadata.user_id",
    ),
    (
        "cache_control of another type",
        changed(
            CLAUDE,
            messages=said({"type": "text", "text": "x", "cache_control": {"type": "persistent"}}),
        ),
        400,
        "cache_control.type",
    ),
    (
        "tool_use input not an object",
        changed(CLAUDE, messages=[*said("hi"), *said({**USE, "input": "A"}, role="assistant")]),
        400,
        "input: Input should be a valid dictionary",
    ),
    (
        "thinking block without a signature",
        changed(
            CLAUDE,
            messages=[*said("hi"), *said({"type": "thinking", "thinking": "hm"}, role="assistant")],
        ),
        400,
        "signature: Field required",
    ),
    (
        "redacted thinking without data",
        changed(
            CLAUDE, messages=[*said("hi"), *said({"type": "redacted_thinking"}, role="assistant")]
        ),
        400,
        "data: Field required",
    ),
    (
        "document of an unknown media type",
        changed(
            CLAUDE,
            messages=said(
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/zip", "data": "AA=="},
                }
            ),
        ),
        400,
        "media_type",
    ),
    (
        "image url source without a url",
        changed(CLAUDE, messages=said({"type": "image", "source": {"type": "url"}})),
        400,
        "source.url: Field required",
    ),
    (
        "tool_result holding a tool_use",
        changed(
            CLAUDE,
            tools=[TOOL],
            messages=[
                *said("hi"),
                *said(USE, role="assistant"),
                *said({**RESULT, "content": [USE]}),
            ],
        ),
        400,
        "Input tag 'tool_use'",
    ),
    (
        "tool without input_schema",
        changed(CLAUDE, tools=[{"name": "lookup"}]),
        400,
        "input_schema: Field required",
    ),
    (
        "output format without a schema",
        changed(CLAUDE, output_config={"format": {"type": "json_schema"}}),
        400,
        "output_config.format.schema: Field required",
    ),
    (
        "unknown effort",
        changed(CLAUDE, output_config={"effort": "extreme"}),
        400,
        "output_config.effort",
    ),
    (
        "five cache breakpoints",
        changed(
            CLAUDE,
            messages=said(
                *[
                    {"type": "text", "text": f"p{i}", "cache_control": {"type": "ephemeral"}}
                    for i in range(5)
                ]
            ),
        ),
        400,
        "A maximum of 4 blocks with cache_control",
    ),
    (
        "1h breakpoint after a 5m one",
        changed(
            CLAUDE,
            system=[{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}],
            messages=said(
                {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ),
        ),
        400,
        "longer TTLs must come first",
    ),
]
ANTHROPIC_CASES += ANTHROPIC_MORE


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [case[1:] for case in ANTHROPIC_CASES],
    ids=[case[0] for case in ANTHROPIC_CASES],
)
def test_anthropic_rejects_what_the_api_rejects(
    claude: anthropic.Anthropic, body: Body, status: int, message: str
) -> None:
    with pytest.raises(anthropic.APIStatusError) as raised:
        claude.post("/v1/messages", body=body, cast_to=object)
    error = raised.value
    assert error.status_code == status
    assert isinstance(error.body, dict)
    assert error.body["type"] == "error"
    kind = "not_found_error" if status == 404 else "invalid_request_error"
    assert error.body["error"]["type"] == kind
    assert message in error.body["error"]["message"]


GPT: Body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hello"}]}
FUNCTION = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}

# (case, body, status, param, code)
OPENAI_CASES: list[tuple[str, Body, int, str, str]] = [
    ("unknown top-level field", changed(GPT, colour="blue"), 400, "colour", "unknown_parameter"),
    (
        "temperature above 2",
        changed(GPT, temperature=3),
        400,
        "temperature",
        "integer_above_max_value",
    ),
    ("top_p above 1", changed(GPT, top_p=1.5), 400, "top_p", "decimal_above_max_value"),
    (
        "presence_penalty below -2",
        changed(GPT, presence_penalty=-3.0),
        400,
        "presence_penalty",
        "decimal_below_min_value",
    ),
    ("n of 0", changed(GPT, n=0), 400, "n", "integer_below_min_value"),
    ("top_p as text", changed(GPT, top_p="high"), 400, "top_p", "invalid_type"),
    ("unknown model", changed(GPT, model="invalid-model-name"), 404, "model", "model_not_found"),
    (
        "max_tokens on gpt-5",
        changed(GPT, model="gpt-5", max_tokens=100),
        400,
        "max_tokens",
        "unsupported_parameter",
    ),
    (
        "max_tokens on o3",
        changed(GPT, model="o3", max_tokens=100),
        400,
        "max_tokens",
        "unsupported_parameter",
    ),
    (
        "temperature on o4-mini",
        changed(GPT, model="o4-mini", temperature=0.2),
        400,
        "temperature",
        "unsupported_value",
    ),
    (
        "stop on gpt-5",
        changed(GPT, model="gpt-5", stop=["END"]),
        400,
        "stop",
        "unsupported_parameter",
    ),
    (
        "reasoning_effort on gpt-4.1",
        changed(GPT, reasoning_effort="high"),
        400,
        "reasoning_effort",
        "unsupported_parameter",
    ),
    (
        "unknown role",
        changed(GPT, messages=[{"role": "bot", "content": "x"}]),
        400,
        "messages[0].role",
        "invalid_value",
    ),
    (
        "missing messages",
        changed(GPT, messages=None),
        400,
        "messages",
        "missing_required_parameter",
    ),
    ("empty messages", changed(GPT, messages=[]), 400, "messages", "empty_array"),
    (
        "unknown content part",
        changed(GPT, messages=said({"type": "video", "url": "x"})),
        400,
        "messages[0].content[0].type",
        "invalid_value",
    ),
    (
        "tool message answering no call",
        changed(GPT, messages=[{"role": "tool", "tool_call_id": "call_1", "content": "x"}]),
        400,
        "messages.[0].role",
        "invalid_value",
    ),
    (
        "tool call left unanswered",
        changed(
            GPT,
            tools=[FUNCTION],
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "user", "content": "go on"},
            ],
        ),
        400,
        "messages.[2].role",
        "invalid_value",
    ),
    (
        "tool_choice naming a missing function",
        changed(
            GPT, tools=[FUNCTION], tool_choice={"type": "function", "function": {"name": "close"}}
        ),
        400,
        "tool_choice",
        "invalid_value",
    ),
    (
        "tool_choice without tools",
        changed(GPT, tool_choice="required"),
        400,
        "tool_choice",
        "invalid_value",
    ),
    (
        "function name with a space",
        changed(GPT, tools=[{"type": "function", "function": {"name": "look up"}}]),
        400,
        "tools[0].function.name",
        "invalid_value",
    ),
    (
        "json_object without the word json",
        changed(GPT, response_format={"type": "json_object"}),
        400,
        "messages",
        "invalid_value",
    ),
    (
        "json_schema without a name",
        changed(GPT, response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
        400,
        "response_format.json_schema.name",
        "missing_required_parameter",
    ),
    (
        "stream_options without stream",
        changed(GPT, stream_options={"include_usage": True}),
        400,
        "stream_options",
        "invalid_value",
    ),
    (
        "five stop sequences",
        changed(GPT, stop=["a", "b", "c", "d", "e"]),
        400,
        "stop",
        "integer_above_max_value",
    ),
    (
        "top_logprobs without logprobs",
        changed(GPT, top_logprobs=3),
        400,
        "top_logprobs",
        "invalid_value",
    ),
    (
        "unknown field in a message",
        changed(GPT, messages=[{"role": "user", "content": "x", "mood": "ok"}]),
        400,
        "messages[0].mood",
        "unknown_parameter",
    ),
]


OPENAI_MORE: list[tuple[str, Body, int, str, str]] = [
    ("model as a number", changed(GPT, model=5), 400, "model", "invalid_type"),
    ("stream as text", changed(GPT, stream="yes"), 400, "stream", "invalid_type"),
    ("n above 128", changed(GPT, n=200), 400, "n", "integer_above_max_value"),
    (
        "logit_bias above 100",
        changed(GPT, logit_bias={"50256": 101}),
        400,
        "logit_bias.50256",
        "integer_above_max_value",
    ),
    ("seed as text", changed(GPT, seed="7"), 400, "seed", "invalid_type"),
    (
        "unknown service tier",
        changed(GPT, service_tier="gold"),
        400,
        "service_tier",
        "invalid_value",
    ),
    ("unknown modality", changed(GPT, modalities=["video"]), 400, "modalities[0]", "invalid_value"),
    (
        "unknown reasoning effort",
        changed(GPT, model="gpt-5", reasoning_effort="max"),
        400,
        "reasoning_effort",
        "invalid_value",
    ),
    ("unknown verbosity", changed(GPT, verbosity="loud"), 400, "verbosity", "invalid_value"),
    (
        "unknown cache retention",
        changed(GPT, prompt_cache_retention="1w"),
        400,
        "prompt_cache_retention",
        "invalid_value",
    ),
    (
        "image part without a url",
        changed(GPT, messages=said({"type": "image_url", "image_url": {}})),
        400,
        "messages[0].content[0].image_url.url",
        "missing_required_parameter",
    ),
    (
        "unknown image detail",
        changed(
            GPT, messages=said({"type": "image_url", "image_url": {"url": "x", "detail": "max"}})
        ),
        400,
        "messages[0].content[0].image_url.detail",
        "invalid_value",
    ),
    (
        "image in a system message",
        changed(
            GPT,
            messages=[
                {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ],
        ),
        400,
        "messages[0].content[0].type",
        "invalid_value",
    ),
    (
        "tool message without tool_call_id",
        changed(GPT, messages=[{"role": "tool", "content": "x"}]),
        400,
        "messages[0].tool_call_id",
        "missing_required_parameter",
    ),
    (
        "tool call without arguments",
        changed(
            GPT,
            messages=[
                *said("hi"),
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}],
                },
            ],
        ),
        400,
        "messages[1].tool_calls[0].function.arguments",
        "missing_required_parameter",
    ),
    (
        "tool of an unknown type",
        changed(GPT, tools=[{"type": "plugin", "plugin": {}}]),
        400,
        "tools[0].type",
        "invalid_value",
    ),
    (
        "function without a name",
        changed(GPT, tools=[{"type": "function", "function": {}}]),
        400,
        "tools[0].function.name",
        "missing_required_parameter",
    ),
    (
        "unknown response format",
        changed(GPT, response_format={"type": "yaml"}),
        400,
        "response_format.type",
        "invalid_value",
    ),
    (
        "json_schema name with a space",
        changed(GPT, response_format={"type": "json_schema", "json_schema": {"name": "my schema"}}),
        400,
        "response_format.json_schema.name",
        "invalid_value",
    ),
    (
        "unknown tool_choice string",
        changed(GPT, tools=[FUNCTION], tool_choice="always"),
        400,
        "tool_choice",
        "invalid_value",
    ),
    (
        "parallel_tool_calls without tools",
        changed(GPT, parallel_tool_calls=False),
        400,
        "parallel_tool_calls",
        "invalid_value",
    ),
    (
        "metadata value as a number",
        changed(GPT, metadata={"team": 7}),
        400,
        "metadata.team",
        "invalid_type",
    ),
    (
        "breakpoint of an unknown ttl",
        changed(
            GPT,
            messages=said(
                {
                    "type": "text",
                    "text": "x",
                    "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "1d"},
                }
            ),
        ),
        400,
        "messages[0].content[0].prompt_cache_breakpoint.ttl",
        "invalid_value",
    ),
    (
        "unknown prompt cache mode",
        changed(GPT, prompt_cache_options={"mode": "always"}),
        400,
        "prompt_cache_options.mode",
        "invalid_value",
    ),
]
OPENAI_CASES += OPENAI_MORE


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [case[1:] for case in OPENAI_CASES],
    ids=[case[0] for case in OPENAI_CASES],
)
def test_openai_rejects_what_the_api_rejects(
    oai: openai.OpenAI, body: Body, status: int, param: str, code: str
) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        oai.post("/chat/completions", body=body, cast_to=object)
    error = raised.value
    assert error.status_code == status
    assert isinstance(error.body, dict)
    assert set(error.body) == {"message", "type", "param", "code"}
    assert error.body["type"] == "invalid_request_error"
    assert (error.body["param"], error.body["code"]) == (param, code)
    assert error.body["message"]


GEMINI: Body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
DECLARATION = {"name": "lookup", "parameters": {"type": "OBJECT", "properties": {}}}

# (case, model, body, status, a piece of the message)
GEMINI_CASES: list[tuple[str, str, Body, int, str]] = [
    (
        "unknown top-level field",
        "gemini-2.5-flash",
        changed(GEMINI, colour="blue"),
        400,
        'Unknown name "colour"',
    ),
    (
        "unknown config field",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"temprature": 1}),
        400,
        "at 'generation_config'",
    ),
    (
        "temperature above 2",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"temperature": 3}),
        400,
        "temperature",
    ),
    (
        "candidateCount of 9",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"candidateCount": 9}),
        400,
        "candidate_count",
    ),
    ("unknown model", "invalid-model-name", GEMINI, 404, "models/invalid-model-name is not found"),
    (
        "part without data",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[{"role": "user", "parts": [{}]}]),
        400,
        "oneof field 'data'",
    ),
    (
        "part with two kinds of data",
        "gemini-2.5-flash",
        changed(
            GEMINI,
            contents=[
                {
                    "role": "user",
                    "parts": [
                        {"text": "x", "inlineData": {"mimeType": "image/png", "data": "AA=="}}
                    ],
                }
            ],
        ),
        400,
        "oneof field 'data'",
    ),
    (
        "duplicate function declarations",
        "gemini-2.5-flash",
        changed(GEMINI, tools=[{"functionDeclarations": [DECLARATION, DECLARATION]}]),
        400,
        "Duplicate function declaration found: lookup",
    ),
    (
        "allowed names outside mode ANY",
        "gemini-2.5-flash",
        changed(
            GEMINI,
            tools=[{"functionDeclarations": [DECLARATION]}],
            toolConfig={
                "functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["lookup"]}
            },
        ),
        400,
        "only be set when mode is ANY",
    ),
    (
        "allowed name not declared",
        "gemini-2.5-flash",
        changed(
            GEMINI,
            tools=[{"functionDeclarations": [DECLARATION]}],
            toolConfig={
                "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["close"]}
            },
        ),
        400,
        "function close is not declared",
    ),
    (
        "unknown calling mode",
        "gemini-2.5-flash",
        changed(GEMINI, toolConfig={"functionCallingConfig": {"mode": "SOMETIMES"}}),
        400,
        "Invalid value at 'tool_config.function_calling_config.mode'",
    ),
    (
        "response schema without JSON",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"responseSchema": {"type": "STRING"}}),
        400,
        "response_mime_type",
    ),
    (
        "unknown response mime type",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"responseMimeType": "text/html"}),
        400,
        "allowed mimetypes",
    ),
    (
        "no thinking on 2.5 Pro",
        "gemini-2.5-pro",
        changed(GEMINI, generationConfig={"thinkingConfig": {"thinkingBudget": 0}}),
        400,
        "only works in thinking mode",
    ),
    (
        "turns not alternating",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[GEMINI["contents"][0], GEMINI["contents"][0]]),
        400,
        "alternate between user and model",
    ),
]


GEMINI_MORE: list[tuple[str, str, Body, int, str]] = [
    ("misspelt model", "gemini-2.5-flashy", GEMINI, 404, "is not found"),
    ("contents missing", "gemini-2.5-flash", {"generationConfig": {}}, 400, "contents"),
    (
        "parts as text",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[{"role": "user", "parts": "hi"}]),
        400,
        "Invalid value at 'contents[0].parts'",
    ),
    (
        "unknown part field",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[{"role": "user", "parts": [{"txt": "hi"}]}]),
        400,
        'Unknown name "txt"',
    ),
    (
        "empty parts",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[{"role": "user", "parts": []}]),
        400,
        "must not be empty",
    ),
    (
        "inline data without a mime type",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[{"role": "user", "parts": [{"inlineData": {"data": "AA=="}}]}]),
        400,
        "mime_type",
    ),
    (
        "function call without a name",
        "gemini-2.5-flash",
        changed(
            GEMINI,
            contents=[
                *GEMINI["contents"],
                {"role": "model", "parts": [{"functionCall": {"args": {}}}]},
            ],
        ),
        400,
        "function_call.name",
    ),
    (
        "system role",
        "gemini-2.5-flash",
        changed(GEMINI, contents=[{"role": "system", "parts": [{"text": "x"}]}]),
        400,
        "valid role",
    ),
    (
        "maxOutputTokens of 0",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"maxOutputTokens": 0}),
        400,
        "max_output_tokens",
    ),
    (
        "topP above 1",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"topP": 1.5}),
        400,
        "top_p",
    ),
    (
        "six stop sequences",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"stopSequences": list("abcdef")}),
        400,
        "stop_sequences",
    ),
    (
        "unknown thinking level",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"thinkingConfig": {"thinkingLevel": "EXTREME"}}),
        400,
        "thinking_level",
    ),
    (
        "unknown modality",
        "gemini-2.5-flash",
        changed(GEMINI, generationConfig={"responseModalities": ["SMELL"]}),
        400,
        "response_modalities",
    ),
    (
        "safety setting without a threshold",
        "gemini-2.5-flash",
        changed(GEMINI, safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT"}]),
        400,
        "threshold",
    ),
    (
        "unknown tool",
        "gemini-2.5-flash",
        changed(GEMINI, tools=[{"webBrowse": {}}]),
        400,
        'Unknown name "webBrowse"',
    ),
    (
        "declaration without a name",
        "gemini-2.5-flash",
        changed(GEMINI, tools=[{"functionDeclarations": [{"description": "x"}]}]),
        400,
        "function_declarations[0].name",
    ),
    (
        "both response schemas",
        "gemini-2.5-flash",
        changed(
            GEMINI,
            generationConfig={
                "responseMimeType": "application/json",
                "responseSchema": {"type": "STRING"},
                "responseJsonSchema": {"type": "string"},
            },
        ),
        400,
        "cannot both be set",
    ),
]
GEMINI_CASES += GEMINI_MORE


@pytest.mark.parametrize(
    ("model", "body", "status", "message"),
    [case[1:] for case in GEMINI_CASES],
    ids=[case[0] for case in GEMINI_CASES],
)
def test_gemini_rejects_what_the_api_rejects(
    server: RunningServer, model: str, body: Body, status: int, message: str
) -> None:
    path = f"/v1beta/models/{model}:generateContent"
    got, _, reply = http(server, "POST", path, body, {"x-goog-api-key": "k"})
    assert got == status
    assert set(reply["error"]) == {"code", "message", "status"}
    assert reply["error"]["code"] == status
    assert reply["error"]["status"] == ("NOT_FOUND" if status == 404 else "INVALID_ARGUMENT")
    assert message in reply["error"]["message"]


async def test_lenient_keeps_the_permissive_behaviour() -> None:
    strict, lenient = (
        Emulator(latency=Latency(0, 1e6)),
        Emulator(latency=Latency(0, 1e6), lenient=True),
    )
    requests = [
        ("/v1/messages", changed(CLAUDE, model="my-claude", colour="blue", temperature=1.5)),
        ("/v1/chat/completions", changed(GPT, model="my-gpt", colour="blue", temperature=3)),
        (
            "/v1beta/models/my-gemini:generateContent",
            changed(GEMINI, colour="blue", generationConfig={"temperature": 3}),
        ),
    ]
    for path, body in requests:
        assert (await strict.dispatch("POST", path, body)).status in (400, 404)
        assert (await lenient.dispatch("POST", path, body)).status == 200


async def test_a_registered_model_id_is_served_on_every_wire() -> None:
    emu = Emulator(latency=Latency(0, 1e6))
    paths = {
        "/v1/messages": changed(CLAUDE, model="house-model"),
        "/v1/chat/completions": changed(GPT, model="house-model"),
        "/v1beta/models/house-model:generateContent": GEMINI,
    }
    assert {(await emu.dispatch("POST", p, b)).status for p, b in paths.items()} == {404}
    emu.register_model("house-model")
    assert {(await emu.dispatch("POST", p, b)).status for p, b in paths.items()} == {200}


def _sdk_tags(union: Any) -> set[str]:
    """The ``type`` literals of a union of the SDK's TypedDicts."""
    tags: set[str] = set()
    for member in typing.get_args(union):
        hint = typing.get_type_hints(member)["type"]
        tags |= {a for a in _literals(hint) if isinstance(a, str)}
    return tags


def _literals(hint: Any) -> set[object]:
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    return {v for arg in typing.get_args(hint) for v in _literals(arg)}


def _fields(spec: Any) -> set[str]:
    assert isinstance(spec, Obj)
    return set(spec.fields)


def test_the_schemas_take_every_field_the_sdks_send() -> None:
    """The specs follow the SDKs' request types: nothing an SDK can send is refused as unknown."""
    from anthropic.types import ContentBlockParam, MessageCountTokensParams, ToolUnionParam
    from anthropic.types.message_create_params import MessageCreateParamsStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

    assert set(MessageCreateParamsStreaming.__annotations__) | {"stream"} <= _fields(
        anthropic_rules.CREATE
    )
    assert set(MessageCountTokensParams.__annotations__) <= _fields(anthropic_rules.COUNT)
    blocks = anthropic_rules.CREATE.fields["messages"]
    assert isinstance(blocks, ListOf)
    message = blocks.item
    assert isinstance(message, Obj)
    content = message.fields["content"]
    assert isinstance(content, OneOf)
    listed = content.options[1]
    assert isinstance(listed, ListOf)
    assert isinstance(listed.item, Tagged)
    assert _sdk_tags(ContentBlockParam) <= set(listed.item.variants)
    tools = anthropic_rules.CREATE.fields["tools"]
    assert isinstance(tools, ListOf)
    assert isinstance(tools.item, Tagged)
    assert _sdk_tags(ToolUnionParam) <= set(tools.item.variants)
    from anthropic.types.beta.message_create_params import (
        MessageCreateParamsStreaming as BetaCreateParams,
    )

    beta_fields = set(BetaCreateParams.__annotations__) - {"betas"}  # betas is a header
    assert beta_fields | {"stream"} <= _fields(anthropic_rules.CREATE)
    chat_fields = set(CompletionCreateParamsStreaming.__annotations__)
    assert chat_fields <= _fields(chat_rules.CREATE)


def test_token_counting_routes_validate_too(
    claude: anthropic.Anthropic, server: RunningServer
) -> None:
    prompt: Body = {"model": OPUS_41, "messages": [{"role": "user", "content": "hello"}]}
    assert claude.messages.count_tokens(**prompt).input_tokens > 0
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: Extra inputs"):
        claude.post("/v1/messages/count_tokens", body={**prompt, "max_tokens": 5}, cast_to=object)
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="invalid-model-name", messages=prompt["messages"])
    path = "/v1beta/models/gemini-2.5-flash:countTokens"
    status, _, reply = http(server, "POST", path, {**GEMINI, "colour": "blue"})
    assert (status, reply["error"]["status"]) == (400, "INVALID_ARGUMENT")
    status, _, reply = http(server, "POST", "/v1beta/models/nope:countTokens", GEMINI)
    assert (status, reply["error"]["status"]) == (404, "NOT_FOUND")


def test_the_beta_clients_requests_pass(claude: anthropic.Anthropic) -> None:
    """The SDK's beta client sends beta fields with no header: they are taken."""
    managed = claude.beta.messages.create(
        model=OPUS_41,
        max_tokens=64,
        messages=[{"role": "user", "content": "hello"}],
        context_management={"edits": []},
    )
    assert managed.content


@pytest.mark.parametrize(
    "model", ["gpt-4o", "gpt-4o-2024-08-06", "gpt-5.2", "o4-mini", "qwen3-max"]
)
def test_openai_family_ids_are_served(oai: openai.OpenAI, model: str) -> None:
    assert oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(("flags", "lenient"), [([], False), (["--lenient"], True)])
def test_cli_serve_is_strict_unless_lenient(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], lenient: bool
) -> None:
    import uvicorn
    from typer.testing import CliRunner

    from forkagent.cli import app
    from forkagent.emulator import asgi

    built: list[Emulator] = []
    monkeypatch.setattr(asgi, "build_app", lambda emulator: built.append(emulator))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    result = CliRunner().invoke(app, ["emulator", "serve", "--port", "0", *flags])
    assert result.exit_code == 0, result.output
    assert [e.catalog.lenient for e in built] == [lenient]
