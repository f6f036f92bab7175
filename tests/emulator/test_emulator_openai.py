"""Conformance: the OpenAI, DashScope and DeepSeek rules of CACHING.md, through the
official ``openai`` SDK over loopback HTTP. Each test names the rule it checks."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import openai
import pytest
from _emu_helpers import ephemeral, text
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam

from forkagent.emulator import Emulator, Latency, Reply, RunningServer, VirtualClock, tokens


def chat(client: openai.OpenAI, prompt: str, **params: Any) -> ChatCompletion:
    params.setdefault("model", "gpt-4.1")
    messages = params.pop("messages", None) or [
        {"role": "system", "content": prompt},
        {"role": "user", "content": "hello"},
    ]
    reply = client.chat.completions.create(messages=messages, **params)
    assert isinstance(reply, ChatCompletion)
    return reply


def chunks_of(client: openai.OpenAI, prompt: str, **params: Any) -> list[ChatCompletionChunk]:
    """The chunks of a streamed ``chat``."""
    stream = client.chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "system", "content": prompt}, {"role": "user", "content": "hello"}],
        stream=True,
        **params,
    )
    return list(stream)


def cached(reply: ChatCompletion) -> int:
    assert reply.usage is not None
    assert reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.cached_tokens or 0


def test_rule_openai_caching_starts_at_1024_tokens(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): automatic prefix caching for prompts of at least 1024 tokens."""
    short = text(900)
    chat(oai, short)
    assert cached(chat(oai, short)) == 0
    long = text(1300)
    chat(oai, long)
    assert cached(chat(oai, long)) >= 1024


def test_rule_openai_hits_grow_in_128_token_steps(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): cache hits grow in 128-token steps past 1024."""
    shared = text(3000, "shared")
    chat(oai, shared)
    again = chat(oai, shared)
    prompt = again.usage.prompt_tokens if again.usage else 0
    assert cached(again) == prompt - prompt % 128
    assert (cached(again) - 1024) % 128 == 0
    forked = chat(oai, shared[: len(shared) * 2 // 3] + " a different ending " + text(700, "tail"))
    assert cached(forked) % 128 == 0
    assert 1024 <= cached(forked) < cached(again)


def test_rule_openai_prompt_tokens_include_cached(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): prompt_tokens includes the cached ones."""
    prompt = text(2000)
    first = chat(oai, prompt)
    second = chat(oai, prompt)
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.prompt_tokens == second.usage.prompt_tokens
    assert 0 < cached(second) <= second.usage.prompt_tokens


def test_rule_openai_routing_by_prompt_cache_key(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): routing hashes the first ~256 tokens together with prompt_cache_key."""
    prompt = text(1600)
    chat(oai, prompt, prompt_cache_key="family-a")
    assert cached(chat(oai, prompt, prompt_cache_key="family-a")) > 0
    assert cached(chat(oai, prompt, prompt_cache_key="family-b")) == 0


def test_rule_openai_fifteen_requests_per_minute_per_key(
    oai: openai.OpenAI, clock: VirtualClock
) -> None:
    """Rule (OpenAI): keep about 15 requests/minute per key; more overflow to cold machines."""
    prompt = text(1600)
    hits = [cached(chat(oai, prompt, prompt_cache_key="busy")) > 0 for _ in range(17)]
    assert hits[0] is False
    assert all(hits[1:15])
    assert hits[15] is False  # the 16th request of the minute lands on another machine
    assert hits[16] is True
    clock.advance(61)
    assert cached(chat(oai, prompt, prompt_cache_key="busy")) > 0


def test_rule_openai_tools_and_schema_are_part_of_the_prefix(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): tools and the structured-output schema are part of the prefix."""
    tool = {"type": "function", "function": {"name": "lookup", "description": text(1200, "tool")}}
    prompt = "short system prompt"
    chat(oai, prompt, tools=[tool])
    assert cached(chat(oai, prompt, tools=[tool])) >= 1024
    other = {"type": "function", "function": {"name": "search", "description": text(1200, "tool")}}
    assert cached(chat(oai, prompt, tools=[other])) == 0

    def schema(name: str) -> dict[str, Any]:
        return {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": {"description": text(1200)}},
        }

    chat(oai, prompt, response_format=schema("out"))
    assert cached(chat(oai, prompt, response_format=schema("out"))) >= 1024
    assert cached(chat(oai, prompt, response_format=schema("other"))) == 0


