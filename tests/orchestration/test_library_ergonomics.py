"""Streaming, per-fork options, named agents from code, results with cost, predictable sources."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from forkagent import Agent, ForkParams, Limits, TaskResult
from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator
from forkagent.errors import AgentSpawnError, ConfigurationError
from forkagent.events import Event, OutputDelta, ToolCallStarted
from forkagent.messages import AssistantMessage
from forkagent.permissions import MemoryDirFilter
from forkagent.requests import ModelRequest
from forkagent.testing import NOTIFICATION_TAG, FunctionModel, ScriptedModel, reply, tool_call

# -- streaming ---------------------------------------------------------------------


async def test_stream_yields_the_main_agents_text_as_it_arrives() -> None:
    model = ScriptedModel(
        [reply("Let me look.", tool_call("Glob", pattern="*.md")), reply("Found two files.")]
    )
    agent = Agent(model=model, subagents=False)
    events: list[Event] = [event async for event in agent.stream("Where are the docs?")]
    deltas = [e for e in events if isinstance(e, OutputDelta)]
    assert len(deltas) > 2
    assert "".join(d.text for d in deltas if d.turn == 1) == "Let me look."
    assert "".join(d.text for d in deltas if d.turn == 2) == "Found two files."
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(s.turn, s.name) for s in started] == [(1, "Glob")]
    # the deltas come before the finish of the turn they belong to
    assert events.index(deltas[-1]) < len(events) - 1


async def test_streaming_through_the_emulator_adds_up_to_the_final_text() -> None:
    with use_emulator(Emulator()):
        agent = Agent(model="emulator:claude-sonnet-4-6", subagents=False, builtin_tools=False)
        events = [event async for event in agent.stream("Say hello to the team")]
    text = "".join(e.text for e in events if isinstance(e, OutputDelta) and not e.thinking)
    assert text.startswith("Understood")
    assert len([e for e in events if isinstance(e, OutputDelta)]) > 1


# -- per-fork options --------------------------------------------------------------


def echo_after_read(request: ModelRequest) -> str:
    return "done: " + request.messages[-1].text[:40]


async def test_a_fork_has_its_own_label_turn_limit_and_transcript_choice(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            reply("read"),
            reply(tool_call("Glob", pattern="*")),
            reply(tool_call("Glob", pattern="*")),
            reply("too late"),
        ]
    )
    agent = Agent(model=model, cwd=tmp_path)
    async with agent.session() as session:
        await session.send("look")
        [child] = await session.fork(
            [ForkParams("dig", label="digger", max_turns=2, transcript=False)]
        )
        result = await child.wait()
        root_id = session.root.id
    assert child.label == "digger"
    assert result.status == "budget_exceeded"
    assert result.turns == 2
    from forkagent.state import transcript_path

    assert transcript_path(root_id, root_id).exists()
    assert not transcript_path(root_id, child.id).exists()


async def test_a_fork_tool_filter_refuses_at_dispatch_without_touching_the_tools(
    tmp_path: Path,
) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    outside = tmp_path / "notes.txt"

    def write_both(request: ModelRequest) -> AssistantMessage | str:
        last = request.messages[-1].text
        if "consolidate" in last:
            return reply(
                tool_call("Write", file_path=str(memory / "m.md"), content="kept"),
                tool_call("Write", file_path=str(outside), content="leaked"),
            )
        return "ok"

    model = FunctionModel(write_both)
    async with Agent(model=model, cwd=tmp_path).session() as session:
        await session.send("hello")
        parent_tools = model.requests[-1].tools
        [child] = await session.fork(
            [ForkParams("consolidate", tool_filter=MemoryDirFilter(memory))]
        )
        await child.wait()
    assert (memory / "m.md").read_text() == "kept"
    assert not outside.exists()
    fork_requests = [r for r in model.requests if r.tools is not parent_tools]
    assert all(r.tools == parent_tools for r in fork_requests)


async def test_on_complete_and_an_external_cancel_token() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        text = request.messages[-1].text
        if "wait here" in text and NOTIFICATION_TAG not in text:  # the fork, not its report
            entered.set()
            await release.wait()
        return "ok"

    seen: list[TaskResult] = []
    cancel = asyncio.Event()
    async with Agent(model=FunctionModel(slow), builtin_tools=False).session() as session:
        await session.send("start")
        [child] = await session.fork(
            [ForkParams("wait here", on_complete=seen.append, cancel=cancel)], background=True
        )
        await entered.wait()
        cancel.set()
        result = await child.wait()
        await session.idle()
    assert result.status == "cancelled"
    assert [r.task_id for r in seen] == [child.id]


async def test_dropping_a_fire_and_forget_handle_cancels_its_fork() -> None:
    never = asyncio.Event()

    async def hang(request: ModelRequest) -> str:
        if "summarise" in request.messages[-1].text:
            await never.wait()
        return "ok"

    async with Agent(model=FunctionModel(hang), builtin_tools=False).session() as session:
        await session.send("start")
        handle = session.fork_and_forget(ForkParams("summarise", label="away summary"))
        task = handle.task
        await asyncio.sleep(0)
        del handle
        gc.collect()
        result = await task.wait()
        assert result.status == "cancelled"
        assert session.root.inbox == []  # forgotten: nothing reported into the conversation


async def test_a_kept_fire_and_forget_handle_gives_its_result() -> None:
    async with Agent(model=FunctionModel(echo_after_read), builtin_tools=False).session() as s:
        await s.send("start")
        handle = s.fork_and_forget("write the summary")
        result = await handle.wait()
    assert result.status == "completed"
    assert result.output.startswith("done:")


# -- named agents from code, and results -------------------------------------------


async def test_spawn_starts_a_named_agent_like_the_agent_tool_does() -> None:
    model = ScriptedModel([reply("hi"), reply("three TODOs")])
    async with Agent(model=model).session() as session:
        await session.send("hello")
        task = await session.spawn("Explore", "list the TODOs")
        result = await task.wait()
    assert task.kind == "named"
    assert result.output == "three TODOs"
    explore_request = model.requests[-1]
    assert "Agent" not in {t.name for t in explore_request.tools}
    assert explore_request.system != model.requests[0].system


async def test_spawn_of_an_unknown_type_names_the_known_ones() -> None:
    async with Agent(model=ScriptedModel([reply("hi")])).session() as session:
        await session.send("hello")
        with pytest.raises(AgentSpawnError, match=r"Explore"):
            await session.spawn("Reviewr", "review")


async def test_a_childs_result_carries_its_cost_and_cache_figures() -> None:
    with use_emulator(Emulator()):
        agent = Agent(model="emulator:claude-sonnet-4-6", builtin_tools=False)
        async with agent.session() as session:
            await session.send("Read the plan " + "and the notes " * 1500)
            [child] = await session.fork(["check the plan"])
            result = await child.wait()
    assert result.model == "emulator:claude-sonnet-4-6"
    assert result.cost is not None
    assert result.cost > 0
    assert result.cache_hit_ratio is not None
    assert result.cache_hit_ratio > 0.5


# -- predictable sources, notebooks -------------------------------------------------


def write_agent(directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: a test agent\n---\nYou review.\n"
    )


def test_user_agent_files_load_only_when_asked(tmp_path: Path) -> None:
    write_agent(Path.home() / ".claude" / "agents", "personal-reviewer")
    write_agent(tmp_path / ".claude" / "agents", "project-reviewer")
    default = {d.name for d in Agent(model="test:echo", cwd=tmp_path).catalog()}
    asked = {
        d.name for d in Agent(model="test:echo", cwd=tmp_path, load_user_agents=True).catalog()
    }
    assert "project-reviewer" in default
    assert "personal-reviewer" not in default
    assert {"project-reviewer", "personal-reviewer"} <= asked


async def test_run_sync_inside_a_running_loop_says_what_to_call() -> None:
    agent = Agent(model="test:echo")
    with pytest.raises(ConfigurationError, match=r"await agent\.run"):
        agent.run_sync("hello")


def test_limits_for_a_fork_can_come_whole() -> None:
    params = ForkParams("x", limits=Limits(max_tokens=10), max_turns=3)
    assert params.limits == Limits(max_tokens=10)
    assert params.max_turns == 3


# -- emulator scripts aimed at one agent ------------------------------------------


async def test_emulator_scripts_can_target_one_agent_and_one_of_its_turns() -> None:
    emulator = Emulator()
    emulator.script(
        Reply(
            tool_calls=(ToolCall("Agent", {"prompt": "find TODOs", "subagent_type": "Explore"}),)
        ),
        agent="main",
    )
    emulator.script("Explore says: three TODOs.", agent="Explore")
    emulator.script("Main, turn two: done.", agent="main", turn=2)
    with use_emulator(emulator):
        result = await Agent(model="emulator:claude-sonnet-4-6", builtin_tools=False).run("go")
    assert result.output == "Main, turn two: done."
    explore = next(a for a in result.agents if a.kind == "named")
    assert explore.label == "Explore"
    assert emulator.pending_script() == 0


def test_a_turn_without_an_agent_is_refused() -> None:
    with pytest.raises(ValueError, match="turn= needs agent="):
        Emulator().script("x", turn=2)


async def test_a_fork_that_says_nothing_reports_nothing_not_its_parents_words() -> None:
    def answer(request: ModelRequest) -> str:
        return "" if "stay quiet" in request.messages[-1].text else "the parent's answer"

    async with Agent(model=FunctionModel(answer), builtin_tools=False).session() as session:
        await session.send("hello")
        [child] = await session.fork(["stay quiet"])
        result = await child.wait()
    assert result.output == ""
