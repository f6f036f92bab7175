"""Anthropic adapter: wire mapping (pure) and the SDK against the emulator over loopback HTTP."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from forkagent._orchestration.fork import FORK_RULES, fork_base, fork_from
from forkagent.emulator import Emulator, Fault, RunningServer
from forkagent.errors import (
    InvalidRequestError,
    MissingCredentialsError,
    OverloadedError,
    StreamInterruptedError,
)
from forkagent.messages import (
    AssistantMessage,
    JsonValue,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    user,
)
from forkagent.models import (
    Model,
    ResponseComplete,
    ResponseStarted,
    TextDelta,
    ToolUseStarted,
)
from forkagent.models._retry import RetryPolicy
from forkagent.models.anthropic import (
    AnthropicModel,
    AnthropicStream,
    can_prewarm,
    min_cache_tokens,
    parse_response,
    render_request,
)
from forkagent.requests import BlockPosition, CacheTTL, ModelRequest, ModelSettings
from forkagent.testing import wire

from ._helpers import (
    FAST,
    LONG_SYSTEM,
    LOOKUP,
    THINKING,
    assert_golden,
    check_conversation,
    converse,
    rich_request,
    script_tool_turn,
)

MODEL = "claude-opus-4-1"


def _marked(body: Mapping[str, Any]) -> list[str]:
    """Where the ``cache_control`` markers are, as ``system[1]``, ``messages[2][1]``..."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [f"system[{i}]" for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for m, message in enumerate(body["messages"]):
        found += [
            f"messages[{m}][{b}]" for b, x in enumerate(message["content"]) if "cache_control" in x
        ]
    return found


# --- pure mapping ---------------------------------------------------------------------------------


def test_wire_request_matches_golden() -> None:
    request = rich_request(
        MODEL, thinking=THINKING, cache_ttl="1h", extra={"metadata": {"user_id": "u-1"}}
    )
    assert_golden(
        "anthropic_request", wire(render_request(request, previous_message_id="msg_prev"))
    )


def test_breakpoints_after_system_at_previous_request_end_shared_prefix_end_and_last_block() -> (
    None
):
    body = wire(render_request(rich_request(MODEL)))
    # messages[2][2] ends the previous request (the last block before the last assistant message)
    assert _marked(body) == ["system[1]", "messages[2][1]", "messages[2][2]", "messages[4][0]"]
    assert body["system"][1]["cache_control"] == {"type": "ephemeral"}


def test_without_a_system_prompt_the_last_tool_carries_the_prefix_breakpoint() -> None:
    request = ModelRequest(model=MODEL, tools=(LOOKUP, LOOKUP), messages=(user("hi"),))
    assert _marked(wire(render_request(request))) == ["tools[1]", "messages[0][0]"]


def test_a_thinking_block_hands_its_breakpoint_to_the_block_before_it() -> None:
    request = ModelRequest(
        model=MODEL,
        messages=(
            user("go"),
            assistant(ThinkingBlock(thinking="t", signature="s"), "done"),
            user("next"),
        ),
        shared_prefix_end=BlockPosition(message=1, block=0),
    )
    assert _marked(wire(render_request(request))) == ["messages[0][0]", "messages[2][0]"]


def test_automatic_caching_in_extra_takes_the_last_blocks_slot() -> None:
    request = rich_request(MODEL, extra={"cache_control": {"type": "ephemeral"}})
    body = wire(render_request(request))
    assert _marked(body) == ["system[1]", "messages[2][1]", "messages[2][2]"]
    assert body["cache_control"] == {"type": "ephemeral"}  # four breakpoints in all


async def test_automatic_caching_in_extra_is_accepted_by_the_api(
    model: AnthropicModel,
) -> None:
    request = rich_request(MODEL, extra={"cache_control": {"type": "ephemeral"}})
    response = await model.request(request)  # five breakpoints would be a 400
    assert response.message.content


