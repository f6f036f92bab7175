"""``loop_clock``: the emulator's cache clock on the event loop's timeline, so that a loop on
virtual time (``looptime``) steps the latency and the cache lifetimes together."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import looptime
import pytest

from forkagent.emulator import Emulator, Latency, loop_clock

PROMPT = "You review database schemas and say what could break. " * 500
BODY = {
    "model": "claude-opus-4-6",
    "max_tokens": 256,
    "system": [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": "hello"}],
}
T = TypeVar("T")


def _on_virtual_time(work: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=lambda: looptime.new_event_loop(start=1000.0)) as runner:
        return runner.run(work)


def test_it_reads_the_running_loops_time() -> None:
    async def read() -> tuple[float, float]:
        before = loop_clock()
        await asyncio.sleep(42.5)
        return before, loop_clock()

    assert _on_virtual_time(read()) == (1000.0, 1042.5)


def test_outside_a_loop_it_says_there_is_none() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        loop_clock()


def test_latency_and_cache_lifetime_step_on_one_virtual_timeline() -> None:
    """A five-minute entry is read after 4 minutes and expired after 5 more, in no real time;
    each request takes exactly its time to first token plus its output at the set speed."""
    emu = Emulator(clock=loop_clock, latency=Latency(ttft=0.5, tokens_per_second=100.0))

    async def session() -> list[tuple[int, int, float]]:
        loop = asyncio.get_running_loop()
        seen = []
        for pause in (0.0, 240.0, 301.0):
            await asyncio.sleep(pause)
            started = loop.time()
            usage = (await emu.dispatch("POST", "/v1/messages", BODY)).body["usage"]
            seen.append(
                (
                    usage["cache_creation_input_tokens"],
                    usage["cache_read_input_tokens"],
                    loop.time() - started - usage["output_tokens"] / 100.0,
                )
            )
        return seen

    (written, _, first), (_, read, second), (rewritten, _, third) = _on_virtual_time(session())
    assert written > 0
    assert read == rewritten == written
    assert first == second == third == pytest.approx(0.5)
    assert emu.log[-1].breakpoints[0].reason == "expired"
