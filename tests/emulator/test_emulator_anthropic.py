"""Conformance: the Anthropic rules of CACHING.md, through the official SDK over loopback HTTP.

Each test names the rule it checks.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from _emu_helpers import (
    HAIKU_45,
    OPUS_41,
    TOOL,
    ephemeral,
    error_body,
    system_block,
    text,
    text_block,
    turns,
    user,
)
from anthropic.types import MessageParam, RawMessageStreamEvent

from forkagent.emulator import Emulator, Latency, Reply, RunningServer, VirtualClock, tokens
from forkagent.emulator.profiles import ANTHROPIC_FRAMING_TOKENS as FRAMING


def create(client: anthropic.Anthropic, **params: Any) -> anthropic.types.Message:
    params.setdefault("model", OPUS_41)
    params.setdefault("max_tokens", 64)
    params.setdefault("messages", [user("hello")])
    reply = client.messages.create(**params)
    assert isinstance(reply, anthropic.types.Message)
    return reply


def events(client: anthropic.Anthropic, **params: Any) -> list[RawMessageStreamEvent]:
    """The events of a streamed ``create``."""
    return list(
        client.messages.create(**{"model": OPUS_41, "max_tokens": 64, **params, "stream": True})
    )


def read(reply: anthropic.types.Message) -> int:
    """Tokens read from the cache (the emulator always reports the field)."""
    assert reply.usage.cache_read_input_tokens is not None
    return reply.usage.cache_read_input_tokens


def written(reply: anthropic.types.Message) -> int:
    assert reply.usage.cache_creation_input_tokens is not None
    return reply.usage.cache_creation_input_tokens


def test_rule_running_hash_tools_system_messages(claude: anthropic.Anthropic) -> None:
    """Rule: key = running hash over tools -> system -> messages; hits need an identical prefix."""
    system = system_block(1500, ttl=None)
    messages = [user("question one", mark=True)]
    first = create(claude, tools=[TOOL], system=system, messages=messages)
    again = create(claude, tools=[TOOL], system=system, messages=messages)
    assert written(first) == read(again) > 1500
    changed = create(
        claude, tools=[TOOL], system=system, messages=[user("question two", mark=True)]
    )
    assert changed.usage.cache_read_input_tokens == 0
    assert changed.usage.cache_creation_input_tokens == first.usage.cache_creation_input_tokens


def test_rule_cache_control_marker_is_not_hashed(claude: anthropic.Anthropic) -> None:
    """Rule: moving a breakpoint to a later block does not invalidate earlier content."""
    first = create(claude, system=system_block(1500), messages=[user("hi")])
    moved = create(claude, system=system_block(1500, ttl=None), messages=[user("hi", mark=True)])
    assert moved.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert moved.usage.cache_creation_input_tokens == tokens.count("hi")


def test_rule_tool_use_key_order_is_part_of_the_prefix(claude: anthropic.Anthropic) -> None:
    """Rule: hits need identical bytes, tool_use JSON key order included."""

    def history(args: dict[str, Any]) -> list[MessageParam]:
        return [
            user("look"),
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": args}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
                    text_block("go on", mark=True),
                ],
            },
        ]

    system = system_block(1500)
    create(claude, tools=[TOOL], system=system, messages=history({"a": 1, "b": 2}))
    same = create(claude, tools=[TOOL], system=system, messages=history({"a": 1, "b": 2}))
    reordered = create(claude, tools=[TOOL], system=system, messages=history({"b": 2, "a": 1}))
    assert same.usage.cache_creation_input_tokens == 0
    assert written(reordered) > 0
    assert read(reordered) < read(same)


def test_rule_writes_only_at_breakpoints(claude: anthropic.Anthropic, emu: Emulator) -> None:
    """Rule: writes happen only at breakpoints; without one both counters stay 0."""
    bare = create(claude, system=system_block(3000, ttl=None))
    bare_again = create(claude, system=system_block(3000, ttl=None))
    assert bare.usage.cache_creation_input_tokens == bare_again.usage.cache_read_input_tokens == 0
    assert bare_again.usage.input_tokens == 3000 + tokens.count("hello") + FRAMING
    marked = create(claude, system=system_block(3000))
    assert marked.usage.cache_read_input_tokens == 0
    assert emu.log.last.breakpoints[0].reason == "not_written"


def test_rule_at_most_four_breakpoints(claude: anthropic.Anthropic) -> None:
    """Rule: at most 4 breakpoints per request; more is a 400 invalid_request_error."""
    messages = turns(5, mark="all")
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(claude, messages=messages)
    assert error_body(caught.value)["type"] == "error"
    assert error_body(caught.value)["error"]["type"] == "invalid_request_error"
    assert "maximum of 4" in error_body(caught.value)["error"]["message"]


def test_rule_automatic_caching_uses_one_of_four_slots(claude: anthropic.Anthropic) -> None:
    """Rule: a top-level cache_control marks the last cacheable block and uses one of the 4 slots."""
    messages = turns(4, mark="all")
    with pytest.raises(anthropic.BadRequestError):
        create(claude, messages=messages, cache_control=ephemeral())
    history = [user(text(1500))]
    first = create(claude, messages=history, cache_control=ephemeral())
    assert first.usage.cache_creation_input_tokens == 1500
    longer = [*history, {"role": "assistant", "content": "ok"}, user("next")]
    second = create(claude, messages=longer, cache_control=ephemeral())
    assert second.usage.cache_read_input_tokens == 1500
    assert second.usage.input_tokens == FRAMING  # never cached: after the last block


@pytest.mark.parametrize(("added", "hit"), [(19, True), (20, False)])
def test_rule_reads_walk_back_twenty_blocks(
    claude: anthropic.Anthropic, emu: Emulator, added: int, hit: bool
) -> None:
    """Rule: reads walk back over at most 20 block positions (the breakpoint counts as the first)."""
    create(claude, system=system_block(1500), messages=[user("start")])
    messages = turns(added, mark="last")  # the breakpoint is `added` blocks after the entry
    reply = create(claude, system=system_block(1500, ttl=None), messages=messages)
    assert (reply.usage.cache_read_input_tokens == 1500) is hit
    if not hit:
        assert emu.log.last.breakpoints[0].reason == "beyond_lookback"


def test_rule_minimum_prefix_per_model(claude: anthropic.Anthropic, emu: Emulator) -> None:
    """Rule: minimum cacheable prefix by model (1024 Opus 4.1, 4096 Haiku 4.5); below it both counters are 0."""
    big = create(claude, model=OPUS_41, system=system_block(2000))
    assert big.usage.cache_creation_input_tokens == 2000
    small = create(claude, model=HAIKU_45, system=system_block(2000))
    again = create(claude, model=HAIKU_45, system=system_block(2000))
    for usage in (small.usage, again.usage):
        assert usage.cache_creation_input_tokens == usage.cache_read_input_tokens == 0
        assert usage.input_tokens == 2000 + tokens.count("hello") + FRAMING
    assert emu.log.last.breakpoints[0].reason == "below_minimum"


def test_rule_ttl_five_minutes_refreshed_on_read(
    claude: anthropic.Anthropic, clock: VirtualClock, emu: Emulator
) -> None:
    """Rule: TTL 5 minutes by default, refreshed free on each read."""
    system = system_block(1500)
    create(claude, system=system)
    clock.advance(240)
    assert create(claude, system=system).usage.cache_read_input_tokens == 1500
    clock.advance(240)
    assert create(claude, system=system).usage.cache_read_input_tokens == 1500
    clock.advance(301)
    expired = create(claude, system=system)
    assert expired.usage.cache_read_input_tokens == 0
    assert expired.usage.cache_creation_input_tokens == 1500
    assert emu.log.last.breakpoints[0].reason == "expired"


def test_rule_ttl_one_hour(claude: anthropic.Anthropic, clock: VirtualClock) -> None:
    """Rule: "ttl": "1h" keeps the entry an hour; it is billed as a 1h write."""
    first = create(claude, system=system_block(1500, ttl="1h"))
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == 1500
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == 0
    clock.advance(50 * 60)
    assert create(claude, system=system_block(1500, ttl="1h")).usage.cache_read_input_tokens == 1500
    clock.advance(61 * 60)
    assert create(claude, system=system_block(1500, ttl="1h")).usage.cache_read_input_tokens == 0


def test_rule_lifetime_counts_from_request_start(
    claude: anthropic.Anthropic, clock: VirtualClock, emu: Emulator
) -> None:
    """Rule: the lifetime counts from the start of the request that wrote it, not its end."""

    def slow(request: Any) -> Reply:
        clock.advance(120)  # a two-minute generation
        return Reply(text="done")

    emu.set_policy(slow)
    create(claude, system=system_block(1500))
    emu.set_policy(lambda request: Reply(text="quick"))
    clock.advance(181)  # 301 s after the writer started, 181 s after it ended
    assert create(claude, system=system_block(1500)).usage.cache_read_input_tokens == 0


def test_rule_longer_ttl_must_come_first(claude: anthropic.Anthropic) -> None:
    """Rule: longer TTLs must come before shorter ones in one request (else 400)."""
    messages: list[MessageParam] = [
        {"role": "user", "content": [text_block("question", mark="1h")]}
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(claude, system=system_block(1500, ttl="5m"), messages=messages)
    assert error_body(caught.value)["error"]["type"] == "invalid_request_error"
    ok = create(claude, system=system_block(1500, ttl="1h"), messages=[user("question", mark=True)])
    assert ok.usage.cache_creation is not None
    assert ok.usage.cache_creation.ephemeral_1h_input_tokens == 1500
    assert ok.usage.cache_creation.ephemeral_5m_input_tokens == tokens.count("question")


async def test_rule_parallel_requests_at_the_same_instant_all_miss(
    server: RunningServer, emu: Emulator
) -> None:
    """Rule: an entry is available only after the first response begins; parallel requests all miss."""
    params: dict[str, Any] = {
        "model": OPUS_41,
        "max_tokens": 32,
        "system": system_block(1500),
        "messages": [user("go")],
    }
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0) as client:
        replies = await asyncio.gather(*(client.messages.create(**params) for _ in range(3)))
        assert [r.usage.cache_read_input_tokens for r in replies] == [0, 0, 0]
        assert [r.usage.cache_creation_input_tokens for r in replies] == [1500] * 3
        after = await client.messages.create(**params)
    assert after.usage.cache_read_input_tokens == 1500
    reasons = {e.breakpoints[0].reason for e in emu.log[:3]}
    assert "not_yet_visible" in reasons


async def test_rule_entry_visible_once_the_first_response_begins(server: RunningServer) -> None:
    """Rule: a sibling sent after the first response has begun (still streaming) hits."""
    params: dict[str, Any] = {
        "model": OPUS_41,
        "max_tokens": 4000,
        "system": system_block(1500),
        "messages": [user("go")],
    }
    server.emulator.latency = Latency(ttft=0.01, tokens_per_second=200)
    server.emulator.script(Reply(text=text(60)))
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0) as client:
        stream = await client.messages.create(**params, stream=True)
        first_event = await stream.__anext__()
        assert first_event.type == "message_start"
        sibling = await client.messages.create(**params)
        remaining = [event.type async for event in stream]
    assert remaining[-1] == "message_stop"
    assert sibling.usage.cache_read_input_tokens == 1500


def test_rule_prewarm_with_max_tokens_zero(claude: anthropic.Anthropic) -> None:
    """Rule: max_tokens 0 writes the cache and returns no content, no output billed."""
    warm = create(claude, max_tokens=0, system=system_block(1500))
    assert warm.content == []
    assert warm.usage.output_tokens == 0
    assert warm.stop_reason == "max_tokens"
    assert warm.usage.cache_creation_input_tokens == 1500
    assert create(claude, system=system_block(1500)).usage.cache_read_input_tokens == 1500


@pytest.mark.parametrize(
    "extra",
    [
        {"stream": True},
        {"thinking": {"type": "adaptive"}},
        {"tools": [TOOL], "tool_choice": {"type": "any"}},
        {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "lookup"}},
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
    ],
)
def test_rule_prewarm_not_allowed_with(claude: anthropic.Anthropic, extra: dict[str, Any]) -> None:
    """Rule: pre-warming is not allowed with stream, thinking, structured outputs or forced tool_choice."""
    with pytest.raises(anthropic.BadRequestError):
        create(claude, max_tokens=0, system=system_block(1500), **extra)


def test_rule_tools_change_invalidates_everything(
    claude: anthropic.Anthropic, emu: Emulator
) -> None:
    """Rule: changing tools invalidates everything (the system-level entry too)."""
    create(claude, tools=[TOOL], system=system_block(1500))
    other = {**TOOL, "description": "Look a ticket up, fast."}
    reply = create(claude, tools=[other], system=system_block(1500))
    assert reply.usage.cache_read_input_tokens == 0
    outcome = emu.log.last.breakpoints[0]
    assert (outcome.reason, outcome.changed_at) == ("prefix_changed", "tools[0]")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"tool_choice": {"type": "auto"}}, {"tool_choice": {"type": "none"}}),
        ({}, {"thinking": {"type": "adaptive"}}),
    ],
)
def test_rule_tool_choice_and_thinking_invalidate_the_messages_level(
    claude: anthropic.Anthropic, before: dict[str, Any], after: dict[str, Any]
) -> None:
    """Rule: changing tool_choice or thinking invalidates the messages level only."""
    messages = [user(text(1200, "history"), mark=True)]
    system = system_block(1500)
    create(claude, tools=[TOOL], system=system, messages=messages, **before)
    reply = create(claude, tools=[TOOL], system=system, messages=messages, **after)
    tool_tokens = read(reply) - 1500
    assert tool_tokens > 0  # tools + system were read
    assert reply.usage.cache_creation_input_tokens == 1200


def test_rule_images_invalidate_the_messages_level(claude: anthropic.Anthropic) -> None:
    """Rule: adding or removing images invalidates the messages level, not system."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    history = [user(text(1200, "history"), mark=True)]
    create(
        claude,
        system=system_block(1500),
        messages=[*history, {"role": "assistant", "content": "ok"}, user("plain")],
    )
    with_image = [
        *history,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [image]},
    ]
    reply = create(claude, system=system_block(1500), messages=with_image)
    assert reply.usage.cache_read_input_tokens == 1500
    assert reply.usage.cache_creation_input_tokens == 1200


