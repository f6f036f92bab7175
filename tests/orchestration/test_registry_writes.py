"""A session's registry writes: off the event loop, in order, all there after closing."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from forkagent.state._appends import BACKGROUND
from forkagent.state.registry import AgentRecord, Registry
from forkagent.testing import reply, tool_call
from forkagent.tools import tool

from ._support import make_agent, threads_writing_rows, tree_model, turn_of


def held_open_by(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open (known on Linux; elsewhere taken as so)."""
    fds = Path(f"/proc/{pid}/fd")
    if not fds.exists():
        return True
    return path.resolve() in {Path(os.readlink(fd)) for fd in fds.iterdir()}


async def test_the_event_loop_never_waits_on_a_registry_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper process writes the rows: this process runs none of the SQL that does."""
    here = threads_writing_rows(monkeypatch)
    registry = Registry(tmp_path / "registry.db")
    forks = [tool_call("Agent", id=f"f{i}", prompt=f"part {i}", fork=True) for i in range(3)]
    model = tree_model([reply(*forks)])
    agent = make_agent(model, tmp_path, subagents=True, registry=registry)
    async with agent.session() as session:
        await session.send("go")
        ids = list(session._runtime.runs)
    helper = BACKGROUND.helper_pid
    assert helper is not None
    assert helper != os.getpid()
    assert here == []
    assert held_open_by(helper, registry.path)  # its connection, kept open
    rows = {r.id: r for r in Registry(registry.path).list()}
    assert set(rows) == set(ids)
    assert all(r.status == "completed" and r.turns >= 1 for r in rows.values())


async def test_another_reader_sees_the_running_agents(tmp_path: Path) -> None:
    """What ``forkagent ps`` relies on: rows appear while the agents still run."""
    released = asyncio.Event()

    @tool
    async def hold() -> str:
        """Wait until the test lets the agent go on."""
        await released.wait()
        return "released"

    path = tmp_path / "registry.db"
    model = tree_model(
        [reply(tool_call("Agent", id="f", prompt="wait", fork=True))],
        fork=lambda r: reply(tool_call("hold")) if turn_of(r) == 1 else "Scope: done",
    )
    agent = make_agent(model, tmp_path, subagents=True, tools=[hold], registry=Registry(path))
    async with agent.session() as session:
        sending = asyncio.create_task(session.send("go"))
        reader = Registry(path)
        running: tuple[AgentRecord, ...] = ()
        for _ in range(500):
            running = await asyncio.to_thread(reader.list, include_finished=False)
            if len(running) == 2 or sending.done():
                break
            await asyncio.sleep(0.01)
        assert sorted(r.kind for r in running) == ["fork", "main"]
        released.set()
        await sending
    assert {r.status for r in Registry(path).list()} == {"completed"}


async def test_a_failing_registry_write_is_logged_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(tmp_path / "registry.db")
    with closing(sqlite3.connect(registry.path)) as db, db:
        db.execute(
            "CREATE TRIGGER full BEFORE INSERT ON agents BEGIN SELECT RAISE(ABORT, 'the disk is full'); END"
        )
    model = tree_model([reply(tool_call("Agent", id="f", prompt="part", fork=True))])
    agent = make_agent(model, tmp_path, subagents=True, registry=registry)
    with caplog.at_level(logging.ERROR, logger="forkagent.state.registry"):
        result = await agent.run("go")
    assert result.status == "completed"
    assert result.output == "root done"
    failures = [r for r in caplog.records if r.name == "forkagent.state.registry"]
    assert failures
    assert "the disk is full" in failures[0].getMessage()
    assert "agent registry" in failures[0].getMessage()
