"""Time the event loop spends in the recorder (transcripts + registry) for a 50-agent tree.

The main agent forks 49 children in one reply; each child takes three turns
(two tool calls, then an answer). Every event goes through the session's
``Recorder``; this wraps it and sums the time spent inside, on the loop. Run
with the registry on (the default SQLite file in a temp dir) and off, so the
registry's share shows.

    python bench/registry_listener.py [--children N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.events import Event
from forkagent.messages import AssistantMessage
from forkagent.models import ModelResponse
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel, is_fork_history, reply, tool_call
from forkagent.tools import tool
from forkagent.usage import Usage


@tool
def step(n: int) -> str:
    """One step of work."""
    return f"step {n} done"


def tree_model(children: int) -> FunctionModel:
    def answer(request: ModelRequest) -> ModelResponse:
        turns = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if is_fork_history(request.messages):
            own = turns - 1
            message = (
                reply(f"Scope: step {own}", tool_call("step", n=own))
                if own < 2
                else reply("Scope: done.")
            )
        elif turns == 0:
            message = reply(
                *[tool_call("Agent", prompt=f"part {i}", fork=True) for i in range(children)]
            )
        else:
            message = reply("all done")
        return ModelResponse(
            message=message,
            stop_reason="tool_use" if message.tool_uses else "end_turn",
            usage=Usage(input_tokens=1000, output_tokens=20, cache_read_tokens=9000, requests=1),
        )

    return FunctionModel(answer, name="claude-sonnet-4-6")


async def one_run(children: int, registry: bool, home: Path) -> tuple[float, float, int]:
    """Seconds in the recorder, the longest single call, and the number of calls."""
    agent = Agent(
        model=tree_model(children),
        tools=[step],
        builtin_tools=False,
        load_agent_files=False,
        cwd=home,
        registry=None if registry else False,
        options=RuntimeOptions(max_agents=children),
    )
    spent: list[float] = []
    async with agent.session() as session:
        recorder = session._runtime.listeners[0]

        def timed(event: Event) -> None:
            start = time.perf_counter()
            recorder(event)
            spent.append(time.perf_counter() - start)

        session._runtime.listeners[0] = timed
        await session.send("go", wait_for_background=True)
    return sum(spent), max(spent), len(spent)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=49)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for registry in (True, False):
        totals, longest = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as home:
                os.environ["FORKAGENT_HOME"] = home
                total, worst, calls = await one_run(args.children, registry, Path(home))
            totals.append(total * 1000)
            longest.append(worst * 1000)
        print(
            f"registry {'on ' if registry else 'off'}: {calls} listener calls, "
            f"{statistics.median(totals):.1f} ms on the loop (median of {args.repeat}), "
            f"longest call {statistics.median(longest):.2f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
