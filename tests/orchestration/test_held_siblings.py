"""Fork siblings held without a task until their family's release (``ForkFamily.hold``).

A held sibling's task is made when the family is released, so it skips the step that
would only wait: every event, result and order must be what the general path gives,
where each sibling's task starts at once and waits for the release on a future.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from forkagent import RuntimeOptions
from forkagent._orchestration.fanout import ForkFamily
from forkagent._orchestration.runtime import ForkParams
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.events import AgentMovedToBackground, Event, NotificationDelivered, RequestSent
from forkagent.models.base import ModelProfile
from forkagent.models.emulator import EmulatorModel
from forkagent.models.function import FunctionModel
from forkagent.requests import ModelRequest
from forkagent.testing import reply, tool_call

from ._support import Events, last_text, make_agent, results_by_id, tree_model

Projection = tuple[object, ...]


def _projected(events: list[Event]) -> list[Projection]:
    """Each event's type and plain fields, agent ids numbered by first appearance and
    timings left out: what two runs of the same work must share."""
    ids: dict[str, str] = {}
    rows: list[Projection] = []
    for event in events:
        row: list[object] = [type(event).__name__]
        for item in dataclasses.fields(event):
            value = getattr(event, item.name)
            if item.name == "seconds" or not isinstance(value, str | int | bool | None):
                continue
            if isinstance(value, str) and (value.startswith(("fork-", "main-")) or value in ids):
                value = ids.setdefault(value, f"agent{len(ids)}")
            row.append((item.name, value))
        rows.append(tuple(row))
    return rows


async def _fork_run(
    tmp_path: Path, *, background: bool, general: bool
) -> tuple[list[Projection], list[tuple[str, str]]]:
    events = Events()
    model = EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY))
    agent = make_agent(
        model,
        tmp_path,
        listeners=[events],
        registry=False,
        skip_transcript=True,
        options=RuntimeOptions(resume_on_notification=False),
    )
    with pytest.MonkeyPatch.context() as patch:
        if general:  # no sibling is ever held: each starts its task and waits on a future
            patch.setattr(ForkFamily, "holds", lambda family: False)
        async with agent.session() as session:
            await session.send("Plan the work.")
            tasks = await session.fork([f"Do task {n}." for n in range(6)], background=background)
            results = await asyncio.gather(*(t.wait() for t in tasks))
    return _projected(events), [(r.status, r.output) for r in results]


@pytest.mark.parametrize("background", [True, False])
async def test_held_siblings_give_the_general_paths_events_and_results(
    tmp_path: Path, background: bool
) -> None:
    held = await _fork_run(tmp_path / "held", background=background, general=False)
    general = await _fork_run(tmp_path / "general", background=background, general=True)
    assert held == general
    events, results = held
    assert [status for status, _ in results] == ["completed"] * 6
    assert sum(row[0] == "RequestSent" for row in events) == 7


def _forks_sent(events: Events) -> list[str]:
    return [e.agent_id for e in events.of(RequestSent) if e.agent_id.startswith("fork-")]


def _gated_model(gate: asyncio.Event, *, visible_after: float = 0.0) -> FunctionModel:
    """The first fork request waits for ``gate``; the others answer at once."""
    seen: list[str] = []

    async def answer(request: ModelRequest) -> str:
        text = str(request.messages[-1])
        if "Directive" in text and not seen:
            seen.append(text)
            await gate.wait()
        return "done"

    model = FunctionModel(answer, name="gated")
    model.profile = ModelProfile(
        provider="test",
        warmup="first_response_ends",
        cache_visible_after=visible_after,
    )
    return model


async def test_a_held_sibling_cancelled_ends_at_once(tmp_path: Path) -> None:
    gate = asyncio.Event()
    agent = make_agent(_gated_model(gate), tmp_path, registry=False, skip_transcript=True)
    async with asyncio.timeout(10), agent.session() as session:
        await session.send("Plan.")
        tasks = await session.fork(["a", "b", "c"], background=True)
        await asyncio.sleep(0.01)  # the leader's request is in flight, its siblings held
        tasks[1].cancel()
        cancelled = await tasks[1].wait()  # before the leader answers
        assert not gate.is_set()
        gate.set()
        rest = [await tasks[0].wait(), await tasks[2].wait()]
    assert cancelled.status == "cancelled"
    assert [r.status for r in rest] == ["completed", "completed"]


async def test_siblings_lead_when_the_first_child_ends_before_its_request(tmp_path: Path) -> None:
    events = Events()
    gate = asyncio.Event()
    gate.set()
    agent = make_agent(
        _gated_model(gate), tmp_path, listeners=[events], registry=False, skip_transcript=True
    )
    async with asyncio.timeout(10), agent.session() as session:
        await session.send("Plan.")
        tasks = await session.fork(["a", "b", "c"], background=True)
        tasks[0].cancel()  # before its task has run a step: it never leads
        results = await asyncio.gather(*(t.wait() for t in tasks))
    assert [r.status for r in results] == ["cancelled", "completed", "completed"]
    assert _forks_sent(events) == [tasks[1].id, tasks[2].id]


async def test_a_release_after_the_leader_ends_still_releases_the_held(tmp_path: Path) -> None:
    """DeepSeek-like: the prefix is readable some time after the leader's reply ends."""
    gate = asyncio.Event()
    gate.set()
    model = _gated_model(gate, visible_after=0.02)
    agent = make_agent(model, tmp_path, registry=False, skip_transcript=True)
    async with asyncio.timeout(10), agent.session() as session:
        await session.send("Plan.")
        tasks = await session.fork(["a", "b", "c"], background=True)
        results = await asyncio.gather(*(t.wait() for t in tasks))
    assert [r.status for r in results] == ["completed"] * 3


