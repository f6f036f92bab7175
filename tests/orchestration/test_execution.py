"""Execution: background children, notifications, moving to the background, cancellation."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from forkagent._orchestration.runtime import RuntimeOptions
from forkagent.agents import AgentDefinition
from forkagent.errors import AgentSpawnError
from forkagent.events import NOTIFICATION_TAG, AgentMovedToBackground, NotificationDelivered
from forkagent.messages import JsonValue, Message, TextBlock, ToolUseBlock, UserMessage
from forkagent.requests import ModelRequest
from forkagent.testing import reply, tool_call
from forkagent.tools import tool

from ._support import (
    Events,
    assert_consistent,
    is_child,
    is_root,
    make_agent,
    results_by_id,
    tree_model,
    turn_of,
)


def notifications(messages: Sequence[Message], task_id: str) -> int:
    """How many times the task's notification appears in a conversation."""
    marker = f"<{NOTIFICATION_TAG}>\ntask: {task_id}\n"
    return sum(
        block.text.count(marker)
        for m in messages
        if isinstance(m, UserMessage)
        for block in m.content
        if isinstance(block, TextBlock)
    )


def assert_no_repeated_request(requests: Sequence[ModelRequest]) -> None:
    sent = [r.canonical_bytes() for r in requests]
    assert len(set(sent)) == len(sent), "a model request was sent twice"


def started_children(events: Events) -> list[str]:
    return [e.agent_id for e in events.started if e.parent_id is not None]


# -- background children and their notification ------------------------------------------------


@pytest.mark.parametrize("child_finishes", ["while_parent_works", "after_parent_is_idle"])
async def test_a_background_notification_arrives_exactly_once(
    tmp_path: Path, child_finishes: str
) -> None:
    events = Events()
    parent_idle, parent_busy = asyncio.Event(), asyncio.Event()

    async def root_second_turn(request: ModelRequest) -> object:
        parent_busy.set()
        if child_finishes == "while_parent_works":
            await asyncio.sleep(0.05)  # the child reports during this turn
        return "I will wait for the report."

    async def child(request: ModelRequest) -> str:
        await (parent_busy if child_finishes == "while_parent_works" else parent_idle).wait()
        return "Scope: background work done."

    def root_third_turn(request: ModelRequest) -> str:
        return "Got the report."

    model = tree_model(
        [
            reply(tool_call("Agent", id="bg", prompt="work", fork=True, run_in_background=True)),
            root_second_turn,  # type: ignore[list-item]
            root_third_turn,
        ],
        fork=child,
    )

    agent = make_agent(model, tmp_path, subagents=True, listeners=[events])
    async with agent.session() as session:
        first = await session.send("go")
        parent_idle.set()
        await session.idle()
        [task_id] = started_children(events)
        final = session.result()
    launch = results_by_id(first.messages)["bg"].text
    assert task_id in launch
    assert "automatically" in launch
    assert "Do not poll" in launch
    assert notifications(final.messages, task_id) == 1
    assert [e.task_id for e in events.of(NotificationDelivered)] == [task_id]
    assert final.output == "Got the report."
    assert "Scope: background work done." in str(final.messages)
    root_requests = [r for r in model.requests if is_root(r)]
    assert notifications(root_requests[-1].messages, task_id) == 1
    assert_no_repeated_request(model.requests)
    assert_consistent(final.messages)


async def test_run_waits_for_background_children_and_their_reports(tmp_path: Path) -> None:
    events = Events()
    calls = [
        tool_call("Agent", id=f"bg{i}", prompt=f"part {i}", fork=True, run_in_background=True)
        for i in range(3)
    ]
    model = tree_model([reply(*calls), "Waiting."], fork=lambda r: f"Scope: {r.messages[-1].text}")
    result = await make_agent(model, tmp_path, subagents=True, listeners=[events]).run("go")
    ids = started_children(events)
    assert len(ids) == 3
    for task_id in ids:
        assert notifications(result.messages, task_id) == 1
    assert sorted(e.task_id for e in events.of(NotificationDelivered)) == sorted(ids)
    assert result.status == "completed"
    assert {a.status for a in result.agents} == {"completed"}
    assert_consistent(result.messages)


