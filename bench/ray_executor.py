"""Forks on Ray against forks in process: throughput and the per-child overhead.

For N background forks (100 and 1,000), each fork makes one tool call and then
answers: two model requests and one tool call per child, on the in-process
emulator without simulated latency, so what is measured is the executors'
own cost, not a model's. Both runs go in one process, one after the other,
timed from ``session.fork`` to the last result:

- ``in_process``: today's executor, everything in this event loop;
- ``ray``: ``RayExecutor`` on a local Ray instance (2 CPUs, 2 workers), the
  requests going from the workers to this process's emulator over HTTP and
  the tool calls running in the workers.

``per_child_ms`` = (Ray time - in-process time) / N: what running a child's
work on Ray adds to it, here where the model answers at once. Against a real
model, which takes seconds per request, this is the figure to weigh.

    python -m bench.ray_executor [--quick] [--json]      (needs the ray extra)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from forkagent import Agent, Executor, InProcessExecutor, RuntimeOptions, tool
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall
from forkagent.emulator.timing import NO_LATENCY
from forkagent.executors.ray import RayExecutor
from forkagent.models.emulator import EmulatorModel

from ._agents import MODEL

SIZES = (100, 1_000)


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted: {text}"


def _policy(request: EmulatedRequest) -> Reply:
    """Forks call ``note`` once, then answer; the main agent plans."""
    if request.agent is None or request.agent.kind != "fork":
        return Reply(text="Planned.")
    if '"tool_result"' in json.dumps(request.body["messages"][-1]):
        return Reply(text="Done.")
    return Reply(tool_calls=(ToolCall("note", {"text": request.agent.label}),))


@dataclass(frozen=True, slots=True)
class Row:
    forks: int
    in_process_seconds: float
    ray_seconds: float

    @property
    def in_process_forks_per_second(self) -> float:
        return self.forks / self.in_process_seconds

    @property
    def ray_forks_per_second(self) -> float:
        return self.forks / self.ray_seconds

    @property
    def per_child_ms(self) -> float:
        return (self.ray_seconds - self.in_process_seconds) / self.forks * 1000

    def to_dict(self) -> dict[str, float]:
        return {
            **asdict(self),
            "in_process_forks_per_second": round(self.in_process_forks_per_second, 1),
            "ray_forks_per_second": round(self.ray_forks_per_second, 1),
            "ray_to_in_process": round(self.in_process_seconds / self.ray_seconds, 3),
            "per_child_ms": round(self.per_child_ms, 2),
        }


async def run_forks(cwd: Path, forks: int, executor: Executor) -> float:
    """Seconds from ``session.fork`` to the last of ``forks`` results."""
    agent = Agent(
        model=EmulatorModel(MODEL, Emulator(latency=NO_LATENCY, policy=_policy)),
        cwd=cwd,
        tools=[note],
        builtin_tools=False,
        options=RuntimeOptions(max_agents=forks, resume_on_notification=False),
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
        executor=executor,
    )
    async with agent.session() as session:
        await session.send("Plan the work. " * 600)  # above the 2,048-token cache minimum
        started = time.perf_counter()
        tasks = await session.fork([f"Do task {n}." for n in range(forks)], background=True)
        results = await asyncio.gather(*(task.wait() for task in tasks))
        seconds = time.perf_counter() - started
    if any(r.status != "completed" or r.turns != 2 for r in results):
        raise RuntimeError("the background forks did not all complete in two turns")
    return seconds


async def measure(sizes: tuple[int, ...]) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        async with RayExecutor(local_cpus=2) as ray_executor:
            await run_forks(Path(scratch), 2, ray_executor)  # workers and HTTP server warm
            for forks in sizes:
                local = await run_forks(Path(scratch), forks, InProcessExecutor())
                remote = await run_forks(Path(scratch), forks, ray_executor)
                rows.append(Row(forks, local, remote))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 forks only")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance
    rows = asyncio.run(measure(SIZES[:1] if args.quick else SIZES))
    if args.json:
        print(json.dumps([row.to_dict() for row in rows], indent=2))
        return
    print("forks  in-process/s  ray/s  ray:in-process  per-child overhead")
    for row in rows:
        data = row.to_dict()
        print(
            f"{row.forks:>5}  {data['in_process_forks_per_second']:>12}  "
            f"{data['ray_forks_per_second']:>5}  {data['ray_to_in_process']:>14}  "
            f"{data['per_child_ms']:>6} ms"
        )


if __name__ == "__main__":
    main()
