"""``AgentTask.wait()`` gives what ``asyncio.shield`` over the child's task gives.

Each scenario awaits both side by side: a result, an exception, a cancelled
task, and waiters given up on while the task runs on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from forkagent._orchestration.loop import AgentRun
from forkagent._orchestration.tasks import AgentTask, TaskResult
from forkagent.usage import Usage

RESULT = TaskResult(
    task_id="t", status="completed", output="done", usage=Usage(), turns=1, seconds=0
)


def handle(body: Callable[[], Coroutine[Any, Any, TaskResult]]) -> AgentTask:
    """A task handle around ``body`` (``wait`` never reads the run)."""
    task = AgentTask(run=cast(AgentRun, None), kind="fork", label="t", background=True)
    task._task = asyncio.create_task(body())
    return task


async def settled(waiter: Awaitable[TaskResult]) -> str:
    try:
        return (await waiter).output
    except asyncio.CancelledError:
        return "cancelled"
    except RuntimeError as exc:
        return f"raised {exc}"


async def compare(body: Callable[[], Coroutine[Any, Any, TaskResult]]) -> str:
    """Both ways of waiting for the same task; they must agree."""
    task = handle(body)
    assert task._task is not None
    ours, shielded = task.wait(), asyncio.shield(task._task)
    outcomes = [await settled(ours), await settled(shielded)]
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


async def test_a_result_an_exception_and_a_cancelled_task_come_out_as_from_a_shield() -> None:
    async def answers() -> TaskResult:
        await asyncio.sleep(0)
        return RESULT

    async def fails() -> TaskResult:
        await asyncio.sleep(0)
        raise RuntimeError("lost")

    async def cancelled() -> TaskResult:
        current = asyncio.current_task()
        assert current is not None
        asyncio.get_running_loop().call_soon(current.cancel)
        await asyncio.sleep(1)
        return RESULT

    assert await compare(answers) == "done"
    assert await compare(fails) == "raised lost"
    assert await compare(cancelled) == "cancelled"


async def test_a_waiter_given_up_on_leaves_the_task_and_the_other_waiters_alone() -> None:
    release = asyncio.Event()

    async def slow() -> TaskResult:
        await release.wait()
        return RESULT

    task = handle(slow)
    first, second = task.wait(), task.wait()
    first.cancel()
    for _ in range(3):  # each given up on: dropped as the next waiter comes
        asyncio.ensure_future(task.wait()).cancel()
        await asyncio.sleep(0)
    third, fourth = task.wait(), task.wait()
    assert isinstance(task._waiters, list)  # several are listed (one is kept alone)
    assert len(task._waiters) == 3
    third.cancel()  # given up on after the last call: still listed when the task ends
    release.set()
    async with asyncio.timeout(5):
        outcomes = [await settled(w) for w in (first, second, third, fourth)]
    assert outcomes == ["cancelled", "done", "cancelled", "done"]
    assert task._task is not None
    assert not task._task.cancelled()
    assert task.wait() is task._task  # once it has ended, the task itself, as a shield gives


async def test_a_result_handed_out_in_the_last_step_reaches_waiters_after_the_task_ended() -> None:
    """``hand_out``: the runtime's way for a finished run. A waiter resumes with the task
    already ended with that very result, as a shield gives; one given up on stays so."""

    async def answers() -> TaskResult:
        await asyncio.sleep(0)
        task.hand_out(RESULT)
        return RESULT

    task = handle(answers)
    assert task._task is not None
    waiter, given_up, shielded = task.wait(), task.wait(), asyncio.shield(task._task)
    given_up.cancel()
    assert await waiter is RESULT
    assert task._task.done()
    assert task._task.result() is RESULT
    assert await shielded is RESULT
    assert given_up.cancelled()
    assert task._waiters is None
    assert task.wait() is task._task
