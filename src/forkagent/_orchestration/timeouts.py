"""Request timeouts: one timer per event loop watches every request in flight.

``asyncio.timeout`` puts one timer in the event loop's heap per request. With a
hundred forks waiting at once, a hundred 600-second timers sit in that heap,
and every other timer pushed or popped (the provider client's, the emulator's)
is compared against them in Python. Here every request of a loop registers its
deadline with one ``RequestTimer``, whose single timer is set for the earliest
deadline. What a request sees is what ``asyncio.timeout`` gives: its task is
cancelled at the deadline, and that cancellation, and only that one, comes out
as ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType


class RequestTimeout:
    """One request's deadline: a context manager around the request's ``await``, or ended by
    hand (``end``) where a ``with`` would keep its bound ``__exit__`` for the request's life."""

    __slots__ = ("_cancelling", "_task", "_timer", "deadline", "expired")

    def __init__(self, timer: RequestTimer, task: asyncio.Task[object], deadline: float) -> None:
        self._timer = timer
        self._task = task
        self._cancelling = task.cancelling()
        self.deadline = deadline
        self.expired = False

    def __enter__(self) -> RequestTimeout:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.end(exc_type):
            raise TimeoutError from None

    def end(self, exc_type: type[BaseException] | None) -> bool:
        """Stop watching (the request ended with ``exc_type``, None for a result); whether
        that end is this deadline's, which ``__exit__`` raises as ``TimeoutError``."""
        self._timer.forget(self)
        # As asyncio.timeout: a cancellation counts as the timeout only if nobody else's is pending.
        expired_alone = self.expired and self._task.uncancel() <= self._cancelling
        return expired_alone and exc_type is asyncio.CancelledError

    def expire(self) -> None:
        self.expired = True
        self._task.cancel()


class RequestTimer:
    """The deadlines of one event loop's requests in flight, kept by one timer.

    It holds no reference to its loop (only the loop's timer holds it, while armed),
    so a loop that is done with can be collected, and its timer with it.
    """

    def __init__(self) -> None:
        self._pending: set[RequestTimeout] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0
        """When the armed timer fires (``_handle.when()``, kept so as not to ask per request)."""

    def after(self, loop: asyncio.AbstractEventLoop, seconds: float) -> RequestTimeout:
        """A deadline ``seconds`` from now for the request of ``loop``'s current task."""
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a request timeout needs to run inside a task")
        timeout = RequestTimeout(self, task, loop.time() + seconds)
        self._pending.add(timeout)
        if self._handle is None or timeout.deadline < self._when:
            self._arm(loop, timeout.deadline)
        return timeout

    def forget(self, timeout: RequestTimeout) -> None:
        self._pending.discard(timeout)
        if not self._pending and self._handle is not None:
            self._handle.cancel()  # nothing left to watch: no timer outlives the requests
            self._handle = None

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = loop.call_at(when, self._fire, loop, when)
        self._when = when

    def _fire(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._handle = None
        # The loop runs a timer up to its clock's resolution early: what it would have run
        # by now is every deadline up to this timer's, whatever the clock reads.
        limit = max(when, loop.time())
        due = [timeout for timeout in self._pending if timeout.deadline <= limit]
        for timeout in due:
            self._pending.discard(timeout)
            timeout.expire()
        if self._pending:
            self._arm(loop, min(timeout.deadline for timeout in self._pending))


_timers: dict[weakref.ref[asyncio.AbstractEventLoop], RequestTimer] = {}
"""Each loop's timer, by a weak reference to the loop: what a ``WeakKeyDictionary`` keeps,
looked up without its Python ``get`` on every request."""


def _drop(loop: weakref.ref[asyncio.AbstractEventLoop]) -> None:
    """A loop was collected: its timer goes with it."""
    _timers.pop(loop, None)


def request_timeout(seconds: float | None) -> RequestTimeout | None:
    """A deadline that cancels the current task after ``seconds``, then raises
    ``TimeoutError`` (from ``with`` or ``end``), as ``async with asyncio.timeout(s):`` does;
    None for no limit, so a request without one makes no object."""
    if seconds is None:
        return None
    loop = asyncio.get_running_loop()
    timer = _timers.get(weakref.ref(loop))
    if timer is None:
        timer = _timers[weakref.ref(loop, _drop)] = RequestTimer()
    return timer.after(loop, seconds)