def test_one_hour_ttl_marks_every_breakpoint() -> None:
    body = wire(render_request(rich_request(MODEL, cache_ttl="1h")))
    assert body["system"][1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert body["messages"][4]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_thinking_goes_back_verbatim_and_unsigned_thinking_is_left_out() -> None:
    body = wire(render_request(rich_request(MODEL)))
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Both tickets are needed.",
        "signature": "sig-1",
    }
    assert body["messages"][3]["content"][0] == {
        "type": "redacted_thinking",
        "data": "opaque-redacted",
    }
    foreign = ModelRequest(model=MODEL, messages=(assistant(ThinkingBlock(thinking="x"), "y"),))
    assert wire(render_request(foreign))["messages"][0]["content"] == [
        {"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}
    ]


def test_prewarm_is_refused_locally_where_the_api_refuses_it() -> None:
    plain = rich_request(MODEL)
    assert can_prewarm(plain)
    assert wire(render_request(plain, max_tokens=0))["max_tokens"] == 0
    assert not can_prewarm(rich_request(MODEL, thinking=THINKING))
    assert not can_prewarm(rich_request(MODEL, tool_choice="lookup"))


def test_parse_response_keeps_thinking_parallel_calls_usage_and_diagnosis() -> None:
    response = parse_response(
        {
            "id": "msg_1",
            "model": MODEL,
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"z": 1, "a": 2}},
                {"type": "tool_use", "id": "t2", "name": "lookup", "input": {"key": "B"}},
                {"type": "server_tool_use", "id": "s1", "name": "web", "input": {}},
            ],
            "stop_reason": "tool_use",
            "usage": {
                "input_tokens": 10,
                "output_tokens": 7,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 50,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 20,
                    "ephemeral_1h_input_tokens": 30,
                },
            },
            "diagnostics": {"cache_miss_reason": {"type": "system_changed"}},
        }
    )
    blocks = response.message.content
    assert blocks[0] == ThinkingBlock(thinking="plan", signature="sig")
    assert blocks[1] == ThinkingBlock(thinking="", signature="opaque", redacted=True)
    assert [u.id for u in response.message.tool_uses] == ["t1", "t2"]
    assert list(response.message.tool_uses[0].input) == ["z", "a"]
    assert len(blocks) == 5
    assert response.stop_reason == "tool_use"
    assert response.response_id == "msg_1"
    assert response.cache_diagnosis == {"type": "system_changed"}
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens) == (10, 100)
    assert (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (20, 30)


def test_cache_writes_without_a_ttl_split_count_as_five_minutes() -> None:
    usage = parse_response({"usage": {"cache_creation_input_tokens": 40}}).usage
    assert (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (40, 0)


def _stream_events(json_pieces: list[str]) -> list[dict[str, JsonValue]]:
    deltas: list[dict[str, JsonValue]] = [
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": piece},
        }
        for piece in json_pieces
    ]
    return [
        {
            "type": "message_start",
            "message": {"id": "m", "model": MODEL, "usage": {"input_tokens": 3}},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "lookup", "input": {}},
        },
        *deltas,
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]


def test_stream_events_fold_into_one_response() -> None:
    sink = AnthropicStream()
    deltas = [d for e in _stream_events(['{"z": 1, ', '"a": [2]}']) for d in sink.feed(e)]
    assert deltas == [ResponseStarted(), TextDelta("Hi"), ToolUseStarted(id="t", name="lookup")]
    response = sink.finish()
    assert response.message.content[0] == TextBlock(text="Hi")
    call = response.message.tool_uses[0]
    assert list(call.input.items()) == [("z", 1), ("a", [2])]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 9)


def test_a_stream_call_with_broken_json_keeps_the_raw_text() -> None:
    sink = AnthropicStream()
    for event in _stream_events(['{"key": "B"']):
        sink.feed(event)
    call = sink.finish().message.tool_uses[0]
    assert call == ToolUseBlock(id="t", name="lookup", input={}, raw_arguments='{"key": "B"')


