"""Gemini adapter: REST mapping (pure) and google-genai against the emulator over loopback HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from forkagent._orchestration.fork import fork_base, fork_from
from forkagent.emulator import EmulatedRequest, Emulator, Fault, Reply, RunningServer
from forkagent.errors import MissingCredentialsError, StreamInterruptedError
from forkagent.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    tool_result,
    user,
)
from forkagent.models import Model, TextDelta, ThinkingDelta
from forkagent.models.gemini import (
    CachedPrefix,
    GeminiModel,
    GeminiStream,
    parse_response,
    render_cache,
    render_request,
    shared_contents,
)
from forkagent.requests import BlockPosition, ModelRequest, ModelSettings, ThinkingConfig
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

MODEL = "gemini-2.5-flash"


def _roles(body: dict[str, Any]) -> list[str]:
    return [c["role"] for c in body["contents"]]


# --- pure mapping ---------------------------------------------------------------------------------


def test_wire_request_matches_golden() -> None:
    assert_golden("gemini_request", wire(render_request(rich_request(MODEL, thinking=THINKING))))


def test_consecutive_turns_of_one_role_are_merged() -> None:
    request = ModelRequest(
        model=MODEL,
        messages=(user("a"), user("b"), assistant("c"), assistant("d"), user("e")),
    )
    body = wire(render_request(request))
    assert _roles(body) == ["user", "model", "user"]
    assert body["contents"][0]["parts"] == [{"text": "a"}, {"text": "b"}]


def test_function_responses_are_named_by_their_call_and_come_first() -> None:
    parts = wire(render_request(rich_request(MODEL)))["contents"][2]["parts"]
    assert parts[0] == {
        "functionResponse": {
            "id": "call_a",
            "name": "lookup",
            "response": {"output": "A: open, owner Kim"},
        }
    }
    assert parts[1]["functionResponse"]["response"] == {"error": "bad arguments"}
    assert parts[2:] == [
        {"fileData": {"mimeType": "image/png", "fileUri": "https://x/e.png"}},
        {"text": "Now summarise."},
    ]


def test_thought_signatures_survive_a_round_trip() -> None:
    parts: list[dict[str, Any]] = [
        {"text": "plan", "thought": True, "thoughtSignature": "s1"},
        {"functionCall": {"id": "f1", "name": "lookup", "args": {"z": 1, "a": 2}}, "thoughtSignature": "s2"},
        {"text": "Checking."},
        {"text": "", "thoughtSignature": "s3"},
    ]  # fmt: skip
    response = parse_response(
        {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}
    )
    assert response.message.content == (
        ThinkingBlock(thinking="plan", signature="s1"),
        ThinkingBlock(thinking="", signature="s2"),
        ToolUseBlock(id="f1", name="lookup", input={"z": 1, "a": 2}),
        TextBlock(text="Checking."),
        ThinkingBlock(thinking="", signature="s3"),
    )
    assert response.stop_reason == "tool_use"
    again = wire(render_request(ModelRequest(model=MODEL, messages=(user("go"), response.message))))
    assert again["contents"][1]["parts"] == parts


def test_calls_without_an_id_get_one_from_the_response() -> None:
    response = parse_response(
        {
            "responseId": "r9",
            "candidates": [{"content": {"parts": [
                {"functionCall": {"name": "lookup", "args": {}}},
                {"functionCall": {"name": "lookup", "args": {}}},
            ]}}],
        }
    )  # fmt: skip
    assert [u.id for u in response.message.tool_uses] == ["r9_0", "r9_1"]


@pytest.mark.parametrize(
    ("thinking", "config"),
    [
        (ThinkingConfig(type="adaptive"), {"includeThoughts": True, "thinkingBudget": -1}),
        (ThinkingConfig(type="enabled", budget_tokens=512), {"includeThoughts": True, "thinkingBudget": 512}),
        (ThinkingConfig(type="disabled"), {"thinkingBudget": 0}),
    ],
)  # fmt: skip
def test_thinking_settings(thinking: ThinkingConfig, config: dict[str, Any]) -> None:
    request = ModelRequest(model=MODEL, settings=ModelSettings(thinking=thinking))
    assert wire(render_request(request))["generationConfig"]["thinkingConfig"] == config


def _fork(directive_in_same_message: bool) -> ModelRequest:
    history: list[Message] = [
        user("context"),
        AssistantMessage(content=(ToolUseBlock(id="t", name="lookup", input={}),)),
    ]
    placeholder = tool_result("t", "pending")
    if directive_in_same_message:
        history.append(UserMessage(content=(placeholder, TextBlock(text="do X"))))
    else:
        history += [UserMessage(content=(placeholder,)), assistant("ok"), user("do X")]
    return ModelRequest(
        model=MODEL,
        system="sys",
        tools=(LOOKUP,),
        messages=tuple(history),
        shared_prefix_end=BlockPosition(message=2, block=0),
    )


def test_the_cached_part_ends_before_a_content_that_leaves_the_shared_prefix() -> None:
    assert shared_contents(_fork(directive_in_same_message=True)) == 2
    assert shared_contents(_fork(directive_in_same_message=False)) == 3
    assert shared_contents(ModelRequest(model=MODEL, messages=(user("x"),))) == 0


def test_a_request_on_a_cached_prefix_sends_only_the_rest() -> None:
    request = _fork(directive_in_same_message=True)
    body = wire(render_request(request, cached=CachedPrefix(name="cachedContents/c1", contents=2)))
    assert "systemInstruction" not in body
    assert "tools" not in body
    assert body["cachedContent"] == "cachedContents/c1"
    assert _roles(body) == ["user"]
    cache = render_cache(request, 2)
    assert cache["model"] == f"models/{MODEL}"
    assert cache["ttl"] == "300s"
    assert _roles(cache) == ["user", "model"]
    assert cache["systemInstruction"] == {"parts": [{"text": "sys"}]}


def test_usage_separates_cached_tokens_and_bills_thoughts_as_output() -> None:
    usage = parse_response(
        {
            "usageMetadata": {
                "promptTokenCount": 1000,
                "cachedContentTokenCount": 800,
                "candidatesTokenCount": 10,
                "thoughtsTokenCount": 30,
            }
        }
    ).usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (200, 800, 40)


def test_stream_chunks_fold_into_one_response() -> None:
    def chunk(*parts: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
        if finish:
            candidate["finishReason"] = finish
        return {"responseId": "r", "candidates": [candidate]}

    sink = GeminiStream()
    chunks = [
        chunk({"text": "th", "thought": True}),
        chunk({"text": "ink", "thought": True}),
        chunk({"text": "Hel"}),
        chunk({"text": "lo"}),
        chunk({"text": "", "thoughtSignature": "sig"}, finish="STOP"),
    ]
    deltas = [d for c in chunks for d in sink.feed(c)]
    assert deltas == [ThinkingDelta("th"), ThinkingDelta("ink"), TextDelta("Hel"), TextDelta("lo")]
    assert sink.finish().message.content == (
        ThinkingBlock(thinking="think"),
        ThinkingBlock(thinking="", signature="sig"),
        TextBlock(text="Hello"),
    )
    unfinished = GeminiStream()
    unfinished.feed(chunks[0])
    with pytest.raises(StreamInterruptedError):
        unfinished.finish()


def test_a_missing_key_names_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    with pytest.raises(MissingCredentialsError, match="GOOGLE_API_KEY or GEMINI_API_KEY"):
        GeminiModel(MODEL)


# --- through the SDK, over loopback HTTP -----------------------------------------------------------


def _model(server: RunningServer, closing: list[Model], **options: Any) -> GeminiModel:
    made = GeminiModel(MODEL, base_url=server.url, retry=FAST, **options)
    closing.append(made)
    return made


@pytest.mark.parametrize("stream", [False, True])
async def test_multi_turn_tool_conversation(
    emulator: Emulator, server: RunningServer, closing: list[Model], stream: bool
) -> None:
    script_tool_turn(emulator)
    check_conversation(await converse(_model(server, closing), stream=stream))


def _children(system: str) -> list[ModelRequest]:
    parent = (user("Shared context."), assistant("Understood."))
    return [
        ModelRequest(
            model=MODEL,
            system=system,
            tools=(LOOKUP,),
            messages=(*parent, user(directive)),
            shared_prefix_end=BlockPosition(message=1, block=0),
        )
        for directive in ("Task one.", "Task two.", "Task three.")
    ]


async def test_a_family_of_forks_shares_one_explicit_cache(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    bodies: list[dict[str, Any]] = []

    def capture(request: EmulatedRequest) -> Reply:
        bodies.append(dict(request.body))
        return Reply(text="done")

    emulator.set_policy(capture)
    model = _model(server, closing, explicit_cache=True)
    responses = await asyncio.gather(*(model.request(c) for c in _children(LONG_SYSTEM)))
    caches = (await emulator.dispatch("GET", "/v1beta/cachedContents")).body["cachedContents"]
    assert len(caches) == 1
    assert {b["cachedContent"] for b in bodies} == {caches[0]["name"]}
    assert not any("systemInstruction" in b or "tools" in b for b in bodies)
    assert all(r.usage.cache_read_tokens > 5000 for r in responses)
    assert model.profile.warmup == "none"


async def test_a_prefix_too_short_to_cache_is_sent_whole(
    emulator: Emulator, server: RunningServer, closing: list[Model]
) -> None:
    model = _model(server, closing, explicit_cache=True)
    for child in _children("short"):
        assert (await model.request(child)).message.text
    caches = (await emulator.dispatch("GET", "/v1beta/cachedContents")).body["cachedContents"]
    assert caches == []


async def test_rate_limits_and_overload_are_retried(
    emulator: Emulator, server: RunningServer, closing: list[Model], sleeps: list[float]
) -> None:
    emulator.faults.inject(Fault("rate_limit", retry_after=0.75))
    emulator.faults.inject(Fault("overloaded"))
    request = ModelRequest(model=MODEL, messages=(user("hi"),))
    assert (await _model(server, closing).request(request)).message.text
    assert sleeps[0] == 0.75
    assert len(sleeps) == 2


def _calls(name: str, count: int = 12) -> AssistantMessage:
    return AssistantMessage(
        content=tuple(ToolUseBlock(id=f"call_{n}", name=name, input={"n": n}) for n in range(count))
    )


def test_siblings_of_one_reply_share_their_function_responses() -> None:
    """The N placeholder results every child ends with are rendered once for the family;
    merging turns never changes a shared rendering."""
    base = fork_base((user("Split it."), _calls("Agent")))
    bodies = []
    for directive in ("first", "second"):
        forked = fork_from(base, directive)
        child = ModelRequest(model=MODEL, messages=forked.messages)
        body = render_request(child)
        assert body == render_request(child)  # the same from the warm caches
        bodies.append(wire(body)["contents"])
    a, b = bodies
    assert _roles({"contents": a}) == ["user", "model", "user"]
    responses = a[2]["parts"][:12]
    assert [p["functionResponse"]["name"] for p in responses] == ["Agent"] * 12
    assert all(x is y for x, y in zip(responses, b[2]["parts"][:12], strict=True))
    assert a[2]["parts"][-1] == {"text": "Directive:\nfirst"}
    assert b[2]["parts"][-1] == {"text": "Directive:\nsecond"}
    first, second = user("a"), user("b")
    merged = ModelRequest(model=MODEL, messages=(first, second))
    alone = ModelRequest(model=MODEL, messages=(first,))
    for _ in range(2):  # merging extends a new list, never the shared rendering of ``first``
        assert wire(render_request(merged))["contents"][0]["parts"] == [
            {"text": "a"},
            {"text": "b"},
        ]
        assert wire(render_request(alone))["contents"][0]["parts"] == [{"text": "a"}]


def test_a_shared_rendering_follows_the_names_of_the_calls_before_it() -> None:
    """A function response is named by the call before it: the same result blocks after
    calls of another name are rendered again, not taken from the cache."""
    done = [tool_result(f"call_{n}", "done") for n in range(12)]
    results = UserMessage(content=(*done, TextBlock(text="Go on.")))
    for name in ("read", "grep", "read"):
        request = ModelRequest(model=MODEL, messages=(user("Go."), _calls(name), results))
        parts = wire(render_request(request))["contents"][2]["parts"]
        assert [p["functionResponse"]["name"] for p in parts[:12]] == [name] * 12