async def test_without_resume_the_notification_waits_for_the_next_turn(tmp_path: Path) -> None:
    events = Events()
    release = asyncio.Event()

    async def child(request: ModelRequest) -> str:
        await release.wait()
        return "Scope: done."

    model = tree_model(
        [
            reply(tool_call("Agent", id="bg", prompt="w", fork=True, run_in_background=True)),
            "ok",
            "seen",
        ],
        fork=child,
    )
    agent = make_agent(
        model,
        tmp_path,
        subagents=True,
        listeners=[events],
        options=RuntimeOptions(resume_on_notification=False),
    )
    async with agent.session() as session:
        await session.send("go")
        release.set()
        await session.idle()
        requests_before = len(model.requests)
        [task_id] = started_children(events)
        assert notifications(session.messages, task_id) == 0  # no turn was started for it
        result = await session.send("anything new?")
    assert len(model.requests) == requests_before + 1
    assert notifications(result.messages, task_id) == 1
    assert notifications(model.requests[-1].messages, task_id) == 1
    assert [e.task_id for e in events.of(NotificationDelivered)] == [task_id]


async def test_a_report_read_mid_turn_does_not_wake_the_parent_again(tmp_path: Path) -> None:
    """One child reports while the parent works; the parent then waits for the other."""
    release, working = asyncio.Event(), asyncio.Event()

    async def child(request: ModelRequest) -> str:
        text = request.messages[-1].content[-1].text  # type: ignore[union-attr]
        # Each child answers only once the parent's second turn is under way, however
        # the event loop orders the tasks before it.
        await (release if text.endswith("slow") else working).wait()
        return "Scope: ok"

    async def second_turn(request: ModelRequest) -> str:
        working.set()
        await asyncio.sleep(0.05)  # the fast child reports meanwhile
        asyncio.get_running_loop().call_later(0.1, release.set)
        return "Waiting."

    calls = [
        tool_call("Agent", prompt=name, fork=True, run_in_background=True)
        for name in ("fast", "slow")
    ]
    model = tree_model([reply(*calls), second_turn, "Read the first report."], fork=child)
    result = await make_agent(model, tmp_path, subagents=True).run("go")
    root_requests = [r for r in model.requests if is_root(r)]
    assert [type(r.messages[-1]).__name__ for r in root_requests] == ["UserMessage"] * 4
    assert_no_repeated_request(model.requests)
    assert result.output == "root done"


# -- sync or background: run_in_background alone decides ---------------------------------------


@pytest.mark.parametrize("kind", ["fork", "named"])
@pytest.mark.parametrize("run_in_background", [None, False, True])
async def test_run_in_background_alone_decides(
    tmp_path: Path, kind: str, run_in_background: bool | None
) -> None:
    events = Events()
    args: dict[str, JsonValue] = {"prompt": "work"}
    if kind == "fork":
        args["fork"] = True
    if run_in_background is not None:
        args["run_in_background"] = run_in_background
    model = tree_model([reply(ToolUseBlock(id="a", name="Agent", input=args))])
    async with make_agent(model, tmp_path, subagents=True, listeners=[events]).session() as session:
        first = await session.send("go")
        [started] = [e for e in events.started if e.parent_id is not None]
        background = bool(run_in_background)
        assert started.kind == kind
        assert started.background is background
        text = results_by_id(first.messages)["a"].text
        if background:
            assert "in the background" in text
            assert "automatically" in text
        else:
            assert ("Scope: fork done." if kind == "fork" else "named done") in text
            assert "finished: completed" in text
        await session.idle()


