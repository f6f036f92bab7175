"""``emulator:<model-id>``: the real adapters over ``Emulator.dispatch``, in process."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkagent.emulator import CacheSettings, Emulator, Fault, Latency, default_emulator, serve
from forkagent.emulator.policies import (
    AGENT_HEADER,
    CallingAgent,
    EmulatedRequest,
    Reply,
    agent_header,
)
from forkagent.errors import (
    ConfigurationError,
    OverloadedError,
    ProviderError,
    StreamInterruptedError,
    UnknownModelError,
)
from forkagent.messages import user
from forkagent.models import Model, ResponseComplete, TextDelta
from forkagent.models._retry import RetryPolicy
from forkagent.models.anthropic import AnthropicModel
from forkagent.models.base import CALLER, Caller
from forkagent.models.compat import DASHSCOPE, DEEPSEEK
from forkagent.models.emulator import EmulatorModel, family
from forkagent.models.gemini import GeminiModel
from forkagent.models.openai import OpenAIModel
from forkagent.models.openai_responses import Api
from forkagent.requests import ModelRequest

from ._helpers import FAST, LONG_SYSTEM, check_conversation, converse, script_tool_turn


@pytest.fixture
def emu() -> Emulator:
    return Emulator(
        latency=Latency(ttft=0.001, tokens_per_second=1e6),
        settings=CacheSettings(deepseek_build_delay=0.0),
    )


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("claude-haiku-4-5", "anthropic"),
        ("gpt-4.1", "openai"),
        ("o4-mini", "openai"),
        ("qwen-plus", "dashscope"),
        ("qwen3-max", "dashscope"),
        ("deepseek-reasoner", "deepseek"),
        ("gemini-2.5-pro", "gemini"),
    ],
)
def test_the_model_id_picks_the_wire_format(model_id: str, expected: str) -> None:
    assert family(model_id) == expected


def test_an_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(UnknownModelError, match="claude-, gpt-"):
        EmulatorModel("llama-3")


async def test_the_profile_mirrors_the_real_provider(closing: list[Model]) -> None:
    pairs: list[tuple[str, Model]] = [
        ("claude-haiku-4-5", AnthropicModel("claude-haiku-4-5")),
        ("qwen-plus", OpenAIModel("qwen-plus", dialect=DASHSCOPE)),
        ("deepseek-chat", OpenAIModel("deepseek-chat", dialect=DEEPSEEK)),
        ("gemini-2.5-pro", GeminiModel("gemini-2.5-pro")),
    ]
    for model_id, real in pairs:
        closing.append(real)
        emulated = EmulatorModel(model_id).profile
        assert emulated == dataclasses.replace(real.profile, provider="emulator")


def test_every_emulator_model_shares_the_default_emulator() -> None:
    assert EmulatorModel("gpt-4.1").emulator is EmulatorModel("claude-opus-4-6").emulator
    assert EmulatorModel("gpt-4.1").emulator is default_emulator()


@pytest.mark.parametrize(
    ("model_id", "stream"),
    [
        ("claude-opus-4-1", False),
        ("claude-opus-4-1", True),
        ("gpt-4.1", True),
        ("qwen-plus", False),
        ("deepseek-chat", True),
        ("gemini-2.5-flash", False),
        ("gemini-2.5-flash", True),
    ],
)
async def test_multi_turn_tool_conversation_in_process(
    emu: Emulator, model_id: str, stream: bool
) -> None:
    script_tool_turn(emu)
    check_conversation(await converse(EmulatorModel(model_id, emu, retry=FAST), stream=stream))


async def test_provider_errors_are_typed_like_the_real_adapters(
    emu: Emulator, sleeps: list[float]
) -> None:
    request = ModelRequest(model="claude-opus-4-1", messages=(user("hi"),))
    emu.faults.inject(Fault("rate_limit", retry_after=0.5))
    assert (await EmulatorModel("claude-opus-4-1", emu).request(request)).message.text
    assert sleeps == [0.5]
    emu.faults.inject(Fault("overloaded"), times=2)
    model = EmulatorModel("claude-opus-4-1", emu, retry=RetryPolicy(max_retries=1))
    with pytest.raises(OverloadedError, match="emulator"):
        await model.request(request)
    emu.faults.inject(Fault("server_error"), times=2)
    chat = EmulatorModel("gpt-4.1", emu, retry=RetryPolicy(max_retries=1))
    with pytest.raises(ProviderError) as caught:
        await chat.request(request.model_copy(update={"model": "gpt-4.1"}))
    assert caught.value.status == 500


@pytest.mark.parametrize("over_http", [False, True])
async def test_a_cut_stream(emu: Emulator, sleeps: list[float], over_http: bool) -> None:
    """In process, or through the emulator's HTTP server (``EmulatorModel(url=...)``)."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(serve(emu)).url if over_http else None
        model = EmulatorModel("gpt-4.1", None if url else emu, url=url, retry=FAST)
        request = ModelRequest(model="gpt-4.1", messages=(user("one two three four five six"),))
        emu.faults.inject(Fault("cut_stream", after_events=0))
        events = [e async for e in model.stream(request)]
        assert isinstance(events[-1], ResponseComplete)
        # gpt-4.1 speaks the Responses API: created, in_progress, item and part added, 2 deltas
        emu.faults.inject(Fault("cut_stream", after_events=6))
        seen: list[object] = []

        async def consume() -> None:
            async for event in model.stream(request):
                seen.append(event)

        with pytest.raises(StreamInterruptedError):
            await consume()
        assert seen
        assert all(isinstance(e, TextDelta) for e in seen)
        await model.aclose()


