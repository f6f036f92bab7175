"""A run killed with SIGKILL mid-tool, then resumed from its transcript (issue 8).

The agent runs in a subprocess against the emulator over HTTP. It is killed
while a tool call is in flight; the resumed session answers that call, sends
the same rendered prompt, tools and history, reads its prefix from the cache
the dead process wrote, and says so in its cache report.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkagent import Agent, RunResult, Session
from forkagent.emulator import Emulator, Latency, Reply, ToolCall, serve
from forkagent.emulator.server import RunningServer
from forkagent.messages import ToolResultBlock, UserMessage
from forkagent.state.registry import Registry
from forkagent.state.transcript import read_transcript

MODEL = "anthropic:claude-sonnet-4-6"
CHILD = """
import asyncio, sys
from forkagent import Agent
prompt = "Summarise these notes. " + " ".join(f"note {i} is about item {i * 7}." for i in range(900))
asyncio.run(Agent(model=sys.argv[2], cwd=sys.argv[1], load_agent_files=False).run(prompt))
"""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, RunningServer]]:
    emulator = Emulator(latency=Latency(ttft=0.01, tokens_per_second=5000))
    with serve(emulator) as running:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", running.url)
        yield emulator, running


def _wait_for(condition: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the child process")


def _main_transcript() -> Path | None:
    records = [r for r in Registry().list() if r.kind == "main"]
    return records[0].transcript if records else None


def _has_tool_call(path: Path | None) -> bool:
    return path is not None and path.exists() and len(read_transcript(path).messages) >= 2


async def _proceed(path: Path) -> RunResult:
    async with Session.resume(Agent(load_agent_files=False), path) as session:
        return await session.proceed()


def test_a_killed_run_resumes_from_its_transcript_and_hits_the_cache(
    server: tuple[Emulator, RunningServer], tmp_path: Path
) -> None:
    emulator, _ = server
    emulator.script(
        Reply(text="Checking.", tool_calls=(ToolCall("Bash", {"command": "sleep 60"}),))
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), MODEL], env=os.environ.copy()
    )
    try:
        _wait_for(lambda: _has_tool_call(_main_transcript()))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    path = _main_transcript()
    assert path is not None
    before = read_transcript(path)
    assert not before.finished
    first = emulator.log[0].usage
    assert first is not None

    result = asyncio.run(_proceed(path))

    assert result.status == "completed"
    answered = [
        b
        for m in result.messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert len(answered) == 1
    assert answered[0].is_error  # the call the kill interrupted is closed, not re-run
    resumed = emulator.log[-1].usage
    assert resumed is not None
    assert resumed.cache_read_tokens >= 0.99 * first.prompt_tokens
    assert len(emulator.log) == 2  # nothing was sent twice
    after = read_transcript(path)
    assert after.finished
    report = after.cache_entries[-1].cache_report()
    assert report is not None  # explained against the dead process's request, not "cold"
    assert (report.status, report.compared_with) == ("hit", "the agent's request before the resume")