@pytest.mark.parametrize(
    ("run_in_background", "expected"), [(None, True), (False, False), (True, True)]
)
async def test_a_definitions_background_default_yields_to_the_call(
    tmp_path: Path, run_in_background: bool | None, expected: bool
) -> None:
    events = Events()
    watcher = AgentDefinition(
        name="watcher", description="Watches.", system_prompt="Watch.", background=True
    )
    args: dict[str, object] = {"prompt": "watch", "subagent_type": "watcher"}
    if run_in_background is not None:
        args["run_in_background"] = run_in_background
    model = tree_model([reply(ToolUseBlock(id="a", name="Agent", input=args))])
    agent = make_agent(model, tmp_path, subagents=True, agents=[watcher], listeners=[events])
    async with agent.session() as session:
        await session.send("go")
        [started] = [e for e in events.started if e.parent_id is not None]
        assert started.background is expected
        await session.idle()


# -- moving a sync child to the background -----------------------------------------------------


@tool
def step(n: int) -> str:
    """One step of work."""
    return f"step {n} done"


def _moving_child(in_flight: asyncio.Event, release: asyncio.Event) -> object:
    async def child(request: ModelRequest) -> object:
        turn = turn_of(request) - 1
        if turn == 0:
            return reply("Starting.", tool_call("step", n=1))
        if turn == 1:
            in_flight.set()
            await release.wait()  # the parent moves us to the background meanwhile
            return reply(tool_call("step", n=2))
        return "Scope: finished after two steps."

    return child


@pytest.mark.parametrize("how", ["api", "auto"])
async def test_a_sync_child_moved_to_the_background_repeats_nothing(
    tmp_path: Path, how: str
) -> None:
    events = Events()
    in_flight, release = asyncio.Event(), asyncio.Event()
    model = tree_model(
        [
            reply(tool_call("Agent", id="a", prompt="long job", fork=True)),
            "Carrying on.",
            "Report read.",
        ],
        fork=_moving_child(in_flight, release),  # type: ignore[arg-type]
    )
    options = RuntimeOptions(auto_background_after=0.05 if how == "auto" else None)
    agent = make_agent(
        model, tmp_path, subagents=True, tools=[step], listeners=[events], options=options
    )
    async with agent.session() as session:
        turn = asyncio.create_task(session.send("go"))
        await asyncio.wait_for(in_flight.wait(), 5)
        [task_id] = started_children(events)
        if how == "api":
            session.move_to_background(task_id)
        first = await asyncio.wait_for(turn, 5)  # the parent goes on while the child still runs
        task = session.task(task_id)
        assert task.status == "running"
        assert task.background
        moved = results_by_id(first.messages)["a"].text
        assert "moved to the background" in moved
        assert "automatically" in moved
        assert first.output == "Carrying on."
        release.set()
        await session.idle()
        final = session.result()
    ended: str = task.status  # a fresh read: the child ran on since the check above
    assert ended == "completed"
    assert task.result is not None
    assert task.result.output == "Scope: finished after two steps."
    child_requests = [r for r in model.requests if is_child(r)]
    assert len(child_requests) == 3  # three turns, none repeated
    assert_no_repeated_request(model.requests)
    # The same loop went on: each request extends the one before.
    for before, after in itertools.pairwise(child_requests):
        assert after.messages[: len(before.messages)] == before.messages
    directive = child_requests[0].messages[-1].content[-1]
    assert isinstance(directive, TextBlock)
    assert directive.text.endswith("long job")
    assert [e.agent_id for e in events.of(AgentMovedToBackground)] == [task_id]
    assert notifications(final.messages, task_id) == 1
    assert final.output == "Report read."
    assert_consistent(task.run.messages)


# -- cancellation ------------------------------------------------------------------------------


def _sleeper(sleeping: list[str], cancelled: list[str]) -> object:
    @tool
    async def nap(ctx_label: str = "") -> str:
        """Sleep for an hour."""
        sleeping.append(ctx_label)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(ctx_label)
            raise
        return "rested"

    return nap


