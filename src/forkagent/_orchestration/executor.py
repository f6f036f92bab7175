"""Where a child's work runs: the one seam between the runtime and an execution engine.

The runtime keeps every decision about a child (routing, guards, budgets,
notifications, transcripts) in the driver process. An executor only decides
where the child's model requests and tool calls are carried out: here, in
this process (the default), or elsewhere (``forkagent.executors.ray``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Protocol

from ..state.worktrees import Worktree
from .loop import AgentRun


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one agent's requests and tool calls ran."""

    executor: str
    """``in-process``, ``ray``, ..."""
    worker_pid: int
    """The process that ran them."""


class Executor(Protocol):
    """Places a child before its first turn: its ``model`` and ``tools`` are swapped for
    ones that run where the executor runs them; the bytes it sends stay the same."""

    @property
    def name(self) -> str: ...

    async def place(self, run: AgentRun, worktree: Worktree | None = None) -> Placement:
        """Make ``run`` do its work where this executor runs it; say where that is.
        ``worktree``: the child's own checkout (worktree isolation), on this machine."""
        ...

    async def release(self, run: AgentRun) -> None:
        """``run`` has ended, however it ended: bring what it left where it ran (files in
        its worktree) back here, before the worktree is kept or removed."""
        ...


class InProcessExecutor:
    """Children run in the driver's event loop, as they always have: nothing is swapped."""

    name = "in-process"

    async def place(self, run: AgentRun, worktree: Worktree | None = None) -> Placement:
        return here()

    async def release(self, run: AgentRun) -> None:
        """Its work is already here."""


@functools.cache
def here() -> Placement:
    """This process: where the main agent always runs (one value, not one per child)."""
    return Placement(InProcessExecutor.name, os.getpid())


os.register_at_fork(after_in_child=here.cache_clear)  # a forked process is somewhere else
