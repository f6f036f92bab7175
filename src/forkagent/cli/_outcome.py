"""How ``run`` and ``resume`` end: signals, exit codes, and the command to resume."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..agent import RunResult

T = TypeVar("T")

EXIT_CODES: dict[str, int] = {
    "completed": 0,
    "failed": 1,
    "budget_exceeded": 3,
    "timed_out": 5,
    "truncated": 6,
    "cancelled": 7,
}
"""Exit status per final status; 2 is a usage error, 4 the turn limit (``max_turns``),
128 + N a run interrupted by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)."""
MAX_TURNS_EXIT = 4
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a run the way Ctrl-C does (SIGINT is asyncio's own)."""


class Interrupted(Exception):
    """The run was ended by a signal; its agents were stopped and recorded ``interrupted``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def run_until_signal(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(main())``; SIGTERM and SIGHUP cancel it as Ctrl-C does.

    Cancelling the main task lets every layer clean up on the way out: tool
    process groups are killed, transcripts and registry rows say how the
    agents ended. Raises ``Interrupted`` after that.
    """
    received: list[int] = []

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal(signum: int) -> None:
            received.append(signum)
            task.cancel()

        for signum in ENDING_SIGNALS:
            loop.add_signal_handler(signum, on_signal, signum)
        return await main()

    try:
        return asyncio.run(guarded())
    except KeyboardInterrupt:
        raise Interrupted(signal.SIGINT) from None
    except asyncio.CancelledError:
        if not received:
            raise
        raise Interrupted(received[0]) from None


def exit_code(result: RunResult) -> int:
    if result.status == "budget_exceeded" and result.stop_reason == "max_turns":
        return MAX_TURNS_EXIT
    return EXIT_CODES.get(result.status, 1)


def resume_hint(agent_id: str | None) -> str:
    return f"continue it with: forkagent resume {agent_id}" if agent_id else ""
