"""What recording costs per background fork: the runtime with each record on and off.

The same run as ``overhead``'s throughput (a main agent, then N background forks
on the in-process emulator, from ``session.fork`` until the session is closed),
in four configurations: ``stripped`` (no registry, no transcripts), ``registry``,
``transcripts``, and ``default`` (both, as a real ``Agent`` has). The
configurations take turns, round after round, so that a busy machine slows them
alike; each prints its median milliseconds per fork and every round's figure.
One 50-fork run of each comes first, uncounted (a first run pays for warming up).

    python -m bench.recording [--forks N] [--rounds R]    (from the checkout's root)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.state.registry import Registry

from . import scaling
from ._agents import offline_agent

MakeAgent = Callable[[Path, RuntimeOptions], Agent]
WARM_UP_FORKS = 50


def _agent(registry: bool, transcripts: bool) -> MakeAgent:
    def make(cwd: Path, options: RuntimeOptions) -> Agent:
        emulator = Emulator(latency=NO_LATENCY)
        rows = Registry(cwd / "registry.db") if registry else None
        return offline_agent(emulator, cwd, options, registry=rows, transcripts=transcripts)

    return make


CONFIGURATIONS: dict[str, MakeAgent] = {
    "stripped": _agent(registry=False, transcripts=False),
    "registry": _agent(registry=True, transcripts=False),
    "transcripts": _agent(registry=False, transcripts=True),
    "default": _agent(registry=True, transcripts=True),
}


async def ms_per_fork(cwd: Path, forks: int, make_agent: MakeAgent) -> float:
    """Milliseconds per fork, from the forks' start until the session is closed."""
    options = RuntimeOptions(max_agents=forks, resume_on_notification=False)
    async with make_agent(cwd, options).session() as session:
        await session.send("Plan the work.")
        gc.collect()
        started = time.perf_counter()
        tasks = await session.fork([f"Do task {n}." for n in range(forks)], background=True)
        results = await asyncio.gather(*(task.wait() for task in tasks))
    seconds = time.perf_counter() - started
    if any(result.status != "completed" for result in results):
        raise RuntimeError("the background forks did not all complete")
    return seconds / forks * 1e3


async def measure(forks: int, rounds: int) -> dict[str, list[float]]:
    """Each configuration's milliseconds per fork, one figure per round."""
    figures: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
    with tempfile.TemporaryDirectory() as tmp, scaling.state_home(Path(tmp) / "state"):
        for make_agent in CONFIGURATIONS.values():
            await ms_per_fork(Path(tmp), WARM_UP_FORKS, make_agent)
        for _ in range(rounds):
            for name, make_agent in CONFIGURATIONS.items():
                figures[name].append(await ms_per_fork(Path(tmp), forks, make_agent))
    return figures


def main(argv: Sequence[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--forks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.forks, args.rounds))
    stripped = statistics.median(figures["stripped"])
    for name, values in figures.items():
        median = statistics.median(values)
        rounds = ", ".join(f"{value:.3f}" for value in values)
        print(f"{name:12} {median:.3f} ms per fork (+{median - stripped:.3f})  [{rounds}]")
    return figures


if __name__ == "__main__":
    main()
