from __future__ import annotations

from pathlib import Path

from forkagent import Agent
from forkagent.telemetry import UsageRecorder


async def test_a_finished_runs_usage_tree_is_the_recorders(tmp_path: Path) -> None:
    recorder = UsageRecorder()
    agent = Agent(
        model="emulator:claude-sonnet-4-6",
        cwd=tmp_path,
        listeners=[recorder],
        load_agent_files=False,
        registry=False,
        skip_transcript=True,
    )
    result = await agent.run("Say hello")

    tree = result.usage_tree()
    assert tree.to_dict() == recorder.tree().to_dict()
    assert list(tree.by_model) == ["claude-sonnet-4-6"]  # priced and shown by the model's name