def test_rule_openai_retention_24h(oai: openai.OpenAI, clock: VirtualClock) -> None:
    """Rule (OpenAI): prompt_cache_retention 24h keeps prefixes far longer than in-memory."""
    memory, extended = text(1500, "memory"), text(1500, "extended")
    chat(oai, memory)
    chat(oai, extended, prompt_cache_retention="24h")
    clock.advance(2 * 3600)
    assert cached(chat(oai, memory)) == 0
    assert cached(chat(oai, extended, prompt_cache_retention="24h")) > 0


def test_rule_openai_streaming_usage(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): streamed usage (stream_options.include_usage) carries cached_tokens."""
    prompt = text(1500)
    chat(oai, prompt)
    chunks = chunks_of(oai, prompt, stream_options={"include_usage": True})
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 1408
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content.startswith("Understood:")


def test_openai_tool_calls_round_trip(oai: openai.OpenAI, emu: Emulator) -> None:
    """Scripted tool calls render as Chat Completions tool_calls, streamed and not."""
    from forkagent.emulator import ToolCall

    emu.script(Reply(tool_calls=(ToolCall("lookup", {"ticket": "T-1"}),)))
    reply = chat(oai, "sys")
    call = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    assert call is not None
    assert call[0].type == "function"
    assert call[0].function.name == "lookup"
    assert call[0].function.arguments == '{"ticket":"T-1"}'
    emu.script(Reply(tool_calls=(ToolCall("lookup", {"ticket": "T-2"}),)))
    chunks = chunks_of(oai, "sys")
    arguments = "".join(
        tc.function.arguments or ""
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
        for tc in c.choices[0].delta.tool_calls
        if tc.function
    )
    assert arguments == '{"ticket":"T-2"}'


def test_openai_tool_messages_must_answer_tool_calls(oai: openai.OpenAI) -> None:
    """A tool message without a preceding tool call is a 400, as on the real API."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "x", "content": "1"},
    ]
    with pytest.raises(openai.BadRequestError, match="role 'tool'"):
        oai.chat.completions.create(model="gpt-4.1", messages=messages)  # type: ignore[arg-type]


GPT_56 = "gpt-5.6"
"""A model that takes ``prompt_cache_breakpoint`` (gpt-5.6 and later)."""


def marked(body: str, **breakpoint: str) -> dict[str, Any]:
    return {
        "type": "text",
        "text": body,
        "prompt_cache_breakpoint": {"mode": "explicit"} | breakpoint,
    }


def gpt56(client: openai.OpenAI, messages: list[Any], mode: str = "explicit") -> ChatCompletion:
    return chat(client, "", model=GPT_56, messages=messages, prompt_cache_options={"mode": mode})


def written(reply: ChatCompletion) -> int:
    assert reply.usage is not None
    assert reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.cache_write_tokens or 0


def test_rule_openai_explicit_breakpoint_writes_then_reads_its_exact_prefix(
    oai: openai.OpenAI,
) -> None:
    """Rule (OpenAI, newer models): prompt_cache_breakpoint marks the exact end of a prefix
    (not rounded to a block); usage reports cache_write_tokens, then cached_tokens."""
    system = {"role": "system", "content": [marked(text(1500))]}
    first = gpt56(oai, [system, {"role": "user", "content": "q1"}])
    second = gpt56(oai, [system, {"role": "user", "content": "q2"}])
    assert (cached(first), written(second)) == (0, 0)
    assert written(first) == cached(second) > 1500
    assert cached(second) % 128 != 0
    assert second.usage is not None
    assert second.usage.prompt_tokens > cached(second)


