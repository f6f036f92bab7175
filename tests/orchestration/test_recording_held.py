"""A fork's lines after its response, held by the recorder and handed over in one append.

The usage, cache report, reply and final status of a fork come one after another in one
step of its task; the recorder holds them and appends them together when the agent
finishes, when another agent's line comes, or at the end of the loop's turn. These tests
hold that path to the one that appends each line at once: the same lines, in the same
order, and nothing held past the turn.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from forkagent import Agent, RuntimeOptions
from forkagent._orchestration.budget import Budget
from forkagent._orchestration.loop import AgentRun
from forkagent._orchestration.recording import Recorder
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.events import AgentStarted, ResponseReceived
from forkagent.messages import assistant, user
from forkagent.models.base import ModelResponse
from forkagent.models.emulator import EmulatorModel
from forkagent.models.function import ScriptedModel
from forkagent.requests import ModelSettings
from forkagent.state._appends import BackgroundAppends
from forkagent.state.transcript import flush_transcripts, read_transcript, transcript_path
from forkagent.usage import Usage

FORKS = 5
TIMES = {"at", "seconds"}


async def _forks(cwd: Path) -> tuple[str, list[str]]:
    """A main agent answers, then forks ``FORKS`` background children; their ids."""
    agent = Agent(
        model=EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY)),
        cwd=cwd,
        options=RuntimeOptions(max_agents=FORKS, resume_on_notification=False),
        load_agent_files=False,
    )
    async with agent.session() as session:
        await session.send("Plan the work.")
        tasks = await session.fork([f"Do task {n}." for n in range(FORKS)], background=True)
        for task in tasks:
            assert (await task.wait()).status == "completed"
        return session.root.id, [task.id for task in tasks]


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _lines(path: Path, names: dict[str, str]) -> list[dict[str, object]]:
    """The file's lines without their times (and a request's seconds), each run's ids and
    folder named alike."""
    text = path.read_text()
    for name, alike in names.items():
        text = text.replace(name, alike)
    lines = [json.loads(line) for line in text.splitlines()]
    return [{key: value for key, value in line.items() if key not in TIMES} for line in lines]


async def test_a_forks_lines_held_to_its_finish_are_the_lines_appended_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    appends: Counter[str] = Counter()
    append = BackgroundAppends.append

    def counted(
        self: BackgroundAppends, path: str, data: bytes, *, fsync: bool, create: bool
    ) -> None:
        appends[path] += 1
        append(self, path, data, fsync=fsync, create=create)

    monkeypatch.setattr(BackgroundAppends, "append", counted)
    runs = {"held": await _forks(_folder(tmp_path / "held"))}
    monkeypatch.setattr(Recorder, "_hold", lambda *_: None)  # every line appended at once
    runs["apart"] = await _forks(_folder(tmp_path / "apart"))

    written: dict[str, list[list[dict[str, object]]]] = {}
    for way, (root, forks) in runs.items():
        names = {root: "root", str(tmp_path / way): "cwd"}
        names |= {fork: f"fork {n}" for n, fork in enumerate(forks)}
        paths = [transcript_path(root, fork) for fork in forks]
        written[way] = [_lines(path, names) for path in paths]
        per_fork = [appends[str(path)] for path in paths]
        # The start (header, directive, "running") is one append; the rest one more, held.
        assert per_fork == [2 if way == "held" else 5] * FORKS
    assert written["held"] == written["apart"]
    types = [line["type"] for line in written["held"][0]]
    assert types == ["header", "message", "status", "usage", "cache", "message", "status"]


async def test_lines_held_when_the_turn_ends_leave_with_it_and_before_a_forks_header(
    tmp_path: Path,
) -> None:
    """An agent that has not finished: its usage line waits for nothing but the turn's end,
    and a fork started before that end first hands it over (its header counts that line)."""
    run = AgentRun(
        id="main-0-held",
        model=ScriptedModel([], name="claude-sonnet-4-6"),
        system="Be brief.",
        tools=(),
        tool_specs=(),
        settings=ModelSettings(),
        cwd=tmp_path,
        budget=Budget(),
        messages=[user("Plan the work.")],
    )
    child = AgentRun(
        id="fork-1-held",
        parent_id=run.id,
        kind="fork",
        is_fork=True,
        model=run.model,
        system=run.system,
        tools=(),
        tool_specs=(),
        settings=ModelSettings(),
        cwd=tmp_path,
        budget=Budget(),
        messages=[user("Plan the work."), assistant("Planned."), user("Do task 1.")],
    )
    recorder = Recorder({run.id: run, child.id: child}, run.id, registry=None)
    recorder(AgentStarted(run.id, None, "main", "", background=False))
    response = ModelResponse(
        message=assistant("Planned."), usage=Usage(input_tokens=3, output_tokens=2)
    )
    path = transcript_path(run.id, run.id)

    recorder(ResponseReceived(run.id, 1, response, seconds=0.5))
    await asyncio.sleep(0)  # the turn ends
    flush_transcripts()
    assert [line["type"] for line in _lines(path, {})][-1] == "usage"

    run.messages.append(response.message)
    recorder._sync(run)  # held: the agent goes on
    recorder(AgentStarted(child.id, run.id, "fork", "Do task 1.", background=True))
    flush_transcripts()
    assert [line["type"] for line in _lines(path, {})][-1] == "message"
    header = read_transcript(transcript_path(run.id, child.id)).header
    assert header.history_from is not None
    assert header.history_from.lines == 4  # the prompt, "running", usage, and the held reply
    await asyncio.sleep(0)
    recorder.close()
    assert read_transcript(transcript_path(run.id, child.id)).messages == tuple(child.messages)
