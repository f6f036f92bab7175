"""The recorder's dispatch by event type, and the registry's usage price (issue 18, twelfth
pass): each path writes what the general one did."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest

from forkagent._orchestration.budget import Budget
from forkagent._orchestration.loop import AgentRun
from forkagent._orchestration.recording import _RECORD, Recorder
from forkagent.events import AgentStarted, TranscriptStatus
from forkagent.messages import Message, assistant, user
from forkagent.models.function import ScriptedModel
from forkagent.pricing import cost
from forkagent.requests import ModelSettings
from forkagent.state import transcript
from forkagent.state.registry import Registry
from forkagent.state.transcript import (
    StatusEntry,
    TranscriptWriter,
    read_transcript,
    transcript_path,
)
from forkagent.testing import reply, tool_call

from ._support import make_agent, tree_model

MODEL = "claude-sonnet-4-6"


def test_the_recorder_handles_exactly_the_events_a_transcript_records() -> None:
    """An event type the writer records but the table missed would lose its lines and rows."""
    assert set(_RECORD) == set(TranscriptWriter.RECORDED_EVENTS)


async def test_each_rows_cost_is_its_agents_total_usage_priced_at_its_model(
    tmp_path: Path,
) -> None:
    """A run's first response takes the event's price (its usage is the run's total); a later
    one prices the total: both are what pricing the total at the run's model gives."""
    registry = Registry(tmp_path / "registry.db")
    forks = [tool_call("Agent", id=f"f{i}", prompt=f"part {i}", fork=True) for i in range(2)]
    model = tree_model([reply(*forks)], name=MODEL)
    agent = make_agent(model, tmp_path, subagents=True, registry=registry)
    async with agent.session() as session:
        await session.send("go")
        runs = dict(session._runtime.runs)
    rows = {row.id: row for row in Registry(registry.path).list()}
    assert set(rows) == set(runs)
    assert sorted(run.turns for run in runs.values()) == [1, 1, 2]  # both paths taken
    for agent_id, run in runs.items():
        priced = cost(MODEL, run.usage)
        assert priced is not None
        assert priced > 0
        assert rows[agent_id].cost == priced


@pytest.mark.parametrize("status", get_args(TranscriptStatus))
def test_a_status_line_from_its_template_is_the_one_its_fields_serialize_to(
    status: TranscriptStatus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the time of a status without output, error or details is serialized per line."""
    for at in (datetime(2026, 1, 2, 3, 4, 5, 678901, UTC), datetime(2026, 1, 2, tzinfo=UTC)):
        monkeypatch.setattr(transcript, "_now", lambda at=at: at)
        fields = transcript._status_fields(status)
        assert transcript._status_line(status) == transcript._JSON_ANY.to_json(fields) + b"\n"
        entry = StatusEntry.model_validate_json(transcript._status_line(status))
        assert (entry.status, entry.at, entry.output, entry.error) == (status, at, None, None)


@pytest.mark.parametrize("diverges", [False, True])
def test_a_forks_transcript_inherits_what_it_shares_with_its_parents_record(
    tmp_path: Path, diverges: bool
) -> None:
    """All of the parent's recorded history, or (its last message replaced since) a part: the
    fork's header refers to the shared messages and its own lines hold the rest."""
    shared: list[Message] = [user("Plan the work."), assistant("Planned.")]
    run = _run("main-0-share", tmp_path, [*shared, user("And the tests.")])
    own: list[Message] = [user("Do task 1.")]
    if not diverges:
        own.insert(0, run.messages[-1])
    child = _run("fork-1-share", tmp_path, [*shared, *own], parent=run)
    recorder = Recorder({run.id: run, child.id: child}, run.id, registry=None)
    recorder(AgentStarted(run.id, None, "main", "", background=False))
    recorder(AgentStarted(child.id, run.id, "fork", "Do task 1.", background=True))
    recorder.close()
    written = read_transcript(transcript_path(run.id, child.id))
    assert written.header.history_from is not None
    assert written.header.history_from.messages == (2 if diverges else 3)
    assert written.messages == tuple(child.messages)


def _run(
    agent_id: str, cwd: Path, messages: list[Message], parent: AgentRun | None = None
) -> AgentRun:
    return AgentRun(
        id=agent_id,
        parent_id=None if parent is None else parent.id,
        kind="main" if parent is None else "fork",
        is_fork=parent is not None,
        model=ScriptedModel([], name=MODEL),
        system="Be brief.",
        tools=(),
        tool_specs=(),
        settings=ModelSettings(),
        cwd=cwd,
        budget=Budget(),
        messages=messages,
    )
