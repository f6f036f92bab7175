"""Fan-out: RequestSent marks when a request really leaves; a pre-warm is a request like any other."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import sys
from collections.abc import AsyncGenerator, AsyncIterator, ValuesView
from pathlib import Path
from typing import Any

import pytest

from forkagent import Agent, RuntimeOptions
from forkagent._orchestration import runtime as runtime_module
from forkagent._orchestration.fanout import ForkFamily, send_in_family
from forkagent._orchestration.fork import cache_key_hash
from forkagent._orchestration.runtime import ForkParams
from forkagent._orchestration.tasks import AgentTask
from forkagent.emulator import Emulator, Latency
from forkagent.emulator.timing import NO_LATENCY
from forkagent.events import Event, RequestSent, ResponseReceived
from forkagent.messages import AssistantMessage, JsonValue, TextBlock
from forkagent.models.base import (
    Model,
    ModelProfile,
    ModelResponse,
    ResponseComplete,
    ResponseStarted,
    StreamEvent,
    TextDelta,
)
from forkagent.models.emulator import EmulatorModel
from forkagent.models.function import FunctionModel
from forkagent.pricing import price_for
from forkagent.requests import (
    ModelRequest,
    ModelSettings,
    ThinkingConfig,
    ToolSpec,
    canonical_json,
)
from forkagent.state.transcript import UsageEntry, read_transcript, transcript_path
from forkagent.telemetry import EconomicsRecorder, Listener, UsageRecorder
from forkagent.usage import Usage

from ._support import Events, make_agent


async def test_siblings_are_sent_only_after_the_first_child_answered(tmp_path: Path) -> None:
    timeline: list[str] = []

    async def answer(request: ModelRequest) -> str:
        await asyncio.sleep(0.02)
        timeline.append("answered")
        return "done"

    def on_event(event: Event) -> None:
        if isinstance(event, RequestSent):
            timeline.append("sent")

    model = FunctionModel(answer)
    model.profile = ModelProfile(provider="test", warmup="first_response_ends")
    agent = Agent(model=model, cwd=tmp_path, load_agent_files=False, listeners=[on_event])

    async with agent.session() as session:
        await session.send("plan")
        timeline.clear()
        await session.fork(["a", "b", "c"])

    # The first child goes alone; its siblings leave only once it has answered.
    assert timeline[:2] == ["sent", "answered"]
    assert timeline.count("sent") == 3


# -- pre-warm ---------------------------------------------------------------------------------

CLAUDE = "claude-sonnet-4-6"
CONTEXT = "The module under review keeps its totals in integer cents. " * 300
"""About 3,600 tokens: above the model's 2,048-token cacheable minimum."""


def _prewarm_agent(emulator: Emulator, cwd: Path, *listeners: Listener, **options: Any) -> Agent:
    return make_agent(
        EmulatorModel(CLAUDE, emulator),
        cwd,
        options=RuntimeOptions(fanout="prewarm"),
        listeners=listeners,
        registry=False,
        **options,
    )


