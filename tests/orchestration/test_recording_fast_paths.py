"""The recorder's fast paths write what the general ones do (issue 18, eighth pass)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import TypedDict

import pytest

from forkagent.events import AgentKind, RecordStatus
from forkagent.state._appends import _running_loop
from forkagent.state.registry import (
    AgentRecord,
    Registry,
    RegistryWriter,
    _own_process,
    own_process_start,
)
from forkagent.usage import Usage


class _Started(TypedDict):
    """What ``register_started`` and ``AgentRecord`` are both given."""

    root_id: str
    model: str
    kind: AgentKind
    parent_id: str | None
    label: str
    background: bool
    cwd: str


@pytest.mark.parametrize(
    ("kind", "parent_id", "background", "transcript"),
    [("fork", "parent", True, "/state/t/child.jsonl"), ("main", None, False, None)],
)
def test_a_started_agent_gets_the_row_its_record_would_have(
    tmp_path: Path, kind: AgentKind, parent_id: str | None, background: bool, transcript: str | None
) -> None:
    """``register_started`` builds the row without an ``AgentRecord``: the same row, read back
    from the database, as ``register`` of the record with the same fields (times aside)."""
    started = _Started(
        root_id="root",
        model="emulator:model",
        kind=kind,
        parent_id=parent_id,
        label="a label",
        background=background,
        cwd="/work",
    )
    registry = Registry(tmp_path / "registry.db")
    writer = RegistryWriter(registry)
    writer.register_started("fast", transcript=transcript, **started)
    writer.close()
    path = None if transcript is None else Path(transcript)
    registry.register(
        AgentRecord(id="slow", transcript=path, process_start=own_process_start(), **started)
    )
    fast, slow = registry.get("fast"), registry.get("slow")
    assert fast.started_at == fast.updated_at > 0
    assert dataclasses.replace(fast, started_at=0.0, updated_at=0.0) == dataclasses.replace(
        slow, id="fast", started_at=0.0, updated_at=0.0
    )


def test_the_running_loop_is_asked_in_c_and_is_none_outside_a_loop() -> None:
    """``_appends`` asks for the running loop per line through asyncio's C accessor, which
    returns None outside a loop instead of raising as ``get_running_loop`` does."""
    assert _running_loop() is None

    async def inside() -> asyncio.AbstractEventLoop | None:
        return _running_loop()

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(inside()) is loop
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("status", "error", "cost"),
    [("completed", None, 0.25), ("failed", 'bad "x"', None), ("cancelled", None, None)],
)
def test_the_writers_usage_and_finish_rows_are_the_updates_rows(
    tmp_path: Path, status: RecordStatus, error: str | None, cost: float | None
) -> None:
    """``RegistryWriter.record_usage`` and ``finish`` build their changes without ``update``:
    the rows read back equal those of ``Registry``'s, which go through ``update`` (times
    aside, but a final status's ``ended_at`` is set on both)."""
    registry = Registry(tmp_path / "registry.db")
    usage = Usage(input_tokens=3, output_tokens=5, cache_read_tokens=7, cache_write_1h_tokens=11)
    for agent_id in ("fast", "slow"):
        registry.register(AgentRecord(id=agent_id, root_id="root", model="emulator:model"))
    writer = RegistryWriter(registry)
    writer.record_usage("fast", usage, turns=2, cost=cost)
    writer.finish("fast", status, output="x" * 600, error=error)
    writer.close()
    registry.record_usage("slow", usage, turns=2, cost=cost)
    registry.finish("slow", status, output="x" * 600, error=error)
    fast, slow = registry.get("fast"), registry.get("slow")
    assert fast.ended_at is not None
    assert slow.ended_at is not None
    assert dataclasses.replace(
        fast, started_at=0.0, updated_at=0.0, ended_at=0.0
    ) == dataclasses.replace(slow, id="fast", started_at=0.0, updated_at=0.0, ended_at=0.0)
    assert (fast.turns, fast.cache_write_tokens, fast.cost) == (2, 11, cost)


def test_the_writers_finish_refuses_an_unknown_status_as_update_does(tmp_path: Path) -> None:
    writer = RegistryWriter(Registry(tmp_path / "registry.db"))
    with pytest.raises(ValueError, match="is not an agent status"):
        writer.finish("a", "done")  # type: ignore[arg-type]  # the wrong status under test
    writer.close()


def test_a_started_row_gives_the_pid_of_the_process_that_wrote_it_after_a_fork() -> None:
    """``register_started`` asks for the pid once per process: a child made by ``os.fork``
    after the parent asked writes its own pid, not the parent's."""
    assert _own_process()[0] == os.getpid()  # asked, and kept, in this process
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(writer, str(_own_process()[0]).encode())
        os._exit(0)
    os.close(writer)
    reported = os.read(reader, 32)
    os.close(reader)
    os.waitpid(child, 0)
    assert int(reported) == child != os.getpid()
