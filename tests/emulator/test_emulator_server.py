"""The emulator as infrastructure: errors in each provider's shape, faults, admin routes,
scripted replies and policies, the in-process API, the CLI."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import openai
import pytest
from _emu_helpers import OPUS_41, error_body, http, system_block, text, user
from typer.testing import CliRunner

from forkagent.cli import app as cli_app
from forkagent.emulator import (
    EmulatedDisconnect,
    EmulatedRequest,
    Emulator,
    Fault,
    FaultPlan,
    Latency,
    Reply,
    RunningServer,
    ToolCall,
    default_emulator,
    serve,
    tokens,
)
from forkagent.emulator.profiles import ANTHROPIC_FRAMING_TOKENS

MESSAGES_BODY: dict[str, Any] = {
    "model": OPUS_41,
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hello"}],
}


def create(client: anthropic.Anthropic, **params: Any) -> anthropic.types.Message:
    reply = client.messages.create(**{**MESSAGES_BODY, **params})
    assert isinstance(reply, anthropic.types.Message)
    return reply


def test_rate_limit_fault_has_retry_after_in_each_shape(
    claude: anthropic.Anthropic, oai: openai.OpenAI, emu: Emulator
) -> None:
    emu.faults.inject(Fault("rate_limit", retry_after=7), times=2)
    with pytest.raises(anthropic.RateLimitError) as caught:
        create(claude)
    assert caught.value.response.headers["retry-after"] == "7"
    assert error_body(caught.value)["error"]["type"] == "rate_limit_error"
    with pytest.raises(openai.RateLimitError) as limited:
        oai.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "x"}])
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.code == "rate_limit_exceeded"
    assert [e.status for e in emu.log] == [429, 429]


def test_overloaded_and_server_errors(
    claude: anthropic.Anthropic, oai: openai.OpenAI, emu: Emulator
) -> None:
    emu.faults = FaultPlan(
        schedule={1: Fault("overloaded"), 2: Fault("server_error"), 3: Fault("overloaded")}
    )
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        create(claude)
    assert overloaded.value.status_code == 529
    with pytest.raises(anthropic.InternalServerError) as failed:
        create(claude)
    assert error_body(failed.value)["error"]["type"] == "api_error"
    with pytest.raises(openai.InternalServerError) as busy:
        oai.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "x"}])
    assert busy.value.status_code == 503
    assert create(claude).content


def test_sdk_retries_through_an_injected_429(server: RunningServer, emu: Emulator) -> None:
    emu.faults.inject(Fault("rate_limit", retry_after=0))
    with anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=2) as client:
        assert create(client).content
    assert [e.status for e in emu.log] == [429, 200]


def test_cut_stream_and_dropped_connection(claude: anthropic.Anthropic, emu: Emulator) -> None:
    emu.faults.inject(Fault("cut_stream", after_events=3))
    seen: list[str] = []

    def consume() -> None:
        for event in claude.messages.create(**{**MESSAGES_BODY, "stream": True}):
            seen.append(event.type)

    with pytest.raises(Exception) as cut:  # noqa: PT011 - the SDK surfaces the transport's own error
        consume()
    assert seen[0] == "message_start"
    assert "message_stop" not in seen
    assert "incomplete" in str(cut.value) or isinstance(cut.value, anthropic.APIConnectionError)
    emu.faults.inject(Fault("drop"))
    with pytest.raises(anthropic.APIConnectionError):
        create(claude)


def test_dropped_request_writes_no_cache(claude: anthropic.Anthropic, emu: Emulator) -> None:
    """A request that dies before its response begins leaves no readable entry."""
    emu.faults.inject(Fault("drop"))
    with pytest.raises(anthropic.APIConnectionError):
        create(claude, system=system_block(1500))
    assert create(claude, system=system_block(1500)).usage.cache_read_input_tokens == 0


def test_delay_fault(claude: anthropic.Anthropic, emu: Emulator) -> None:
    emu.faults.inject(Fault("delay", seconds=0.3))
    started = time.monotonic()
    create(claude)
    assert time.monotonic() - started >= 0.3
    assert emu.log.last.fault == "delay"


def test_fault_probabilities_are_seeded() -> None:
    def draws(seed: int) -> list[str | None]:
        plan = FaultPlan(probabilities={"server_error": 0.3, "rate_limit": 0.2}, seed=seed)
        return [f.kind if f else None for f in (plan.draw(n) for n in range(1, 200))]

    assert draws(4) == draws(4)
    assert draws(4) != draws(5)
    kinds = set(draws(4))
    assert kinds == {None, "server_error", "rate_limit"}


def test_errors_in_each_provider_shape(server: RunningServer) -> None:
    status, _, body = http(server, "POST", "/v1/messages", {"model": OPUS_41, "messages": []})
    assert status == 400
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    status, _, body = http(server, "POST", "/v1/chat/nothing", {})
    assert status == 404
    assert body["error"]["code"] == "not_found"
    status, _, body = http(server, "POST", "/v1beta/models/gemini-2.5-flash:generateContent", {})
    assert (status, body["error"]["status"]) == (400, "INVALID_ARGUMENT")
    status, _, body = http(server, "POST", "/v1/messages", b"{not json")
    assert (status, body["error"]["type"]) == (400, "invalid_request_error")


def test_missing_key_is_401_when_required() -> None:
    with serve(Emulator(require_key=True, latency=Latency(0, 1e6))) as running:
        status, _, body = http(running, "POST", "/v1/messages", MESSAGES_BODY)
        assert (status, body["error"]["type"]) == (401, "authentication_error")
        status, _, body = http(running, "POST", "/v1/messages", MESSAGES_BODY, {"x-api-key": "any"})
        assert status == 200


def test_models_route(
    server: RunningServer, claude: anthropic.Anthropic, oai: openai.OpenAI
) -> None:
    assert [m.id for m in oai.models.list()]
    assert [m.id for m in claude.models.list()]


def test_count_tokens(claude: anthropic.Anthropic) -> None:
    counted = claude.messages.count_tokens(
        model=OPUS_41, system=system_block(1500), messages=[user("hi")]
    )
    assert counted.input_tokens == 1500 + tokens.count("hi") + ANTHROPIC_FRAMING_TOKENS


def test_admin_script_log_faults_and_reset(
    server: RunningServer, claude: anthropic.Anthropic, emu: Emulator
) -> None:
    status, _, body = http(
        server, "POST", "/_emulator/script", {"replies": [{"text": "scripted!"}]}
    )
    assert (status, body["pending"]) == (200, 1)
    assert create(claude).content[0].text == "scripted!"  # type: ignore[union-attr]
    _, _, log = http(server, "GET", "/_emulator/log")
    assert log["entries"][0]["status"] == 200
    assert log["entries"][0]["usage"]["input_tokens"] > 0
    http(server, "POST", "/_emulator/faults", {"inject": [{"kind": "server_error"}]})
    with pytest.raises(anthropic.InternalServerError):
        create(claude)
    status, _, _ = http(server, "POST", "/_emulator/faults", {"inject": [{"kind": "nope"}]})
    assert status == 400
    http(server, "POST", "/_emulator/reset", {})
    assert len(emu.log) == 0


def test_scripted_replies_by_match_conversation_and_queue(
    claude: anthropic.Anthropic, emu: Emulator
) -> None:
    emu.script("first global", "second global")
    emu.script(Reply(text="for alpha"), conversation="alpha")
    emu.script(Reply(tool_calls=(ToolCall("lookup", {"t": 1}),)), match="look it up")
    tool = create(claude, messages=[user("please look it up now")])
    assert tool.stop_reason == "tool_use"
    assert tool.content[0].type == "tool_use"
    alpha = claude.messages.create(
        **MESSAGES_BODY, extra_headers={"x-emulator-conversation": "alpha"}
    )
    assert alpha.content[0].text == "for alpha"
    assert [create(claude).content[0].text for _ in range(3)] == [  # type: ignore[union-attr]
        "first global",
        "second global",
        "Understood: hello",
    ]


async def test_policy_interface(emu: Emulator) -> None:
    async def echo(request: EmulatedRequest) -> Reply:
        return Reply(
            text=f"{request.provider}:{request.model}:{request.last_user_text}", thinking="why"
        )

    emu.set_policy(echo)
    reply = await emu.dispatch(
        "POST", "/v1/messages", {**MESSAGES_BODY, "thinking": {"type": "adaptive"}}
    )
    assert [b["type"] for b in reply.body["content"]] == ["thinking", "text"]
    assert reply.body["content"][1]["text"] == f"anthropic:{OPUS_41}:hello"

    def broken(request: EmulatedRequest) -> Reply:
        raise RuntimeError("boom")

    emu.set_policy(broken)
    failed = await emu.dispatch("POST", "/v1/messages", MESSAGES_BODY)
    assert failed.status == 500
    assert "boom" in failed.body["error"]["message"]


def test_max_tokens_truncates(claude: anthropic.Anthropic, emu: Emulator) -> None:
    emu.script(text(50))
    reply = create(claude, max_tokens=10)
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens == 10


async def test_dispatch_matches_http(server: RunningServer, emu: Emulator) -> None:
    body = {**MESSAGES_BODY, "system": system_block(1500)}
    in_process = await emu.dispatch("POST", "/v1/messages", body)
    status, _, over_http = http(server, "POST", "/v1/messages", body)
    assert in_process.status == status == 200
    assert in_process.body["usage"]["cache_creation_input_tokens"] == 1500
    assert over_http["usage"]["cache_read_input_tokens"] == 1500
    assert {k: v for k, v in in_process.body.items() if k not in ("id", "usage")} == {
        k: v for k, v in over_http.items() if k not in ("id", "usage")
    }


async def test_dispatch_streams_and_cuts(emu: Emulator) -> None:
    reply = await emu.dispatch("POST", "/v1/messages", {**MESSAGES_BODY, "stream": True})
    events = reply.body["events"]
    assert (events[0]["event"], events[-1]["event"]) == ("message_start", "message_stop")
    emu.faults.inject(Fault("cut_stream", after_events=2))
    with pytest.raises(EmulatedDisconnect) as cut:
        await emu.dispatch(
            "POST",
            "/v1/chat/completions",
            {"model": "gpt-4.1", "stream": True, "messages": [user("x")]},
        )
    assert len(cut.value.events) == 2


async def test_concurrent_in_process_requests_all_miss(emu: Emulator) -> None:
    import asyncio

    body = {**MESSAGES_BODY, "system": system_block(1500)}
    replies = await asyncio.gather(*(emu.dispatch("POST", "/v1/messages", body) for _ in range(3)))
    assert [r.body["usage"]["cache_read_input_tokens"] for r in replies] == [0, 0, 0]
    later = await emu.dispatch("POST", "/v1/messages", body)
    assert later.body["usage"]["cache_read_input_tokens"] == 1500


def test_default_emulator_is_shared() -> None:
    assert default_emulator() is default_emulator()


def test_cli_serve_is_registered() -> None:
    result = CliRunner().invoke(cli_app, ["emulator", "serve", "--help"])
    assert result.exit_code == 0
    assert "--port" in result.output
