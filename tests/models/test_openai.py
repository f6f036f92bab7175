"""Chat Completions adapter and its dialects: wire mapping, and the SDK over loopback HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from forkagent._orchestration.fork import FORK_PLACEHOLDER, FORK_RULES, fork_base, fork_from
from forkagent.emulator import EmulatedRequest, Emulator, Fault, Reply, RunningServer
from forkagent.errors import MissingCredentialsError, StreamInterruptedError
from forkagent.messages import (
    AssistantMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    user,
)
from forkagent.models import Model, ResponseComplete, TextDelta, ThinkingDelta, ToolUseStarted
from forkagent.models.compat import DASHSCOPE, DEEPSEEK, LLAMACPP, VLLM
from forkagent.models.openai import (
    OPENAI,
    ChatDialect,
    ChatStream,
    OpenAIModel,
    parse_response,
    parse_usage,
    render_request,
    takes_breakpoints,
)
from forkagent.requests import BlockPosition, ModelRequest, ModelSettings
from forkagent.testing import wire

from ._helpers import (
    FAST,
    LONG_SYSTEM,
    assert_golden,
    capture_bodies,
    check_conversation,
    converse,
    rich_request,
    script_tool_turn,
)

# --- pure mapping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "dialect", "extra"),
    [
        ("openai_request", "gpt-4.1", OPENAI, {"prompt_cache_retention": "24h"}),
        ("dashscope_request", "qwen-plus", DASHSCOPE, {}),
        ("deepseek_request", "deepseek-chat", DEEPSEEK, {}),
        ("llamacpp_request", "local", LLAMACPP, {"id_slot": 1, "cache_prompt": True}),
    ],
)
def test_wire_request_matches_golden(
    name: str, model: str, dialect: ChatDialect, extra: dict[str, Any]
) -> None:
    request = rich_request(model, extra=extra)
    assert_golden(name, wire(render_request(request, dialect, stream=True)))


def test_tool_results_become_tool_messages_and_their_images_a_user_message() -> None:
    messages = wire(render_request(rich_request("gpt-4.1"), OPENAI))["messages"]
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "user", "assistant", "user"
    ]  # fmt: skip
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "A: open, owner Kim",
    }
    assert messages[4]["content"] == "bad arguments"
    assert messages[5]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://x/e.png"}},
        {"type": "text", "text": "Now summarise."},
    ]


def test_tool_call_arguments_keep_key_order_or_the_models_raw_text() -> None:
    calls = wire(render_request(rich_request("gpt-4.1"), OPENAI))["messages"][2]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"key":"A","deep":true}', '{"key": "B"']


def test_only_openai_gets_the_cache_routing_key() -> None:
    request = rich_request("m")
    assert wire(render_request(request, OPENAI))["prompt_cache_key"] == "family-1"
    for dialect in (DASHSCOPE, DEEPSEEK, VLLM):
        assert "prompt_cache_key" not in wire(render_request(request, dialect))


def test_dashscope_markers_sit_where_anthropic_puts_its_breakpoints() -> None:
    messages = wire(render_request(rich_request("qwen-plus"), DASHSCOPE))["messages"]
    marked = [
        (i, j)
        for i, m in enumerate(messages)
        if isinstance(m["content"], list)
        for j, part in enumerate(m["content"])
        if "cache_control" in part
    ]
    # system's last part, the second tool result (end of the shared prefix), the user text that
    # ended the previous request, the last user text
    assert marked == [(0, 1), (4, 0), (5, 1), (7, 0)]
    assert all(isinstance(m["content"], list) for m in messages if m["content"] is not None)


def _breakpoints(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, m in enumerate(body["messages"])
        if isinstance(m["content"], list)
        for j, part in enumerate(m["content"])
        if part.get("prompt_cache_breakpoint") == {"mode": "explicit"}
    ]


def test_newer_openai_models_get_explicit_breakpoints_where_dashscope_gets_markers() -> None:
    body = wire(render_request(rich_request("gpt-5.6"), OPENAI))
    assert body["prompt_cache_options"] == {"mode": "explicit"}
    assert _breakpoints(body) == [(0, 1), (4, 0), (5, 1), (7, 0)]
    assert all(isinstance(m["content"], list) for m in body["messages"] if m["content"] is not None)
    older = wire(render_request(rich_request("gpt-4.1"), OPENAI))
    assert "prompt_cache_options" not in older
    assert _breakpoints(older) == []


@pytest.mark.parametrize(
    ("model", "takes"),
    [
        ("gpt-5.6", True),
        ("gpt-5.6-mini-2026-01-01", True),
        ("gpt-6", True),
        ("gpt-5.5", False),
        ("gpt-5", False),
        ("gpt-4.1", False),
        ("o3", False),
    ],
)
def test_breakpoints_are_for_gpt_5_6_and_later(model: str, takes: bool) -> None:
    assert takes_breakpoints(model) is takes


def test_thinking_goes_back_only_where_the_dialect_takes_it() -> None:
    request = rich_request("m")
    assert "reasoning_content" not in wire(render_request(request, OPENAI))["messages"][2]
    assert wire(render_request(request, DEEPSEEK))["messages"][2]["reasoning_content"] == (
        "Both tickets are needed."
    )


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("any", "required"),
        ("lookup", {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_tool_choice(choice: str, expected: object) -> None:
    request = ModelRequest(model="m", settings=ModelSettings(tool_choice=choice))
    assert wire(render_request(request, OPENAI))["tool_choice"] == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # OpenAI: cached and newly written tokens are both inside prompt_tokens
            {"prompt_tokens": 1000, "completion_tokens": 5,
             "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}},
            (100, 600, 300),
        ),
        (  # DashScope explicit cache
            {"prompt_tokens": 1500, "completion_tokens": 5,
             "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_input_tokens": 1400}},
            (100, 0, 1400),
        ),
        (  # DeepSeek
            {"prompt_tokens": 900, "completion_tokens": 5,
             "prompt_cache_hit_tokens": 640, "prompt_cache_miss_tokens": 260},
            (260, 640, 0),
        ),
        ({"prompt_tokens": 50, "completion_tokens": 5}, (50, 0, 0)),  # vLLM without details
    ],
)  # fmt: skip
def test_usage_fields_of_each_server(body: dict[str, Any], expected: tuple[int, int, int]) -> None:
    usage = parse_usage({"usage": body})
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_5m_tokens) == expected
    assert usage.output_tokens == 5


def test_llamacpp_reports_reuse_in_its_timings() -> None:
    usage = parse_usage(
        {"usage": {"prompt_tokens": 300}, "timings": {"cache_n": 256, "prompt_n": 44}}
    )
    assert (usage.input_tokens, usage.cache_read_tokens) == (44, 256)


def test_parse_response_reads_reasoning_calls_and_finish_reason() -> None:
    response = parse_response(
        {
            "id": "chatcmpl-1",
            "model": "deepseek-chat",
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "reasoning_content": "think",
                        "tool_calls": [
                            {"id": "c1", "type": "function",
                             "function": {"name": "lookup", "arguments": '{"z":1,"a":2}'}},
                            {"id": "c2", "type": "function",
                             "function": {"name": "lookup", "arguments": '{"key": '}},
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )  # fmt: skip
    thinking, first, second = response.message.content
    assert thinking == ThinkingBlock(thinking="think")
    assert isinstance(first, ToolUseBlock)
    assert list(first.input) == ["z", "a"]
    assert second == ToolUseBlock(id="c2", name="lookup", raw_arguments='{"key": ')
    assert response.stop_reason == "tool_use"
    assert parse_response(
        {"choices": [{"message": {}, "finish_reason": "length"}]}
    ).stop_reason == ("max_tokens")


def _chunks() -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "model": "gpt-4.1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    call = {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "lookup", "arguments": ""},
    }
    return [
        chunk({"role": "assistant", "reasoning_content": "hm"}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"tool_calls": [call]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"key":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"A"}'}}]}),
        chunk({}, "tool_calls"),
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}},
    ]  # fmt: skip


def test_stream_chunks_fold_into_one_completion() -> None:
    sink = ChatStream("openai")
    deltas = [d for c in _chunks() for d in sink.feed(c)]
    assert deltas == [
        ThinkingDelta("hm"), TextDelta("Hel"), TextDelta("lo"), ToolUseStarted(id="t1", name="lookup")
    ]  # fmt: skip
    response = sink.finish()
    assert response.message.text == "Hello"
    assert response.message.tool_uses[0].input == {"key": "A"}
    assert response.usage.input_tokens == 10


def test_a_stream_without_finish_reason_is_an_interruption() -> None:
    sink = ChatStream("openai")
    for chunk in _chunks()[:3]:
        sink.feed(chunk)
    with pytest.raises(StreamInterruptedError):
        sink.finish()


def test_a_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASHSCOPE_API_KEY")
    with pytest.raises(MissingCredentialsError, match="DASHSCOPE_API_KEY"):
        OpenAIModel("qwen-plus", dialect=DASHSCOPE)


def test_local_engines_need_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    assert OpenAIModel("m", dialect=VLLM).profile.provider == "vllm"


# --- through the SDK, over loopback HTTP -----------------------------------------------------------


def _model(
    server: RunningServer, closing: list[Model], name: str, dialect: ChatDialect
) -> OpenAIModel:
    made = OpenAIModel(name, dialect=dialect, base_url=server.url + "/v1", retry=FAST)
    closing.append(made)
    return made


@pytest.mark.parametrize(
    ("name", "dialect", "stream"),
    [
        ("gpt-4.1", OPENAI, False),
        ("gpt-4.1", OPENAI, True),
        ("qwen-plus", DASHSCOPE, False),
        ("qwen-plus", DASHSCOPE, True),
        ("deepseek-chat", DEEPSEEK, False),
    ],
)
async def test_multi_turn_tool_conversation(
    emulator: Emulator,
    server: RunningServer,
    closing: list[Model],
    name: str,
    dialect: ChatDialect,
    stream: bool,
) -> None:
    script_tool_turn(emulator)
    responses = await converse(_model(server, closing, name, dialect), stream=stream)
    check_conversation(responses)
    if dialect is DASHSCOPE:
        assert responses[0].usage.cache_write_5m_tokens > 5000


async def test_settings_reach_the_server(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    bodies: list[dict[str, Any]] = []

    def capture(request: EmulatedRequest) -> Reply:
        bodies.append(dict(request.body))
        return Reply(text="ok")

    emulator.set_policy(capture)
    emulator.register_model("my-model")  # a local vLLM server's model
    settings = ModelSettings(cache_key="family-7")
    request = ModelRequest(model="gpt-4.1", messages=(user("hi"),), settings=settings)
    await _model(server, closing, "gpt-4.1", OPENAI).request(request)
    salted = settings.model_copy(update={"extra": {"cache_salt": "tenant-1"}})
    local = request.model_copy(update={"model": "my-model", "settings": salted})
    async for _ in _model(server, closing, "my-model", VLLM).stream(local):
        pass
    openai_body, vllm_body = bodies
    assert openai_body["prompt_cache_key"] == "family-7"
    assert openai_body["max_completion_tokens"] == 4096
    assert vllm_body["cache_salt"] == "tenant-1"
    assert vllm_body["stream_options"] == {"include_usage": True}
    assert "prompt_cache_key" not in vllm_body


async def test_fork_siblings_read_the_prefix_their_first_member_wrote_at_its_breakpoint(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    bodies = capture_bodies(emulator)
    parent = (user("Shared context, read with care. " * 400), assistant("Understood."))
    children = [
        ModelRequest(
            model="gpt-5.6",
            system=LONG_SYSTEM,
            messages=(*parent, user(directive)),
            shared_prefix_end=BlockPosition(message=1, block=0),
        )
        for directive in ("Task one.", "Task two.", "Task three.")
    ]
    model = _model(server, closing, "gpt-5.6", OPENAI)
    first = await model.request(children[0])
    siblings = [await model.request(child) for child in children[1:]]
    assert first.usage.cache_read_tokens == 0
    assert first.usage.cache_write_5m_tokens > 7000
    for sibling in siblings:
        assert sibling.usage.cache_read_tokens > 7000
        assert 0 < sibling.usage.cache_write_5m_tokens < 20
    assert bodies[0]["prompt_cache_options"] == {"mode": "explicit"}
    # system, the parent's prompt (its previous request's end), the shared prefix end, the last part
    assert _breakpoints(bodies[0]) == [(0, 0), (1, 0), (2, 0), (3, 0)]


async def test_429_is_retried_after_retry_after(
    emulator: Emulator, server: RunningServer, closing: list[Model], sleeps: list[float]
) -> None:
    emulator.faults.inject(Fault("rate_limit", retry_after=0.5))
    model = _model(server, closing, "gpt-4.1", OPENAI)
    assert (await model.request(ModelRequest(model="gpt-4.1", messages=(user("hi"),)))).message.text
    assert sleeps == [0.5]


async def test_a_cut_stream_is_retried_when_nothing_was_shown(
    emulator: Emulator, server: RunningServer, closing: list[Model], sleeps: list[float]
) -> None:
    emulator.faults.inject(Fault("cut_stream", after_events=0))
    model = _model(server, closing, "gpt-4.1", OPENAI)
    events = [e async for e in model.stream(ModelRequest(model="gpt-4.1", messages=(user("hi"),)))]
    assert isinstance(events[-1], ResponseComplete)
    assert len(sleeps) == 1


def test_a_refusal_is_kept_as_text_with_its_stop_reason() -> None:
    message = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    response = parse_response({"choices": [{"message": message, "finish_reason": "stop"}]})
    assert response.message.text == "I can't help with that."
    assert response.stop_reason == "refusal"


def _siblings(dialect: ChatDialect, model: str) -> list[list[dict[str, Any]]]:
    """Two children of a reply with 12 tool calls, rendered; each child's messages."""
    calls = tuple(ToolUseBlock(id=f"call_{n}", name="Agent", input={"n": n}) for n in range(12))
    base = fork_base((user("Split it."), AssistantMessage(content=calls)))
    bodies = []
    for directive in ("first", "second"):
        forked = fork_from(base, directive)
        child = ModelRequest(
            model=model, messages=forked.messages, shared_prefix_end=forked.shared_prefix_end
        )
        body = render_request(child, dialect)
        assert body == render_request(child, dialect)  # the same from the warm caches
        bodies.append(wire(body)["messages"])
    return bodies