def test_rule_openai_explicit_mode_without_breakpoints_caches_nothing(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): mode explicit turns the implicit breakpoint off."""
    messages = [{"role": "user", "content": text(2000)}]
    for _ in range(2):
        reply = gpt56(oai, messages)
        assert (cached(reply), written(reply)) == (0, 0)


def test_rule_openai_implicit_mode_adds_its_own_breakpoint_at_the_end(
    oai: openai.OpenAI, emu: Emulator
) -> None:
    """Rule (OpenAI): in implicit mode a request writes its explicit breakpoints and one of its own."""
    messages = [
        {"role": "system", "content": [marked(text(1500))]},
        {"role": "user", "content": text(300, "question")},
    ]
    first = gpt56(oai, messages, mode="implicit")
    assert [b.label for b in emu.log.last.breakpoints] == [
        "messages[0].content[0]",
        "messages[1].content[0]",
    ]
    assert first.usage is not None
    assert written(first) == first.usage.prompt_tokens
    assert cached(gpt56(oai, messages, mode="implicit")) == first.usage.prompt_tokens


def test_rule_openai_at_most_four_breakpoint_writes(oai: openai.OpenAI, emu: Emulator) -> None:
    """Rule (OpenAI): a request writes at most its latest four breakpoints (no error)."""
    parts = [marked(text(1100, f"p{i}")) for i in range(5)]
    gpt56(oai, [{"role": "user", "content": parts}])
    assert [b.label for b in emu.log.last.breakpoints] == [
        f"messages[0].content[{i}]" for i in range(1, 5)
    ]
    assert cached(gpt56(oai, [{"role": "user", "content": parts[:1]}])) == 0


def test_rule_openai_breakpoints_have_no_block_lookback_limit(oai: openai.OpenAI) -> None:
    """Rule (OpenAI): a breakpoint finds a cached prefix however many blocks back it ends."""
    head = marked(text(1500))
    gpt56(oai, [{"role": "user", "content": [head]}])
    unmarked = {"type": "text", "text": head["text"]}
    far = [unmarked, *({"type": "text", "text": f"c{i}"} for i in range(39)), marked("end")]
    assert cached(gpt56(oai, [{"role": "user", "content": far}])) > 1500


@pytest.mark.parametrize(
    ("mode", "part"),
    [
        ("explicit", {"type": "text", "text": "x", "prompt_cache_breakpoint": {"mode": "auto"}}),
        ("explicit", marked("x", ttl="1h")),
        ("sometimes", marked("x")),
    ],
)
def test_rule_openai_breakpoint_settings_are_checked(
    oai: openai.OpenAI, mode: str, part: dict[str, Any]
) -> None:
    """Rule (OpenAI): a breakpoint's mode is 'explicit' and its ttl 30m or 12h; the request's
    mode is implicit or explicit."""
    with pytest.raises(openai.BadRequestError):
        gpt56(oai, [{"role": "user", "content": [part]}], mode=mode)


def qwen_messages(
    prefix: str, question: str, *, marks: int = 1
) -> list[ChatCompletionMessageParam]:
    """DashScope's explicit cache: a ``cache_control`` mark on a content part (not in the SDK's types)."""
    system: dict[str, Any] = {"type": "text", "text": prefix, "cache_control": ephemeral()}
    messages = [
        {"role": "system", "content": [system]},
        {"role": "user", "content": [{"type": "text", "text": question}]},
    ]
    return cast(list[ChatCompletionMessageParam], messages)


def dashscope_details(reply: ChatCompletion) -> dict[str, Any]:
    assert reply.usage is not None
    assert reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.model_dump()


def test_rule_dashscope_explicit_cache_control(oai: openai.OpenAI) -> None:
    """Rule (DashScope): explicit cache_control blocks; usage cached_tokens and cache_creation_input_tokens."""
    messages = qwen_messages(text(1500), "q1")
    first = dashscope_details(chat(oai, "", model="qwen-plus", messages=messages))
    second = dashscope_details(chat(oai, "", model="qwen-plus", messages=messages))
    assert (first["cached_tokens"], first["cache_creation_input_tokens"]) == (
        0,
        second["cached_tokens"],
    )
    assert second["cached_tokens"] > 1500
    assert second["cache_creation_input_tokens"] == 0
    assert second["cache_type"] == "ephemeral"


def test_rule_dashscope_only_last_four_markers_count(oai: openai.OpenAI, emu: Emulator) -> None:
    """Rule (DashScope): at most 4 markers; only the last 4 count (no error)."""
    parts = [
        {"type": "text", "text": text(1100, f"p{i}"), "cache_control": ephemeral()}
        for i in range(5)
    ]
    messages = [{"role": "user", "content": parts}]
    chat(oai, "", model="qwen-plus", messages=messages)
    assert [b.label for b in emu.log.last.breakpoints] == [
        f"messages[0].content[{i}]" for i in range(1, 5)
    ]
    first_only = [{"role": "user", "content": parts[:1]}]
    assert (
        dashscope_details(chat(oai, "", model="qwen-plus", messages=first_only))["cached_tokens"]
        == 0
    )


def test_rule_dashscope_twenty_block_lookback(oai: openai.OpenAI) -> None:
    """Rule (DashScope): a marker looks back over at most 20 content blocks."""
    head = {"type": "text", "text": text(1500), "cache_control": ephemeral()}
    chat(oai, "", model="qwen-plus", messages=[{"role": "user", "content": [head]}])
    near = [dict(head, cache_control=None)] + [{"type": "text", "text": f"b{i}"} for i in range(19)]
    near[-1]["cache_control"] = ephemeral()
    far = [dict(head, cache_control=None)] + [{"type": "text", "text": f"c{i}"} for i in range(20)]
    far[-1]["cache_control"] = ephemeral()
    for parts in (near, far):
        for part in parts:
            if part.get("cache_control") is None:
                part.pop("cache_control", None)
    hit = chat(oai, "", model="qwen-plus", messages=[{"role": "user", "content": near}])
    miss = chat(oai, "", model="qwen-plus", messages=[{"role": "user", "content": far}])
    assert dashscope_details(hit)["cached_tokens"] > 1500
    assert dashscope_details(miss)["cached_tokens"] == 0


def test_rule_dashscope_explicit_minimum_1024(oai: openai.OpenAI) -> None:
    """Rule (DashScope): explicit cache blocks need at least 1024 tokens."""
    messages = qwen_messages(text(900), "q")
    chat(oai, "", model="qwen-plus", messages=messages)
    details = dashscope_details(chat(oai, "", model="qwen-plus", messages=messages))
    assert details["cached_tokens"] == details["cache_creation_input_tokens"] == 0


def test_rule_dashscope_five_minute_ttl_reset_on_hit(
    oai: openai.OpenAI, clock: VirtualClock
) -> None:
    """Rule (DashScope): 5 min TTL, reset on hit."""
    messages = qwen_messages(text(1500), "q")
    chat(oai, "", model="qwen-plus", messages=messages)
    clock.advance(290)
    assert (
        dashscope_details(chat(oai, "", model="qwen-plus", messages=messages))["cached_tokens"] > 0
    )
    clock.advance(290)
    assert (
        dashscope_details(chat(oai, "", model="qwen-plus", messages=messages))["cached_tokens"] > 0
    )
    clock.advance(301)
    assert (
        dashscope_details(chat(oai, "", model="qwen-plus", messages=messages))["cached_tokens"] == 0
    )


async def test_rule_dashscope_cache_created_after_the_response_ends(server: RunningServer) -> None:
    """Rule (DashScope): the cache is created after the model's response, not when it begins."""
    emu = server.emulator
    emu.latency = Latency(ttft=0.01, tokens_per_second=300)
    emu.script(Reply(text=text(60)))
    messages = qwen_messages(text(1500), "q")
    async with openai.AsyncOpenAI(
        base_url=server.url + "/v1", api_key="k", max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model="qwen-plus", messages=messages, stream=True
        )
        await anext(aiter(stream))
        during = await client.chat.completions.create(model="qwen-plus", messages=messages)
        async for _ in stream:
            pass
        after = await client.chat.completions.create(model="qwen-plus", messages=messages)
    assert dashscope_details(during)["cached_tokens"] == 0
    assert dashscope_details(after)["cached_tokens"] > 1500


