"""Conformance: the OpenAI Responses API, through the official ``openai`` SDK over loopback
HTTP: input items, tool calls, reasoning items, stored responses, streaming, and the OpenAI
cache rules (the engine Chat Completions uses) read through ``input_tokens_details``."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from _emu_helpers import text
from openai.types.responses import Response, ResponseInputItemParam

from forkagent.emulator import Emulator, Reply, ToolCall, VirtualClock

MODEL = "gpt-4.1"
LOOKUP: Any = {
    "type": "function",
    "name": "lookup",
    "description": "Look a ticket up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
}


def create(client: openai.OpenAI, prompt: str, **params: Any) -> Response:
    params.setdefault("model", MODEL)
    params.setdefault("input", "hello")
    reply: Response = client.responses.create(instructions=prompt, **params)
    return reply


def cached(reply: Response) -> int:
    assert reply.usage is not None
    return reply.usage.input_tokens_details.cached_tokens


def billed(reply: Response) -> int:
    assert reply.usage is not None
    return reply.usage.input_tokens


def sent_back(reply: Response) -> list[ResponseInputItemParam]:
    """The reply's output items as the next request's input, as a client sends them."""
    items: Any = [item.model_dump(exclude_none=True) for item in reply.output]
    return list(items)


def test_rule_responses_caching_starts_at_1024_tokens_and_input_includes_cached(
    oai: openai.OpenAI,
) -> None:
    """Rule (OpenAI): automatic prefix caching from 1024 tokens, 128-token steps;
    ``input_tokens`` includes ``input_tokens_details.cached_tokens``."""
    short = text(900)
    create(oai, short)
    assert cached(create(oai, short)) == 0
    long = text(2000)
    first = create(oai, long)
    second = create(oai, long)
    assert billed(first) == billed(second)
    assert cached(second) == billed(second) - billed(second) % 128
    assert cached(second) >= 1024
    assert second.output_text == "Understood: hello"


def test_rule_responses_routing_by_prompt_cache_key(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): ``prompt_cache_key`` is part of the routing, as on Chat Completions."""
    prompt = text(1600)
    create(oai, prompt, prompt_cache_key="family-a")
    assert cached(create(oai, prompt, prompt_cache_key="family-a")) > 0
    assert cached(create(oai, prompt, prompt_cache_key="family-b")) == 0


def test_rule_responses_retention_24h(oai: openai.OpenAI, clock: VirtualClock) -> None:
    """Rule (OpenAI): ``prompt_cache_retention: "24h"`` outlives the in-memory retention."""
    memory, extended = text(1500, "memory"), text(1500, "extended")
    create(oai, memory)
    create(oai, extended, prompt_cache_retention="24h")
    clock.advance(2 * 3600)
    assert cached(create(oai, memory)) == 0
    assert cached(create(oai, extended, prompt_cache_retention="24h")) > 0


