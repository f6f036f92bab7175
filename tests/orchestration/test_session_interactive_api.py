"""What an interactive front end (``forkagent chat``) uses of ``Session``: streaming in
every turn, and background reports answered when the front end says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator
from forkagent.emulator.policies import EmulatedRequest
from forkagent.events import AgentStarted, Event, NotificationDelivered, OutputDelta

MODEL = "emulator:claude-sonnet-4-6"


async def test_streaming_covers_send_and_outlives_a_stream(tmp_path: Path) -> None:
    events: list[Event] = []
    agent = Agent(model=MODEL, cwd=tmp_path, registry=False, listeners=[events.append])
    with use_emulator(Emulator()):
        async with agent.session() as session:
            await session.send("first")
            assert not any(isinstance(e, OutputDelta) for e in events)  # off by default
            session.streaming = True
            await session.send("second")
            streamed = "".join(e.text for e in events if isinstance(e, OutputDelta))
            assert streamed == "Understood: second"
            async for _ in session.stream("third"):
                pass
            assert session.streaming  # stream() leaves the setting as it found it


async def test_reports_wait_for_answer_notifications_when_the_caller_decides(
    tmp_path: Path,
) -> None:
    events: list[Event] = []
    emulator = Emulator()
    call = ToolCall("Agent", {"prompt": "count", "fork": True, "run_in_background": True})
    emulator.script(Reply(tool_calls=(call,)), "Started.", "Counted: 3.", agent="main")
    release = asyncio.Event()

    async def child(request: EmulatedRequest) -> Reply:
        await release.wait()  # it ends once the main agent's turn is over
        return Reply(text="3 items")

    emulator.set_policy(child)
    agent = Agent(
        model=MODEL,
        cwd=tmp_path,
        registry=False,
        listeners=[events.append],
        options=RuntimeOptions(resume_on_notification=False),
    )
    with use_emulator(emulator):
        async with agent.session() as session:
            await session.send("go")
            [fork] = [e for e in events if isinstance(e, AgentStarted) and e.parent_id]
            release.set()
            await session.idle()  # the child ended; with the default, its report would be read
            assert not any(isinstance(e, NotificationDelivered) for e in events)  # it waits

            assert await session.answer_notifications()
            assert session.result().output == "Counted: 3."
            assert [e.task_id for e in events if isinstance(e, NotificationDelivered)] == [
                fork.agent_id
            ]
            assert not await session.answer_notifications()  # nothing left: no turn