async def test_siblings_with_and_without_a_time_limit_send_in_their_order(tmp_path: Path) -> None:
    """A sibling with a wall-time limit is never held (the limit must end it while it
    waits); the held ones before it begin first, so every sibling sends in fork order."""
    events = Events()
    gate = asyncio.Event()
    gate.set()
    agent = make_agent(
        _gated_model(gate), tmp_path, listeners=[events], registry=False, skip_transcript=True
    )
    directives: list[str | ForkParams] = [
        "a",
        "b",
        ForkParams("c", timeout=60),
        "d",
        ForkParams("e", timeout=60),
    ]
    async with asyncio.timeout(10), agent.session() as session:
        await session.send("Plan.")
        tasks = await session.fork(directives, background=True)
        results = await asyncio.gather(*(t.wait() for t in tasks))
    assert [r.status for r in results] == ["completed"] * 5
    assert _forks_sent(events) == [t.id for t in tasks]


@pytest.mark.parametrize("general", [False, True])
async def test_a_siblings_request_timer_starts_when_it_is_sent(
    tmp_path: Path, general: bool
) -> None:
    """``request_timeout`` times a request, not the wait for the family's leader, whether
    the sibling waits held or in a task of its own: a leader that hangs past it fails, and
    its siblings then send and answer."""
    gate = asyncio.Event()  # never set: the leader's request hangs
    agent = make_agent(
        _gated_model(gate), tmp_path, registry=False, skip_transcript=True, request_timeout=0.05
    )
    with pytest.MonkeyPatch.context() as patch:
        if general:
            patch.setattr(ForkFamily, "holds", lambda family: False)
        async with asyncio.timeout(10), agent.session() as session:
            await session.send("Plan.")
            tasks = await session.fork(["a", "b", "c"], background=True)
            results = await asyncio.gather(*(t.wait() for t in tasks))
    assert [r.status for r in results] == ["failed", "completed", "completed"]


async def test_held_sync_children_move_to_the_background_and_report(tmp_path: Path) -> None:
    """Sync forks from one reply: the held ones are waited for through a waiter of their own
    (``wait_foreground``), go to the background on time like their leader, and report once."""
    gate = asyncio.Event()
    calls = [tool_call("Agent", id=f"c{n}", prompt=f"job {n}", fork=True) for n in range(3)]

    async def fork(request: ModelRequest) -> str:
        if "job 0" in last_text(request):
            await gate.wait()
        return "Scope: done."

    model = tree_model([reply(*calls), "Carrying on.", "Reports read."], fork=fork)
    model.profile = ModelProfile(provider="test", warmup="first_response_ends")
    events = Events()
    agent = make_agent(
        model,
        tmp_path,
        subagents=True,
        listeners=[events],
        options=RuntimeOptions(auto_background_after=0.05),
    )
    async with asyncio.timeout(10), agent.session() as session:
        first = await session.send("go")  # every child moved to the background
        assert [e.agent_id for e in events.of(AgentMovedToBackground)] == [
            e.agent_id for e in events.started if e.kind == "fork"
        ]
        assert all(
            "moved to the background" in r.text for r in results_by_id(first.messages).values()
        )
        gate.set()
        await session.idle()
        final = session.result()
    tasks = [session.task(e.agent_id) for e in events.started if e.kind == "fork"]
    assert [t.status for t in tasks] == ["completed"] * 3
    assert sum(isinstance(e, NotificationDelivered) for e in events) == 3
    assert final.output == "Reports read."