def test_rule_responses_tools_and_text_format_are_part_of_the_prefix(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): tools and the structured-output schema are part of the prefix."""
    tool = {**LOOKUP, "description": text(1200, "tool")}
    create(oai, "short", tools=[tool])
    assert cached(create(oai, "short", tools=[tool])) >= 1024
    assert cached(create(oai, "short", tools=[{**tool, "name": "search"}])) == 0
    schema: Any = {"type": "json_schema", "name": "out", "schema": {"description": text(1200)}}
    create(oai, "short", text={"format": schema})
    assert cached(create(oai, "short", text={"format": schema})) >= 1024
    assert cached(create(oai, "short", text={"format": {**schema, "name": "other"}})) == 0


def test_previous_response_id_is_the_full_context_for_the_cache(oai: openai.OpenAI) -> None:
    """A request continuing a stored response counts and caches exactly like the same
    conversation sent in full: the server rebuilds the context from what it stored."""
    prompt = text(2000)
    first = create(oai, prompt, input="first question")
    chained = create(oai, prompt, input="second question", previous_response_id=first.id)
    whole: list[ResponseInputItemParam] = [
        {"role": "user", "content": "first question"},
        *sent_back(first),
        {"role": "user", "content": "second question"},
    ]
    full = create(oai, prompt, input=whole)
    assert billed(chained) == billed(full) > billed(first)
    assert cached(chained) >= 1024
    assert cached(full) >= cached(chained)
    assert chained.previous_response_id == first.id
    counted = oai.responses.input_tokens.count(
        model=MODEL, instructions=prompt, input="second question", previous_response_id=first.id
    )
    assert counted.input_tokens == billed(chained)


def test_instructions_are_not_carried_over(oai: openai.OpenAI, emu: Emulator) -> None:
    first = create(oai, "be terse", input="one")
    create(oai, "be verbose", input="two", previous_response_id=first.id)
    assert emu.log[-1].usage is not None
    continued = oai.responses.retrieve(emu.log[-1].message_id or "")
    assert continued.instructions == "be verbose"


def test_unknown_or_unstored_responses_are_the_apis_errors(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as missing:
        create(oai, "x", previous_response_id="resp_unknown")
    assert missing.value.body == {
        "message": "Previous response with id 'resp_unknown' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }
    unstored = create(oai, "x", store=False)
    with pytest.raises(openai.BadRequestError, match="not found"):
        create(oai, "x", previous_response_id=unstored.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(unstored.id)
    stored = create(oai, "x")
    assert oai.responses.retrieve(stored.id).output_text == stored.output_text
    oai.responses.delete(stored.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(stored.id)


def test_function_calls_round_trip(oai: openai.OpenAI, emu: Emulator) -> None:
    emu.script(
        Reply(text="Checking.", tool_calls=(ToolCall("lookup", {"key": "A"}),)),
        Reply(text="A is open."),
    )
    first = create(oai, "You help.", tools=[LOOKUP], input="Look A up.")
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [("lookup", '{"key":"A"}')]
    assert emu.log[-1].breakpoints  # accounted
    answer: ResponseInputItemParam = {
        "type": "function_call_output",
        "call_id": calls[0].call_id,
        "output": "A: open",
    }
    second = create(oai, "You help.", tools=[LOOKUP], input=[answer], previous_response_id=first.id)
    assert second.output_text == "A is open."
    with pytest.raises(openai.BadRequestError) as orphan:
        create(oai, "You help.", input=[{**answer, "call_id": "call_nobody"}])
    assert orphan.value.body == {
        "message": "No tool call found for function call output with call_id call_nobody.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }


def test_streaming_events_in_the_apis_order_with_the_final_usage(
    oai: openai.OpenAI, emu: Emulator
) -> None:
    prompt = text(1500)
    create(oai, prompt)
    emu.script(
        Reply(text="Looking.", tool_calls=(ToolCall("lookup", {"key": "B"}),), thinking="Need B.")
    )
    stream = oai.responses.create(
        model="gpt-5",
        instructions=prompt,
        input="hello",
        tools=[LOOKUP],
        reasoning={"summary": "auto"},
        stream=True,
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # reasoning
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",  # message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.usage is not None
    assert final.response.usage.output_tokens_details.reasoning_tokens == 3
    assert [item.type for item in final.response.output] == [
        "reasoning",
        "message",
        "function_call",
    ]
    again = create(oai, prompt, model="gpt-5", tools=[LOOKUP], input="hello")
    assert cached(again) >= 1024


def test_stream_helper_of_the_sdk_accumulates_the_response(oai: openai.OpenAI) -> None:
    with oai.responses.stream(model=MODEL, instructions="x", input="stream me") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Understood: stream me"


def test_reasoning_items_round_trip_verbatim(oai: openai.OpenAI, emu: Emulator) -> None:
    """Encrypted reasoning goes back as it came; changed, it is refused; by id it needs
    the response stored."""
    emu.script(Reply(text="Hm.", thinking="Think about the ticket."), conversation="r")
    headers = {"x-emulator-conversation": "r"}
    first = create(
        oai,
        "x",
        model="gpt-5",
        input="why?",
        include=["reasoning.encrypted_content"],
        store=False,
        extra_headers=headers,
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content
    assert reasoning.summary == []  # no summary asked for
    history: list[ResponseInputItemParam] = [
        {"role": "user", "content": "why?"},
        *sent_back(first),
        {"role": "user", "content": "and then?"},
    ]
    assert create(oai, "x", model="gpt-5", input=history, store=False).status == "completed"
    tampered: Any = [*history]
    tampered[1] = {**tampered[1], "encrypted_content": reasoning.encrypted_content + "x"}
    with pytest.raises(openai.BadRequestError) as refused:
        create(oai, "x", model="gpt-5", input=tampered)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "invalid_encrypted_content"
    by_id: Any = [*history]
    by_id[1] = {"type": "reasoning", "id": reasoning.id, "summary": []}
    with pytest.raises(openai.NotFoundError, match="not persisted"):
        create(oai, "x", model="gpt-5", input=by_id)


def test_reasoning_items_by_id_from_a_stored_response(oai: openai.OpenAI, emu: Emulator) -> None:
    emu.script(Reply(text="Hm.", thinking="Think about it."))
    first = create(oai, "x", model="o4-mini", input="why?")
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content is None  # not asked for
    history: list[ResponseInputItemParam] = [
        {"role": "user", "content": "why?"},
        {"type": "reasoning", "id": reasoning.id, "summary": []},
        {"type": "item_reference", "id": first.output[1].id or ""},
        {"role": "user", "content": "and then?"},
    ]
    chained = create(oai, "x", model="o4-mini", input="and then?", previous_response_id=first.id)
    assert billed(create(oai, "x", model="o4-mini", input=history)) == billed(chained)


def test_max_output_tokens(oai: openai.OpenAI, emu: Emulator) -> None:
    emu.script(text(100))
    cut = create(oai, "x", max_output_tokens=16)
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as small:
        create(oai, "x", max_output_tokens=8)
    assert isinstance(small.value.body, dict)
    assert small.value.body["param"] == "max_output_tokens"
    assert small.value.body["code"] == "integer_below_min_value"


def test_input_tokens_counts_what_a_request_is_billed(oai: openai.OpenAI) -> None:
    prompt = text(1200)
    reply = create(oai, prompt, tools=[LOOKUP], input="count me")
    counted = oai.responses.input_tokens.count(
        model=MODEL, instructions=prompt, tools=[LOOKUP], input="count me"
    )
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == billed(reply)