def test_a_stream_without_message_stop_is_an_interruption() -> None:
    sink = AnthropicStream()
    for event in _stream_events(["{}"])[:-1]:
        sink.feed(event)
    with pytest.raises(StreamInterruptedError, match="nothing was added"):
        sink.finish()


@pytest.mark.parametrize(
    ("model", "minimum"),
    [
        ("claude-sonnet-4-5-20250929", 1024),
        ("claude-opus-4-1", 1024),
        ("claude-3-7-sonnet-latest", 1024),
        ("claude-sonnet-4-6", 2048),
        ("claude-3-5-haiku-20241022", 2048),
        ("claude-haiku-4-5", 4096),
        ("claude-opus-4-6", 4096),
        ("claude-opus-5-5", 4096),
    ],
)
def test_minimum_cacheable_prefix_per_model(model: str, minimum: int) -> None:
    assert min_cache_tokens(model) == minimum


def test_a_missing_key_is_reported_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(MissingCredentialsError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL)


# --- through the SDK, over loopback HTTP -----------------------------------------------------------


@pytest.fixture
def model(server: RunningServer, closing: list[Model]) -> AnthropicModel:
    made = AnthropicModel(MODEL, base_url=server.url, retry=FAST)
    closing.append(made)
    return made


@pytest.mark.parametrize("stream", [False, True])
async def test_multi_turn_tool_conversation(
    emulator: Emulator, model: AnthropicModel, stream: bool
) -> None:
    script_tool_turn(emulator)
    responses = await converse(model, stream=stream)
    check_conversation(responses)
    assert responses[0].usage.cache_write_5m_tokens > 5000
    assert responses[0].response_id


async def test_one_hour_writes_are_counted_apart(emulator: Emulator, model: AnthropicModel) -> None:
    request = ModelRequest(
        model=MODEL,
        system=LONG_SYSTEM,
        messages=(user("hello"),),
        settings=ModelSettings(cache_ttl="1h"),
    )
    usage = (await model.request(request)).usage
    assert usage.cache_write_1h_tokens > 5000
    assert usage.cache_write_5m_tokens == 0


