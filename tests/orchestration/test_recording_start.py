"""A fork's start in one append, and its tree's folder made once.

Each of these paths replaces several calls per fork on the event loop; each test holds it
to what the general path writes (the same lines but for their times, in the same order).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkagent import Agent, RuntimeOptions
from forkagent._orchestration import recording
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.history import History
from forkagent.messages import AssistantMessage, TextBlock, UserMessage
from forkagent.models.emulator import EmulatorModel
from forkagent.state import transcript
from forkagent.state._append_helper import OpenFiles
from forkagent.state.transcript import (
    HeaderTemplate,
    StatusEntry,
    TranscriptError,
    TranscriptHeader,
    TranscriptWriter,
    read_transcript,
    transcript_path,
)

HEADER = TranscriptHeader(agent_id="fork-0", root_id="root", model="claude-sonnet-4-6", cwd="/w")


def _conversation() -> list[UserMessage | AssistantMessage]:
    return [
        UserMessage(content=(TextBlock(text="Plan the work."),)),
        AssistantMessage(content=(TextBlock(text="Planned."),)),
        UserMessage(content=(TextBlock(text="Do task 1."),)),
    ]


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _without_times(path: Path) -> list[dict[str, object]]:
    return [{k: v for k, v in line.items() if k != "at"} for line in _lines(path)]


@pytest.mark.parametrize("inherited", [0, 2, 3])
def test_a_start_in_one_append_writes_the_lines_a_header_and_a_status_would(
    tmp_path: Path, inherited: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``header_from(..., status=...)``: the header, the messages after ``inherited`` and the
    status line, byte for byte as written one call each but for their times (in order), in
    one append."""
    appends: list[bytes] = []
    real_append = OpenFiles.append

    def counted(self: OpenFiles, path: str, data: bytes, *, fsync: bool, create: bool) -> None:
        appends.append(data)
        real_append(self, path, data, fsync=fsync, create=create)

    monkeypatch.setattr(OpenFiles, "append", counted)
    template = HeaderTemplate(HEADER)
    history = History(_conversation()).snapshot()
    joined, apart = tmp_path / "joined.jsonl", tmp_path / "apart.jsonl"
    with TranscriptWriter(joined, new=True) as writer:
        writer.header_from(
            template, "fork-1", "x", history.prefix(inherited), history, status="running"
        )
        assert len(appends) == 1
        assert writer.lines == len(history) - inherited + 1
        assert writer.history == history
    with TranscriptWriter(apart) as writer:
        writer.header_from(template, "fork-1", "x", history.prefix(inherited), history)
        writer.status("running")
    assert _without_times(joined) == _without_times(apart)
    times = [str(line["at"]) for line in _lines(joined)]
    assert times == sorted(times)  # truthful: each line's own time, in the order written
    assert [line["type"] for line in _lines(joined)] == (
        ["header"] + ["message"] * (len(history) - inherited) + ["status"]
    )


def test_a_start_that_cannot_be_written_leaves_the_writer_without_a_header(
    tmp_path: Path,
) -> None:
    """The append fails (the folder is gone): the error is the writer's, and no header is
    taken as written."""
    folder = tmp_path / "tree"
    folder.mkdir()
    writer = TranscriptWriter(folder / "t.jsonl", new=True)
    shutil.rmtree(folder)
    history = History(_conversation()).snapshot()
    with pytest.raises(TranscriptError, match="could not be written"):
        writer.header_from(HeaderTemplate(HEADER), "fork-1", "x", (), history, status="running")
    assert not writer.header_written
    assert writer.lines == 0
    assert list(writer.history) == []


def test_a_writer_given_its_folder_does_not_ask_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``folder``: the caller made it; without it, the writer asks (and fails here)."""

    def refuse(folder: Path | str) -> None:
        raise AssertionError(f"asked for {folder}")

    monkeypatch.setattr(transcript, "make_state_dir", refuse)
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path, folder=str(tmp_path), new=True) as writer:
        writer.header(HEADER)
    assert read_transcript(path).header == HEADER
    with pytest.raises(AssertionError, match="asked for"):
        TranscriptWriter(tmp_path / "u.jsonl")


async def test_a_tree_makes_its_transcripts_folder_once_and_every_fork_starts_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder makes the tree's folder once, not once per agent; each fork's start
    (header, directive, "running") still reads back whole."""
    made: list[str] = []

    def counted(folder: Path | str) -> None:
        made.append(str(folder))
        transcript.make_state_dir(folder)

    monkeypatch.setattr(recording, "make_state_dir", counted)
    agent = Agent(
        model=EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY)),
        cwd=tmp_path,
        options=RuntimeOptions(max_agents=10, resume_on_notification=False),
        load_agent_files=False,
    )
    async with agent.session() as session:
        await session.send("Plan the work.")
        root = session.root.id
        tasks = await session.fork([f"Do task {n}." for n in range(6)], background=True)
        results = [await task.wait() for task in tasks]
    assert len(made) == 1
    for n, (task, result) in enumerate(zip(tasks, results, strict=True)):
        read = read_transcript(transcript_path(root, task.id))
        assert read.header.agent_id == task.id
        assert read.messages[-2].text.endswith(f"Do task {n}.")
        assert read.messages[-1].text == result.output
        statuses = [e.status for e in read.entries if isinstance(e, StatusEntry)]
        assert statuses == ["running", "completed"]


def test_a_writer_that_cannot_make_its_file_says_so_as_it_opens(tmp_path: Path) -> None:
    """An existing transcript's writer makes its file as it opens: a failure there is the
    same ``TranscriptError`` a line's would be (the link points into a missing folder)."""
    link = tmp_path / "t.jsonl"
    link.symlink_to(tmp_path / "missing" / "t.jsonl")
    with pytest.raises(TranscriptError, match="a line could not be written"):
        TranscriptWriter(link)
