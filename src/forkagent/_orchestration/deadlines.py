"""Time limits for model requests, on one timer per event loop.

``asyncio.timeout`` schedules a timer handle per use. With 1,000 forks in
flight that is a heap of 1,000 handles compared in Python, and each ended
request leaves a cancelled handle behind for the loop to sweep: about 4 us a
request. A request's limit here is a ``(deadline, order, limit)`` tuple in a
heap compared in C, with one timer armed for the earliest deadline; limits of
requests that ended are dropped as the timer meets them, or all at once when
they are most of the heap. What a limit does when it expires is what
``asyncio.timeout`` does: it cancels the task, and the cancellation leaves the
``with`` block as ``TimeoutError`` unless someone else cancelled the task too.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import weakref
from types import TracebackType
from typing import Literal

_COMPACT_MIN = 64
"""Ended limits are swept from the heap at once only past this many (and half the heap)."""


class _Deadlines:
    """The limits of one event loop's requests in flight, earliest first.

    It keeps no reference to its loop while none is in flight (its timer would be one), so
    a closed loop's entry in ``_BY_LOOP`` goes with it.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, RequestLimit]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._ended = 0
        """Limits in the heap whose request has ended."""

    def add(self, limit: RequestLimit, deadline: float, loop: asyncio.AbstractEventLoop) -> None:
        heapq.heappush(self._heap, (deadline, next(self._order), limit))
        if self._timer is None or deadline < self._timer.when():
            self._arm(loop)

    def ended(self) -> None:
        self._ended += 1
        heap = self._heap
        if self._ended == len(heap):  # none in flight
            heap.clear()
            self._ended = 0
            self._disarm()
        elif self._ended > _COMPACT_MIN and 2 * self._ended > len(heap):
            heap[:] = [entry for entry in heap if not entry[2].done]
            heapq.heapify(heap)
            self._ended = 0

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._disarm()
        if self._heap:
            self._timer = loop.call_at(self._heap[0][0], self._fire, loop)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now, heap = loop.time(), self._heap
        while heap and (heap[0][2].done or heap[0][0] <= now):
            limit = heapq.heappop(heap)[2]
            if limit.done:
                self._ended -= 1
            else:
                limit.expire()
        self._arm(loop)


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = (
    weakref.WeakKeyDictionary()
)


class RequestLimit:
    """``with`` a limit around an ``await``: past ``seconds``, the task is cancelled and the
    block raises ``TimeoutError``."""

    __slots__ = ("_cancelling", "_deadlines", "_seconds", "_task", "done", "expired")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self.done = False
        self.expired = False

    def __enter__(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a request limit must be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        deadlines = _BY_LOOP.get(loop)
        if deadlines is None:
            deadlines = _BY_LOOP[loop] = _Deadlines()
        self._deadlines = deadlines
        deadlines.add(self, loop.time() + self._seconds, loop)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        self.done = True
        if not self.expired:
            self._deadlines.ended()
        elif self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc  # only this limit cancelled the task
        return False

    def expire(self) -> None:
        self.expired = True
        self._task.cancel()


_NO_LIMIT = contextlib.nullcontext()


def request_limit(seconds: float | None) -> RequestLimit | contextlib.nullcontext[None]:
    """A limit of ``seconds`` for the ``with`` block (none for None), as ``asyncio.timeout``."""
    return _NO_LIMIT if seconds is None else RequestLimit(seconds)
