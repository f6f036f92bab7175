"""The runtime's own overhead: building forks, running many, cancelling a tree.

- **Fork build**: time (best of 3 rounds) and retained memory (``tracemalloc``)
  to build one child's first request from a 2,000-message history
  (``Runtime.build_fork`` plus ``build_request``), against a naive fork that
  deep-copies the history.
- **Throughput**: 1,000 background forks on the in-process emulator without
  simulated latency, from ``session.fork`` to the last result and the session
  closed (transcript lines and registry rows written). The ideal is
  the same 1,000 requests sent straight to the model (adapter and emulator,
  no runtime) in the order fan-out sends them: the first alone, then the rest
  at once. ``throughput_ratio`` = ideal time / runtime time, the median of three
  pairs (runtime, then ideal) after a pair that only warms both. Each run starts
  with the emulator's process-wide memos empty, so the ideal does not replay
  requests the runtime's run taught it. ``bare_fork_ratio`` reads the ideal
  against bare forks: the same requests, each built the least way a runtime
  could (the first fork's request with its directive's text replaced), then
  sent as the ideal sends them. It is about the most any runtime could read, so
  it shows how much of ``throughput_ratio``'s target is left for the runtime's
  own work.
- **Cancel latency**: a tree of 100 agents (the main agent, 9 named agents,
  10 named agents under each) all waiting on a response; the time from
  ``session.aclose()`` until every task has ended.

Garbage is collected before each timed phase, so that none pays for what ran before it.

    python -m bench.overhead [--quick]       (from the checkout's root)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from forkagent import Agent, RuntimeOptions, Session
from forkagent.agents.builtin import GENERAL_PURPOSE
from forkagent.emulator import EmulatedRequest, Emulator, Policy, Reply, ToolCall
from forkagent.emulator.memo import forget_everything
from forkagent.emulator.timing import NO_LATENCY
from forkagent.events import Event, RequestSent, ResponseReceived
from forkagent.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    user,
)
from forkagent.models.emulator import EmulatorModel
from forkagent.requests import ModelRequest

from . import scaling
from ._agents import MODEL, offline_agent

HISTORY_MESSAGES = 2_000
LONG_HISTORY_MESSAGES = 50_000
ONE_REPLY = (100, 1_000)
"""Forks asked for in one reply: time per fork at the second over time per fork at the first.
Issue 18's item 4 names these sizes, so ``--quick`` runs them too."""
BACKGROUND_FORKS = 1_000
"""Issue 18's item 1 names this size, so ``--quick`` runs it too: at 100 forks a family's
fixed costs weigh ten times as much per fork, and the ratio would measure something else."""
_NAMED_PROMPT = GENERAL_PURPOSE.system_prompt.splitlines()[0]
TREE = (9, 10)
"""Named agents under the main agent, and under each of those: 1 + 9 + 90 = 100 agents."""


@dataclass(frozen=True, slots=True)
class Overhead:
    history_messages: int
    fork_build_ms_per_child: float
    fork_bytes_per_child: float
    deepcopy_build_ms_per_child: float
    deepcopy_bytes_per_child: float
    background_forks: int
    forks_per_second: float
    ideal_requests_per_second: float
    throughput_ratio: float
    bare_fork_ratio: float
    """The ideal's time over bare forks' (each request built the least way, sent as the ideal
    sends them): what a runtime doing nothing else would read against ``throughput_ratio``'s
    target."""
    tree_agents: int
    cancel_ms: float
    forks_per_second_default: float
    """As ``forks_per_second``, with the registry and transcripts on (an ``Agent``'s defaults)."""
    throughput_ratio_default: float
    fork_build_ms_per_child_50k: float
    fork_bytes_per_child_50k: float
    agent_tool_spawn_ms_per_child: float
    one_reply_seconds_few: float
    """N forks in one reply: N = 100..."""
    one_reply_seconds_many: float
    """...and ten times as many."""
    one_reply_scaling: float
    """Time per fork at N = 1,000 over time per fork at N = 100, all in one reply."""
    inflight_kb_per_child_2k: float