def test_siblings_of_one_reply_share_their_placeholder_tool_messages() -> None:
    a, b = _siblings(OPENAI, "gpt-4.1")
    assert [m["role"] for m in a] == ["user", "assistant"] + ["tool"] * 12 + ["user"]
    assert all(x is y for x, y in zip(a[:14], b[:14], strict=True))  # rendered once
    assert a[-1] is not b[-1]
    assert [p["text"] for p in a[-1]["content"]] == [FORK_RULES, "Directive:\nfirst"]
    assert a[2] == {"role": "tool", "tool_call_id": "call_0", "content": FORK_PLACEHOLDER}


@pytest.mark.parametrize(
    ("dialect", "model", "marker"),
    [
        (DASHSCOPE, "qwen-plus", "cache_control"),
        (OPENAI, "gpt-5.6", "prompt_cache_breakpoint"),
    ],
)
def test_markers_go_on_each_siblings_own_copies(
    dialect: ChatDialect, model: str, marker: str
) -> None:
    a, b = _siblings(dialect, model)
    # the prompt ended the parent's previous request; the rules end the shared prefix; the
    # directive ends the request: each marked in the child's own copy
    assert [marker in part for part in a[0]["content"]] == [True]
    assert [marker in part for part in a[-1]["content"]] == [True, True]
    assert all(x is y for x, y in zip(a[1:14], b[1:14], strict=True))
    assert not any(marker in part for m in a[2:14] for part in m["content"])


def test_a_marked_tool_result_in_a_long_message_is_a_copy() -> None:
    calls = tuple(ToolUseBlock(id=f"call_{n}", name="read", input={"n": n}) for n in range(12))
    results = tuple(
        ToolResultBlock(tool_use_id=f"call_{n}", content=(TextBlock(text=f"file {n}"),))
        for n in range(12)
    )
    history = (user("Read them."), AssistantMessage(content=calls), UserMessage(content=results))
    body = wire(render_request(ModelRequest(model="qwen-plus", messages=history), DASHSCOPE))
    tools = body["messages"][-12:]
    assert [("cache_control" in m["content"][-1]) for m in tools] == [False] * 11 + [True]
    unmarked = ModelRequest(model="qwen-plus", messages=(*history, user("And?")))
    shared = wire(render_request(unmarked, DASHSCOPE))["messages"][2:14]
    assert not any("cache_control" in m["content"][-1] for m in shared)
