"""A sync child's parent waits in the foreground on one future: a result, or a move away."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from forkagent._orchestration.loop import AgentRun
from forkagent._orchestration.runtime import RuntimeOptions
from forkagent._orchestration.tasks import AgentTask
from forkagent.events import AgentMovedToBackground, AgentStarted, Event
from forkagent.requests import ModelRequest
from forkagent.testing import reply, tool_call

from ._support import Events, make_agent, results_by_id, tree_model


async def test_a_child_moved_before_its_parent_waits_goes_to_the_background(
    tmp_path: Path,
) -> None:
    """A move asked for as the child starts (its ``AgentStarted``), before the parent's wait
    begins, still lets the parent go on: the child reports later, in the background."""
    events = Events()
    release = asyncio.Event()

    async def child(request: ModelRequest) -> str:
        await release.wait()
        return "Scope: done in the background."

    model = tree_model(
        [reply(tool_call("Agent", id="a", prompt="long job", fork=True)), "Carrying on.", "Read."],
        fork=child,
    )
    moving: list[Callable[[str], None]] = []

    def move_at_start(event: Event) -> None:
        if isinstance(event, AgentStarted) and event.parent_id is not None:
            moving[0](event.agent_id)

    agent = make_agent(model, tmp_path, subagents=True, listeners=[events, move_at_start])
    async with asyncio.timeout(10), agent.session() as session:
        moving.append(session.move_to_background)
        first = await session.send("go")
        [moved] = events.of(AgentMovedToBackground)
        assert session.task(moved.agent_id).status == "running"
        assert "moved to the background" in results_by_id(first.messages)["a"].text
        assert first.output == "Carrying on."
        release.set()
        await session.idle()
        final = session.result()
    assert session.task(moved.agent_id).status == "completed"
    assert final.output == "Read."


async def _tasks_while_children_run(cwd: Path, children: int) -> int:
    """How many asyncio tasks exist while ``children`` sync forks of one reply are in flight."""
    in_flight: set[str] = set()
    everyone, release = asyncio.Event(), asyncio.Event()

    async def child(request: ModelRequest) -> str:
        in_flight.add(request.messages[-1].text)
        if len(in_flight) == children:
            everyone.set()
        await release.wait()
        return "Scope: done."

    calls = [tool_call("Agent", id=f"c{n}", prompt=f"job {n}", fork=True) for n in range(children)]
    model = tree_model([reply(*calls), "All read."], fork=child)
    options = RuntimeOptions(fanout="off")  # every child in flight at once, none held
    agent = make_agent(model, cwd, subagents=True, options=options)
    async with asyncio.timeout(10), agent.session() as session:
        turn = asyncio.create_task(session.send("go"))
        await everyone.wait()
        count = len(asyncio.all_tasks())
        release.set()
        result = await turn
    assert result.output == "All read."
    assert all("finished: completed" in r.text for r in results_by_id(result.messages).values())
    return count


async def test_a_sync_child_costs_its_parent_no_task_to_wait_on(tmp_path: Path) -> None:
    """Per sync fork there is its tool call's task and its own run's, nothing more: N forks
    in one reply keep every waiting parent frame alive at once, so a waiter task, event or
    ``asyncio.wait`` per child would be N more of each for the collector to walk."""
    one = await _tasks_while_children_run(tmp_path / "one", 1)
    four = await _tasks_while_children_run(tmp_path / "four", 4)
    assert four - one == 3 * 2


async def test_a_move_that_comes_with_the_waits_cancellation_cancels_the_child(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The parent's wait is cancelled in the very step its child is moved: the child was
    still in the foreground, so it is cancelled with the wait (the cancellation wins, as
    when the wait was ``asyncio.wait``), and the move's outcome is not logged as lost."""
    task = AgentTask(run=cast(AgentRun, None), kind="fork", label="held", background=False)
    waiting = asyncio.create_task(task.wait_foreground(None))
    await asyncio.sleep(0)  # it waits now, on a waiter of its own (the child is held: no task)
    task.move_to_background()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert task.cancel_requested
    assert not task.background
    del task, waiting
    gc.collect()
    assert "never retrieved" not in caplog.text