async def _until(condition: Callable[[], bool], seconds: float = 5) -> None:
    """Poll a condition that several tasks make true (no single event to wait on)."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_cancel_one_task_by_id(tmp_path: Path) -> None:
    events = Events()
    sleeping: list[str] = []
    cancelled: list[str] = []
    release = asyncio.Event()

    async def child(request: ModelRequest) -> object:
        directive = request.messages[-1].content[-1].text  # type: ignore[union-attr]
        if "sleepy" in directive and turn_of(request) == 1:
            return reply(tool_call("nap"))
        await release.wait()
        return f"Scope: {directive.splitlines()[-1]}"

    calls = [
        tool_call("Agent", id=name, prompt=name, fork=True, run_in_background=True)
        for name in ("sleepy", "steady")
    ]
    model = tree_model([reply(*calls), "Waiting.", "Noted.", "Noted again."], fork=child)  # type: ignore[arg-type]
    agent = make_agent(
        model, tmp_path, subagents=True, tools=[_sleeper(sleeping, cancelled)], listeners=[events]
    )
    async with agent.session() as session:
        await session.send("go")
        await _until(lambda: bool(sleeping))
        sleepy_id, steady_id = started_children(events)
        session.cancel(sleepy_id)
        await asyncio.wait_for(session.task(sleepy_id).wait(), 5)
        assert session.task(sleepy_id).status == "cancelled"
        assert session.task(steady_id).status == "running"
        release.set()
        await session.idle()
        assert session.task(steady_id).status == "completed"
        final = session.result()
    assert len(cancelled) == 1
    sleepy = session.task(sleepy_id).run
    assert_consistent(sleepy.messages)
    assert notifications(final.messages, sleepy_id) == 1
    assert notifications(final.messages, steady_id) == 1
    assert "status: cancelled" in str(final.messages)


async def test_cancel_an_unknown_id_says_so(tmp_path: Path) -> None:
    async with make_agent(tree_model(["hi"]), tmp_path).session() as session:
        with pytest.raises(AgentSpawnError, match="no agent task with id 'nope'"):
            session.cancel("nope")


async def test_closing_the_session_cancels_a_100_agent_tree_promptly(tmp_path: Path) -> None:
    """10 background named agents, each with 9 background forks asleep in a tool."""
    events = Events()
    sleeping: list[str] = []
    cancelled: list[str] = []

    def named(request: ModelRequest) -> object:
        if turn_of(request) == 0:
            return reply(
                *[
                    tool_call("Agent", prompt=f"part {i}", fork=True, run_in_background=True)
                    for i in range(9)
                ]
            )
        return "Waiting for my forks."

    root_calls = [
        tool_call(
            "Agent", prompt=f"area {i}", subagent_type="general-purpose", run_in_background=True
        )
        for i in range(10)
    ]
    model = tree_model(
        [reply(*root_calls), "Waiting for everyone."],
        named=named,  # type: ignore[arg-type]
        fork=lambda r: reply(tool_call("nap")) if turn_of(r) == 1 else "Scope: rested.",
    )
    agent = make_agent(
        model,
        tmp_path,
        subagents=True,
        tools=[_sleeper(sleeping, cancelled)],
        listeners=[events],
        options=RuntimeOptions(max_agents=200),
        registry=False,
        skip_transcript=True,
    )
    session = agent.session()
    await session.send("go")
    await _until(lambda: len(sleeping) == 90, seconds=20)
    runtime = session._runtime
    assert len(runtime.tasks) == 100
    sent_before_close = len(model.requests)
    async with asyncio.timeout(10):
        await session.aclose()
    assert len(cancelled) == 90
    statuses = {t.status for t in runtime.tasks.values()}
    assert statuses == {"cancelled"}
    assert all(t._task is not None and t._task.done() for t in runtime.tasks.values())
    for task in runtime.tasks.values():
        assert_consistent(task.run.messages)
    late = [
        ("root" if is_root(r) else "other", r.messages[-1].text[:80])
        for r in model.requests[sent_before_close:]
    ]
    assert late == [], "closing the session started new turns"


async def test_interrupting_the_parent_turn_spares_background_children(tmp_path: Path) -> None:
    events = Events()
    release = asyncio.Event()
    waiting: set[str] = set()

    async def child(request: ModelRequest) -> str:
        directive = request.messages[-1].content[-1].text  # type: ignore[union-attr]
        waiting.add(directive.splitlines()[-1])
        if directive.endswith("foreground"):
            await asyncio.sleep(3600)
        await release.wait()
        return "Scope: background done."

    calls = [
        tool_call("Agent", id="bg", prompt="background", fork=True, run_in_background=True),
        tool_call("Agent", id="fg", prompt="foreground", fork=True),
    ]
    model = tree_model([reply(*calls), "Back after the report."], fork=child)
    async with make_agent(model, tmp_path, subagents=True, listeners=[events]).session() as session:
        turn = asyncio.create_task(session.send("go"))
        await _until(lambda: waiting == {"background", "foreground"})
        bg_id, fg_id = started_children(events)
        turn.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await turn
            await asyncio.gather(session.task(fg_id).wait(), return_exceptions=True)
        assert session.task(fg_id).status == "cancelled"  # the turn's own child stops with it
        assert session.task(bg_id).status == "running"  # the background child is spared
        interrupted = session.messages
        assert_consistent(interrupted)
        results = results_by_id(interrupted)
        assert "in the background" in results["bg"].text
        assert results["fg"].is_error
        release.set()
        await session.idle()
        assert session.task(bg_id).status == "completed"
        final = session.result()
    assert notifications(final.messages, bg_id) == 1
    assert final.output == "Back after the report."


async def test_a_failing_child_reports_its_failure(tmp_path: Path) -> None:
    events = Events()

    def child(request: ModelRequest) -> str:
        raise RuntimeError("the provider fell over")

    calls = [
        tool_call("Agent", id="sync", prompt="a", fork=True),
        tool_call("Agent", id="bg", prompt="b", fork=True, run_in_background=True),
    ]
    model = tree_model([reply(*calls), "Handled."], fork=child)
    result = await make_agent(model, tmp_path, subagents=True, listeners=[events]).run("go")
    sync = results_by_id(result.messages)["sync"].text
    assert "failed" in sync
    assert "the provider fell over" in sync
    bg_id = started_children(events)[1]
    assert notifications(result.messages, bg_id) == 1
    assert "status: failed" in str(result.messages)
    assert {a.status for a in result.agents if a.parent} == {"failed"}
    assert result.status == "completed"


async def test_a_named_child_waits_for_its_own_background_fork(tmp_path: Path) -> None:
    """The drive loop works at every level: a named agent reads its fork's report first."""

    def named(request: ModelRequest) -> object:
        if turn_of(request) == 0:
            return reply(tool_call("Agent", prompt="dig", fork=True, run_in_background=True))
        if f"<{NOTIFICATION_TAG}>" not in request.messages[-1].text:
            return "Waiting for my fork."
        return "named final: the fork dug."

    model = tree_model(
        [reply(tool_call("Agent", id="n", prompt="investigate"))],
        named=named,  # type: ignore[arg-type]
    )
    result = await make_agent(model, tmp_path, subagents=True).run("go")
    assert "named final: the fork dug." in results_by_id(result.messages)["n"].text
    assert {a.kind: a.status for a in result.agents} == {
        "main": "completed",
        "named": "completed",
        "fork": "completed",
    }