async def test_a_prewarm_is_billed_to_the_first_child_and_seen_by_every_listener(
    tmp_path: Path,
) -> None:
    emulator = Emulator(latency=NO_LATENCY)
    events, usage, economics = Events(), UsageRecorder(), EconomicsRecorder()
    async with _prewarm_agent(emulator, tmp_path, events, usage, economics).session() as session:
        await session.send(CONTEXT)
        await session.fork(["check a", "check b", "check c"])
        runtime, root_id = session._runtime, session.root.id

    served = sum((e.usage for e in emulator.log if e.usage is not None), Usage())
    assert served.requests == 5  # the parent, the pre-warm and three children
    [prewarm] = [e for e in events.of(ResponseReceived) if e.prewarm]
    [sent] = [e for e in events.of(RequestSent) if e.prewarm]
    leader = runtime.runs[prewarm.agent_id]
    assert leader.is_fork
    assert sent.agent_id == leader.id
    assert prewarm.response.usage.cache_write_tokens > 0
    # The leader's usage, every agent's together, the usage tree, the budget and the
    # economics all count what the emulator served, pre-warm included.
    assert leader.usage.requests == 2
    assert sum((run.usage for run in runtime.runs.values()), Usage()) == served
    assert usage.tree().total == served
    assert runtime.tree_budget.tokens == served.total_tokens
    assert runtime.tree_budget.turns == 4  # a pre-warm is not a turn
    price = price_for(CLAUDE)
    assert price is not None
    assert economics.comparison().this_run == pytest.approx(price.input_equivalents(served))
    transcript = read_transcript(transcript_path(root_id, leader.id))
    assert transcript.usage == leader.usage
    lines = [e for e in transcript.entries if isinstance(e, UsageEntry)]
    assert [(line.turn, line.prewarm) for line in lines] == [(1, True), (1, False)]
    # The leader's own request is then compared with its pre-warm, which wrote that prompt.
    warmed, own = [r.report for r in runtime.cache_monitor.reports(leader.id)]
    assert warmed.compared_with == f"parent {root_id}'s last request"
    assert own.status == "hit"
    assert own.compared_with == "the agent's pre-warm request"


async def test_a_family_of_one_is_never_prewarmed(tmp_path: Path) -> None:
    """Nobody would read the entry early, and the child would read it all again."""
    emulator = Emulator(latency=NO_LATENCY)
    events = Events()
    async with _prewarm_agent(emulator, tmp_path, events).session() as session:
        await session.send(CONTEXT)
        [task] = await session.fork(["check a"])

    assert not [e for e in events.of(RequestSent) if e.prewarm]  # three children are: above
    assert task.run.usage.requests == 1
    assert task.status == "completed"


async def test_when_the_model_refuses_to_prewarm_the_siblings_wait_for_the_first_response(
    tmp_path: Path,
) -> None:
    emulator = Emulator(latency=Latency(ttft=0.02, tokens_per_second=1e6))
    events = Events()
    thinking = ModelSettings(thinking=ThinkingConfig(type="enabled", budget_tokens=1024))
    agent = _prewarm_agent(emulator, tmp_path, events, settings=thinking, skip_transcript=True)
    async with agent.session() as session:
        await session.send(CONTEXT)
        tasks = await session.fork(["check a", "check b", "check c"])

    assert not [e for e in events.of(RequestSent) if e.prewarm]  # the API refuses it with thinking
    assert [task.status for task in tasks] == ["completed"] * 3
    reasons = [b.reason for entry in emulator.log for b in entry.breakpoints]
    assert "not_yet_visible" not in reasons
    # the siblings read the first child's shared prefix and write only their own directive
    writes = sorted(task.run.usage.cache_write_tokens for task in tasks)
    assert writes[1] < 20 < writes[2]


async def test_a_leaders_stream_is_finished_not_left_to_the_loops_finalizer(
    tmp_path: Path,
) -> None:
    """The leader streams (Anthropic's warm-up); every generator of that stream ends with
    it, none is closed later by the event loop's finalizer hook."""
    finalized: list[str] = []
    hooks = sys.get_asyncgen_hooks()

    def finalizer(generator: AsyncGenerator[object, None]) -> None:
        finalized.append(type(generator).__name__ + " " + repr(generator))
        if hooks.finalizer is not None:
            hooks.finalizer(generator)

    sys.set_asyncgen_hooks(hooks.firstiter, finalizer)
    events = Events()
    try:
        emulator = Emulator(latency=NO_LATENCY)
        agent = make_agent(EmulatorModel(CLAUDE, emulator), tmp_path, listeners=[events])
        async with agent.session() as session:
            await session.send(CONTEXT)
            tasks = await session.fork(["check a", "check b", "check c"])
            gc.collect()
    finally:
        sys.set_asyncgen_hooks(*hooks)

    assert [task.status for task in tasks] == ["completed"] * 3
    assert [entry.stream for entry in emulator.log] == [False, True, False, False]
    replies = [e.response for e in events.of(ResponseReceived) if e.agent_id == tasks[0].id]
    assert replies[0].message.text.startswith("Understood: ")
    assert finalized == []


