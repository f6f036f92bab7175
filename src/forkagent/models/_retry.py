"""Retry policy and error mapping shared by every provider adapter.

The SDKs' own retries are switched off (``max_retries=0``) so that one policy
decides for all providers and the emulator alike: which failures are worth
another attempt, how long to wait, and what the final error tells the user.
A streamed reply is retried only while nothing of it has reached the caller;
after that a cut is reported as ``StreamInterruptedError`` and the partial
reply is dropped, so a history never receives half a message.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..errors import (
    AuthenticationError,
    InvalidRequestError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    StreamInterruptedError,
)
from ..messages import JsonValue
from .base import ModelResponse, ResponseComplete, ResponseStarted, StreamEvent

logger = logging.getLogger("forkagent.models")

T = TypeVar("T")

_sleep = asyncio.sleep
"""Indirection so tests can observe the waits without waiting."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter; a server's ``retry-after`` wins when it is given."""

    max_retries: int = 4
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 20.0
    jitter: float = 0.25
    """Each computed delay is shortened by up to this fraction, at random."""
    max_retry_after: float = 60.0
    """A server asking for a longer wait than this gets the error back instead."""

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number ``retry`` (0-based), or None to give up."""
        if retry >= self.max_retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        backoff = min(self.max_delay, self.initial_delay * self.multiplier**retry)
        return backoff * (1 - self.jitter * random.random())


DEFAULT_RETRY = RetryPolicy()


async def with_retries(policy: RetryPolicy, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` until it succeeds or fails in a way not worth retrying."""
    retry = 0
    while True:
        try:
            return await call()
        except ProviderError as error:
            wait = _backoff(policy, retry, error)
        await _sleep(wait)
        retry += 1


class StreamAccumulator(Protocol):
    """Builds one reply from a provider's stream events (as JSON dicts)."""

    def feed(self, event: Mapping[str, JsonValue]) -> list[StreamEvent]:
        """Take one event; return the deltas worth showing now."""

    def finish(self) -> ModelResponse:
        """The whole reply; raises ``StreamInterruptedError`` if the stream never ended."""


async def stream_with_retries(
    policy: RetryPolicy,
    open_stream: Callable[[], AsyncGenerator[Mapping[str, JsonValue], None]],
    accumulator: Callable[[], StreamAccumulator],
) -> AsyncIterator[StreamEvent]:
    """Stream a reply, retrying cuts that happen before the first delta went out."""
    retry = 0
    while True:
        sink = accumulator()
        delivered = False
        try:
            async with aclosing(open_stream()) as events:
                async for event in events:
                    for delta in sink.feed(event):
                        # A reply that only began showed nothing: a cut then is retried.
                        delivered = delivered or not isinstance(delta, ResponseStarted)
                        yield delta
            response = sink.finish()
        except ProviderError as error:
            if delivered:
                raise _interrupted(error) from error
            wait = _backoff(policy, retry, error)
        else:
            yield ResponseComplete(response)
            return
        await _sleep(wait)
        retry += 1


def _interrupted(error: ProviderError) -> StreamInterruptedError:
    if isinstance(error, StreamInterruptedError):
        return error
    return StreamInterruptedError(
        f"the stream from {error.provider} broke after part of the reply was shown ({error}); "
        "nothing was added to the history: send the request again",
        provider=error.provider,
        status=error.status,
        retryable=True,
    )


def _backoff(policy: RetryPolicy, retry: int, error: ProviderError) -> float:
    """Seconds to wait before retry number ``retry``; raises ``error`` when none is due."""
    wait = policy.delay(retry, error.retry_after) if error.retryable else None
    if wait is None:
        raise error
    logger.warning(
        "%s failed (%s); retry %d in %.2fs",
        error.provider,
        error.status or "network",
        retry + 1,
        wait,
    )
    return wait


# --- turning a failed call into a typed error -----------------------------------------------

_KIND_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}
"""Error types that arrive with a misleading HTTP status (an SSE ``error`` event comes with 200)."""


