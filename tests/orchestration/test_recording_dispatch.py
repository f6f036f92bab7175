"""The recorder's dispatch by event type, and the registry's usage price (issue 18, twelfth
pass): each path writes what the general one did."""

from __future__ import annotations

from pathlib import Path

from forkagent._orchestration.recording import _RECORD
from forkagent.pricing import cost
from forkagent.state.registry import Registry
from forkagent.state.transcript import TranscriptWriter
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