# -- many forks: work in proportion to the family, not the tree --------------------------------


async def test_a_familys_cache_key_hash_is_computed_once_and_shared_by_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[ModelRequest] = []

    def counting(request: ModelRequest) -> str:
        hashed.append(request)
        return cache_key_hash(request)

    monkeypatch.setattr(runtime_module, "cache_key_hash", counting)
    events = Events()
    agent = make_agent(FunctionModel(lambda r: "done"), tmp_path, listeners=[events])
    async with agent.session() as session:
        await session.send("plan")
        await session.fork([f"part {n}" for n in range(8)])
        await session.send("plan again")
        await session.fork(["part 9", "part 10"])

    keys = [e.details["cache_key_hash"] for e in events.started if e.kind == "fork"]
    assert len(keys) == 10
    assert len(set(keys)) == 1  # the same tools, system and settings throughout
    assert len(hashed) == 2  # once per family


@pytest.mark.parametrize("system", ["You review code.", (TextBlock(text="a"), TextBlock(text="b"))])
def test_a_cache_key_hash_digests_the_canonical_model_settings_tools_and_system(
    system: str | tuple[TextBlock, ...],
) -> None:
    """Its tools' JSON is kept per tool object (``tool_json``): the digest is still the one
    of every part dumped and encoded afresh, and a tool changed is a new hash."""
    schema: dict[str, JsonValue] = {"type": "object", "properties": {"p": {"type": "string"}}}
    tools = tuple(ToolSpec(name=n, description="ü " + n, input_schema=schema) for n in "ab")
    thinking = ModelSettings(thinking=ThinkingConfig(type="enabled", budget_tokens=1024))
    request = ModelRequest(model=CLAUDE, system=system, tools=tools, settings=thinking)
    dumped = system if isinstance(system, str) else [b.model_dump(mode="json") for b in system]
    parts = [
        {"model": CLAUDE},
        thinking.model_dump(mode="json"),
        *(t.model_dump(mode="json") for t in tools),
        dumped,
    ]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(canonical_json(part))

    assert cache_key_hash(request) == digest.hexdigest()[:16]
    assert cache_key_hash(request) == digest.hexdigest()[:16]  # its tools' JSON kept
    other = ToolSpec(name="b", description="ü b", input_schema={"type": "object"})
    changed = request.model_copy(update={"tools": (tools[0], other)})
    assert cache_key_hash(changed) != cache_key_hash(request)


async def test_ending_a_child_does_not_walk_every_task_of_the_tree(tmp_path: Path) -> None:
    async def scans_for(forks: int) -> int:
        agent = make_agent(FunctionModel(lambda r: "done"), tmp_path)
        async with agent.session() as session:
            tasks = _CountingTasks()
            session._runtime.tasks = tasks
            await session.send("plan")
            children = await session.fork([f"part {n}" for n in range(forks)], background=True)
            await asyncio.gather(*(child.wait() for child in children))
        return tasks.scans

    assert await scans_for(30) == await scans_for(3)


class _CountingTasks(dict[str, AgentTask]):
    """The runtime's task table, counting the walks over all of it."""

    scans = 0

    def values(self) -> ValuesView[AgentTask]:  # type: ignore[override]
        self.scans += 1
        return super().values()


class _SlowFirstText(Model):
    """A provider whose reply begins at once, and whose first text waits for ``text``."""

    profile = ModelProfile(provider="test", warmup="first_response_starts")

    def __init__(self) -> None:
        self.text = asyncio.Event()

    @property
    def name(self) -> str:
        return "slow-first-text"

    async def request(self, request: ModelRequest) -> ModelResponse:
        return self._reply("sibling")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield ResponseStarted()
        await self.text.wait()
        yield TextDelta("leader")
        yield ResponseComplete(self._reply("leader"))

    def _reply(self, text: str) -> ModelResponse:
        return ModelResponse(
            message=AssistantMessage(content=(TextBlock(text=text),)),
            stop_reason="end_turn",
            usage=Usage(),
            model=self.name,
        )


