"""The shared retry policy, error mapping and stream retry semantics."""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from forkagent.errors import (
    AuthenticationError,
    InvalidRequestError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    StreamInterruptedError,
)
from forkagent.messages import JsonValue, user
from forkagent.models import ResponseComplete, ResponseStarted, StreamEvent, TextDelta
from forkagent.models._retry import (
    RetryPolicy,
    connection_error,
    parse_retry_after,
    provider_error,
    stream_with_retries,
    with_retries,
)
from forkagent.models.anthropic import AnthropicStream


def test_backoff_grows_with_jitter_and_stops_after_max_retries() -> None:
    policy = RetryPolicy(
        max_retries=3, initial_delay=1.0, multiplier=2.0, max_delay=3.0, jitter=0.25
    )
    for retry, ceiling in enumerate([1.0, 2.0, 3.0]):
        delay = policy.delay(retry, None)
        assert delay is not None
        assert ceiling * 0.75 <= delay <= ceiling
    assert policy.delay(3, None) is None


def test_retry_after_wins_unless_it_is_longer_than_we_wait() -> None:
    policy = RetryPolicy(max_retry_after=30.0)
    assert policy.delay(0, 12.0) == 12.0
    assert policy.delay(0, 31.0) is None


@pytest.mark.parametrize(
    ("headers", "body", "seconds"),
    [
        ({"retry-after-ms": "1500"}, None, 1.5),
        ({"Retry-After": "7"}, None, 7.0),
        ({}, {"error": {"details": [{"@type": "RetryInfo", "retryDelay": "3s"}]}}, 3.0),
        ({}, None, None),
        ({"retry-after": "soon"}, None, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], body: JsonValue, seconds: float | None) -> None:
    assert parse_retry_after(headers, body) == seconds


def test_parse_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    waited = parse_retry_after({"retry-after": when})
    assert waited is not None
    assert 25 < waited <= 30


@pytest.mark.parametrize(
    ("status", "body", "kind", "retryable", "advice"),
    [
        (401, {"error": {"message": "bad key"}}, AuthenticationError, False, "Check the API key (X_KEY)"),
        (429, {"error": {"message": "slow"}}, RateLimitError, True, "Lower the concurrency"),
        (429, {"error": {"message": "q", "code": "insufficient_quota"}}, RateLimitError, False, "Add credits"),
        (529, {"type": "error", "error": {"type": "overloaded_error"}}, OverloadedError, True, "Try again"),
        (503, {"error": {"status": "UNAVAILABLE"}}, ProviderError, True, "temporary"),
        (400, {"error": {"message": "bad"}}, InvalidRequestError, False, "will fail the same way"),
        (200, {"type": "error", "error": {"type": "overloaded_error"}}, OverloadedError, True, ""),
        (None, {"error": {"status": "RESOURCE_EXHAUSTED"}}, RateLimitError, True, ""),
    ],
)  # fmt: skip
def test_errors_are_typed_and_say_what_to_do(
    status: int | None, body: JsonValue, kind: type[ProviderError], retryable: bool, advice: str
) -> None:
    error = provider_error("acme", status, body, {"retry-after": "2"}, key_variable="X_KEY")
    assert type(error) is kind
    assert error.retryable is retryable
    assert advice in str(error)
    assert error.provider == "acme"


def test_a_connection_failure_is_retryable() -> None:
    error = connection_error("acme", ConnectionResetError("peer reset"))
    assert error.retryable
    assert error.status is None
    assert "ConnectionResetError" in str(error)


async def test_with_retries_retries_only_what_is_retryable(sleeps: list[float]) -> None:
    outcomes: list[Exception | str] = [provider_error("p", 500), provider_error("p", 429), "ok"]

    async def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert await with_retries(RetryPolicy(), call) == "ok"
    assert len(sleeps) == 2
    with pytest.raises(InvalidRequestError):
        await with_retries(RetryPolicy(), _failing(provider_error("p", 400)))
    assert len(sleeps) == 2


def _failing(error: Exception) -> Any:
    async def call() -> None:
        raise error

    return call


def _events(text: str) -> list[Mapping[str, Any] | Exception]:
    return [
        {"type": "message_start", "message": {"id": "m", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]


def _opener(attempts: list[list[Mapping[str, Any] | Exception]]) -> Any:
    def open_stream() -> AsyncIterator[Mapping[str, Any]]:
        async def events() -> AsyncIterator[Mapping[str, Any]]:
            for item in attempts.pop(0):
                if isinstance(item, Exception):
                    raise item
                yield item

        return events()

    return open_stream


async def _collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


async def test_a_stream_that_fails_before_output_is_opened_again(sleeps: list[float]) -> None:
    attempts: list[list[Mapping[str, Any] | Exception]] = [
        [*_events("x")[:1], connection_error("p", OSError("cut"))],
        _events("whole"),
    ]
    events = await _collect(stream_with_retries(RetryPolicy(), _opener(attempts), AnthropicStream))
    # Each attempt's reply began; only the second showed anything.
    assert events[:3] == [ResponseStarted(), ResponseStarted(), TextDelta("whole")]
    assert isinstance(events[-1], ResponseComplete)
    assert events[-1].response.message.text == "whole"
    assert len(sleeps) == 1


async def test_a_stream_that_fails_after_output_is_reported(sleeps: list[float]) -> None:
    attempts: list[list[Mapping[str, Any] | Exception]] = [
        [*_events("half")[:3], connection_error("p", OSError("cut"))],
    ]
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async for event in stream_with_retries(RetryPolicy(), _opener(attempts), AnthropicStream):
            seen.append(event)

    with pytest.raises(StreamInterruptedError, match="send the request again") as caught:
        await consume()
    assert seen == [ResponseStarted(), TextDelta("half")]
    assert caught.value.retryable
    assert sleeps == []


async def test_a_stream_that_just_stops_is_retried_like_a_cut(sleeps: list[float]) -> None:
    attempts: list[list[Mapping[str, Any] | Exception]] = [_events("x")[:2], _events("again")]
    events = await _collect(stream_with_retries(RetryPolicy(), _opener(attempts), AnthropicStream))
    assert isinstance(events[-1], ResponseComplete)
    assert events[-1].response.message.text == "again"


@pytest.mark.parametrize("status", [400, 401, 429, 500, 529])
def test_a_provider_message_ending_in_a_full_stop_gives_no_double_stop(status: int) -> None:
    error = provider_error("acme", status, {"error": {"message": "Slow down please."}})

    assert ".." not in str(error)
    assert "Slow down please." in str(error)


async def test_a_refused_connection_fails_at_once_with_what_to_do() -> None:
    """Nothing listens on the port: retrying cannot help, so the error is final and says why."""
    import socket

    from forkagent.errors import ProviderError
    from forkagent.models import resolve_model
    from forkagent.requests import ModelRequest

    # Bound but not listening: connections are refused, and no other process (another xdist
    # worker) can start listening on the port meanwhile.
    with socket.socket() as unheard:
        unheard.bind(("127.0.0.1", 0))
        port = unheard.getsockname()[1]
        model = resolve_model(f"vllm:qwen3@http://127.0.0.1:{port}/v1")
        with pytest.raises(ProviderError, match="connection was refused") as refused:
            await model.request(ModelRequest(model="qwen3", messages=(user("hi"),)))
    assert not refused.value.retryable
    await model.aclose()
