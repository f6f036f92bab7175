"""Telemetry on real sessions against the in-process emulator.

Every agent tree explains its own cache use: the tests read the
``CacheReported`` events it emits, with no monitor of their own, except
where a virtual clock has to be shared with the monitor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkagent import RuntimeOptions
from forkagent._orchestration.loop import AgentRun
from forkagent.agent import Agent
from forkagent.emulator import Emulator, Latency
from forkagent.emulator.timing import VirtualClock
from forkagent.events import CacheReported, Event, ResponseReceived
from forkagent.messages import user
from forkagent.models.emulator import EmulatorModel
from forkagent.requests import request_blocks
from forkagent.telemetry import CacheMonitor, UsageRecorder

PLAN = "Read the code and plan the review."
CODE = "def f(x):\n    return x * 2\n" * 300
"""A long first prompt (~3k tokens): losing the messages' cache is a miss."""


def agent(model: EmulatorModel, cwd: Path, *listeners: object, **options: Any) -> Agent:
    return Agent(
        model=model,
        listeners=listeners,  # type: ignore[arg-type]
        cwd=cwd,
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
        **options,
    )


def reports(events: list[Event]) -> list[CacheReported]:
    return [e for e in events if isinstance(e, CacheReported)]


async def test_a_fork_family_reads_its_parents_cache_and_the_tree_adds_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = EmulatorModel("claude-sonnet-4-6", Emulator())
    events: list[Event] = []
    recorder = UsageRecorder()

    with caplog.at_level(logging.INFO, logger="forkagent.cache"):
        async with agent(model, tmp_path, events.append, recorder).session() as session:
            await session.send(PLAN)
            await session.send("Continue.")
            await session.fork(["review module A", "review module B", "review module C"])
            result = session.result()

    seen = reports(events)
    assert [e.report.status for e in seen] == ["cold", "hit", "hit", "hit", "hit"]
    assert [e.report.compared_with for e in seen][3:] == [
        f"fork {seen[2].agent_id}'s shared prefix"
    ] * 2
    assert not caplog.records
    for report in seen:  # each report comes right after its response
        response = events[events.index(report) - 1]
        assert isinstance(response, ResponseReceived)
        assert (response.agent_id, response.turn) == (report.agent_id, report.turn)
    root = recorder.tree()
    assert len(root.children) == 3
    assert root.total.requests == 5
    assert root.total.cache_read_tokens == sum(e.report.read_tokens for e in seen)
    assert root.cost_complete
    facade = result.usage_tree()  # the same tree, from the run's result alone
    assert [child.agent_id for child in facade.children] == [c.agent_id for c in root.children]
    assert facade.total == root.total == result.total_usage


def edit_model(run: AgentRun) -> None:
    run.model = EmulatorModel("claude-opus-4-1", run.model.emulator)  # type: ignore[attr-defined]


def edit_settings(run: AgentRun) -> None:
    run.settings = run.settings.model_copy(update={"tool_choice": "none"})


def edit_tools(run: AgentRun) -> None:
    first = run.tool_specs[0]
    edited = first.model_copy(update={"description": first.description + " Mind the cache."})
    run.tool_specs = (edited, *run.tool_specs[1:])


def edit_system(run: AgentRun) -> None:
    assert isinstance(run.system, str)
    run.system += "\nAnswer briefly."


@pytest.mark.parametrize(
    ("edit", "reason", "diagnosis"),
    [
        (edit_model, "model_changed", None),
        (edit_settings, "settings_changed", "unavailable"),
        (edit_tools, "tools_changed", "tools_changed"),
        (edit_system, "system_changed", "system_changed"),
    ],
)
async def test_a_changed_request_header_is_named_as_the_cause(
    tmp_path: Path,
    edit: Callable[[AgentRun], None],
    reason: str,
    diagnosis: str | None,
) -> None:
    model = EmulatorModel("claude-sonnet-4-6", Emulator(), diagnostics=True)
    events: list[Event] = []

    async with agent(model, tmp_path, events.append).session() as session:
        await session.send(f"{PLAN}\n\n{CODE}")
        edit(session.root)
        await session.send("Continue.")
        if session.root.model is not model:
            await session.root.model.aclose()

    first, second = reports(events)
    assert first.report.status == "cold"
    assert second.report.status == "miss"
    assert second.report.reasons[0] == reason
    assert second.report.write_tokens > 0
    if diagnosis is None:  # a new model has no earlier response to compare with
        assert second.report.provider_diagnosis is None
    else:
        assert second.report.reasons[1:] == ("provider_reported",)
        assert second.report.provider_diagnosis is not None
        assert second.report.provider_diagnosis["type"] == diagnosis