def test_rule_dashscope_implicit_cache_from_256_tokens(oai: openai.OpenAI) -> None:
    """Rule (DashScope): implicit cache always on from 256 tokens; explicit and implicit exclusive."""
    prompt = text(400)
    chat(oai, prompt, model="qwen-plus")
    details = dashscope_details(chat(oai, prompt, model="qwen-plus"))
    assert details["cached_tokens"] >= 256
    assert details.get("cache_creation_input_tokens") is None
    small = text(200, "small")
    chat(oai, small, model="qwen-plus")
    assert dashscope_details(chat(oai, small, model="qwen-plus"))["cached_tokens"] == 0


def deepseek_usage(reply: ChatCompletion) -> dict[str, Any]:
    assert reply.usage is not None
    return reply.usage.model_dump()


def test_rule_deepseek_64_token_units_from_zero(oai: openai.OpenAI, clock: VirtualClock) -> None:
    """Rule (DeepSeek): automatic cache from token 0 in 64-token units."""
    prompt = text(200)
    first = deepseek_usage(chat(oai, prompt, model="deepseek-chat"))
    clock.advance(5)
    second = deepseek_usage(chat(oai, prompt, model="deepseek-chat"))
    assert first["prompt_cache_hit_tokens"] == 0
    assert second["prompt_cache_hit_tokens"] == second["prompt_tokens"] // 64 * 64
    assert second["prompt_cache_hit_tokens"] > 0


