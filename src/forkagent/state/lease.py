"""One process per agent: a lock file a session holds while it runs the agent.

Two processes appending to one transcript would interleave two histories and
lose one of them, so resuming an agent whose process still runs is refused.
The lock is an ``flock`` on ``<state dir>/leases/<agent id>.lock``: the kernel
releases it when its process ends, even by ``kill -9``, so a crashed agent
never stays locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import ForkagentError
from .transcript import make_state_dir, safe_file_name, state_dir


class AgentBusyError(ForkagentError):
    """The agent is running in another process (or in this one, in another session)."""


class Lease:
    """Held while a session runs ``agent_id``; ``release`` (or process exit) frees it."""

    def __init__(self, agent_id: str, *, base: Path | None = None) -> None:
        folder = (base or state_dir()) / "leases"
        make_state_dir(folder)
        self.path = folder / f"{safe_file_name(agent_id)}.lock"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise AgentBusyError(
                f"agent {agent_id} is still running (process {holder}): two processes "
                f"would write one transcript. Stop it first (forkagent stop {agent_id}) "
                "or wait until it ends, then resume it"
            ) from None
        pid_line = f"{os.getpid()}\n".encode()
        # Written over the old pid, then cut to its length. Truncating to 0 first freed the
        # file's block (a discard, about 150 us on an ext4 mounted with it), and made ext4
        # write the file back when ``release`` closes it (``auto_da_alloc``): 20 to 90 us of
        # each session's close.
        os.pwrite(self._fd, pid_line, 0)
        os.ftruncate(self._fd, len(pid_line))

    def release(self) -> None:
        """Let another process run the agent (the file stays: removing it would race)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
