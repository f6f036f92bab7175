"""Bash: run a shell command in the agent's cwd, in its own process group.

The group is what makes the command stoppable: on timeout, on cancellation and
when the command ends, every process it started is killed with it. Output goes
to a pipe this module owns, so a process that escaped the group and still holds
the pipe cannot keep the call waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import TypeAlias

from pydantic import Field

from ...errors import ToolError
from ..base import ArgsTool, ToolContext, ToolOutput
from ..environment import DEFAULT_POLICY, EnvironmentPolicy
from ._common import ToolArgs

MAX_TIMEOUT_MS = 600_000
_DRAIN_SECONDS = 1.0
"""How long to wait, after the group is gone, for a detached process to let go of the output."""


class BashArgs(ToolArgs):
    command: str = Field(min_length=1, description="The command, run with `bash -c`.")
    timeout: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_MS,
        description=f"Timeout in milliseconds, at most {MAX_TIMEOUT_MS}.",
    )
    description: str | None = Field(
        default=None, description="What the command does, in a few words, for the people watching."
    )


class Bash(ArgsTool):
    """A fresh ``bash -c`` per call: nothing (cwd, variables) carries over between calls."""

    name = "Bash"
    Args = BashArgs

    def __init__(
        self,
        *,
        max_output_bytes: int = 30_000,
        default_timeout_ms: int = 120_000,
        env_policy: EnvironmentPolicy = DEFAULT_POLICY,
    ) -> None:
        self.max_output_bytes = max_output_bytes
        self.default_timeout_ms = default_timeout_ms
        self.env_policy = env_policy
        self.description = (
            "Run a bash command in the working directory and return its stdout and stderr "
            "(interleaved) and exit code. Each call is a fresh shell with empty stdin. Timeout: "
            f"{default_timeout_ms // 1000} s by default, at most {MAX_TIMEOUT_MS // 1000} s. "
            f"Output over {max_output_bytes // 1000} KB keeps its start and end. Processes the "
            "command leaves running are killed when it ends; start one with "
            "`setsid CMD > LOG 2>&1 &` to keep it. Prefer Read, Grep, Glob and Edit for files."
        )

    async def run(self, args: BashArgs, ctx: ToolContext) -> ToolOutput:
        if not ctx.cwd.is_dir():
            raise ToolError(f"Cannot run the command: working directory {ctx.cwd} does not exist.")
        timeout_ms = args.timeout or self.default_timeout_ms
        output = _Output(self.max_output_bytes)
        env = self.env_policy.environment()
        starting = asyncio.ensure_future(_start(args.command, ctx.cwd, output, env))
        try:
            proc, transport, pipe = await asyncio.shield(starting)
        except asyncio.CancelledError:
            await _undo_start(starting)
            raise
        try:
            code = await _wait(proc, timeout_ms / 1000)
        finally:
            complete = await asyncio.shield(_stop(proc, transport, pipe))
        return _report(output.text(), code, timeout_ms, complete)


class _Output:
    """The command's output, bounded: the first and the last half of the cap are kept."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0

    def add(self, data: bytes) -> None:
        self._total += len(data)
        room = self.cap // 2 - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        self._tail += data
        keep = self.cap - self.cap // 2
        if len(self._tail) > keep:
            del self._tail[:-keep]

    def text(self) -> str:
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        omitted = self._total - len(self._head) - len(self._tail)
        if not omitted:
            return head + tail
        return (
            f"{head}\n[... {omitted} bytes cut here: output is capped at {self.cap} bytes, "
            f"this keeps the first and last {self.cap // 2} ...]\n{tail}"
        )


class _Pipe(asyncio.Protocol):
    """Our end of the command's stdout and stderr; ``closed`` resolves once every writer is gone."""

    def __init__(self, output: _Output) -> None:
        self._output = output
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._output.add(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


_Started: TypeAlias = "tuple[asyncio.subprocess.Process, asyncio.ReadTransport, _Pipe]"


async def _start(command: str, cwd: Path, output: _Output, env: dict[str, str]) -> _Started:
    read_fd, write_fd = os.pipe()
    started = False
    try:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
        )
        started = True
    except OSError as exc:
        raise ToolError(f"Cannot start bash: {exc.strerror or exc}") from None
    finally:
        os.close(write_fd)
        if not started:
            os.close(read_fd)
    pipe = _Pipe(output)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(lambda: pipe, os.fdopen(read_fd, "rb", 0))
    return proc, transport, pipe


async def _undo_start(starting: asyncio.Future[_Started]) -> None:
    """Cancelled while bash was starting: let the start finish, then kill what it started.

    The process group exists as soon as the spawn does, before ``_start`` returns;
    cancelling ``_start`` itself could leave that group running with nobody to kill it.
    """
    await asyncio.wait([starting])
    if starting.cancelled() or starting.exception() is not None:
        return
    await asyncio.shield(_stop(*starting.result()))


async def _wait(proc: asyncio.subprocess.Process, seconds: float) -> int | None:
    """The exit code, or None when the command ran out of time."""
    try:
        async with asyncio.timeout(seconds):
            return await proc.wait()
    except TimeoutError:
        return None


async def _stop(
    proc: asyncio.subprocess.Process, transport: asyncio.ReadTransport, pipe: _Pipe
) -> bool:
    """Kill the process group, reap the shell, close the pipe; say whether all output arrived."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    await asyncio.wait([pipe.closed], timeout=_DRAIN_SECONDS)
    transport.close()
    return pipe.closed.done()


def _report(output: str, code: int | None, timeout_ms: int, complete: bool) -> str:
    lines = [output.rstrip("\n") or "(no output)"]
    if not complete:
        lines.append("[Stopped reading: a detached process still holds the output open.]")
    if code is None:
        lines.append(
            f"[Timed out after {timeout_ms / 1000:g} s; the command and every process it "
            "started were killed.]"
        )
    elif code < 0:
        lines.append(f"[Killed by signal {-code}.]")
    else:
        lines.append(f"[Exit code {code}]")
    return "\n".join(lines)
