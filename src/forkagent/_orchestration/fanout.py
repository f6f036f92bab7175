"""Warm first, then release the siblings (CACHING.md, consequence 3).

Siblings launched at the same instant all miss: a cache entry is readable
only once the first response has begun (Anthropic) or ended (DashScope
explicit, DeepSeek; DeepSeek's some seconds later still, its profile's
``cache_visible_after``). A family's first child goes alone; the others wait for
its signal. Anthropic can instead pre-warm with ``max_tokens: 0``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..errors import StreamInterruptedError
from ..models.base import Model, ModelResponse, ResponseComplete, Warmup
from ..requests import ModelRequest

FanoutMode = Literal["auto", "off", "prewarm"]
logger = logging.getLogger(__name__)


class Held(Protocol):
    """A member held until the release (an ``AgentTask``)."""

    def begin_held(self) -> None: ...


@dataclass(eq=False)
class ForkFamily:
    """Siblings forked from one parent state; they share one cached prefix."""

    key: tuple[str, int]
    warmup: Warmup
    released: bool = False
    leader: str | None = None
    size: int = 0
    """Children built into the family so far (siblings join before any request leaves)."""
    _waiting: list[asyncio.Future[None]] = field(default_factory=list)
    """One future per sibling waiting for the release. Not an ``asyncio.Event``: each of
    its waiters removes itself from a deque, O(siblings) each, O(siblings²) a family."""
    running: int = 0
    """Members whose tasks have begun and not ended (``began``, ``ended``)."""
    _held: list[Held] = field(default_factory=list)
    """Members whose tasks are not made until the release: each would only start, wait for
    it and be woken, one more step of the event loop per sibling (``hold``). The members
    themselves, not a bound ``begin_held`` kept per held sibling."""

    def __post_init__(self) -> None:
        if self.warmup == "none":
            self.released = True

    def lead_or_wait(self, agent_id: str) -> bool:
        """True when ``agent_id`` goes first and must release the others."""
        if self.released or self.leader not in (None, agent_id):
            return False
        self.leader = agent_id
        return True

    def wait(self) -> asyncio.Future[None] | None:
        """A future the release completes; None once released (nothing to wait for).

        A sibling cancelled while it waits cancels only its own future, which the
        release then passes over."""
        if self.released:
            return None
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        return waiter

    def holds(self) -> bool:
        """Whether a new member's task can wait unmade: a member runs, and either releases
        the family or, ending without, begins the held ones (``ended``)."""
        return self.running > 0 and not self.released

    def hold(self, member: Held) -> None:
        """``member.begin_held()`` makes its task, at the release or when no member runs."""
        self._held.append(member)

    def began(self) -> None:
        self.running += 1

    def ended(self) -> None:
        """A member's run ended: if it was the last running and none released the family
        (cancelled or refused before its request, or a release still to come), the held
        members begin, and one of them leads as before."""
        self.running -= 1
        if not self.running and not self.released:
            self.begin_held()

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)
        self.begin_held()  # after the waiters: every held member started after them

    def begin_held(self) -> None:
        """Begin the held members' tasks, in the order they started."""
        held, self._held = self._held, []
        for member in held:
            member.begin_held()


Prewarm = Callable[[ModelRequest], Awaitable[bool]]
"""Pre-warms a request's cache (``max_tokens: 0``); False when the model would not send one."""


async def send_in_family(
    family: ForkFamily,
    agent_id: str,
    model: Model,
    request: ModelRequest,
    *,
    prewarm: Prewarm | None,
    on_send: Callable[[], None],
) -> ModelResponse:
    """A child's first request, ordered so that its siblings can read the cache.

    ``on_send`` is called when the request actually leaves, after any wait or
    pre-warm. A family of one is never pre-warmed: nobody would read the entry
    early, and its request would read it all again (+7%). A leader whose
    pre-warm the model refuses falls back to the provider's warm-up rule.
    """
    if not family.lead_or_wait(agent_id):
        if (release := family.wait()) is not None:
            await release
        on_send()
        return await model.request(request)
    later = False
    try:
        if prewarm is not None and family.size > 1 and await prewarm(request):
            family.release()
            on_send()
            return await model.request(request)
        on_send()
        if family.warmup == "first_response_starts":
            try:
                return await _stream_releasing(family, model, request)
            except StreamInterruptedError as exc:
                # Cut after its reply began: the siblings are on their way, and nothing
                # was added to the history, so the same request goes again (with retries).
                logger.warning("fork %s: %s; sending its request again", agent_id, exc)
                return await model.request(request)
        response = await model.request(request)
        if (delay := model.profile.cache_visible_after) > 0:
            # The entry is readable only ``delay`` after the reply (DeepSeek): release then,
            # without holding the leader's own result back.
            asyncio.get_running_loop().call_later(delay, family.release)
            later = True
        return response
    finally:
        if not later:
            family.release()


async def _stream_releasing(
    family: ForkFamily, model: Model, request: ModelRequest
) -> ModelResponse:
    """Stream the leader's reply and release the siblings at its first event.

    For Anthropic that is ``ResponseStarted`` (``message_start``): the entry is readable
    from then on, before any text (a reply that opens with long thinking or a tool
    call would otherwise hold them back).

    The stream is read to its end (``ResponseComplete`` is its last event), so every
    generator of the model's chain finishes here; one left at its last event would be
    closed later by the loop's finalizer hook, each through a thread-safe callback and
    a task of its own.
    """
    response: ModelResponse | None = None
    async for event in model.stream(request):
        family.release()
        if response is None and isinstance(event, ResponseComplete):
            response = event.response
    if response is None:
        raise StreamInterruptedError(
            "the stream ended without a final response", provider=model.profile.provider
        )
    return response