async def test_adapter_options_pass_through(emu: Emulator) -> None:
    claude = EmulatorModel("claude-opus-4-1", emu, diagnostics=True)
    first = ModelRequest(model="claude-opus-4-1", system=LONG_SYSTEM, messages=(user("hi"),))
    reply = await claude.request(first)
    changed = first.model_copy(
        update={"system": "Other. " * 900, "messages": (*first.messages, reply.message, user("x"))}
    )
    diagnosis = (await claude.request(changed)).cache_diagnosis
    assert diagnosis is not None
    assert diagnosis["type"] == "system_changed"
    warm = await claude.prewarm(first)
    assert warm is not None
    assert warm.output_tokens == 0
    with pytest.raises(ConfigurationError, match="Claude"):
        EmulatorModel("gpt-4.1", emu, diagnostics=True)
    with pytest.raises(ConfigurationError, match="Gemini"):
        EmulatorModel("gpt-4.1", emu, explicit_cache=True)
    assert EmulatorModel("gemini-2.5-flash", emu, explicit_cache=True).profile.warmup == "none"


@pytest.mark.parametrize(
    ("model_id", "api"),
    [
        ("claude-opus-4-1", None),
        ("gpt-4.1", "chat"),
        ("gpt-4.1", "responses"),
        ("qwen-plus", None),
        ("gemini-2.5-flash", None),
    ],
)
async def test_each_wire_tells_the_policy_which_agent_calls(
    emu: Emulator, model_id: str, api: Api | None
) -> None:
    """Every API's request names the agent set in ``CALLER`` (a label with ``;`` too)."""
    seen: list[CallingAgent | None] = []

    def policy(request: EmulatedRequest) -> Reply:
        seen.append(request.agent)
        return Reply(text="ok")

    emu.set_policy(policy)
    model = EmulatorModel(model_id, emu, api=api)
    request = ModelRequest(model=model_id, messages=(user("hi"),))
    await model.request(request)
    token = CALLER.set(Caller("fork-7-ab12", "part;two", "fork", 3))
    try:
        await model.request(request)
    finally:
        CALLER.reset(token)
    assert seen == [None, CallingAgent("fork-7-ab12", "part,two", "fork", 3)]


@pytest.mark.parametrize("caller", [Caller("fork-7-ab12", "part;two", "fork", 3), None])
async def test_the_caller_handed_over_in_process_is_the_one_its_header_names_over_http(
    emu: Emulator, caller: Caller | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process the agent is handed to the emulator; over HTTP it rides in a header.
    Policies see the same ``CallingAgent`` either way, requested or streamed."""
    seen: list[CallingAgent | None] = []
    parsed: list[bool] = []
    from_headers = CallingAgent.from_headers.__func__  # type: ignore[attr-defined]

    def parsing(cls: type[CallingAgent], headers: Mapping[str, str]) -> CallingAgent | None:
        parsed.append(AGENT_HEADER in headers)
        return from_headers(cls, headers)  # type: ignore[no-any-return]

    def policy(request: EmulatedRequest) -> Reply:
        seen.append(request.agent)
        return Reply(text="ok")

    monkeypatch.setattr(CallingAgent, "from_headers", classmethod(parsing))
    emu.set_policy(policy)
    request = ModelRequest(model="claude-opus-4-1", messages=(user("hi"),))
    token = CALLER.set(caller)
    try:
        with serve(emu) as server:
            for model in (
                EmulatorModel("claude-opus-4-1", emu),
                EmulatorModel("claude-opus-4-1", url=server.url),
            ):
                await model.request(request)
                async for _ in model.stream(request):
                    pass
                await model.aclose()
    finally:
        CALLER.reset(token)
    expected = CallingAgent("fork-7-ab12", "part,two", "fork", 3) if caller else None
    assert seen == [expected] * 4
    # In process a caller is not written to be parsed again; over HTTP its header is read
    # (and no header is no agent, nothing parsed).
    assert parsed == ([True] * 2 if caller else [])


async def test_dispatch_reads_an_agent_handed_over_before_its_header(emu: Emulator) -> None:
    """``dispatch(agent=...)`` is what policies see; without it the header (any case) says."""
    seen: list[CallingAgent | None] = []

    def policy(request: EmulatedRequest) -> Reply:
        seen.append(request.agent)
        return Reply(text="ok")

    emu.set_policy(policy)
    body = {
        "model": "claude-opus-4-1",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
    header = {"X-Emulator-Agent": agent_header("main-0-abc", "main", "main", 2)}
    handed = CallingAgent("fork-1-def", "a;b", "fork", 1)
    await emu.dispatch("POST", "/v1/messages", body, header)
    await emu.dispatch("POST", "/v1/messages", body, header, agent=handed)
    await emu.dispatch("POST", "/v1/messages", body)
    assert seen == [CallingAgent("main-0-abc", "main", "main", 2), handed, None]


@settings(max_examples=300, deadline=None)
@given(
    agent_id=st.text(st.sampled_from("ab;,1-")) | st.text(),
    label=st.text(st.sampled_from("ab;,1 ")) | st.text(),
    kind=st.sampled_from(["main", "fork", "named", "a;b", ""]) | st.text(),
    turn=st.integers(min_value=-2, max_value=10**9),
)
def test_a_handed_over_agent_is_what_its_header_would_say(
    agent_id: str, label: str, kind: str, turn: int
) -> None:
    header = {AGENT_HEADER: agent_header(agent_id, label, kind, turn)}
    assert CallingAgent.tagged(agent_id, label, kind, turn) == CallingAgent.from_headers(header)
