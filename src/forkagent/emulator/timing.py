"""Clocks and simulated latency.

Cache lifetimes are measured on the emulator's clock, which tests replace by a
``VirtualClock`` so that a five-minute TTL expires without sleeping. Latency is
slept on the event loop (``asyncio.sleep``): it is what makes concurrent requests
overlap, so the rule "an entry is visible only once the writing response has
begun" is observable even when the clock is virtual. ``loop_clock`` puts the
cache clock on the loop's own timeline, so a loop on virtual time (``looptime``)
steps latency and cache lifetimes together and a run is the same at any load.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


class VirtualClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward and return the new time."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += seconds
            return self._now


def wall_clock() -> float:
    return time.monotonic()


def loop_clock() -> float:
    """The running event loop's time: the clock ``asyncio.sleep`` (the latency) waits on.

    Outside a running loop there is no loop time to read, and the error says so.
    """
    return asyncio.get_running_loop().time()


@dataclass(frozen=True, slots=True)
class Latency:
    """Simulated model speed.

    ``ttft`` is the time to the first byte of the response (the moment an
    Anthropic cache write becomes visible); output then flows at
    ``tokens_per_second``. The defaults are small so tests stay fast, but
    non-zero so that concurrency matters.
    """

    ttft: float = 0.02
    tokens_per_second: float = 2000.0

    def __post_init__(self) -> None:
        if self.ttft < 0 or self.tokens_per_second <= 0:
            raise ValueError("ttft must be >= 0 and tokens_per_second > 0")

    def generation(self, tokens: int) -> float:
        """Seconds it takes to stream ``tokens`` output tokens."""
        return tokens / self.tokens_per_second


NO_LATENCY = Latency(ttft=0.0, tokens_per_second=1e12)
"""For benchmarks of the emulator's own overhead."""
