"""How fork costs grow with the history and with the number of forks, at the default settings.

Every measure here runs an ``Agent`` as a user gets it: registry and
transcripts on (in a temporary state directory), on the in-process emulator
without simulated latency.

- **Throughput at defaults**: ``overhead.throughput`` again, with the
  registry and transcripts on.
- **Fork build at 50,000 messages**: ``overhead.fork_build`` against a
  history 25 times longer; a fork that copies nothing costs the same.
- **Agent-tool spawn**: a parent of 2,000 messages calls the Agent tool with
  ``fork: true`` in one reply; per child, the time spent in the runtime's
  spawn (route, estimate, build, start) plus the time its events spend in
  the runtime's listeners (cache monitor, transcript, registry).
- **One reply, N forks**: the main agent's first reply asks for N sync forks;
  the time per fork at N = 1,000 over that at N = 100 (20 and 200 with
  ``--quick``; 1.0 is linear).
- **In flight**: the memory each child of a 2,000-message parent holds while
  its first request waits on the model (tracemalloc; the emulator's own
  allocations, the server's side, are left out).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import EmulatedRequest, Emulator, Policy, Reply, ToolCall
from forkagent.emulator.timing import NO_LATENCY
from forkagent.events import Event
from forkagent.messages import AssistantMessage, Message, ToolUseBlock
from forkagent.requests import ModelSettings
from forkagent.state.registry import Registry
from forkagent.tools.spawn import SpawnRequest

from ._agents import offline_agent
from .economics import DIRECTIVE


@contextmanager
def state_home(folder: Path) -> Iterator[None]:
    """Transcripts and the registry go to ``folder`` while the block runs."""
    before = os.environ.get("FORKAGENT_HOME")
    os.environ["FORKAGENT_HOME"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["FORKAGENT_HOME"]
        else:
            os.environ["FORKAGENT_HOME"] = before


def default_agent(
    emulator: Emulator,
    cwd: Path,
    options: RuntimeOptions,
    *listeners: Callable[[Event], None],
    max_tokens: int = ModelSettings().max_tokens,
) -> Agent:
    """An agent on ``MODEL`` with what a real one records: registry rows and transcripts.

    Call inside ``state_home``. Agent files and compaction stay off: a 2,000-message
    history would be summarised before the forks this measures.
    """
    return offline_agent(
        emulator,
        cwd,
        options,
        *listeners,
        registry=Registry(cwd / "registry.db"),
        transcripts=True,
        settings=ModelSettings(max_tokens=max_tokens),
    )


def _fork_calls(children: int) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall("Agent", {"prompt": f"Review part {n}.", "description": f"part {n}", "fork": True})
        for n in range(children)
    )


def _one_reply_policy(children: int) -> Policy:
    """The main agent asks for ``children`` forks in its first reply; each child reports."""

    def reply(request: EmulatedRequest) -> Reply:
        if request.message_count == 1:
            return Reply(tool_calls=_fork_calls(children))
        if DIRECTIVE in request.last_user_text:
            return Reply(text="Scope: one part. Result: done.")
        return Reply(text="All parts reviewed.")

    return reply


async def one_reply(cwd: Path, children: int) -> float:
    """Seconds from the prompt to the main agent's answer, ``children`` forks in one reply."""
    emulator = Emulator(latency=NO_LATENCY, policy=_one_reply_policy(children))
    options = RuntimeOptions(max_agents=children)
    # A reply of 1,000 tool calls is about 30,000 tokens: room for it, as its caller would make.
    agent = default_agent(emulator, cwd, options, max_tokens=64_000)
    async with agent.session() as session:
        gc.collect()
        started = time.perf_counter()
        result = await session.send("Review every part.")
        seconds = time.perf_counter() - started
    if result.status != "completed" or len(result.agents) != children + 1:
        raise RuntimeError(f"{children} forks in one reply ended {result.status}: {result.error}")
    return seconds