def test_rule_speed_invalidates_system_and_messages(claude: anthropic.Anthropic) -> None:
    """Rule: switching speed invalidates system+messages but not tools."""
    tools = [{**TOOL, "description": text(1100), "cache_control": ephemeral()}]
    create(claude, tools=tools, system=system_block(1500))
    reply = create(claude, tools=tools, system=system_block(1500), speed="fast")
    assert read(reply) > 1100
    assert reply.usage.cache_creation_input_tokens == 1500


def test_rule_usage_fields(claude: anthropic.Anthropic) -> None:
    """Rule: input_tokens counts only tokens after the last breakpoint; the three add up to the prompt."""
    system = system_block(1500, ttl="1h")
    messages: list[MessageParam] = [
        user(text(300, "mid"), mark=True),
        {"role": "assistant", "content": "ok"},
        user("tail text"),
    ]
    total = claude.messages.count_tokens(
        model=OPUS_41, system=system, messages=messages
    ).input_tokens
    reply = create(claude, system=system, messages=messages)
    usage = reply.usage
    assert usage.input_tokens == tokens.count("ok") + tokens.count("tail text") + FRAMING
    assert usage.cache_creation is not None
    assert usage.cache_creation.ephemeral_1h_input_tokens == 1500
    assert usage.cache_creation.ephemeral_5m_input_tokens == 300
    assert (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
        == total
    )
    assert usage.output_tokens > 0


