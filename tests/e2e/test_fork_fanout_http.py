"""Forks on the emulator over HTTP through the official anthropic SDK (issue 6's end-to-end run).

A parent with a ~20k-token history forks five children. With fan-out
scheduling the first child goes alone and the others are released once its
response has begun, so each sibling reads its whole shared prefix from the
cache (CACHING.md, Anthropic concurrency rule). With scheduling off, the five
first requests leave together and the request log shows their misses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator, Fault, Latency, serve
from forkagent.emulator.server import RunningServer
from forkagent.models.anthropic import AnthropicModel
from forkagent.models.base import Model
from forkagent.requests import ModelSettings

MODEL = "claude-sonnet-4-6"
DIRECTIVES = [f"Review part {n} of the module and report." for n in range(1, 6)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, RunningServer]]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    emulator = Emulator(latency=Latency(ttft=0.05, tokens_per_second=5000))
    with serve(emulator) as running:
        yield emulator, running


def _history_text() -> str:
    lines = [f"def function_{i}(value):\n    return value * {i} + {i % 7}\n" for i in range(1800)]
    return "Here is the module to review:\n\n" + "".join(lines)


async def _fork_five(model: Model, tmp_path: Path, fanout: str) -> tuple[list[str], str]:
    """Fork five children; their statuses and the label of the shared-prefix breakpoint."""
    agent = Agent(
        model=model,
        cwd=tmp_path,
        load_agent_files=False,
        settings=ModelSettings(max_tokens=256),
        options=RuntimeOptions(fanout=fanout),  # type: ignore[arg-type]
    )
    try:
        async with agent.session() as session:
            await session.send(_history_text())
            assert session.root.last_usage is not None
            assert session.root.last_usage.prompt_tokens > 20_000
            tasks = await session.fork(DIRECTIVES)
            end = tasks[0].run.shared_prefix_end
            assert end is not None
            label = f"messages[{end.message}].content[{end.block}]"
            return [task.status for task in tasks], label
    finally:
        await model.aclose()


def _shared_outcomes(emulator: Emulator, label: str) -> list[tuple[str, str | None]]:
    """Per child first request: what happened at the shared-prefix breakpoint, and why."""
    children = [e for e in emulator.log if e.usage is not None][-5:]
    return [(b.status, b.reason) for e in children for b in e.breakpoints if b.label == label]


@pytest.mark.parametrize("fanout", ["auto", "prewarm"])
async def test_with_fanout_siblings_read_the_prefix_the_first_child_wrote(
    server: tuple[Emulator, RunningServer], tmp_path: Path, fanout: str
) -> None:
    emulator, running = server
    statuses, label = await _fork_five(
        AnthropicModel(MODEL, base_url=running.url), tmp_path, fanout
    )

    assert statuses == ["completed"] * 5
    outcomes = _shared_outcomes(emulator, label)
    assert [status for status, _ in outcomes].count("read") >= 4, outcomes
    children = [e for e in emulator.log if e.usage is not None][-4:]
    for entry in children:
        usage = entry.usage
        assert usage is not None
        assert usage.cache_read_tokens >= 0.99 * (usage.prompt_tokens - usage.cache_write_tokens)
        assert usage.cache_read_tokens > 20_000


async def test_without_fanout_the_siblings_miss_because_the_entry_was_not_yet_visible(
    server: tuple[Emulator, RunningServer], tmp_path: Path
) -> None:
    emulator, running = server
    _, label = await _fork_five(AnthropicModel(MODEL, base_url=running.url), tmp_path, "off")

    outcomes = _shared_outcomes(emulator, label)
    assert [status for status, _ in outcomes] == ["written"] * 5
    assert [reason for _, reason in outcomes].count("not_yet_visible") >= 4


async def test_a_leader_whose_stream_is_cut_after_output_began_is_sent_again(
    server: tuple[Emulator, RunningServer], tmp_path: Path
) -> None:
    """The first child's reply breaks off mid-stream: the family still completes."""
    emulator, running = server
    model = AnthropicModel(MODEL, base_url=running.url)
    agent = Agent(model=model, cwd=tmp_path, load_agent_files=False, builtin_tools=False)
    try:
        async with agent.session() as session:
            await session.send(_history_text())
            emulator.faults.inject(Fault("cut_stream", after_events=4))  # the leader's request
            tasks = await session.fork(DIRECTIVES[:3])
    finally:
        await model.aclose()

    assert [task.status for task in tasks] == ["completed"] * 3
    assert [e.fault for e in emulator.log].count("cut_stream") == 1
