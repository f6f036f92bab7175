"""Every agent's record tells the truth at the edges (issue 15).

Failures, interrupts, stops, cancels right after start, wall-time limits
during a request, hooks around children, replies cut at ``max_tokens``,
duplicate tool-call ids, resume leases and lost children.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from forkagent import Session
from forkagent._orchestration.budget import Limits
from forkagent._orchestration.runtime import RuntimeOptions
from forkagent.errors import ConfigurationError, ModelError, ProviderError
from forkagent.events import NOTIFICATION_TAG, AgentFinished, Event, RequestSent
from forkagent.hooks import HookInput, HookOutcome, Hooks
from forkagent.messages import AssistantMessage, TextBlock, ToolResultBlock, UserMessage, user
from forkagent.models.base import ModelResponse
from forkagent.requests import ModelRequest, ModelSettings
from forkagent.state.lease import AgentBusyError
from forkagent.state.registry import Registry
from forkagent.state.transcript import (
    TranscriptHeader,
    TranscriptWriter,
    read_transcript,
    transcript_path,
)
from forkagent.testing import FunctionModel, ScriptedModel, reply, tool_call
from forkagent.usage import Usage

from ._support import Events, is_child, is_root, make_agent


def on(kind: type[Event], flag: asyncio.Event) -> Callable[[Event], None]:
    """A listener that sets ``flag`` at the first event of ``kind``."""

    def listener(event: Event) -> None:
        if isinstance(event, kind):
            flag.set()

    return listener


def _final_records(agent_id: str) -> tuple[str | None, str]:
    """How the agent's transcript and its registry row say it ended."""
    transcript = read_transcript(transcript_path(agent_id, agent_id))
    assert transcript.status is not None
    return transcript.status.status, Registry().get(agent_id).status


def _main_id(events: Events) -> str:
    return next(e.agent_id for e in events.started if e.parent_id is None)


async def _never(request: ModelRequest) -> str:
    await asyncio.Event().wait()
    return "unreachable"


# -- 1. failures and interrupts of the main agent -------------------------------------


async def test_a_model_call_that_fails_is_recorded_failed_with_its_error(tmp_path: Path) -> None:
    failure = ProviderError("the provider failed: boom", provider="test", status=500)
    events = Events()
    agent = make_agent(ScriptedModel([failure]), tmp_path, listeners=[events])

    with pytest.raises(ProviderError):
        await agent.run("go")

    main = _main_id(events)
    assert _final_records(main) == ("failed", "failed")
    finished = events.of(AgentFinished)[-1]
    assert finished.status == "failed"
    assert "boom" in (finished.error or "")


async def test_an_interrupted_run_is_recorded_interrupted_with_how_to_resume(
    tmp_path: Path,
) -> None:
    events = Events()
    sent = asyncio.Event()
    agent = make_agent(
        FunctionModel(_never),
        tmp_path,
        listeners=[events, on(RequestSent, sent)],
    )

    run = asyncio.create_task(agent.run("go"))
    await sent.wait()
    run.cancel()  # what Ctrl-C does to asyncio.run's main task
    with pytest.raises(asyncio.CancelledError):
        await run

    main = _main_id(events)
    assert _final_records(main) == ("interrupted", "interrupted")
    assert f"forkagent resume {main}" in (events.of(AgentFinished)[-1].error or "")


# -- 2. forkagent stop reaches the main agent ------------------------------------------


async def test_a_stop_request_stops_the_main_agent(tmp_path: Path) -> None:
    events = Events()
    sent = asyncio.Event()
    agent = make_agent(
        FunctionModel(_never),
        tmp_path,
        listeners=[events, on(RequestSent, sent)],
    )
    run = asyncio.create_task(agent.run("go"))
    await sent.wait()
    main = _main_id(events)
    registry = Registry()
    await asyncio.to_thread(_wait_for_row, registry, main)  # rows are written off the loop
    assert registry.request_stop(main).outcome == "requested"

    result = await asyncio.wait_for(run, 30)

    assert result.status == "cancelled"
    assert _final_records(main) == ("cancelled", "cancelled")


