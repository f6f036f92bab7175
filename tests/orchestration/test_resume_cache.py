"""A resumed agent's first cache report continues from the request it sent before.

The runs talk to one in-process emulator on a virtual clock, so the cache the
first session wrote is there for the resumed one, or has expired once the
clock moves past its five minutes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from forkagent import Agent, Session
from forkagent.emulator import Emulator, use_emulator
from forkagent.emulator.timing import VirtualClock
from forkagent.events import CacheReported, Event
from forkagent.messages import assistant, user
from forkagent.state.transcript import (
    TranscriptHeader,
    TranscriptWriter,
    read_transcript,
    transcript_path,
)

MODEL = "emulator:claude-sonnet-4-6"
PROMPT = "Review this code.\n" + "def f(x):\n    return x * 2\n" * 300
"""Long enough (~3k tokens) that losing the messages' cache is a miss."""
RESUMED = "the agent's request before the resume"


@pytest.fixture
def clock() -> Iterator[VirtualClock]:
    clock = VirtualClock()
    with use_emulator(Emulator(clock=clock)):
        yield clock


def make_agent(cwd: Path, events: list[Event] | None = None) -> Agent:
    listeners = () if events is None else (events.append,)
    return Agent(model=MODEL, cwd=cwd, load_agent_files=False, registry=False, listeners=listeners)


async def run_once(cwd: Path) -> Path:
    """Run one prompt to the end; the main agent's transcript."""
    result = await make_agent(cwd).run(PROMPT)
    root = result.agents[0].id
    return transcript_path(root, root)


async def resume_and_send(cwd: Path, path: Path) -> list[CacheReported]:
    events: list[Event] = []
    async with Session.resume(make_agent(cwd, events), path) as session:
        await session.send("Continue.")
    return [e for e in events if isinstance(e, CacheReported)]


def written_earlier(path: Path, seconds: float) -> None:
    """Date every line ``seconds`` back, as if the run had ended that long ago."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        line["at"] = (datetime.fromisoformat(line["at"]) - timedelta(seconds=seconds)).isoformat()
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


async def test_right_after_a_run_the_resumed_request_hits_the_previous_ones_cache(
    tmp_path: Path, clock: VirtualClock
) -> None:
    path = await run_once(tmp_path)

    (report, *_) = await resume_and_send(tmp_path, path)

    assert report.report.status == "hit"
    assert report.report.compared_with == RESUMED
    assert report.report.read_tokens >= report.report.expected_tokens > 2000
    assert read_transcript(path).cache_entries[-1].report["compared_with"] == RESUMED


async def test_a_pause_past_the_ttl_is_reported_as_expiry(
    tmp_path: Path, clock: VirtualClock
) -> None:
    path = await run_once(tmp_path)
    written_earlier(path, 600)
    clock.advance(600)  # the emulator drops the entry as a provider would

    (report, *_) = await resume_and_send(tmp_path, path)

    assert report.report.status == "miss"
    assert report.report.reasons == ("ttl_expired",)
    assert report.report.compared_with == RESUMED


async def test_an_agent_resumed_before_any_answer_starts_cold(
    tmp_path: Path, clock: VirtualClock
) -> None:
    path = transcript_path("main-0-abc123", "main-0-abc123")
    header = TranscriptHeader(
        agent_id="main-0-abc123", root_id="main-0-abc123", model=MODEL, cwd=str(tmp_path)
    )
    with TranscriptWriter(path) as writer:
        writer.header(header)
        writer.message(user(PROMPT))  # killed while its first request was out

    events: list[Event] = []
    async with Session.resume(make_agent(tmp_path, events), path) as session:
        await session.proceed()

    (report,) = [e.report for e in events if isinstance(e, CacheReported)]
    assert report.status == "cold"
    assert report.compared_with is None


def test_the_last_request_is_replayed_as_sent_not_as_the_history_ends(tmp_path: Path) -> None:
    """A message replaced before the answer counts; one cut or replaced after it does not."""
    prompt, reply, results, merged, answer = (
        user("go"),
        assistant("reading"),
        user("results"),
        user("results + a notification"),
        assistant("done"),
    )
    path = tmp_path / "main.jsonl"
    with TranscriptWriter(path) as writer:
        writer.header(TranscriptHeader(agent_id="m", root_id="m", model=MODEL, cwd="/"))
        writer.sync([prompt, reply, results])
        writer.sync([prompt, reply, merged])  # a replacement line
        writer.sync([prompt, reply, merged, answer])
        writer.sync([prompt, reply])  # a truncate line
        writer.sync([prompt, reply, user("something else")])

    transcript = read_transcript(path)
    sent = transcript.last_answered()

    assert sent is not None
    assert sent.messages == (prompt, reply, merged)
    assert sent.messages != transcript.messages[:3]
    assert sent.at == transcript.entries[4].at  # the line of the answer "done"
