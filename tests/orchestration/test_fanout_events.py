"""RequestSent marks when a request really leaves, so held-back siblings are not 'launched early'."""

from __future__ import annotations

import asyncio
from pathlib import Path

from forkagent import Agent
from forkagent.events import Event, RequestSent
from forkagent.models.base import ModelProfile
from forkagent.models.function import FunctionModel
from forkagent.requests import ModelRequest


async def test_siblings_are_sent_only_after_the_first_child_answered(tmp_path: Path) -> None:
    timeline: list[str] = []

    async def answer(request: ModelRequest) -> str:
        await asyncio.sleep(0.02)
        timeline.append("answered")
        return "done"

    def on_event(event: Event) -> None:
        if isinstance(event, RequestSent):
            timeline.append("sent")

    model = FunctionModel(answer)
    model.profile = ModelProfile(provider="test", warmup="first_response_ends")
    agent = Agent(model=model, cwd=tmp_path, load_agent_files=False, listeners=[on_event])

    async with agent.session() as session:
        await session.send("plan")
        timeline.clear()
        await session.fork(["a", "b", "c"])

    # The first child goes alone; its siblings leave only once it has answered.
    assert timeline[:2] == ["sent", "answered"]
    assert timeline.count("sent") == 3