async def test_an_edited_message_is_located_to_its_block_and_byte(tmp_path: Path) -> None:
    model = EmulatorModel("claude-sonnet-4-6", Emulator())
    events: list[Event] = []
    sent: list[Any] = []

    async with agent(model, tmp_path, events.append).session() as session:
        await session.send(PLAN)
        sent.append(session.root.last_request)
        session.root.messages[0] = user("Read the code and plan the reviews.")
        await session.send("Continue.")

    miss = reports(events)[1].report
    assert miss.status == "miss"
    assert miss.reasons == ("messages_changed",)
    diff = miss.difference
    assert diff is not None
    assert (diff.layer, diff.label) == ("messages", "messages[0].content[0]")
    block = request_blocks(sent[0])[diff.block_index or 0]
    assert block.label == "messages[0].content[0]"
    assert diff.byte_offset == block.data.index(b"review.") + len(b"review")
    assert "plan the reviews" in miss.findings[0].message
    assert 0 < miss.expected_tokens < miss.prompt_tokens  # the tools and system before it


async def test_siblings_sent_together_miss_because_the_entry_was_not_there_yet(
    tmp_path: Path,
) -> None:
    emulator = Emulator(latency=Latency(ttft=0.05, tokens_per_second=1_000_000))
    emulator.script("Plan: " + "check every function, one by one. " * 400, match="plan")
    model = EmulatorModel("claude-sonnet-4-6", emulator)
    events: list[Event] = []

    runner = agent(model, tmp_path, events.append, options=RuntimeOptions(fanout="off"))
    async with runner.session() as session:
        await session.send(PLAN)
        await session.fork(["review module A", "review module B", "review module C"])

    children = reports(events)[1:]
    leader = min(children, key=lambda e: e.agent_id)
    others = [e for e in children if e is not leader]
    assert leader.report.compared_with is not None
    assert leader.report.compared_with.startswith("parent ")
    assert [e.report.status for e in others] == ["miss", "miss"]
    for event in others:
        assert event.report.reasons == ("launched_before_cache",)
        assert event.report.compared_with == f"fork {leader.agent_id}'s shared prefix"


async def test_an_expired_entry_is_reported_as_ttl_expiry(tmp_path: Path) -> None:
    clock = VirtualClock()
    model = EmulatorModel("claude-sonnet-4-6", Emulator(clock=clock), diagnostics=True)
    monitor = CacheMonitor(profiles={model.name: model.profile}, clock=clock)

    async with agent(model, tmp_path, monitor).session() as session:
        await session.send(PLAN)
        clock.advance(301)
        await session.send("Continue.")

    (miss,) = monitor.misses()
    assert miss.report.reasons == ("ttl_expired",)
    assert miss.report.read_tokens == 0


async def test_a_prompt_below_the_models_minimum_is_named_as_the_cause(tmp_path: Path) -> None:
    model = EmulatorModel("claude-haiku-4-5", Emulator())  # 4,096-token minimum
    events: list[Event] = []

    async with agent(model, tmp_path, events.append).session() as session:
        await session.send("Hello.")
        await session.send("Again.")
        await session.fork(["one", "two"])

    seen = reports(events)
    assert seen[0].report.reasons == ("below_minimum",)  # the cold request warns
    misses = [e for e in seen if e.report.status == "miss"]
    assert len(misses) == 3
    assert {m.report.reasons for m in misses} == {("below_minimum",)}
    assert "below the minimum of 4,096" in misses[0].report.summary
