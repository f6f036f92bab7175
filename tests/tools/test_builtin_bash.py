# Tests read and write their small fixture files directly; blocking there is harmless.
# ruff: noqa: ASYNC240
from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from forkagent.errors import ToolError
from forkagent.messages import JsonValue
from forkagent.tools import ToolContext
from forkagent.tools.builtin import Bash

Run = Callable[..., Awaitable[str]]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan may wait a moment for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def gone(pid: int) -> bool:
    for _ in range(250):
        if not running(pid):
            return True
        await asyncio.sleep(0.02)
    return False


async def pid_from(path: Path) -> int:
    """The pid the command wrote to ``path``, once it has."""
    for _ in range(500):
        if path.exists() and path.read_text().strip():
            break
        await asyncio.sleep(0.01)
    return int(path.read_text())


async def test_runs_in_the_cwd_with_interleaved_output(tmp_path: Path, run: Run) -> None:
    out = await run(Bash(), command="pwd; echo to-err >&2; echo to-out", description="where")
    assert out.splitlines() == [str(tmp_path), "to-err", "to-out", "[Exit code 0]"]


async def test_nonzero_exit_is_a_normal_result(run: Run) -> None:
    assert await run(Bash(), command="echo failing; exit 3") == "failing\n[Exit code 3]"


async def test_no_output(run: Run) -> None:
    assert await run(Bash(), command="true") == "(no output)\n[Exit code 0]"


async def test_killed_by_a_signal(run: Run) -> None:
    assert await run(Bash(), command="kill -KILL $$") == "(no output)\n[Killed by signal 9.]"


async def test_stdin_is_empty(run: Run) -> None:
    assert await run(Bash(), command="cat; echo done") == "done\n[Exit code 0]"


async def test_output_is_capped_keeping_start_and_end(run: Run) -> None:
    out = await run(Bash(max_output_bytes=1000), command="seq 1 100000")
    assert out.startswith("1\n2\n3\n")
    assert out.endswith("99999\n100000\n[Exit code 0]")
    assert "bytes cut here: output is capped at 1000 bytes" in out
    assert len(out) < 1300


async def test_timeout_kills_the_process_group(tmp_path: Path, run: Run) -> None:
    out = await run(Bash(), command="sleep 100 & echo $! > pid; wait", timeout=300)
    assert out == (
        "(no output)\n[Timed out after 0.3 s; the command and every process it started "
        "were killed.]"
    )
    assert await gone(int((tmp_path / "pid").read_text()))


async def test_leftover_background_processes_are_killed(tmp_path: Path, run: Run) -> None:
    out = await run(Bash(), command="sleep 100 & echo $!")
    assert await gone(int(out.splitlines()[0]))


async def test_a_detached_process_cannot_hold_the_call(tmp_path: Path, run: Run) -> None:
    detach = "setsid bash -c 'echo $$ > pid; exec sleep 30' &"
    out = await run(Bash(), command=f"{detach} until [ -s pid ]; do sleep 0.01; done; cat pid")
    pid = int(out.splitlines()[0])
    try:
        assert "[Stopped reading: a detached process still holds the output open.]" in out
        assert out.endswith("[Exit code 0]")
    finally:
        os.kill(pid, signal.SIGKILL)


async def test_cancellation_kills_the_group_and_propagates(
    tmp_path: Path, ctx: ToolContext
) -> None:
    task = asyncio.create_task(Bash().call({"command": "sleep 100 & echo $! > pid; wait"}, ctx))
    pid = await pid_from(tmp_path / "pid")
    task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await gone(pid)


async def test_missing_cwd_fails_to_start(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"working directory .*nowhere does not exist"):
        await Bash().call({"command": "true"}, ToolContext(cwd=tmp_path / "nowhere"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"command": "true", "timeout": 600_001}, "timeout: Input should be less than or equal"),
        ({"command": "true", "timeout": 0}, "timeout: Input should be greater than or equal"),
        ({"command": ""}, "command: String should have at least 1 character"),
        ({"command": "true", "run_in_background": True}, "run_in_background: Extra inputs"),
        ({}, "command: Field required"),
    ],
)
async def test_bad_arguments(ctx: ToolContext, args: dict[str, JsonValue], message: str) -> None:
    with pytest.raises(ToolError, match=f"^invalid arguments: {message}"):
        await Bash().call(args, ctx)


async def test_a_cancel_while_bash_is_starting_still_kills_its_group(
    tmp_path: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spawn has happened, ``_start`` has not returned: the moment a cancel used to leak."""
    spawned: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    hold = asyncio.Event()
    real_spawn = asyncio.create_subprocess_exec

    async def spawn_then_hold(*args: object, **kwargs: object) -> asyncio.subprocess.Process:
        proc = await real_spawn(*args, **kwargs)  # type: ignore[arg-type]
        spawned.set_result(proc.pid)
        await hold.wait()  # bash exists, and the start is still in progress
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_then_hold)
    task = asyncio.create_task(Bash().call({"command": "sleep 100"}, ctx))
    pid = await spawned
    task.cancel()
    await asyncio.sleep(0)
    hold.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(pid)