def test_rule_deepseek_hit_and_miss_fields(oai: openai.OpenAI, clock: VirtualClock) -> None:
    """Rule (DeepSeek): usage prompt_cache_hit_tokens + prompt_cache_miss_tokens = prompt_tokens."""
    prompt = text(700)
    chat(oai, prompt, model="deepseek-chat")
    clock.advance(5)
    usage = deepseek_usage(chat(oai, prompt, model="deepseek-chat"))
    assert (
        usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"]
        == usage["prompt_tokens"]
    )
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_cache_hit_tokens"]


def test_rule_deepseek_building_takes_seconds(
    oai: openai.OpenAI, clock: VirtualClock, emu: Emulator
) -> None:
    """Rule (DeepSeek): building the cache takes seconds after the response ends."""
    prompt = text(700)
    chat(oai, prompt, model="deepseek-chat")
    assert deepseek_usage(chat(oai, prompt, model="deepseek-chat"))["prompt_cache_hit_tokens"] == 0
    assert emu.log.last.breakpoints[0].reason == "not_yet_visible"
    clock.advance(emu.settings.deepseek_build_delay)
    assert deepseek_usage(chat(oai, prompt, model="deepseek-chat"))["prompt_cache_hit_tokens"] > 0


async def test_openai_parallel_requests_all_miss(server: RunningServer) -> None:
    """Parallel requests at one instant all miss, as the entry appears when the first response begins."""
    messages = [{"role": "system", "content": text(1500)}, {"role": "user", "content": "x"}]
    async with openai.AsyncOpenAI(
        base_url=server.url + "/v1", api_key="k", max_retries=0
    ) as client:
        replies = await asyncio.gather(
            *(client.chat.completions.create(model="gpt-4.1", messages=messages) for _ in range(3))  # type: ignore[arg-type]
        )
    assert [cached(r) for r in replies] == [0, 0, 0]
    assert tokens.count(text(1500)) == 1500