def _agent_calls(children: int) -> AssistantMessage:
    return AssistantMessage(
        content=tuple(
            ToolUseBlock(id=f"toolu_spawn_{n}", name="Agent", input={"prompt": f"Part {n}."})
            for n in range(children)
        )
    )


async def agent_tool_spawn(cwd: Path, history: list[Message], children: int) -> float:
    """Milliseconds of runtime work per child forked through the Agent tool.

    The parent's reply (``children`` Agent calls) is appended as the loop
    would; each call is then spawned as the tool does, in the background so
    that ``spawn`` returns once the child is started. Counted: the spawns, and
    every event of a child in the runtime's listeners until all have ended.
    """
    emulator = Emulator(latency=NO_LATENCY)
    options = RuntimeOptions(max_agents=children, resume_on_notification=False)
    async with default_agent(emulator, cwd, options).session() as session:
        root = session.root
        root.messages = list(history)
        await session.send("Plan the parts.")
        runtime = session._runtime
        listening = 0.0
        emit = runtime.emit

        def timed(event: Event) -> None:
            nonlocal listening
            started = time.perf_counter()
            emit(event)
            if event.agent_id != root.id:
                listening += time.perf_counter() - started

        runtime.emit = timed  # type: ignore[method-assign]  # the bench's own stopwatch
        reply = _agent_calls(children)
        root.append(reply)
        gc.collect()
        started = time.perf_counter()
        for use in reply.tool_uses:
            request = SpawnRequest(
                prompt=str(use.input["prompt"]), fork=True, run_in_background=True
            )
            await runtime.spawn(root, request)
        spawning = time.perf_counter() - started
        listening = 0.0  # the spawns' own events are in ``spawning`` already
        results = await asyncio.gather(*(task.wait() for task in runtime.tasks.values()))
        total = spawning + listening
    if any(r.status != "completed" for r in results) or len(results) != children:
        raise RuntimeError("the Agent-tool forks did not all complete")
    return total * 1000 / children


_SERVER = tracemalloc.Filter(False, "*/forkagent/emulator/*")
"""What the emulator allocates is the server's memory (its parsed copy of each request), which
a real provider holds, not the client: left out."""


def _client_bytes(snapshot: tracemalloc.Snapshot) -> int:
    return sum(stat.size for stat in snapshot.filter_traces([_SERVER]).statistics("filename"))


async def inflight(cwd: Path, history: list[Message], children: int) -> float:
    """Kilobytes the runtime holds per child while its first request waits on the model.

    Everything allocated outside the emulator counts: the child's run and request, the
    adapter's rendered body, its transcript writer and its place in the monitor.
    """
    waiting = 0
    everyone = asyncio.Event()
    go = asyncio.Event()

    async def reply(request: EmulatedRequest) -> Reply:
        nonlocal waiting
        if DIRECTIVE not in request.last_user_text:
            return Reply(text="Planned.")
        waiting += 1
        if waiting == children:
            everyone.set()
        await go.wait()
        return Reply(text="Scope: one part. Result: done.")

    emulator = Emulator(latency=NO_LATENCY, policy=reply)
    options = RuntimeOptions(max_agents=children, resume_on_notification=False, fanout="off")
    async with default_agent(emulator, cwd, options).session() as session:
        session.root.messages = list(history)
        await session.send("Plan the parts.")
        gc.collect()
        tracemalloc.start()
        try:
            before = _client_bytes(tracemalloc.take_snapshot())
            tasks = await session.fork(
                [f"Review part {n}." for n in range(children)], background=True
            )
            await asyncio.wait_for(everyone.wait(), 120)
            gc.collect()
            held = _client_bytes(tracemalloc.take_snapshot()) - before
        finally:
            tracemalloc.stop()
        go.set()
        results = await asyncio.gather(*(task.wait() for task in tasks))
    if any(r.status != "completed" for r in results):
        raise RuntimeError("the in-flight forks did not all complete")
    return held / 1000 / children