async def test_closing_waits_for_a_stop_query_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry query left running in its thread would open the registry after the
    session ended, e.g. recreate it in a state folder being deleted."""
    querying, release, finished = threading.Event(), threading.Event(), threading.Event()
    asked = Registry.stops_requested

    def slow_query(registry: Registry, agent_ids: Iterable[str]) -> set[str]:
        querying.set()
        release.wait(30)
        try:
            return asked(registry, agent_ids)
        finally:
            finished.set()

    monkeypatch.setattr(Registry, "stops_requested", slow_query)
    sent = asyncio.Event()
    agent = make_agent(FunctionModel(_never), tmp_path, listeners=[on(RequestSent, sent)])
    session = agent.session()
    turn = asyncio.create_task(session.send("go"))
    await sent.wait()
    await asyncio.to_thread(querying.wait, 30)
    turn.cancel()
    await asyncio.gather(turn, return_exceptions=True)
    closing = asyncio.create_task(session.aclose())
    # Without the wait, closing ends in milliseconds while the query is still held.
    ended_early, _ = await asyncio.wait({closing}, timeout=0.5)
    assert not ended_early
    release.set()
    await asyncio.wait_for(closing, 30)
    assert finished.is_set()


def _wait_for_row(registry: Registry, agent_id: str) -> None:
    while not any(r.id == agent_id for r in registry.list()):
        time.sleep(0.01)


# -- 3. cancel right after start -------------------------------------------------------


async def test_a_child_cancelled_right_after_start_ends_cancelled_and_reports_once(
    tmp_path: Path,
) -> None:
    events = Events()
    agent = make_agent(FunctionModel(lambda r: "ok"), tmp_path, listeners=[events])
    async with agent.session() as session:
        await session.send("plan")
        (child,) = await session.fork(["do it"], background=True)
        session.cancel(child.id)

        result = await asyncio.wait_for(child.wait(), 30)
        await session.idle()
        notices = [
            b
            for m in session.messages
            if isinstance(m, UserMessage)
            for b in m.content
            if isinstance(b, TextBlock) and NOTIFICATION_TAG in b.text and child.id in b.text
        ]

    assert result.status == "cancelled"
    assert [e.status for e in events.of(AgentFinished) if e.agent_id == child.id] == ["cancelled"]
    assert len(notices) == 1


# -- 7. limits -------------------------------------------------------------------------


async def test_the_tree_time_limit_cuts_a_request_in_flight(tmp_path: Path) -> None:
    async def answer(request: ModelRequest) -> str:
        return await _never(request) if is_child(request) else "planned"

    agent = make_agent(FunctionModel(answer), tmp_path, tree_limits=Limits(max_seconds=0.3))
    async with agent.session() as session:
        await session.send("plan")
        (child,) = await asyncio.wait_for(session.fork(["wait forever"]), 30)

    assert child.result is not None
    assert child.result.status == "timed_out"
    assert "0.3s" in (child.result.error or "")


@pytest.mark.parametrize("field", ["max_turns", "max_tokens", "max_cost", "max_seconds"])
def test_negative_limits_are_refused(field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{field} is -1"):
        Limits(**{field: -1})


@pytest.mark.parametrize("field", ["max_depth", "max_agents", "auto_background_after"])
def test_negative_runtime_options_are_refused(field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{field} is -1"):
        RuntimeOptions(**{field: -1})  # type: ignore[arg-type]  # each field, by name


# -- 8. hooks around children ----------------------------------------------------------


def test_subagent_start_context_reaches_the_child(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(request: ModelRequest) -> AssistantMessage | str:
        if is_root(request):
            if len(request.messages) == 1:
                return reply(tool_call("Agent", prompt="check the schema"))
            return "done"
        seen.append(str(request.messages[-1].model_dump()))
        return "child report"

    hooks = Hooks()
    hooks.add("SubagentStart", lambda i: HookOutcome.context("The schema lives in db/schema.sql."))
    agent = make_agent(FunctionModel(answer), tmp_path, subagents=True, hooks=hooks)
    agent.run_sync("go")

    assert len(seen) == 1
    assert "The schema lives in db/schema.sql." in seen[0]


def test_a_blocking_subagent_stop_hook_sends_the_child_back_to_work(tmp_path: Path) -> None:
    child_prompts: list[str] = []
    checks: list[HookInput] = []

    def answer(request: ModelRequest) -> AssistantMessage | str:
        if is_root(request):
            if len(request.messages) == 1:
                return reply(tool_call("Agent", prompt="write the tests"))
            return "done"
        last = request.messages[-1]
        child_prompts.append(last.text if isinstance(last, UserMessage) else "")
        return "tests written" if len(child_prompts) > 1 else "I stopped early"

    def stop_check(hook_input: HookInput) -> HookOutcome:
        checks.append(hook_input)
        if hook_input.result == "I stopped early":
            return HookOutcome.block("the tests do not run yet")
        return HookOutcome()

    hooks = Hooks()
    hooks.add("SubagentStop", stop_check)
    agent = make_agent(FunctionModel(answer), tmp_path, subagents=True, hooks=hooks)
    result = agent.run_sync("go")

    assert "the tests do not run yet" in child_prompts[1]
    assert [c.stop_hook_active for c in checks] == [False, True]
    child = next(a for a in result.agents if a.kind != "main")
    assert child.status == "completed"
    assert child.turns == 2


# -- 11. smaller truths ----------------------------------------------------------------


def _cut(message: AssistantMessage) -> ModelResponse:
    return ModelResponse(
        message=message, stop_reason="max_tokens", usage=Usage(input_tokens=5, output_tokens=9)
    )


def test_a_reply_cut_at_max_tokens_is_truncated_not_completed(tmp_path: Path) -> None:
    model = ScriptedModel([_cut(reply("The report starts"))])
    agent = make_agent(model, tmp_path, settings=ModelSettings(max_tokens=77))

    result = agent.run_sync("report")

    assert result.status == "truncated"
    assert result.stop_reason == "max_tokens"
    assert "max_tokens (77)" in (result.error or "")


def test_tool_calls_of_a_cut_reply_run_and_the_model_hears_of_the_cut(tmp_path: Path) -> None:
    model = ScriptedModel(
        [_cut(reply(tool_call("Read", file_path="a.txt"))), "all read"],
    )
    (tmp_path / "a.txt").write_text("alpha")
    agent = make_agent(model, tmp_path, builtin_tools=True)

    result = agent.run_sync("read them")

    results = result.messages[2]
    assert isinstance(results, UserMessage)
    read, note = results.content
    assert isinstance(read, ToolResultBlock)
    assert "alpha" in read.text
    assert isinstance(note, TextBlock)
    assert "cut at max_tokens" in note.text
    assert result.status == "completed"


def test_duplicate_tool_call_ids_are_a_clear_error(tmp_path: Path) -> None:
    doubled = reply(tool_call("Read", id="t1", file_path="a"), tool_call("Grep", id="t1"))
    events = Events()
    agent = make_agent(ScriptedModel([doubled]), tmp_path, listeners=[events])

    with pytest.raises(ModelError, match="two tool calls with the id 't1'"):
        agent.run_sync("go")

    assert _final_records(_main_id(events))[0] == "failed"


async def test_test_models_log_no_cache_break_per_fork(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(FunctionModel(lambda r: "ok"), tmp_path)
    with caplog.at_level(logging.WARNING, logger="forkagent.cache"):
        async with agent.session() as session:
            await session.send("plan")
            await session.fork(["a", "b", "c"])

    assert not [r for r in caplog.records if "cache break" in r.message]


# -- 5. resume: the lease and lost children ------------------------------------------


async def test_resuming_an_agent_whose_session_still_runs_is_refused(tmp_path: Path) -> None:
    agent = make_agent(FunctionModel(lambda r: "hello"), tmp_path)
    async with agent.session() as session:
        await session.send("hi")
        path = transcript_path(session.root.id, session.root.id)

        with pytest.raises(AgentBusyError, match="still running"):
            Session.resume(agent, path)

    async with Session.resume(agent, path) as resumed:  # free once the first one closed
        assert (await resumed.send("again")).status == "completed"


def _child_transcript(root_id: str, child_id: str, cwd: Path, *, output: str | None) -> None:
    """A background child's transcript as a dead process left it: ended only with ``output``."""
    with TranscriptWriter(transcript_path(root_id, child_id)) as child:
        child.header(
            TranscriptHeader(
                agent_id=child_id,
                parent_id=root_id,
                root_id=root_id,
                kind="fork",
                label=f"work of {child_id}",
                model="test:function",
                cwd=str(cwd),
                background=True,
            )
        )
        child.message(user("do the work"))
        child.status("running")
        if output is not None:
            child.status("completed", output=output)


async def test_a_resumed_agent_is_told_of_background_children_whose_reports_never_came(
    tmp_path: Path,
) -> None:
    """One child never ended (lost); one ended as the process died, its report undelivered."""
    root = make_agent(FunctionModel(lambda r: "reviewing"), tmp_path)
    async with root.session() as first:
        await first.send("start the review")
        root_id = first.root.id
    _child_transcript(root_id, "fork-1-abc", tmp_path, output=None)
    _child_transcript(root_id, "fork-2-def", tmp_path, output="the schema is fine")

    async with Session.resume(root, transcript_path(root_id, root_id)) as session:
        result = await session.proceed()

    told = result.messages[2]  # the next turn starts with them, then the model answers
    assert isinstance(told, UserMessage)
    assert isinstance(result.messages[3], AssistantMessage)
    lost, ended = (b.text for b in told.content if isinstance(b, TextBlock))
    assert "task: fork-1-abc\nstatus: lost" in lost
    assert "task: fork-2-def\nstatus: completed" in ended
    assert "the schema is fine" in ended
    assert result.status == "completed"
