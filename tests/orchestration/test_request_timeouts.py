"""Request timeouts on one shared timer behave as ``asyncio.timeout`` does.

Each scenario runs under both, and the outcomes must be the same: which
requests time out, which finish, which cancellations stay cancellations, and
what the task's cancellation count is afterwards.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Literal

import pytest

from forkagent._orchestration.timeouts import RequestTimer, _timers, request_timeout
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel

from ._support import make_agent

Kind = Literal["asyncio", "shared"]
KINDS: tuple[Kind, ...] = ("asyncio", "shared")


async def guarded(kind: Kind, seconds: float | None, body: Callable[[], Awaitable[str]]) -> str:
    """``body`` under ``asyncio.timeout`` or under the runtime's shared timer."""
    if kind == "asyncio":
        async with asyncio.timeout(seconds):
            return await body()
    with request_timeout(seconds) or nullcontext():
        return await body()


async def outcome(kind: Kind, seconds: float | None, body: Callable[[], Awaitable[str]]) -> str:
    """What happened, as one comparable string, plus the task's cancellation count after."""
    task = asyncio.current_task()
    assert task is not None
    try:
        result = await guarded(kind, seconds, body)
    except TimeoutError:
        result = "timed out"
    except asyncio.CancelledError:
        result = "cancelled"
        task.uncancel()  # taken as an outcome here, not passed on
    return f"{result}; cancelling={task.cancelling()}"


def sleeper(seconds: float, answer: str = "answered") -> Callable[[], Awaitable[str]]:
    async def body() -> str:
        await asyncio.sleep(seconds)
        return answer

    return body


async def both(scenario: Callable[[Kind], Awaitable[object]]) -> object:
    """The scenario's result under each kind; they must agree."""
    results = [await asyncio.create_task(_run(scenario, kind)) for kind in KINDS]
    assert results[0] == results[1], dict(zip(KINDS, results, strict=True))
    return results[0]


async def _run(scenario: Callable[[Kind], Awaitable[object]], kind: Kind) -> object:
    async with asyncio.timeout(10):  # a deadline missed by the shared timer fails here
        return await scenario(kind)


async def test_a_slow_request_times_out_and_a_quick_one_answers() -> None:
    async def scenario(kind: Kind) -> object:
        return [
            await outcome(kind, 0.02, sleeper(30)),
            await outcome(kind, 30, sleeper(0.001)),
            await outcome(kind, None, sleeper(0.001)),
        ]

    assert await both(scenario) == [
        "timed out; cancelling=0",
        "answered; cancelling=0",
        "answered; cancelling=0",
    ]


async def test_many_requests_at_once_each_keep_their_own_deadline() -> None:
    """Interleaved deadlines, the earliest registered last: only the slow ones time out."""

    async def scenario(kind: Kind) -> object:
        plans = [(30.0, 0.01), (0.02, 30.0), (30.0, 0.03), (0.01, 30.0), (5.0, 0.0)]
        return await asyncio.gather(
            *(outcome(kind, limit, sleeper(takes)) for limit, takes in plans)
        )

    assert await both(scenario) == [
        "answered; cancelling=0",
        "timed out; cancelling=0",
        "answered; cancelling=0",
        "timed out; cancelling=0",
        "answered; cancelling=0",
    ]


async def test_another_cancellation_stays_a_cancellation() -> None:
    """Cancelled by someone else before the deadline: CancelledError, not a timeout."""

    async def scenario(kind: Kind) -> object:
        task = asyncio.create_task(outcome(kind, 30, sleeper(30)))
        await asyncio.sleep(0.01)
        task.cancel()
        return await task

    assert await both(scenario) == "cancelled; cancelling=0"