def test_rule_streaming_usage_in_message_start(claude: anthropic.Anthropic) -> None:
    """Rule: when streaming, the cache usage is in message_start."""
    create(claude, system=system_block(1500))
    streamed = events(claude, system=system_block(1500), messages=[user("hello")])
    assert (streamed[0].type, streamed[-1].type) == ("message_start", "message_stop")
    start = streamed[0]
    assert start.type == "message_start"
    assert start.message.usage.cache_read_input_tokens == 1500
    with claude.messages.stream(
        model=OPUS_41, max_tokens=64, system=system_block(1500), messages=[user("hello")]
    ) as stream:
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens == 1500
    assert final.content[0].type == "text"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model": "claude-opus-4-6"}, "model_changed"),
        ({"tools": [{**TOOL, "name": "other"}]}, "tools_changed"),
        ({"system": system_block(1500, "changed", ttl=None)}, "system_changed"),
        ({"messages": [user("a different start")]}, "messages_changed"),
    ],
)
def test_rule_diagnostics_cache_miss_reason(
    claude: anthropic.Anthropic, change: dict[str, Any], reason: str
) -> None:
    """Rule: diagnostics.previous_message_id -> diagnostics.cache_miss_reason with cache_missed_input_tokens."""
    base: dict[str, Any] = {
        "tools": [TOOL],
        "system": system_block(1500, ttl=None),
        "messages": [user("hello")],
        "cache_control": ephemeral(),
    }
    first = create(claude, **base, diagnostics={"previous_message_id": None})
    assert first.diagnostics is None
    reply = create(claude, **{**base, **change}, diagnostics={"previous_message_id": first.id})
    assert reply.diagnostics is not None
    miss = reply.diagnostics.cache_miss_reason
    assert miss is not None
    assert miss.type == reason
    assert getattr(miss, "cache_missed_input_tokens", 0) > 1500


def test_rule_diagnostics_not_found_unavailable_and_null(claude: anthropic.Anthropic) -> None:
    """Rule: previous_message_not_found, unavailable (other params changed), null when the prefix held."""
    base: dict[str, Any] = {
        "tools": [TOOL],
        "system": system_block(1500),
        "messages": [user("hello")],
    }
    first = create(claude, **base)
    lost = create(claude, **base, diagnostics={"previous_message_id": "msg_unknown"})
    assert lost.diagnostics is not None
    assert lost.diagnostics.cache_miss_reason is not None
    assert lost.diagnostics.cache_miss_reason.type == "previous_message_not_found"
    other = create(
        claude, **base, tool_choice={"type": "none"}, diagnostics={"previous_message_id": first.id}
    )
    assert other.diagnostics is not None
    assert other.diagnostics.cache_miss_reason is not None
    assert other.diagnostics.cache_miss_reason.type == "unavailable"
    grown = [user("hello"), {"role": "assistant", "content": "hi"}, user("more")]
    kept = create(
        claude, **{**base, "messages": grown}, diagnostics={"previous_message_id": first.id}
    )
    assert kept.diagnostics is None
