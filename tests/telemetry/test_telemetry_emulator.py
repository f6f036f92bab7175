"""Telemetry on real sessions against the in-process emulator."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from forkagent.agent import Agent
from forkagent.emulator import Emulator
from forkagent.emulator.timing import VirtualClock
from forkagent.models.emulator import EmulatorModel
from forkagent.telemetry import CacheMonitor, UsageRecorder


def agent(model: EmulatorModel, cwd: Path, *listeners: object) -> Agent:
    return Agent(
        model=model,
        listeners=listeners,  # type: ignore[arg-type]
        cwd=cwd,
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
    )


def watch(model: EmulatorModel, clock: VirtualClock | None = None) -> CacheMonitor:
    profiles = {model.name: model.profile}
    return (
        CacheMonitor(profiles=profiles)
        if clock is None
        else CacheMonitor(profiles=profiles, clock=clock)
    )


async def test_a_fork_family_reads_its_parents_cache_and_the_tree_adds_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = EmulatorModel("claude-sonnet-4-5", Emulator())
    monitor, recorder = watch(model), UsageRecorder()

    with caplog.at_level(logging.INFO, logger="forkagent.cache"):
        async with agent(model, tmp_path, monitor, recorder).session() as session:
            await session.send("Read the code and plan the review.")
            await session.send("Continue.")
            await session.fork(["review module A", "review module B", "review module C"])

    statuses = [e.report.status for e in monitor.reports()]
    assert statuses == ["cold", "hit", "hit", "hit", "hit"]
    assert [e.report.compared_with for e in monitor.reports()][3:] == [
        f"fork {monitor.reports()[2].agent_id}'s shared prefix"
    ] * 2
    assert not caplog.records
    root = recorder.tree()
    assert len(root.children) == 3
    assert root.total.requests == 5
    assert root.total.cache_read_tokens == sum(e.report.read_tokens for e in monitor.reports())
    assert root.cost_complete


async def test_an_expired_entry_is_reported_as_ttl_expiry(tmp_path: Path) -> None:
    clock = VirtualClock()
    model = EmulatorModel("claude-sonnet-4-5", Emulator(clock=clock), diagnostics=True)
    monitor = watch(model, clock)

    async with agent(model, tmp_path, monitor).session() as session:
        await session.send("Read the code and plan the review.")
        clock.advance(301)
        await session.send("Continue.")

    (miss,) = monitor.misses()
    assert miss.report.reasons == ("ttl_expired",)
    assert miss.report.read_tokens == 0


async def test_a_prompt_below_the_models_minimum_is_named_as_the_cause(tmp_path: Path) -> None:
    model = EmulatorModel("claude-haiku-4-5", Emulator())  # 4,096-token minimum
    monitor = watch(model)

    async with agent(model, tmp_path, monitor).session() as session:
        await session.send("Hello.")
        await session.send("Again.")
        await session.fork(["one", "two"])

    misses = monitor.misses()
    assert len(misses) == 3
    assert {m.report.reasons for m in misses} == {("below_minimum",)}
    assert "below the minimum of 4,096" in misses[0].report.summary