def _history(messages: int) -> list[Message]:
    """A long working session: a prompt, then tool calls reading files, then an answer."""
    code = "".join(f"    total += item_{i} * {i}\n" for i in range(24))
    history: list[Message] = [user("Read every module and summarise the design.")]
    for n in range((messages - 2) // 2):
        call = ToolUseBlock(id=f"toolu_{n:05d}", name="Read", input={"path": f"src/m{n}.py"})
        history.append(AssistantMessage(content=(TextBlock(text=f"Reading module {n}."), call)))
        result = ToolResultBlock(tool_use_id=call.id, content=(TextBlock(text=code),))
        history.append(UserMessage(content=(result,), origin="tool"))
    history.append(AssistantMessage(content=(TextBlock(text="The design is layered."),)))
    return history


def _per_child(build: Callable[[int], object], count: int, rounds: int = 3) -> tuple[float, float]:
    """Milliseconds (the best of ``rounds``, as ``timeit`` does) and retained bytes per child.

    Bytes are traced in a separate round: tracing slows every allocation down.
    """
    times = []
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        kept = [build(n) for n in range(count)]
        times.append(time.perf_counter() - started)
        del kept
    gc.collect()
    tracemalloc.start()
    try:
        kept = [build(n) for n in range(count)]
        retained = tracemalloc.get_traced_memory()[0]
        del kept
    finally:
        tracemalloc.stop()
    return min(times) * 1000 / count, retained / count


def fork_build(cwd: Path, forks: int, copies: int) -> tuple[float, float, float, float]:
    """(fork ms, fork bytes, deep-copy ms, deep-copy bytes) per child at 2,000 messages."""
    fork, deep_copy = _builders(cwd, HISTORY_MESSAGES)
    return (*_per_child(fork, forks), *_per_child(deep_copy, copies))


def fork_build_only(cwd: Path, forks: int, messages: int) -> tuple[float, float]:
    """(fork ms, fork bytes) per child at ``messages``."""
    return _per_child(_builders(cwd, messages)[0], forks)


def _builders(
    cwd: Path, messages: int
) -> tuple[Callable[[int], ModelRequest], Callable[[int], ModelRequest]]:
    """A fork's first request, and a naive deep-copying fork's, from a ``messages`` history."""
    session = offline_agent(Emulator(latency=NO_LATENCY), cwd, RuntimeOptions()).session()
    parent = session.root
    parent.messages = _history(messages)
    parent.last_request = parent.build_request()
    runtime = session._runtime

    def fork(n: int) -> ModelRequest:
        return runtime.build_fork(parent, f"Review module {n}.").build_request()

    def deep_copy(n: int) -> ModelRequest:
        copied = [*copy.deepcopy(parent.messages), user(f"Review module {n}.")]
        return parent.build_request().model_copy(update={"messages": tuple(copied)})

    return fork, deep_copy


AgentFactory = Callable[..., Agent]


ROUNDS = 3
"""Timed pairs (runtime, then ideal) per throughput figure; their median ratio is reported."""


@dataclass(frozen=True, slots=True)
class Throughput:
    forks_per_second: float
    ideal_requests_per_second: float
    ratio: float
    """The median of the pairs' ratios, each pair's runtime and ideal measured one after the other."""
    bare_ratio: float | None = None
    """With ``bare``: the median of the ideal's time over bare forks', measured in the same
    rounds right after the ideal."""


async def throughput(
    cwd: Path,
    forks: int,
    make_agent: AgentFactory = offline_agent,
    rounds: int = ROUNDS,
    *,
    bare: bool = False,
) -> Throughput:
    """Forks per second of the runtime against requests per second of the ideal, for agents
    ``make_agent`` builds: the medians of ``rounds`` pairs, after one pair that is not counted.

    The uncounted pair warms both sides alike (lazy imports, the interpreter's specialised
    code, the allocator's arenas). Without it the runtime's first run paid for that alone:
    each ideal runs right after a runtime run, which has already warmed the adapter and
    emulator it uses. Each pair's ratio is taken within the pair, so a change of the
    machine's load between pairs moves both of its sides. With ``bare``, each round also
    sends the requests as bare forks, right after the ideal.
    """

    async def round_() -> tuple[float, float, float | None]:
        runtime_seconds, warm, sent = await _runtime_run(cwd, forks, make_agent)
        gc.collect()  # the runtime's garbage would otherwise be collected during the ideal run
        ideal_seconds = await _direct_run(warm, sent)
        if not bare:
            return runtime_seconds, ideal_seconds, None
        build = bare_forks(sent)
        gc.collect()
        bare_seconds = await _direct_run(warm, (build(n) for n in range(forks)))
        return runtime_seconds, ideal_seconds, bare_seconds

    counted = await _counted(round_, rounds)
    bare_ratios = [ideal / bare for _, ideal, bare in counted if bare is not None]
    return Throughput(
        forks / statistics.median(runtime for runtime, _, _ in counted),
        forks / statistics.median(ideal for _, ideal, _ in counted),
        statistics.median(ideal / runtime for runtime, ideal, _ in counted),
        statistics.median(bare_ratios) if bare_ratios else None,
    )


T = TypeVar("T")


async def _counted(measure: Callable[[], Awaitable[T]], rounds: int) -> list[T]:
    """``rounds`` results of ``measure``, after one that only warms what it runs."""
    await measure()
    return [await measure() for _ in range(rounds)]


async def one_reply_scaling(
    cwd: Path, few: int, many: int, rounds: int = ROUNDS
) -> tuple[float, float, float]:
    """Seconds for ``few`` and for ``many`` forks in one reply, and time per fork at ``many``
    over time per fork at ``few``: medians of ``rounds`` pairs, as ``throughput``'s."""

    async def pair() -> tuple[float, float]:
        return await scaling.one_reply(cwd, few), await scaling.one_reply(cwd, many)

    counted = await _counted(pair, rounds)
    return (
        statistics.median(small for small, _ in counted),
        statistics.median(large for _, large in counted),
        statistics.median((large / many) / (small / few) for small, large in counted),
    )


async def _runtime_run(
    cwd: Path, forks: int, make_agent: AgentFactory
) -> tuple[float, ModelRequest, list[ModelRequest]]:
    """Seconds for ``forks`` background forks, from ``session.fork`` to the session closed;
    the main agent's request before them, and the forks' requests."""
    sent: list[ModelRequest] = []

    def record(event: Event) -> None:
        if isinstance(event, RequestSent) and event.agent_id.startswith("fork"):
            sent.append(event.request)

    options = RuntimeOptions(max_agents=forks, resume_on_notification=False)
    agent = make_agent(Emulator(latency=NO_LATENCY), cwd, options, record)
    forget_everything()  # both runs start from what a fresh process knows
    async with agent.session() as session:
        await session.send("Plan the work.")
        warm = session.root.last_request
        gc.collect()
        started = time.perf_counter()
        tasks = await session.fork([_directive(n) for n in range(forks)], background=True)
        results = await asyncio.gather(*(task.wait() for task in tasks))
    seconds = time.perf_counter() - started  # closed: every record is on disk
    if any(r.status != "completed" for r in results) or len(sent) != forks or warm is None:
        raise RuntimeError("the background forks did not all complete")
    return seconds, warm, sent


def _directive(n: int) -> str:
    return f"Do task {n}."


async def _direct_run(warm: ModelRequest, requests: Iterable[ModelRequest]) -> float:
    """Seconds for ``requests`` sent straight to the model, in the order fan-out sends them:
    the first alone, then the rest at once. Bare forks' are made in the timed part: the first
    before it is sent, the rest all before they are (as the runtime makes its forks)."""
    model = EmulatorModel(MODEL, Emulator(latency=NO_LATENCY))
    forget_everything()  # or the runtime's run would have warmed the emulator for this one
    each = iter(requests)
    try:
        await model.request(warm)
        started = time.perf_counter()
        await model.request(next(each))
        await asyncio.gather(*(model.request(request) for request in each))
        return time.perf_counter() - started
    finally:
        await model.aclose()


def bare_forks(sent: Sequence[ModelRequest]) -> Callable[[int], ModelRequest]:
    """Fork ``n``'s request made the least way a runtime could: the first fork's request with
    its directive's text replaced. Its history, rules block and settings are the very objects
    of the first. The three models are made by ``model_copy``: about 5 us per fork more than
    the runtime's own constructors, which are private (about 0.5% of a fork's time).

    Checked equal to every request the runtime sent, so that bare forks send the same bytes.
    """
    first = sent[0]
    last = first.messages[-1]
    block = last.content[-1] if isinstance(last, UserMessage) else None
    if not isinstance(block, TextBlock) or not block.text.endswith(_directive(0)):
        raise RuntimeError("the first fork's request does not end with its directive's text")
    lead = block.text.removesuffix(_directive(0))
    history, head = tuple(first.messages)[:-1], last.content[:-1]

    def build(n: int) -> ModelRequest:
        text = block.model_copy(update={"text": lead + _directive(n)})
        message = last.model_copy(update={"content": (*head, text)})
        return first.model_copy(update={"messages": (*history, message)})

    if any(build(n) != request for n, request in enumerate(sent)):
        raise RuntimeError("a bare fork's request differs from the one the runtime sent")
    return build


def _tree_policy(branches: int, leaves: int) -> Policy:
    """The main agent starts the branches, each branch its leaves; then everyone waits."""

    def spawn(count: int, prompt: str) -> Reply:
        call = ToolCall(
            "Agent",
            {"prompt": prompt, "subagent_type": "general-purpose", "run_in_background": True},
        )
        return Reply(tool_calls=(call,) * count)

    async def reply(request: EmulatedRequest) -> Reply:
        named = _NAMED_PROMPT in request.system
        if request.message_count == 1 and not named:
            return spawn(branches, "BRANCH")
        if request.message_count == 1 and "BRANCH" in request.last_user_text:
            return spawn(leaves, "LEAF")
        if not named:
            return Reply(text="The branches are running.")
        await asyncio.sleep(3600)  # a response that never comes
        raise AssertionError("unreachable")

    return reply


async def cancel_latency(cwd: Path, branches: int, leaves: int) -> tuple[int, float]:
    """(agents in the tree, milliseconds from ``aclose`` until every task ended)."""
    agents = 1 + branches + branches * leaves
    waiting: dict[str, int] = {}
    everyone_waits = asyncio.Event()

    def track(event: Event) -> None:
        """Counts the children's requests in flight."""
        if isinstance(event, RequestSent | ResponseReceived) and event.agent_id in tasks:
            step = 1 if isinstance(event, RequestSent) else -1
            waiting[event.agent_id] = waiting.get(event.agent_id, 0) + step
        if sum(waiting.values()) == agents - 1:
            everyone_waits.set()

    emulator = Emulator(latency=NO_LATENCY, policy=_tree_policy(branches, leaves))
    options = RuntimeOptions(max_agents=agents, resume_on_notification=False)
    session: Session = offline_agent(emulator, cwd, options, track).session()
    tasks = session._runtime.tasks
    try:
        await session.send("Split the work.")
        await asyncio.wait_for(everyone_waits.wait(), 60)
    except BaseException:
        await session.aclose()
        raise
    gc.collect()
    started = time.perf_counter()
    await session.aclose()
    milliseconds = (time.perf_counter() - started) * 1000
    if len(tasks) != agents - 1 or not all(task.done for task in tasks.values()):
        raise RuntimeError("the tree was not whole, or not every agent ended")
    return agents, milliseconds


async def measure(quick: bool = False) -> Overhead:
    gc.collect()  # whatever ran before should not be collected during these timings
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        build = fork_build(cwd, forks=50 if quick else 200, copies=1 if quick else 5)
        stripped = await throughput(cwd, BACKGROUND_FORKS, bare=True)
        assert stripped.bare_ratio is not None  # asked for
        agents, cancel_ms = await cancel_latency(cwd, *TREE)
        with scaling.state_home(cwd / "state"):
            defaults = await _at_defaults(cwd, quick)
    return Overhead(
        HISTORY_MESSAGES,
        *build,
        BACKGROUND_FORKS,
        stripped.forks_per_second,
        stripped.ideal_requests_per_second,
        stripped.ratio,
        stripped.bare_ratio,
        agents,
        cancel_ms,
        *defaults,
    )


async def _at_defaults(cwd: Path, quick: bool) -> tuple[float, ...]:
    """The figures with the registry and transcripts on, and those of long histories."""
    defaults = await throughput(cwd, BACKGROUND_FORKS, scaling.default_agent)
    build_ms, build_bytes = fork_build_only(cwd, 10 if quick else 50, LONG_HISTORY_MESSAGES)
    history = _history(HISTORY_MESSAGES)
    spawn_ms = await scaling.agent_tool_spawn(cwd, history, 10 if quick else 50)
    small, large, scale = await one_reply_scaling(cwd, *ONE_REPLY)
    inflight_kb = await scaling.inflight(cwd, history, 10 if quick else 50)
    return (
        defaults.forks_per_second,
        defaults.ratio,
        build_ms,
        build_bytes,
        spawn_ms,
        small,
        large,
        scale,
        inflight_kb,
    )


def main(argv: Sequence[str] | None = None) -> Overhead:
    """Run, print each figure, return them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer fork builds and spawns (the throughput and one-reply sizes stay)",
    )
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.quick))
    for name, value in asdict(result).items():
        print(f"{name:<30} {value:>14,.3f}")
    return result


if __name__ == "__main__":
    main()