async def test_cancelling_a_sync_child_by_id_lets_the_parent_go_on(tmp_path: Path) -> None:
    events = Events()
    in_flight = asyncio.Event()

    async def child(request: ModelRequest) -> str:
        in_flight.set()
        await asyncio.sleep(3600)
        return "never"

    model = tree_model(
        [reply(tool_call("Agent", id="a", prompt="hang", fork=True)), "Moving on."], fork=child
    )
    async with make_agent(model, tmp_path, subagents=True, listeners=[events]).session() as session:
        turn = asyncio.create_task(session.send("go"))
        await asyncio.wait_for(in_flight.wait(), 5)
        [child_id] = started_children(events)
        session.cancel(child_id)
        result = await asyncio.wait_for(turn, 5)
    assert session.task(child_id).status == "cancelled"
    assert "finished: cancelled" in results_by_id(result.messages)["a"].text
    assert (result.status, result.output) == ("completed", "Moving on.")


async def test_a_report_arriving_during_a_tool_call_joins_the_results(tmp_path: Path) -> None:
    events = Events()
    reported, busy = asyncio.Event(), asyncio.Event()

    @tool
    async def wait_for_report() -> str:
        """Busy work while the child finishes."""
        busy.set()
        await asyncio.wait_for(reported.wait(), 5)
        return "busy work done"

    async def child(request: ModelRequest) -> str:
        await busy.wait()  # it finishes during the tool call, however the tasks are ordered
        return "Scope: ok"

    def listener(event: object) -> None:
        events(event)  # type: ignore[arg-type]
        if type(event).__name__ == "AgentFinished" and getattr(event, "agent_id", "").startswith(
            "fork"
        ):
            reported.set()

    model = tree_model(
        [
            reply(tool_call("Agent", prompt="w", fork=True, run_in_background=True)),
            reply(tool_call("wait_for_report", id="busy")),
            "Saw it.",
        ],
        fork=child,
    )
    result = await make_agent(
        model, tmp_path, subagents=True, tools=[wait_for_report], listeners=[listener]
    ).run("go")
    [task_id] = started_children(events)
    assert notifications(result.messages, task_id) == 1
    merged = next(m for m in result.messages if notifications([m], task_id))
    assert isinstance(merged, UserMessage)
    assert [r.tool_use_id for r in merged.tool_results] == [
        "busy"
    ]  # results first, then the report
    assert isinstance(merged.content[-1], TextBlock)
    assert_consistent(result.messages)
    assert result.output == "Saw it."


