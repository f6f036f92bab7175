"""Responses API adapter: which API a model uses, the wire mapping, and the SDK over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forkagent._orchestration.fork import FORK_PLACEHOLDER, FORK_RULES, fork_base, fork_from
from forkagent.emulator import Emulator, Reply, RunningServer, ToolCall
from forkagent.errors import ConfigurationError, StreamInterruptedError
from forkagent.messages import (
    AssistantMessage,
    JsonValue,
    ThinkingBlock,
    ToolUseBlock,
    assistant,
    tool_result,
    user,
)
from forkagent.models import Model, TextDelta, ThinkingDelta, ToolUseStarted
from forkagent.models.emulator import EmulatorModel
from forkagent.models.openai_responses import (
    OpenAIResponsesModel,
    ResponsesStream,
    default_api,
    parse_response,
    parse_usage,
    render_request,
)
from forkagent.requests import ModelRequest, ModelSettings, ThinkingConfig
from forkagent.testing import wire

from ._helpers import (
    FAST,
    LONG_SYSTEM,
    LOOKUP,
    assert_golden,
    capture_bodies,
    check_conversation,
    complete,
    converse,
    rich_request,
    script_tool_turn,
)

REASONING: dict[str, JsonValue] = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Check A first."}],
    "encrypted_content": "opaque==",
}

# --- which API ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "api"),
    [
        ("gpt-5", "responses"),
        ("gpt-5.2-mini", "responses"),
        ("gpt-4.1-2025-04-14", "responses"),
        ("gpt-4o", "responses"),
        ("o3", "responses"),
        ("o4-mini", "responses"),
        ("codex-mini-latest", "responses"),
        ("ft:gpt-4.1-mini:acme::abc", "responses"),
        ("gpt-4o-audio-preview", "chat"),
        ("gpt-4o-search-preview", "chat"),
        ("gpt-3.5-turbo", "chat"),
        ("gpt-4-turbo", "chat"),
        ("my-local-model", "chat"),
    ],
)
def test_default_api_follows_openais_recommendation_per_family(model: str, api: str) -> None:
    assert default_api(model) == api


# --- pure mapping ---------------------------------------------------------------------------------


def _rich(model: str = "gpt-5", **settings: Any) -> ModelRequest:
    """The shared rich history, with a reasoning item from this API and no stop sequences."""
    request = rich_request(model, stop_sequences=(), **settings)
    reasoning = ThinkingBlock(thinking="Check A first.", signature=_compact(REASONING))
    first = request.messages[1]
    messages = (
        request.messages[0],
        first.model_copy(update={"content": (reasoning, *first.content)}),
    )
    return request.model_copy(update={"messages": (*messages, *request.messages[2:])})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_wire_request_matches_golden() -> None:
    assert_golden("openai_responses_request", render_request(_rich(), stream=True))


def test_history_maps_to_input_items() -> None:
    body = wire(render_request(_rich()))
    assert body["instructions"] == "You review tickets.\n\nBe exact."
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert kinds == [
        "user", "reasoning", "assistant", "function_call", "function_call",
        "function_call_output", "function_call_output", "user", "assistant", "user",
    ]  # fmt: skip
    calls = [i for i in body["input"] if i.get("type") == "function_call"]
    assert [c["arguments"] for c in calls] == ['{"key":"A","deep":true}', '{"key": "B"']
    image_output = body["input"][6]["output"]
    assert image_output == [
        {"type": "input_text", "text": "bad arguments"},
        {"type": "input_image", "image_url": "https://x/e.png", "detail": "auto"},
    ]
    assert body["tools"][0] == {
        "type": "function",
        "name": "lookup",
        "description": LOOKUP.description,
        "parameters": LOOKUP.input_schema,
        "strict": False,
    }


def test_reasoning_items_go_back_verbatim_and_foreign_thinking_is_left_out() -> None:
    body = wire(render_request(_rich()))
    assert body["input"][1] == REASONING
    anthropic_thinking = ThinkingBlock(thinking="hm", signature="c2lnbmF0dXJl")
    request = ModelRequest(
        model="gpt-5", messages=(user("a"), assistant(anthropic_thinking, "b"), user("c"))
    )
    assert [i.get("type", i.get("role")) for i in wire(render_request(request))["input"]] == [
        "user",
        "assistant",
        "user",
    ]


def test_parsed_reasoning_renders_back_to_the_same_item() -> None:
    response = parse_response({"id": "resp_1", "output": [REASONING], "usage": {}})
    [thinking] = response.message.content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == "Check A first."
    request = ModelRequest(model="gpt-5", messages=(user("a"), response.message, user("b")))
    assert wire(render_request(request))["input"][1] == REASONING


def test_reasoning_models_ask_for_encrypted_reasoning_and_nothing_is_stored() -> None:
    reasoning = wire(render_request(ModelRequest(model="o4-mini", messages=(user("a"),))))
    assert reasoning["store"] is False
    assert reasoning["include"] == ["reasoning.encrypted_content"]
    plain = wire(render_request(ModelRequest(model="gpt-4.1", messages=(user("a"),))))
    assert "include" not in plain
    chained = wire(render_request(ModelRequest(model="o4-mini", messages=(user("a"),)), chain=True))
    assert chained["store"] is True
    assert "include" not in chained


def test_a_continued_history_sends_only_what_follows_the_response() -> None:
    request = ModelRequest(
        model="gpt-5", messages=(user("a"), assistant("b"), user("c")), system="s"
    )
    body = wire(render_request(request, chain=True, previous=("resp_9", 2)))
    assert body["previous_response_id"] == "resp_9"
    assert body["input"] == [{"role": "user", "content": "c"}]
    assert body["instructions"] == "s"  # never carried over by the API


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", "auto"), ("none", "none"), ("any", "required"),
     ("lookup", {"type": "function", "name": "lookup"})],
)  # fmt: skip
def test_tool_choice(choice: str, expected: object) -> None:
    request = ModelRequest(model="m", settings=ModelSettings(tool_choice=choice))
    assert wire(render_request(request))["tool_choice"] == expected


def test_settings_map_to_the_apis_fields() -> None:
    settings = ModelSettings(
        max_tokens=500,
        temperature=0.3,
        cache_key="k",
        thinking=ThinkingConfig(type="enabled", budget_tokens=2048),
        extra={"prompt_cache_retention": "24h"},
    )
    body = wire(render_request(ModelRequest(model="gpt-5", settings=settings)))
    assert body["max_output_tokens"] == 500
    assert body["temperature"] == 0.3
    assert body["prompt_cache_key"] == "k"
    assert body["reasoning"] == {"summary": "auto"}
    assert body["prompt_cache_retention"] == "24h"


def test_stop_sequences_are_refused_with_a_way_out() -> None:
    request = ModelRequest(model="gpt-5", settings=ModelSettings(stop_sequences=("END",)))
    with pytest.raises(ConfigurationError, match="api='chat'"):
        wire(render_request(request))


def test_usage_counts_cached_and_written_tokens_inside_input_tokens() -> None:
    usage = parse_usage(
        {
            "usage": {
                "input_tokens": 1000,
                "input_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 2},
            }
        }
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_5m_tokens) == (
        100,
        600,
        300,
    )
    assert usage.output_tokens == 5


def test_stop_reasons() -> None:
    call = {
        "type": "function_call",
        "call_id": "c1",
        "name": "lookup",
        "arguments": '{"z":1,"a":2}',
    }
    response = parse_response({"output": [call]})
    [use] = response.message.content
    assert isinstance(use, ToolUseBlock)
    assert list(use.input) == ["z", "a"]
    assert response.stop_reason == "tool_use"
    cut: dict[str, JsonValue] = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    assert parse_response(cut).stop_reason == "max_tokens"
    refusal: JsonValue = {"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}
    refused = parse_response({"output": [refusal]})
    assert refused.stop_reason == "refusal"
    assert refused.message.text == "No."


def test_stream_events_fold_into_the_final_response() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": ""}
    final = {"id": "resp_1", "output": [{**call, "arguments": "{}"}], "usage": {"input_tokens": 9}}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1"}},
        {"type": "response.reasoning_summary_text.delta", "delta": "hm"},
        {"type": "response.output_text.delta", "delta": "Hel"},
        {"type": "response.output_item.added", "item": call},
        {"type": "response.completed", "response": final},
    ]
    sink = ResponsesStream("openai")
    deltas = [d for e in events for d in sink.feed(e)]
    assert deltas == [ThinkingDelta("hm"), TextDelta("Hel"), ToolUseStarted(id="c1", name="lookup")]
    assert sink.finish().response_id == "resp_1"
    cut = ResponsesStream("openai")
    for event in events[:3]:
        cut.feed(event)
    with pytest.raises(StreamInterruptedError):
        cut.finish()


# --- through the SDK, over loopback HTTP -----------------------------------------------------------


def _model(server: RunningServer, closing: list[Model], **options: Any) -> OpenAIResponsesModel:
    made = OpenAIResponsesModel("gpt-5", base_url=server.url + "/v1", retry=FAST, **options)
    closing.append(made)
    return made


@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("stream", [False, True])
async def test_multi_turn_tool_conversation(
    emulator: Emulator, server: RunningServer, closing: list[Model], stream: bool, chain: bool
) -> None:
    script_tool_turn(emulator)
    responses = await converse(_model(server, closing, chain=chain), stream=stream)
    check_conversation(responses)
    assert all(r.response_id and r.response_id.startswith("resp_") for r in responses)


async def test_a_chained_conversation_is_billed_and_cached_as_the_full_one(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    script_tool_turn(emulator)
    chained = await converse(_model(server, closing, chain=True))
    emulator.reset()
    script_tool_turn(emulator)
    full = await converse(_model(server, closing))
    assert [r.usage.prompt_tokens for r in chained] == [r.usage.prompt_tokens for r in full]
    assert [r.usage.cache_read_tokens for r in chained] == [r.usage.cache_read_tokens for r in full]


async def test_chained_requests_carry_only_the_new_items(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    bodies = capture_bodies(emulator)
    model = _model(server, closing, chain=True)
    first = ModelRequest(model="gpt-5", system=LONG_SYSTEM, messages=(user("one"),))
    reply = await complete(model, first, stream=False)
    second = first.model_copy(update={"messages": (*first.messages, reply.message, user("two"))})
    await complete(model, second, stream=True)
    assert "previous_response_id" not in bodies[0]
    assert bodies[1]["previous_response_id"] == reply.response_id
    assert bodies[1]["input"] == [{"role": "user", "content": "two"}]
    edited = second.model_copy(update={"messages": (user("other"), reply.message, user("two"))})
    await complete(model, edited, stream=False)
    assert "previous_response_id" not in bodies[2]  # a history it did not send: all of it


@pytest.mark.parametrize("stream", [False, True])
async def test_a_lost_stored_response_is_replaced_by_the_full_history(
    emulator: Emulator, server: RunningServer, closing: list[Model], stream: bool
) -> None:
    bodies = capture_bodies(emulator)
    model = _model(server, closing, chain=True)
    first = ModelRequest(model="gpt-5", messages=(user("one"),))
    reply = await complete(model, first, stream=False)
    emulator.reset()  # the server forgets every stored response
    bodies.clear()
    second = first.model_copy(update={"messages": (*first.messages, reply.message, user("two"))})
    assert (await complete(model, second, stream=stream)).message.text == "done"
    assert [entry.status for entry in emulator.log] == [400, 200]
    [resent] = bodies  # the refused one never reached the model
    assert "previous_response_id" not in resent
    assert [i["content"] for i in resent["input"]] == ["one", "done", "two"]


async def test_reasoning_round_trips_through_the_emulator(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    emulator.script(
        Reply(thinking="Look A up.", tool_calls=(ToolCall("lookup", {"key": "A"}),)),
        Reply(text="A is open."),
    )
    model = _model(server, closing)
    request = ModelRequest(
        model="gpt-5", system=LONG_SYSTEM, tools=(LOOKUP,), messages=(user("Check A."),)
    )
    first = await complete(model, request, stream=True)
    thinking, call = first.message.content
    assert isinstance(thinking, ThinkingBlock)
    assert isinstance(call, ToolUseBlock)
    history = (*request.messages, first.message, user(tool_result(call.id, "open")))
    second = await complete(model, request.model_copy(update={"messages": history}), stream=False)
    assert second.message.text == "A is open."
    assert second.usage.cache_read_tokens > 5000


async def test_the_emulator_model_speaks_the_family_default(emulator: Emulator) -> None:
    request = ModelRequest(model="gpt-5", messages=(user("hi"),))
    await EmulatorModel("gpt-5", emulator).request(request)
    assert emulator.log[-1].route == "/v1/responses"
    await EmulatorModel("gpt-5", emulator, api="chat").request(request)
    assert emulator.log[-1].route == "/v1/chat/completions"
    with pytest.raises(ConfigurationError):
        EmulatorModel("gpt-5", emulator, api="chat", chain=True)


def test_siblings_of_one_reply_share_their_items() -> None:
    """The parent's items and the 12 placeholder outputs are rendered once for the family;
    each child's own user item (rules and directive) is its own."""
    calls = tuple(ToolUseBlock(id=f"call_{n}", name="Agent", input={"n": n}) for n in range(12))
    base = fork_base((user("Split it."), AssistantMessage(content=calls)))
    inputs = []
    for directive in ("first", "second"):
        child = ModelRequest(model="gpt-5", messages=fork_from(base, directive).messages)
        body = render_request(child)
        assert body == render_request(child)  # the same from the warm caches
        inputs.append(wire(body)["input"])
    a, b = inputs
    assert [item.get("type", item.get("role")) for item in a] == (
        ["user"] + ["function_call"] * 12 + ["function_call_output"] * 12 + ["user"]
    )
    assert all(x is y for x, y in zip(a[:-1], b[:-1], strict=True))
    assert a[13] == {
        "type": "function_call_output",
        "call_id": "call_0",
        "output": FORK_PLACEHOLDER,
    }
    assert [p["text"] for p in a[-1]["content"]] == [FORK_RULES, "Directive:\nfirst"]
    assert [p["text"] for p in b[-1]["content"]] == [FORK_RULES, "Directive:\nsecond"]
