"""A session's registry writes: off the event loop, in order, all there after closing."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from forkagent.state.registry import AgentRecord, Registry, RegistryError, RowWrite
from forkagent.testing import reply, tool_call
from forkagent.tools import tool

from ._support import make_agent, tree_model, turn_of


class WatchedRegistry(Registry):
    """A registry that notes which thread wrote each agent's row, and what."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[tuple[int, str, RowWrite]] = []

    def apply(self, rows: Mapping[str, RowWrite]) -> None:
        thread = threading.get_ident()
        self.writes.extend((thread, agent_id, row) for agent_id, row in rows.items())
        super().apply(rows)


async def test_the_event_loop_never_waits_on_a_registry_write(tmp_path: Path) -> None:
    registry = WatchedRegistry(tmp_path / "registry.db")
    forks = [tool_call("Agent", id=f"f{i}", prompt=f"part {i}", fork=True) for i in range(3)]
    model = tree_model([reply(*forks)])
    agent = make_agent(model, tmp_path, subagents=True, registry=registry)
    async with agent.session() as session:
        await session.send("go")
        ids = list(session._runtime.runs)
    loop_thread = threading.get_ident()
    writers = {thread for thread, _, _ in registry.writes}
    assert len(writers) == 1  # one thread, so one order
    assert loop_thread not in writers
    for agent_id in ids:
        writes = [row for _, who, row in registry.writes if who == agent_id]
        assert writes[0].record is not None  # registered, then changed
        assert [row.changes.get("status") for row in writes if "status" in row.changes] == [
            "completed"
        ]
        assert any("turns" in row.changes for row in writes)
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


class BrokenRegistry(Registry):
    def apply(self, rows: Mapping[str, RowWrite]) -> None:
        raise RegistryError("the disk is full")


async def test_a_failing_registry_write_is_logged_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = tree_model([reply(tool_call("Agent", id="f", prompt="part", fork=True))])
    agent = make_agent(
        model, tmp_path, subagents=True, registry=BrokenRegistry(tmp_path / "registry.db")
    )
    with caplog.at_level(logging.ERROR, logger="forkagent.state.registry"):
        result = await agent.run("go")
    assert result.status == "completed"
    assert result.output == "root done"
    assert "the disk is full" in caplog.text
    assert "agent registry" in caplog.text
