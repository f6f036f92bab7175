"""What the runtime adds per background fork stays small: one task per child, nothing per
waiter, and siblings share what they can without seeing each other's (or later) changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator
from forkagent.models.emulator import EmulatorModel
from forkagent.tools import tool

from ._support import make_agent


@tool
def first(text: str) -> str:
    """Echo the text."""
    return text


@tool
def extra(text: str) -> str:
    """Echo the text once more."""
    return text


def offline(cwd: Path) -> Agent:
    """No records, and the main agent does not answer its children's reports by itself."""
    return make_agent(
        EmulatorModel("claude-sonnet-4-6", Emulator()),
        cwd,
        tools=[first],
        registry=False,
        skip_transcript=True,
        options=RuntimeOptions(resume_on_notification=False),
    )


async def test_a_background_fork_is_one_task_and_waiting_for_it_adds_none(tmp_path: Path) -> None:
    async with offline(tmp_path).session() as session:
        await session.send("Plan the work.")
        before = len(asyncio.all_tasks())
        tasks = await session.fork([f"Do task {n}." for n in range(5)], background=True)
        # The family's first child; the others' tasks are made when it releases them.
        assert len(asyncio.all_tasks()) == before + 1
        waits = [task.wait() for task in tasks]
        gathering = asyncio.gather(*waits[1:])
        assert len(asyncio.all_tasks()) == before + 1  # no task wrapped around a wait
        waits[0].cancel()  # a waiter given up on: its child runs on
        results = [*(await gathering), await tasks[0].wait()]
    assert [r.status for r in results] == ["completed"] * 5


async def test_a_forks_tool_index_is_shared_but_not_what_the_parent_adds_later(
    tmp_path: Path,
) -> None:
    async with offline(tmp_path).session() as session:
        await session.send("Plan the work.")
        parent = session.root
        child = session._runtime.build_fork(parent, "Look around.")
        parent.add_tools([extra])
        assert parent.tool("extra") is extra
        assert child.tool("extra") is None
        assert child.tool("first") is parent.tool("first") is not None
        assert [t.name for t in child.tools] == [t.name for t in parent.tools[:-1]]
