"""Long sessions: compaction through a cache-sharing fork, forks across it, after-turn forks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent import Agent, CompactionError, ForkParams, Session
from forkagent.cli import app
from forkagent.emulator import Emulator, use_emulator
from forkagent.events import Compacted, Event
from forkagent.messages import UserMessage
from forkagent.permissions import MemoryDirFilter
from forkagent.requests import ModelRequest
from forkagent.state import CompactionEntry, read_transcript, transcript_path
from forkagent.testing import NOTIFICATION_TAG, FunctionModel

MODEL = "emulator:claude-sonnet-4-6"


def long_context() -> str:
    return "Background: " + " ".join(f"fact {n} about the shop's stock" for n in range(900))


async def test_a_long_session_compacts_through_a_fork_that_reads_the_cache() -> None:
    events: list[Event] = []
    with use_emulator(Emulator()):
        agent = Agent(model=MODEL, builtin_tools=False, compact_at=8_300, listeners=[events.append])
        async with agent.session() as session:
            await session.send(long_context())
            for step in range(6):
                await session.send(f"step {step}: check the next module")
            compacted = [e for e in events if isinstance(e, Compacted)]
            assert len(compacted) == 1
            done = compacted[0]
            assert done.messages_after < done.messages_before
            first = session.messages[0]
            assert isinstance(first, UserMessage)
            assert "<compacted-history>" in first.text
            after = await session.send("and now?")
            agents = session.result().agents
            root_id = session.root.id
    summary = next(a for a in agents if a.id == done.summary_agent)
    assert summary.kind == "fork"
    assert summary.label == "compaction"
    ratio = summary.usage.cache_hit_ratio
    assert ratio is not None
    assert ratio >= 0.9
    assert after.status == "completed"
    entries = read_transcript(transcript_path(root_id, root_id)).entries
    assert any(isinstance(e, CompactionEntry) for e in entries)


async def test_resume_continues_after_the_compaction() -> None:
    with use_emulator(Emulator()):
        agent = Agent(model=MODEL, builtin_tools=False, compact_at=None)
        async with agent.session() as session:
            await session.send(long_context())
            await session.send("one more")
            result = await session.compact()
            history = session.messages
            root_id = session.root.id
        assert result.messages_after < result.messages_before
        resumed = Session.resume(Agent(builtin_tools=False), transcript_path(root_id, root_id))
        async with resumed:
            assert resumed.messages == history
            answer = await resumed.send("continue")
        assert answer.status == "completed"
    logs = CliRunner().invoke(app, ["logs", root_id])
    assert logs.exit_code == 0
    assert "compacted" in logs.stdout


async def test_a_failed_summary_leaves_the_conversation_as_it_was() -> None:
    def fail_for_the_fork(request: ModelRequest) -> str:
        return "" if "Summarise the conversation" in request.messages[-1].text else "ok"

    agent = Agent(model=FunctionModel(fail_for_the_fork), builtin_tools=False, compact_at=None)
    async with agent.session() as session:
        await session.send("hello")
        before = session.messages
        with pytest.raises(CompactionError, match="unchanged"):
            await session.compact()
        assert session.messages == before


async def test_children_running_across_a_compaction_keep_their_history_and_report() -> None:
    release = asyncio.Event()

    async def model(request: ModelRequest) -> str:
        text = request.messages[-1].text
        if "slow job" in text and NOTIFICATION_TAG not in text:
            await release.wait()
            return "slow job done"
        return "noted"

    agent = Agent(model=FunctionModel(model), builtin_tools=False, compact_at=None)
    async with agent.session() as session:
        await session.send("start")
        [slow] = await session.fork(["slow job"], background=True)
        child_history = list(slow.run.messages)
        await session.compact()
        survivors = session.messages[0].text
        assert slow.id in survivors  # the summary says it is still running
        [later] = await session.fork(["after the compaction"])
        assert later.run.messages[0] is session.messages[0]  # new forks share the new prefix
        release.set()
        await slow.wait()
        await session.idle()
        assert slow.run.messages[: len(child_history)] == child_history
        assert any(
            NOTIFICATION_TAG in m.text for m in session.messages if isinstance(m, UserMessage)
        )


async def test_the_recursion_guard_holds_in_a_compacted_fork_child() -> None:
    from forkagent._orchestration.compaction import compact
    from forkagent.errors import ToolError
    from forkagent.tools.spawn import SpawnRequest

    async with Agent(model=FunctionModel(lambda _: "ok"), builtin_tools=False).session() as session:
        await session.send("go")
        [child] = await session.fork(["part one"])
        result = await compact(child.run, keep_tokens=0)
        assert result.messages_after <= result.messages_before
        for request in (SpawnRequest("x", fork=True), SpawnRequest("x", subagent_type="Explore")):
            with pytest.raises(ToolError, match="forked child"):
                await session._runtime.spawn(child.run, request)


async def test_after_turn_forks_run_in_the_background_and_count_in_the_usage(
    tmp_path: Path,
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()

    def consolidate(session: Session[str]) -> ForkParams:
        return ForkParams(
            "consolidate what you learned into the memory directory",
            label="memory",
            max_turns=3,
            tool_filter=MemoryDirFilter(memory),
        )

    agent = Agent(model="test:echo", cwd=tmp_path, after_turn=[consolidate])
    async with agent.session() as session:
        await session.send("remember that the shop opens at nine")
        [handle] = session.after_turn_handles
        assert handle.task.label == "memory"
        result = await handle.wait()
        assert result.status == "completed"
        agents = session.result().agents
        assert NOTIFICATION_TAG not in "".join(
            m.text for m in session.messages if isinstance(m, UserMessage)
        )
    assert any(a.label == "memory" and a.usage.requests >= 1 for a in agents)


def test_resume_compact_on_the_command_line() -> None:
    async def first_run() -> str:
        with use_emulator(Emulator()):
            agent = Agent(model=MODEL, builtin_tools=False, compact_at=None)
            async with agent.session() as session:
                await session.send(long_context())
                await session.send("one more")
                return session.root.id

    root_id = asyncio.run(first_run())
    result = CliRunner().invoke(app, ["resume", root_id, "carry on", "--compact"])
    assert result.exit_code == 0, result.output
    assert "compacted" in result.stderr
    transcript = read_transcript(transcript_path(root_id, root_id))
    assert any(isinstance(e, CompactionEntry) for e in transcript.entries)
