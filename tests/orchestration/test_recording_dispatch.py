"""The recorder's dispatch by event type, and the registry's usage price (issue 18, twelfth
pass): each path writes what the general one did."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest

from forkagent._orchestration.recording import _RECORD
from forkagent.events import TranscriptStatus
from forkagent.pricing import cost
from forkagent.state import transcript
from forkagent.state.registry import Registry
from forkagent.state.transcript import StatusEntry, TranscriptWriter
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