def provider_error(
    provider: str,
    status: int | None,
    body: JsonValue = None,
    headers: Mapping[str, str] | None = None,
    *,
    key_variable: str | None = None,
) -> ProviderError:
    """The typed error for a failed call, with a message that says what to do next."""
    detail, kind = error_detail(body)
    status = _KIND_STATUS.get(kind or "", status) if status in (None, 200) else status
    retry_after = parse_retry_after(headers or {}, body)
    where = f"{provider} (HTTP {status})" if status else provider
    if kind == "insufficient_quota":
        return RateLimitError(
            f"{where} says the account is out of quota: {detail}. Add credits or raise the "
            "spending limit; retrying will not help.",
            provider=provider,
            status=status,
        )
    if status in (401, 403):
        key = f" ({key_variable})" if key_variable else ""
        return AuthenticationError(
            f"{where} refused the credentials: {detail}. Check the API key{key} and that "
            "it may use this model.",
            provider=provider,
            status=status,
        )
    if status == 429:
        return RateLimitError(
            f"{where} rate limit reached: {detail}. Lower the concurrency or request rate, "
            "or ask the provider for a higher limit.",
            provider=provider,
            status=status,
            retryable=True,
            retry_after=retry_after,
        )
    if status == 529:
        return OverloadedError(
            f"{where} is overloaded: {detail}. Try again in a while or use another model.",
            provider=provider,
            status=status,
            retryable=True,
            retry_after=retry_after,
        )
    if status is None or status == 408 or status >= 500:
        return ProviderError(
            f"{where} failed: {detail}. This is usually temporary: try again later, and check "
            "the network and base URL if it persists.",
            provider=provider,
            status=status,
            retryable=True,
            retry_after=retry_after,
        )
    return InvalidRequestError(
        f"{where} rejected the request: {detail}. Check the model name, the settings and "
        "the history sent; retrying the same request will fail the same way.",
        provider=provider,
        status=status,
    )


def connection_error(provider: str, error: BaseException) -> ProviderError:
    """A dropped connection is worth a retry; a refused one is not (nothing listens there)."""
    if _refused(error):
        return ProviderError(
            f"{provider}: the connection was refused, so no server is listening at that "
            "address. Start it (e.g. `forkagent emulator serve`, vLLM, llama.cpp) or fix "
            "the base URL; retrying will not help.",
            provider=provider,
        )
    return provider_error(
        provider, None, {"error": {"message": f"{type(error).__name__}: {error}"}}
    )


def _refused(error: BaseException | None) -> bool:
    """Whether a ``ConnectionRefusedError`` is anywhere in the exception's chain."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ConnectionRefusedError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def stream_cut(provider: str, what: str) -> StreamInterruptedError:
    return StreamInterruptedError(
        f"the stream from {provider} ended before the reply was complete ({what}); "
        "nothing was added to the history",
        provider=provider,
        retryable=True,
    )


def error_detail(body: JsonValue) -> tuple[str, str | None]:
    """Message and machine-readable kind from Anthropic, OpenAI or Google error bodies.

    The openai SDK hands over the inner ``error`` object itself.
    """
    error = (
        body.get("error", body if "message" in body else None) if isinstance(body, dict) else None
    )
    if not isinstance(error, dict):
        text = body if isinstance(body, str) and body else "no details given"
        return _sentence_body(str(text)[:500]), None
    message = _sentence_body(str(error.get("message") or "no details given"))
    kind = error.get("code") if error.get("code") == "insufficient_quota" else None
    kind = kind or error.get("type") or error.get("status")
    return message, kind if isinstance(kind, str) else None


def _sentence_body(detail: str) -> str:
    """Without its final full stop: the messages built around it add their own."""
    return detail.rstrip().rstrip(".").rstrip() or detail


def parse_retry_after(headers: Mapping[str, str], body: JsonValue = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, ``retry-after``, Google's RetryInfo."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := _number(lowered.get("retry-after-ms"))) is not None:
        return ms / 1000
    value = lowered.get("retry-after")
    if (seconds := _number(value)) is not None:
        return seconds
    if value:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            pass
    return _google_retry_delay(body)


def _google_retry_delay(body: JsonValue) -> float | None:
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for item in details if isinstance(details, list) else []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            return _number(delay[:-1])
    return None


def _number(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
