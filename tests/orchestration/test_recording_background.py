"""A burst of background forks at the default settings: every record is whole once the session ends.

Transcript lines and registry rows go out to a helper process, so that the event
loop never waits on the disk; these tests hold them to what a synchronous writer
would have left on disk.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from forkagent import Agent, ForkParams, RuntimeOptions, Session
from forkagent._orchestration.recording import header_for
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.models.emulator import EmulatorModel
from forkagent.permissions.record import policy_record
from forkagent.state.registry import Registry
from forkagent.state.transcript import (
    StatusEntry,
    TranscriptError,
    TranscriptHeader,
    UsageEntry,
    flush_transcripts,
    read_transcript,
    transcript_path,
)

FORKS = 120


def _agent(tmp_path: Path) -> Agent:
    return Agent(
        model=EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY)),
        cwd=tmp_path,
        options=RuntimeOptions(max_agents=FORKS, resume_on_notification=False),
        registry=Registry(tmp_path / "registry.db"),
        load_agent_files=False,
    )


async def test_every_background_fork_leaves_a_whole_transcript_and_a_final_row(
    tmp_path: Path,
) -> None:
    agent = _agent(tmp_path)
    async with agent.session() as session:
        await session.send("Plan the work.")
        root = session.root.id
        tasks = await session.fork([f"Do task {n}." for n in range(FORKS)], background=True)
        results = [await task.wait() for task in tasks]
    assert all(result.status == "completed" for result in results)

    rows = {row.id: row for row in Registry(tmp_path / "registry.db").list(limit=None)}
    for task, result in zip(tasks, results, strict=True):
        transcript = read_transcript(transcript_path(root, task.id))
        assert transcript.header.parent_id == root
        assert transcript.header.history_from is not None  # one header, pointing at the parent
        statuses = [e.status for e in transcript.entries if isinstance(e, StatusEntry)]
        assert statuses == ["running", "completed"]
        assert transcript.messages[-1].text == result.output
        assert sum(isinstance(e, UsageEntry) for e in transcript.entries) == 1
        assert transcript.usage == result.usage
        assert not transcript.torn_tail
        assert rows[task.id].status == "completed"
        assert rows[task.id].turns == 1


async def test_a_resumed_tree_continues_its_transcripts_and_new_forks_get_new_files(
    tmp_path: Path,
) -> None:
    agent = _agent(tmp_path)
    async with agent.session() as session:
        await session.send("Plan the work.")
        root = session.root.id
        first = await session.fork(["Do task 1."], background=True)
        await first[0].wait()
    path = transcript_path(root, root)
    before = read_transcript(path)

    async with Session.resume(_agent(tmp_path), path) as resumed:
        await resumed.send("Go on.")
        later = await resumed.fork(["Do task 2."], background=True)
        await later[0].wait()

    after = read_transcript(path)
    assert after.messages[: len(before.messages)] == before.messages
    assert len(after.messages) > len(before.messages)
    assert sum(isinstance(e, StatusEntry) and e.status == "running" for e in after.entries) == 2
    fork = read_transcript(transcript_path(root, later[0].id))
    assert fork.header.history_from is not None
    assert fork.header.history_from.agent_id == root


async def test_a_transcript_that_loses_lines_ends_there_and_closing_the_session_says_so(
    tmp_path: Path,
) -> None:
    """The tree's folder vanishes under a running session: the agents' work goes on and is
    returned, but the session does not end as if every record were whole."""
    agent = Agent(
        model=EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY)),
        cwd=tmp_path,
        options=RuntimeOptions(max_agents=FORKS, resume_on_notification=False),
        registry=False,
        load_agent_files=False,
    )
    session = agent.session()
    await session.send("Plan the work.")
    folder = transcript_path(session.root.id, session.root.id).parent
    flush_transcripts()
    shutil.rmtree(folder)
    tasks = await session.fork([f"Do task {n}." for n in range(20)], background=True)
    results = [await task.wait() for task in tasks]
    assert all(result.status == "completed" for result in results)
    assert (await session.send("Go on.")).status == "completed"
    with pytest.raises(TranscriptError, match="a line could not be written"):
        await session.aclose()


async def test_a_transcript_removed_during_the_session_is_a_loss_not_a_new_headless_file(
    tmp_path: Path,
) -> None:
    """The main agent's file is deleted between two turns (its writer's file may still be
    open): the turn runs, and closing says the transcript lost lines."""
    agent = Agent(
        model=EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY)),
        cwd=tmp_path,
        options=RuntimeOptions(resume_on_notification=False),
        registry=False,
        load_agent_files=False,
    )
    session = agent.session()
    await session.send("Plan the work.")
    path = transcript_path(session.root.id, session.root.id)
    flush_transcripts()
    path.unlink()
    assert (await session.send("Go on.")).status == "completed"
    with pytest.raises(TranscriptError, match="a line could not be written"):
        await session.aclose()
    assert not path.exists()


LABELS = ('say "hi"\nthen é ✓ \\ end\t🙂', "\x00\x1f\x7f control", "</script>\u2028", "")


async def test_a_familys_headers_are_each_childs_own_and_what_the_run_makes(
    tmp_path: Path,
) -> None:
    """Siblings' headers come from one template (their family's fields serialized once):
    each child's line still reads back as the header built from its own run, awkward
    labels and all, and a later family does not reuse the first one's history reference."""
    agent = _agent(tmp_path)
    async with agent.session() as session:
        await session.send("Plan the work.")
        root = session.root.id
        directives = [ForkParams(f"Do task {n}.", label=label) for n, label in enumerate(LABELS)]
        first = await session.fork(directives, background=True)
        await asyncio.gather(*(task.wait() for task in first))
        await session.send("Go on.")
        later = await session.fork(["One more."], background=True)
        await later[0].wait()
        flush_transcripts()
        main = read_transcript(transcript_path(root, root)).header
        written = {
            task.id: transcript_path(root, task.id).read_bytes().split(b"\n")[0]
            for task in (*first, *later)
        }

    for task in (*first, *later):
        header = TranscriptHeader.model_validate_json(written[task.id])
        assert header.history_from is not None
        built = header_for(
            task.run,
            root_id=root,
            background=True,
            history_from=header.history_from,
            extra={"permissions": policy_record(task.run.policy, False)},
        )
        assert header == built.model_copy(update={"at": header.at})
        whole = read_transcript(transcript_path(root, task.id)).header
        assert (whole.system, whole.tools) == (main.system, main.tools)
    assert [TranscriptHeader.model_validate_json(written[t.id]).label for t in first] == [
        label or f"Do task {n}." for n, label in enumerate(LABELS)
    ]
    points = []
    for task in (*first, *later):
        reference = TranscriptHeader.model_validate_json(written[task.id]).history_from
        assert reference is not None
        points.append((reference.messages, reference.lines))
    assert points == [(2, 6)] * len(LABELS) + [(4, 12)]
