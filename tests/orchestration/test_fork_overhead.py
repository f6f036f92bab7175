"""What the runtime adds per background fork stays small: one task per child, nothing per
waiter, and siblings share what they can without seeing each other's (or later) changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator, use_emulator
from forkagent.tools import tool

MODEL = "emulator:claude-sonnet-4-6"


def make_agent(cwd: Path) -> Agent:
    return Agent(
        model=MODEL,
        cwd=cwd,
        load_agent_files=False,
        registry=False,
        skip_transcript=True,
        options=RuntimeOptions(resume_on_notification=False),
    )


@tool
def extra(text: str) -> str:
    """Echo the text."""
    return text


async def test_a_background_fork_is_one_task_and_waiting_for_it_adds_none(tmp_path: Path) -> None:
    with use_emulator(Emulator()):
        async with make_agent(tmp_path).session() as session:
            await session.send("Plan the work.")
            before = len(asyncio.all_tasks())
            tasks = await session.fork([f"Do task {n}." for n in range(5)], background=True)
            assert len(asyncio.all_tasks()) == before + 5
            waits = [task.wait() for task in tasks]
            gathering = asyncio.gather(*waits[1:])
            assert len(asyncio.all_tasks()) == before + 5  # no task wrapped around a wait
            waits[0].cancel()  # a waiter given up on: its child runs on
            results = [*(await gathering), await tasks[0].wait()]
    assert [r.status for r in results] == ["completed"] * 5


async def test_a_forks_tool_index_is_shared_but_not_what_the_parent_adds_later(
    tmp_path: Path,
) -> None:
    with use_emulator(Emulator()):
        async with make_agent(tmp_path).session() as session:
            await session.send("Plan the work.")
            parent = session.root
            child = session._runtime.build_fork(parent, "Look around.")
            parent.add_tools([extra])
            assert parent.tool("extra") is extra
            assert child.tool("extra") is None
            assert child.tool("Read") is parent.tool("Read") is not None
            assert [t.name for t in child.tools] == [t.name for t in parent.tools[:-1]]