async def test_programmatic_background_forks_report_into_the_conversation(tmp_path: Path) -> None:
    model = tree_model(
        ["Hello.", "Both reports read."], fork=lambda r: f"Scope: {r.messages[-1].text}"
    )
    async with make_agent(model, tmp_path).session() as session:
        await session.send("hi")
        handles = await session.fork(["one", "two"], background=True)
        results = [await h.wait() for h in handles]
        await session.idle()
        final = session.result()
    assert [r.status for r in results] == ["completed", "completed"]
    assert results[0].output.endswith("one")
    for handle in handles:
        assert notifications(final.messages, handle.id) == 1
    assert final.output in ("Both reports read.", "root done")


async def test_waiting_on_a_handle_can_be_abandoned_without_cancelling_the_child(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def child(request: ModelRequest) -> str:
        await release.wait()
        return "Scope: done"

    model = tree_model(["Hello."], fork=child)
    async with make_agent(model, tmp_path).session() as session:
        await session.send("hi")
        [handle] = await session.fork(["x"], background=True)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(handle.wait(), 0.05)
        assert handle.status == "running"
        release.set()
        assert (await handle.wait()).status == "completed"


async def test_usage_is_kept_per_agent_and_summed_over_the_tree(tmp_path: Path) -> None:
    calls = [tool_call("Agent", prompt=f"part {i}", fork=True) for i in range(2)]
    model = tree_model([reply(*calls)])
    result = await make_agent(model, tmp_path, subagents=True).run("go")
    assert [a.kind for a in result.agents] == ["main", "fork", "fork"]
    main, *children = result.agents
    assert main.usage == result.usage
    assert all(c.usage.requests == 1 and c.usage.input_tokens > 0 for c in children)
    assert result.total_usage == main.usage + children[0].usage + children[1].usage
    assert result.usage.requests == 2  # the main agent's own, children not mixed in
    assert all(a.cost is None for a in result.agents)  # an unknown price stays unknown


async def test_a_childs_hung_model_request_is_a_failure_not_a_budget(tmp_path: Path) -> None:
    async def hang(request: ModelRequest) -> str:
        await asyncio.sleep(3600)
        return "never"

    model = tree_model([reply(tool_call("Agent", id="a", prompt="x", fork=True))], fork=hang)
    async with asyncio.timeout(5):
        result = await make_agent(model, tmp_path, subagents=True, request_timeout=0.05).run("go")
    text = results_by_id(result.messages)["a"].text
    assert "finished: failed" in text
    assert "did not answer within 0.05s" in text
    assert "None" not in text