async def test_warm_up_releases_the_siblings_when_the_reply_begins_not_at_its_first_text() -> None:
    """Anthropic's entry is readable once the response has begun (``message_start``)."""
    model = _SlowFirstText()
    family = ForkFamily(("parent", 1), "first_response_starts")
    request = ModelRequest(model=model.name)
    leader = asyncio.create_task(
        send_in_family(family, "a", model, request, prewarm=None, on_send=lambda: None)
    )
    sibling = asyncio.create_task(
        send_in_family(family, "b", model, request, prewarm=None, on_send=lambda: None)
    )

    answer = await asyncio.wait_for(sibling, 5)  # while the leader has shown no text

    assert answer.message.text == "sibling"
    assert not leader.done()
    model.text.set()
    assert (await leader).message.text == "leader"


async def test_a_sibling_cancelled_while_it_waits_leaves_the_others_to_be_released() -> None:
    """Only the cancelled sibling's wait ends; the release still lets every other one go."""
    model = _SlowFirstText()
    family = ForkFamily(("parent", 1), "first_response_ends")
    request = ModelRequest(model=model.name)
    sent: list[str] = []

    def send(agent_id: str) -> asyncio.Task[ModelResponse]:
        return asyncio.create_task(
            send_in_family(
                family,
                agent_id,
                model,
                request,
                prewarm=None,
                on_send=lambda: sent.append(agent_id),
            )
        )

    leader_release = asyncio.Event()
    original = model.request

    async def leader_waits(request: ModelRequest) -> ModelResponse:
        await leader_release.wait()
        return await original(request)

    model.request = leader_waits  # type: ignore[method-assign]  # the leader's reply is held
    leader = send("a")
    await asyncio.sleep(0)
    model.request = original  # type: ignore[method-assign]
    siblings = [send(agent_id) for agent_id in ("b", "c", "d")]
    await asyncio.sleep(0)
    siblings[1].cancel()
    await asyncio.sleep(0)
    assert sent == ["a"]
    leader_release.set()
    outcomes = await asyncio.gather(leader, *siblings, return_exceptions=True)
    assert [type(o).__name__ for o in outcomes] == [
        "ModelResponse",
        "ModelResponse",
        "CancelledError",
        "ModelResponse",
    ]
    assert sent == ["a", "b", "d"]
    assert family.wait() is None  # released: a late sibling does not wait at all


async def test_a_runtime_sibling_waits_for_the_release_under_its_timeout_and_cancel(
    tmp_path: Path,
) -> None:
    """The runtime's siblings wait in the turn loop itself: a cancelled one ends cancelled
    without sending, one past its wall-time limit times out, the others go once released."""
    leader_release = asyncio.Event()
    sent: list[str] = []

    async def answer(request: ModelRequest) -> str:
        if request.messages[-1].text.endswith("lead"):
            await leader_release.wait()
        return "done"

    def on_event(event: Event) -> None:
        if isinstance(event, RequestSent) and event.agent_id.startswith("fork"):
            sent.append(event.agent_id)

    model = FunctionModel(answer)
    model.profile = ModelProfile(provider="test", warmup="first_response_ends")
    agent = make_agent(model, tmp_path, listeners=[on_event])
    async with agent.session() as session:
        await session.send("plan")
        lead, waits, cancelled = await session.fork(["lead", "waits", "cancelled"], background=True)
        slow = await session.fork([ForkParams("slow", timeout=0.05)], background=True)
        await asyncio.sleep(0.01)
        assert sent == [lead.id]
        session.cancel(cancelled.id)
        timed_out = await slow[0].wait()
        leader_release.set()
        results = [await t.wait() for t in (lead, waits, cancelled)]
    assert [r.status for r in results] == ["completed", "completed", "cancelled"]
    assert timed_out.status == "timed_out"
    assert sent == [lead.id, waits.id]
