"""Recursion guards: forks spawn nothing, named agents nest only so deep, the tree has a size cap."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from forkagent._orchestration.fork import FORK_RULES, FORK_TAG
from forkagent._orchestration.runtime import RuntimeOptions
from forkagent.errors import AgentLimitError, AgentSpawnError, ToolError
from forkagent.events import ToolFinished
from forkagent.hooks import HookInput, Hooks
from forkagent.messages import JsonValue, ToolUseBlock
from forkagent.models.function import Reply
from forkagent.requests import ModelRequest
from forkagent.testing import reply, tool_call
from forkagent.tools.spawn import SpawnRequest

from ._support import Events, is_child, make_agent, results_by_id, tree_model, turn_of

SPAWN_KINDS: list[dict[str, JsonValue]] = [
    {"fork": True},
    {"fork": True, "run_in_background": True},
    {"subagent_type": "general-purpose"},
    {"subagent_type": "Explore", "run_in_background": True},
    {"subagent_type": "Plan"},
    {},  # general-purpose by default
    {"fork": False, "subagent_type": "general-purpose", "run_in_background": False},
    {"fork": True, "subagent_type": "Explore"},
]


def _attempts(turn: int, per_turn: int) -> list[ToolUseBlock]:
    kinds = itertools.cycle(SPAWN_KINDS)
    return [
        ToolUseBlock(
            id=f"spawn-{turn}-{i}",
            name="Agent",
            input={"prompt": f"help {turn}.{i}", **next(kinds)},
        )
        for i in range(per_turn)
    ]


async def test_a_fork_child_that_tries_100_spawns_starts_nothing(tmp_path: Path) -> None:
    events = Events()

    def child(request: ModelRequest) -> Reply:
        turn = turn_of(request) - 1  # the parent's messages are in the child's history too
        return reply("Delegating.", *_attempts(turn, 25)) if turn < 4 else "Scope: did it myself."

    model = tree_model(
        [reply(tool_call("Agent", id="root-fork", prompt="do the work", fork=True))], fork=child
    )
    agent = make_agent(model, tmp_path, subagents=True, listeners=[events])
    async with agent.session() as session:
        result = await session.send("go", wait_for_background=True)
        runtime = session._runtime
        assert len(runtime.tasks) == 1
        [fork] = runtime.tasks.values()
        assert runtime.spawned == 1
    assert [e.kind for e in events.started if e.parent_id is not None] == ["fork"]
    assert fork.status == "completed"
    assert fork.result is not None
    assert fork.result.output == "Scope: did it myself."
    attempts = {k: v for k, v in results_by_id(fork.run.messages).items() if k.startswith("spawn-")}
    assert len(attempts) == 100
    for refusal in attempts.values():
        assert refusal.is_error
        assert "forked child" in refusal.text
        assert "may not start agents" in refusal.text
    assert "Scope: did it myself." in results_by_id(result.messages)["root-fork"].text


async def test_the_fork_child_keeps_the_exact_tool_array(tmp_path: Path) -> None:
    events = Events()

    def child(request: ModelRequest) -> object:
        if turn_of(request) == 1:
            return reply(tool_call("Agent", id="nested", prompt="x", fork=True))
        return "Scope: done"

    model = tree_model([reply(tool_call("Agent", id="f", prompt="x", fork=True))], fork=child)  # type: ignore[arg-type]
    async with make_agent(model, tmp_path, subagents=True, listeners=[events]).session() as session:
        await session.send("go")
        [task] = session._runtime.tasks.values()
        assert task.run.tool_specs is session.root.tool_specs  # the very same tuple
        assert task.run.tools is session.root.tools
    root_request = model.requests[0]
    child_requests = [r for r in model.requests if is_child(r)]
    assert len(child_requests) == 2
    for request in child_requests:
        assert request.tools is root_request.tools
        assert "Agent" in [t.name for t in request.tools]  # still offered, refused at dispatch
    refusal = results_by_id(task.run.messages)["nested"]
    assert refusal.is_error
    finished = [e for e in events.of(ToolFinished) if e.tool_use_id == "nested"]
    assert [e.is_error for e in finished] == [True]


async def test_programmatic_forks_from_a_fork_are_refused(tmp_path: Path) -> None:
    model = tree_model(["hello"], fork=lambda r: "Scope: done")
    async with make_agent(model, tmp_path).session() as session:
        await session.send("hi")
        [child] = await session.fork(["look"])
        with pytest.raises(AgentSpawnError, match="forked child"):
            session._runtime.fork_many(child.run, ["again"], background=False)
        assert len(session._runtime.tasks) == 1


@pytest.mark.parametrize(
    "prompt",
    [
        f"What is this block I found?\n{FORK_RULES}",
        f"Is <{FORK_TAG}> a tag? Please fork to check.",
        FORK_RULES,
    ],
)
async def test_a_user_typing_the_fork_boilerplate_can_still_fork(
    tmp_path: Path, prompt: str
) -> None:
    events = Events()
    model = tree_model([reply(tool_call("Agent", id="f", prompt="check", fork=True))])
    result = await make_agent(model, tmp_path, subagents=True, listeners=[events]).run(prompt)
    assert [e.kind for e in events.started if e.parent_id is not None] == ["fork"]
    forked = results_by_id(result.messages)["f"]
    assert not forked.is_error
    assert "Scope: fork done." in forked.text
    assert result.messages[0].text == prompt


def _nesting_model() -> object:
    """Every named agent tries to start another general-purpose agent once."""

    def named(request: ModelRequest) -> object:
        if turn_of(request) == 0:
            return reply(
                tool_call("Agent", id=f"deeper-{len(request.messages)}", prompt="go deeper")
            )
        return f"named done: {results_by_id(request.messages)}"

    return named


@pytest.mark.parametrize("max_depth", [1, 2, 3])
async def test_named_agents_nest_only_to_the_depth_limit(tmp_path: Path, max_depth: int) -> None:
    events = Events()
    model = tree_model(
        [reply(tool_call("Agent", id="top", prompt="go deep"))],
        named=_nesting_model(),  # type: ignore[arg-type]
    )
    agent = make_agent(
        model,
        tmp_path,
        subagents=True,
        listeners=[events],
        options=RuntimeOptions(max_depth=max_depth),
    )
    async with agent.session() as session:
        await session.send("go")
        runs = [t.run for t in session._runtime.tasks.values()]
    assert len(runs) == max_depth
    assert sorted(r.depth for r in runs) == list(range(1, max_depth + 1))
    deepest = max(runs, key=lambda r: r.depth)
    [refusal] = results_by_id(deepest.messages).values()
    assert refusal.is_error
    assert f"only {max_depth} levels deep" in refusal.text


async def test_the_tree_wide_agent_limit(tmp_path: Path) -> None:
    events = Events()
    calls = [tool_call("Agent", id=f"c{i}", prompt=f"part {i}", fork=True) for i in range(5)]
    model = tree_model([reply(*calls)])
    agent = make_agent(
        model, tmp_path, subagents=True, listeners=[events], options=RuntimeOptions(max_agents=3)
    )
    result = await agent.run("go")
    assert len([e for e in events.started if e.parent_id is not None]) == 3
    results = results_by_id(result.messages)
    refused = [r for r in results.values() if r.is_error]
    assert len(refused) == 2
    for r in refused:
        assert "started 3 agents, its limit" in r.text
    assert sum("Scope: fork done." in r.text for r in results.values()) == 3


async def test_the_agent_limit_counts_spawns_at_every_depth(tmp_path: Path) -> None:
    """Named children spawning grandchildren draw on the same tree-wide allowance."""
    events = Events()
    model = tree_model(
        [reply(*[tool_call("Agent", id=f"top{i}", prompt="go") for i in range(2)])],
        named=_nesting_model(),  # type: ignore[arg-type]
    )
    agent = make_agent(
        model,
        tmp_path,
        subagents=True,
        listeners=[events],
        options=RuntimeOptions(max_agents=3, max_depth=5),
    )
    async with agent.session() as session:
        await session.send("go")
        assert session._runtime.spawned == 3
    assert len([e for e in events.started if e.parent_id is not None]) == 3


async def test_the_history_scan_backs_up_the_structural_marker(tmp_path: Path) -> None:
    """A fork whose marker was lost (say, rebuilt from a transcript) is still recognised."""
    model = tree_model(["hello"])
    async with make_agent(model, tmp_path, subagents=True).session() as session:
        await session.send("hi")
        child = session._runtime.build_fork(session.root, "look around")
        assert child.is_fork
        child.is_fork = False
        with pytest.raises(ToolError, match="forked child"):
            await session._runtime.spawn(child, SpawnRequest(prompt="x", fork=True))
        with pytest.raises(ToolError, match="forked child"):
            await session._runtime.spawn(child, SpawnRequest(prompt="x", subagent_type="Explore"))
        assert session._runtime.tasks == {}


@pytest.mark.parametrize("background", [False, True])
async def test_session_fork_starts_what_the_limit_allows_and_refuses_the_rest(
    tmp_path: Path, background: bool
) -> None:
    model = tree_model(["hello"])
    agent = make_agent(model, tmp_path, options=RuntimeOptions(max_agents=3))
    async with agent.session() as session:
        await session.send("hi")
        await session.fork(["first"])
        with pytest.raises(AgentLimitError, match="started 2 of these 4 forks") as refused:
            await session.fork(["a", "b", "c", "d"], background=background)
        assert refused.value.refused == ["c", "d"]
        assert [t.label for t in refused.value.started] == ["a", "b"]
        assert session._runtime.spawned == 3
        results = [await t.wait() for t in refused.value.started]
        assert [r.status for r in results] == ["completed", "completed"]
        with pytest.raises(AgentLimitError) as none_left:
            await session.fork(["e"])
        assert (none_left.value.started, none_left.value.refused) == ([], ["e"])
        assert len(session._runtime.tasks) == 3


async def test_agent_calls_waiting_on_start_hooks_cannot_pass_the_limit(tmp_path: Path) -> None:
    """Five calls in one reply reach the limit check before any child starts."""
    hooks = Hooks()

    @hooks.on("SubagentStart")
    async def pause(event: HookInput) -> None:
        await asyncio.sleep(0)

    events = Events()
    calls = [tool_call("Agent", id=f"c{i}", prompt=f"part {i}", fork=True) for i in range(5)]
    agent = make_agent(
        tree_model([reply(*calls)]),
        tmp_path,
        subagents=True,
        hooks=hooks,
        listeners=[events],
        options=RuntimeOptions(max_agents=3),
    )
    result = await agent.run("go")
    assert len([e for e in events.started if e.parent_id is not None]) == 3
    refused = [r for r in results_by_id(result.messages).values() if r.is_error]
    assert len(refused) == 2
    assert all("started 3 agents, its limit" in r.text for r in refused)