async def test_diagnostics_explain_a_miss_against_the_previous_response(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    model = AnthropicModel(MODEL, base_url=server.url, retry=FAST, diagnostics=True)
    closing.append(model)
    first = ModelRequest(model=MODEL, system=LONG_SYSTEM, messages=(user("hello"),))
    reply = await model.request(first)
    assert reply.cache_diagnosis is None
    follow = (*first.messages, reply.message, user("more"))
    same = await model.request(first.model_copy(update={"messages": follow}))
    assert same.cache_diagnosis is None
    changed = first.model_copy(update={"messages": follow, "system": "Another prompt. " * 400})
    diagnosis = (await model.request(changed)).cache_diagnosis
    assert diagnosis is not None
    assert diagnosis["type"] == "system_changed"


async def test_prewarm_writes_the_prefix_that_siblings_then_read(
    emulator: Emulator, model: AnthropicModel
) -> None:
    prefix = ModelRequest(model=MODEL, system=LONG_SYSTEM, messages=(user("Shared context."),))
    warm = await model.prewarm(prefix)
    assert warm is not None
    assert warm.cache_write_5m_tokens > 5000
    assert warm.output_tokens == 0
    end = BlockPosition(message=0, block=0)
    for directive in ("Task one.", "Task two."):
        child = prefix.model_copy(
            update={
                "messages": (user("Shared context.", directive),),
                "shared_prefix_end": end,
            }
        )
        usage = (await model.request(child)).usage
        assert usage.cache_read_tokens == warm.cache_write_5m_tokens


async def test_429_is_retried_after_the_servers_retry_after(
    emulator: Emulator, model: AnthropicModel, sleeps: list[float]
) -> None:
    emulator.faults.inject(Fault("rate_limit", retry_after=0.25))
    response = await model.request(ModelRequest(model=MODEL, messages=(user("hi"),)))
    assert response.message.text
    assert sleeps == [0.25]


async def test_529_is_retried_then_reported_with_advice(
    emulator: Emulator, server: RunningServer, closing: list[Model], sleeps: list[float]
) -> None:
    model = AnthropicModel(MODEL, base_url=server.url, retry=RetryPolicy(max_retries=2))
    closing.append(model)
    emulator.faults.inject(Fault("overloaded"), times=3)
    with pytest.raises(OverloadedError, match=r"overloaded.*Try again") as caught:
        await model.request(ModelRequest(model=MODEL, messages=(user("hi"),)))
    assert caught.value.status == 529
    assert len(sleeps) == 2


async def test_a_dropped_connection_is_retried(
    emulator: Emulator, model: AnthropicModel, sleeps: list[float]
) -> None:
    emulator.faults.inject(Fault("drop"))
    assert (await model.request(ModelRequest(model=MODEL, messages=(user("hi"),)))).message.text
    assert len(sleeps) == 1


async def test_a_bad_request_is_not_retried(
    emulator: Emulator, model: AnthropicModel, sleeps: list[float]
) -> None:
    with pytest.raises(InvalidRequestError, match="retrying the same request will fail"):
        await model.request(ModelRequest(model=MODEL))
    assert sleeps == []


async def test_a_stream_cut_before_any_output_is_retried(
    emulator: Emulator, model: AnthropicModel, sleeps: list[float]
) -> None:
    emulator.faults.inject(Fault("cut_stream", after_events=1))
    events = [e async for e in model.stream(ModelRequest(model=MODEL, messages=(user("hi"),)))]
    assert isinstance(events[-1], ResponseComplete)
    assert events[-1].response.message.text
    assert len(sleeps) == 1


async def test_a_stream_cut_after_output_is_reported_not_half_returned(
    emulator: Emulator, model: AnthropicModel
) -> None:
    emulator.script("one two three four five six seven eight nine ten eleven twelve")
    emulator.faults.inject(Fault("cut_stream", after_events=5))
    seen: list[object] = []

    async def consume() -> None:
        async for event in model.stream(ModelRequest(model=MODEL, messages=(user("hi"),))):
            seen.append(event)

    with pytest.raises(StreamInterruptedError, match="nothing was added to the history"):
        await consume()
    assert isinstance(seen[0], ResponseStarted)  # the reply began: siblings may go
    assert seen[1:]
    assert all(isinstance(e, TextDelta) for e in seen[1:])


def test_siblings_share_the_rendering_of_their_common_messages() -> None:
    """A fork family's prefix is rendered once; markers never leak into the shared form."""
    history = (user("one " * 50), assistant("two"), user("three"), assistant("four"))
    first = ModelRequest(model=MODEL, messages=(*history, user("five")))
    second = ModelRequest(model=MODEL, messages=(*history, user("six")))

    a, b = wire(render_request(first)), wire(render_request(second))

    # message 0 is unmarked in both: one shared rendering
    assert a["messages"][0] is b["messages"][0]
    # the previous request's end (message 2) carries a marker: rendered per request
    assert a["messages"][2] is not b["messages"][2]
    assert a["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # the shared renderings never carry a marker, whichever request marked its own copy
    for message in (a["messages"][0], a["messages"][1], a["messages"][3]):
        assert message is b["messages"][a["messages"].index(message)]
        assert all("cache_control" not in block for block in message["content"])
    assert render_request(first) == a  # the same bytes as before sharing


def test_siblings_of_one_reply_share_each_placeholder_block() -> None:
    """N forks of one reply end with the same N placeholder results: each is rendered once."""
    calls = tuple(ToolUseBlock(id=f"toolu_{n}", name="Agent", input={"n": n}) for n in range(3))
    history = (user("Split it."), AssistantMessage(content=calls))
    base = fork_base(history)
    children = [
        ModelRequest(
            model=MODEL, messages=forked.messages, shared_prefix_end=forked.shared_prefix_end
        )
        for forked in (fork_from(base, "first"), fork_from(base, "second"))
    ]

    a, b = (wire(render_request(child))["messages"][-1]["content"] for child in children)

    assert all(x is y for x, y in zip(a[:3], b[:3], strict=True))  # the placeholders
    assert [x["type"] for x in a[:3]] == ["tool_result"] * 3
    # the rules block's marked copy is shared by the siblings too (their heads are the same
    # objects), and the marker never reaches the unmarked rendering
    assert a[3] is b[3]
    assert a[3]["cache_control"] == {"type": "ephemeral"}
    plain = ModelRequest(
        model=MODEL,
        messages=(*base.messages, UserMessage(content=(*base.head, TextBlock(text="t")))),
    )
    rules = wire(render_request(plain))["messages"][-1]["content"][3]
    assert rules["text"] == FORK_RULES
    assert "cache_control" not in rules
    assert render_request(children[0]) == wire(render_request(children[0]))


def test_a_shared_marked_block_carries_the_ttl_of_each_request() -> None:
    """The rules' marked copy is shared per TTL: a child asking for one hour never gets the
    five-minute copy a sibling made of the same block, nor the reverse."""
    calls = tuple(ToolUseBlock(id=f"toolu_{n}", name="Agent", input={"n": n}) for n in range(3))
    base = fork_base((user("Split it."), AssistantMessage(content=calls)))

    def rules_mark(ttl: CacheTTL) -> object:
        forked = fork_from(base, f"part for {ttl}")
        request = ModelRequest(
            model=MODEL,
            messages=forked.messages,
            shared_prefix_end=forked.shared_prefix_end,
            settings=ModelSettings(cache_ttl=ttl),
        )
        return wire(render_request(request))["messages"][-1]["content"][-2]["cache_control"]

    assert [rules_mark("5m"), rules_mark("1h"), rules_mark("5m")] == [
        {"type": "ephemeral"},
        {"type": "ephemeral", "ttl": "1h"},
        {"type": "ephemeral"},
    ]


def test_a_long_message_renders_alike_from_its_shared_head() -> None:
    """A message of more than 8 blocks takes its head's rendering from the family's cache:
    the body is the one a block-by-block rendering gives, markers land on the right block
    even when a block renders as nothing, and the shared rendering never carries one."""
    unsigned = ThinkingBlock(thinking="from another provider", signature=None)
    calls = tuple(ToolUseBlock(id=f"toolu_{n}", name="Agent", input={"n": n}) for n in range(11))
    prefill = AssistantMessage(content=(unsigned, *calls))
    request = ModelRequest(model=MODEL, messages=(user("Split it."), prefill))
    expected = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "Agent", "input": {"n": n}}
        for n in range(11)
    ]
    expected[-1] = {**expected[-1], "cache_control": {"type": "ephemeral"}}

    for _ in range(2):  # the head rendered, then taken from the cache
        assert wire(render_request(request))["messages"][1]["content"] == expected

    base = fork_base((user("Split it."), AssistantMessage(content=calls)))
    for directive in ("first", "second"):
        forked = fork_from(base, directive)
        child = ModelRequest(
            model=MODEL, messages=forked.messages, shared_prefix_end=forked.shared_prefix_end
        )
        last = wire(render_request(child))["messages"][-1]["content"]
        assert [b["type"] for b in last] == ["tool_result"] * 11 + ["text", "text"]
        assert [("cache_control" in b) for b in last] == [False] * 11 + [True, True]
        assert last[-1]["text"] == f"Directive:\n{directive}"
    unmarked = ModelRequest(model=MODEL, messages=(user("Split it."), prefill, user("Go on.")))
    shared = wire(render_request(unmarked))["messages"][1]["content"]
    assert all("cache_control" not in block for block in shared)