async def test_a_cancellation_at_the_deadline_wins_over_the_timeout() -> None:
    """Both at once: as with asyncio.timeout, the other cancellation is not swallowed."""

    async def scenario(kind: Kind) -> object:
        async def cancelled_at_deadline() -> str:
            task = asyncio.current_task()
            assert task is not None
            loop = asyncio.get_running_loop()
            loop.call_later(0.02, task.cancel)  # the timeout's timer is set for the same moment
            await asyncio.sleep(30)
            return "answered"

        return await outcome(kind, 0.02, cancelled_at_deadline)

    assert await both(scenario) == "cancelled; cancelling=0"


async def test_a_body_that_swallows_the_cancellation_returns_its_answer() -> None:
    async def scenario(kind: Kind) -> object:
        async def stubborn() -> str:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return "kept going"
            return "answered"

        return await outcome(kind, 0.01, stubborn)

    assert await both(scenario) == "kept going; cancelling=0"


async def test_the_timer_never_fires_before_a_deadline() -> None:
    loop = asyncio.get_running_loop()
    timer = RequestTimer()
    guard = timer.after(loop, 0.02)
    with pytest.raises(TimeoutError), guard:
        await asyncio.sleep(30)
    assert guard.expired
    assert loop.time() >= guard.deadline


async def test_one_timer_serves_every_request_and_none_outlives_them() -> None:
    loop = asyncio.get_running_loop()
    timer = RequestTimer()
    handles: list[int] = []

    async def request(seconds: float) -> None:
        with timer.after(loop, seconds):
            handles.append(_scheduled(loop, timer))
            await asyncio.sleep(0.001)

    await asyncio.gather(*(request(600) for _ in range(50)))
    assert set(handles) == {1}  # one timer in the loop's heap, however many wait
    assert _scheduled(loop, timer) == 0


def test_a_finished_loop_is_not_kept_alive_by_its_timer() -> None:
    async def one_request() -> None:
        with request_timeout(600) or nullcontext():
            await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(one_request())
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None


def test_a_collected_loops_timer_is_dropped_with_it() -> None:
    async def one_request() -> None:
        with request_timeout(600) or nullcontext():
            await asyncio.sleep(0)

    gc.collect()
    before = len(_timers)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(one_request())
    assert len(_timers) == before + 1  # one timer for the loop, kept while the loop lives
    loop.run_until_complete(one_request())
    assert len(_timers) == before + 1  # and found again for its next request
    loop.close()
    del loop
    gc.collect()
    assert len(_timers) == before


async def test_a_timeout_outside_a_task_is_refused() -> None:
    loop = asyncio.get_running_loop()
    failures: list[BaseException] = []

    def from_a_callback() -> None:
        try:
            request_timeout(1)
        except RuntimeError as exc:
            failures.append(exc)

    loop.call_soon(from_a_callback)
    await asyncio.sleep(0.001)
    assert [str(f) for f in failures] == ["a request timeout needs to run inside a task"]


async def test_a_hung_fork_request_fails_and_its_siblings_complete(tmp_path: Path) -> None:
    """Through the runtime: one sibling's request hangs past request_timeout, the rest answer."""

    async def answer(request: ModelRequest) -> str:
        if "Do task 2." in str(request.messages[-1]):
            await asyncio.sleep(3600)
        return "done"

    agent = make_agent(FunctionModel(answer, name="forks"), tmp_path, request_timeout=0.05)
    async with asyncio.timeout(10), agent.session() as session:
        await session.send("Plan.")
        tasks = await session.fork([f"Do task {n}." for n in range(4)], background=True)
        results = await asyncio.gather(*(task.wait() for task in tasks))
    assert [r.status for r in results] == ["completed", "completed", "failed", "completed"]
    assert results[2].error == (
        "ModelError: test:forks did not answer within 0.05s; "
        "raise request_timeout or check the provider"
    )


def _scheduled(loop: asyncio.AbstractEventLoop, timer: RequestTimer) -> int:
    """The timer's live handles in the loop's heap (asyncio has no public view of it)."""
    heap: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    mine = [
        handle
        for handle in heap
        if not handle.cancelled() and handle._callback == timer._fire  # type: ignore[attr-defined]
    ]
    return len(mine)
