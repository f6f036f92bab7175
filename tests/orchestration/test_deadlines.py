"""Request time limits on one timer per loop behave as ``asyncio.timeout`` does."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from forkagent._orchestration.deadlines import request_limit


async def limited(seconds: float | None, work: float) -> str:
    with request_limit(seconds):
        await asyncio.sleep(work)
    return "answered"


async def test_a_request_past_its_limit_raises_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        await limited(0.01, 10)


async def test_no_limit_and_a_limit_not_reached_let_the_request_answer() -> None:
    assert await limited(None, 0) == "answered"
    assert await limited(10, 0) == "answered"


async def test_many_limits_in_flight_expire_each_at_its_own_deadline() -> None:
    """Limits of different lengths, entered in any order, share the loop's timer: only the
    requests that outlive theirs time out, and the task's cancel count is restored. (The
    margins are wide: a loaded machine delays the loop, not the outcome.)"""
    cases = [(0.02, 60), (50.0, 0.01), (0.01, 60), (60.0, 0), (0.03, 60), (40.0, 0.001)] * 40

    results = await asyncio.gather(
        *(limited(seconds, work) for seconds, work in cases), return_exceptions=True
    )

    for (seconds, work), result in zip(cases, results, strict=True):
        if work > seconds:
            assert isinstance(result, TimeoutError)
        else:
            assert result == "answered"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    task = asyncio.create_task(limited(10, 10))
    await asyncio.sleep(0)

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_from_outside_after_the_limit_expired_stays_a_cancel() -> None:
    """Both cancelled the task: the outer cancel wins, as with ``asyncio.timeout``."""

    async def body() -> None:
        with request_limit(0.01):
            try:
                await asyncio.sleep(10)
            finally:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(body())


async def test_a_request_that_ended_before_the_limit_is_not_cancelled_later() -> None:
    """An ended request's limit is dropped: the task goes on past that deadline."""
    with request_limit(0.01):
        await asyncio.sleep(0)

    await asyncio.sleep(0.05)  # past the deadline: nothing cancels this task


def test_a_closed_loop_is_not_kept_alive_by_its_limits() -> None:
    async def work() -> weakref.ref[asyncio.AbstractEventLoop]:
        await limited(10, 0)
        return weakref.ref(asyncio.get_running_loop())

    loop = asyncio.new_event_loop()
    gone = loop.run_until_complete(work())
    loop.close()
    del loop
    gc.collect()

    assert gone() is None
    assert asyncio.run(limited(0.01, 0)) == "answered"  # a new loop gets its own timer
