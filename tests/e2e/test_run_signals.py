"""``forkagent run`` ended by Ctrl-C, SIGTERM or SIGHUP (issue 15, item 4).

The CLI runs in a subprocess against the emulator over HTTP; the scripted
model starts a Bash command that leaves a long-lived child. The signal ends
the run: no process of the command survives, the main agent's row and
transcript say ``interrupted``, and the CLI exits 128 + the signal's number
after printing the command that resumes the agent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkagent import Agent
from forkagent.emulator import Emulator, Latency, Reply, ToolCall, serve
from forkagent.state.registry import Registry
from forkagent.state.transcript import read_transcript


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    emulator = Emulator(latency=Latency(ttft=0.01, tokens_per_second=5000))
    with serve(emulator) as running:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", running.url)
        yield emulator


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (a container's init may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _wait_for_pid(path: Path, child: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return int(text)
        if child.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"the Bash command never started: {child.communicate()[0]!r}")


def _ended_by(child: subprocess.Popen[bytes], signum: signal.Signals) -> str:
    """Send the signal and return the run's output once it has ended; if it is still running
    a minute later, fail with the stacks of its threads (faulthandler's answer to SIGABRT)."""
    child.send_signal(signum)
    try:
        return child.communicate(timeout=60)[0].decode()
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)
        stacks = child.communicate()[0].decode(errors="replace")
        raise AssertionError(f"the run outlived {signum.name} by a minute:\n{stacks}") from None


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_run_kills_its_tools_and_records_interrupted(
    emulator: Emulator, tmp_path: Path, signum: signal.Signals
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    command = f"sleep 300 & echo $! > {pid_file}; wait"
    emulator.script(Reply(text="Working.", tool_calls=(ToolCall("Bash", {"command": command}),)))
    # -X faulthandler: a run that outlives the signal shows where it is stuck (_ended_by).
    run = [sys.executable, "-X", "faulthandler", "-m", "forkagent", "run", "go"]
    run += ["--cwd", str(tmp_path), "--model", "anthropic:claude-sonnet-4-6"]
    run += ["--permission-mode", "bypass"]
    child = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        sleeper = _wait_for_pid(pid_file, child)
        output = _ended_by(child, signum)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()

    assert child.returncode == 128 + signum
    (main,) = [r for r in Registry().list() if r.kind == "main"]
    assert f"forkagent resume {main.id}" in output
    assert not _alive(sleeper)
    assert main.status == "interrupted"
    assert main.transcript is not None
    status = read_transcript(main.transcript).status
    assert status is not None
    assert status.status == "interrupted"


def test_the_sweep_at_start_marks_a_killed_run_lost(emulator: Emulator, tmp_path: Path) -> None:
    """After kill -9 nothing runs in the dead process: the next start marks its rows lost."""
    pid_file = tmp_path / "sleeper.pid"
    command = f"echo $$ > {pid_file}; sleep 300"
    emulator.script(Reply(text="Working.", tool_calls=(ToolCall("Bash", {"command": command}),)))
    run = [sys.executable, "-m", "forkagent", "run", "go", "--cwd", str(tmp_path)]
    run += ["--model", "anthropic:claude-sonnet-4-6", "--permission-mode", "bypass"]
    child = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        shell = _wait_for_pid(pid_file, child)
        child.kill()
        child.communicate()
    finally:
        os.killpg(
            shell, signal.SIGKILL
        )  # kill -9 leaves tools running: nobody is left to stop them

    Agent(model="test:echo", cwd=tmp_path, load_agent_files=False).run_sync("next run")

    killed = [r for r in Registry().list() if r.pid == child.pid]
    assert [r.status for r in killed] == ["lost"]
