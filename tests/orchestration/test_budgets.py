"""Budgets per child and per tree: turns, tokens, cost, wall time (LESSONS 7).

A child that runs out ends with that status and whatever it had reported so
far; its history stays consistent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from forkagent import Agent, AgentTask, ConfigurationError, RunResult, RuntimeOptions, TaskResult
from forkagent._orchestration.budget import Limits
from forkagent.agents import AgentDefinition
from forkagent.messages import AssistantMessage
from forkagent.models import ModelResponse
from forkagent.models.function import ReplyFunction
from forkagent.pricing import cost
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel, reply, tool_call
from forkagent.tools import tool
from forkagent.usage import Usage

from ._support import (
    Events,
    assert_consistent,
    is_child,
    make_agent,
    results_by_id,
    tree_model,
    turn_of,
)


@tool
def step(n: int) -> str:
    """One step of endless work."""
    return f"step {n} done"


@tool
async def slow() -> str:
    """A step that takes far too long."""
    await asyncio.sleep(30)
    return "finally"


def endless(tokens: int = 100, *, own_turns: int = 0) -> ReplyFunction:
    """A child that works step after step, saying which step it is on, never finishing."""

    def child(request: ModelRequest) -> ModelResponse:
        n = turn_of(request) - own_turns + 1
        message = reply(f"working on step {n}", tool_call("step", n=n))
        return ModelResponse(
            message=message, stop_reason="tool_use", usage=Usage(input_tokens=tokens, requests=1)
        )

    return child


def finished(task: AgentTask) -> TaskResult:
    assert task.result is not None, f"{task.id} has not finished"
    return task.result


async def _fork_one(
    tmp_path: Path, *, child: ReplyFunction, name: str = "tree", **options: Any
) -> tuple[RunResult, AgentTask, FunctionModel]:
    events = Events()
    model = tree_model(
        [reply(tool_call("Agent", id="job", prompt="work", fork=True))], fork=child, name=name
    )
    agent = make_agent(
        model, tmp_path, subagents=True, tools=[step, slow], listeners=[events], **options
    )
    async with agent.session() as session:
        result = await session.send("go")
        [task] = session._runtime.tasks.values()
    return result, task, model


async def test_max_turns_ends_the_child_with_its_partial_result(tmp_path: Path) -> None:
    result, task, model = await _fork_one(
        tmp_path, child=endless(own_turns=1), child_limits=Limits(max_turns=3)
    )
    assert task.status == "budget_exceeded"
    assert finished(task).turns == 3
    assert finished(task).output == "working on step 3"
    assert "3 turns" in (finished(task).error or "")
    assert len([r for r in model.requests if is_child(r)]) == 3
    assert_consistent(task.run.messages)
    report = results_by_id(result.messages)["job"].text
    assert "budget_exceeded" in report
    assert "working on step 3" in report


async def test_a_named_agents_turn_limit(tmp_path: Path) -> None:
    model = tree_model(
        [reply(tool_call("Agent", id="job", prompt="work"))],
        named=endless(),
    )
    agent = make_agent(
        model, tmp_path, subagents=True, tools=[step], child_limits=Limits(max_turns=2)
    )
    async with agent.session() as session:
        await session.send("go")
        [task] = session._runtime.tasks.values()
    assert task.kind == "named"
    assert (task.status, finished(task).turns, finished(task).output) == (
        "budget_exceeded",
        2,
        "working on step 2",
    )


async def test_max_tokens(tmp_path: Path) -> None:
    _result, task, _ = await _fork_one(
        tmp_path, child=endless(tokens=100, own_turns=1), child_limits=Limits(max_tokens=250)
    )
    assert task.status == "budget_exceeded"
    assert finished(task).turns == 3  # 0, 100, 200 were under the cap; 300 is not
    assert finished(task).usage.total_tokens == 300
    assert "250" in (finished(task).error or "")
    assert finished(task).output == "working on step 3"


async def test_max_cost_with_a_priced_model(tmp_path: Path) -> None:
    per_turn = cost("claude-sonnet-4-6", Usage(input_tokens=100_000))
    assert per_turn == pytest.approx(0.3)
    _result, task, _ = await _fork_one(
        tmp_path,
        child=endless(tokens=100_000, own_turns=1),
        name="claude-sonnet-4-6",
        child_limits=Limits(max_cost=0.5),
    )
    assert task.status == "budget_exceeded"
    assert finished(task).turns == 2  # $0.30 spent is under $0.50; $0.60 is not
    assert "$0.5" in (finished(task).error or "")
    assert finished(task).output == "working on step 2"


async def test_max_seconds_stops_a_slow_child_promptly(tmp_path: Path) -> None:
    def child(request: ModelRequest) -> AssistantMessage:
        return reply("started the slow part", tool_call("slow"))

    async with asyncio.timeout(5):  # the tool would take 30 s
        result, task, _ = await _fork_one(
            tmp_path, child=child, child_limits=Limits(max_seconds=0.2)
        )
    assert task.status == "timed_out"
    assert finished(task).output == "started the slow part"
    assert_consistent(task.run.messages)
    asked = task.run.messages[-2]
    assert isinstance(asked, AssistantMessage)
    slow_call = asked.tool_uses[0]
    cut = results_by_id(task.run.messages)[slow_call.id]
    assert cut.is_error
    assert "timed_out" in results_by_id(result.messages)["job"].text


async def test_main_agent_limits(tmp_path: Path) -> None:
    model = tree_model([endless()] * 10)
    result = await make_agent(model, tmp_path, tools=[step], limits=Limits(max_turns=2)).run("go")
    assert result.status == "budget_exceeded"
    assert result.output == "working on step 2"
    assert_consistent(result.messages)


async def test_main_agent_wall_time(tmp_path: Path) -> None:
    model = tree_model([reply("starting", tool_call("slow"))])
    async with asyncio.timeout(5):
        result = await make_agent(
            model, tmp_path, tools=[slow], limits=Limits(max_seconds=0.2)
        ).run("go")
    assert result.status == "timed_out"
    assert result.output == "starting"
    assert_consistent(result.messages)


async def test_a_tree_token_budget_is_shared_by_the_children(tmp_path: Path) -> None:
    events = Events()
    calls = [tool_call("Agent", id=f"c{i}", prompt=f"part {i}", fork=True) for i in range(3)]
    root = ModelResponse(message=reply(*calls), usage=Usage(input_tokens=100, requests=1))
    model = tree_model([root], fork=endless(tokens=100, own_turns=1))
    agent = make_agent(
        model,
        tmp_path,
        subagents=True,
        tools=[step],
        listeners=[events],
        tree_limits=Limits(max_tokens=1000),
    )
    async with agent.session() as session:
        result = await session.send("go")
        tasks = list(session._runtime.tasks.values())
        tree_tokens = session._runtime.tree_budget.tokens
    assert {t.status for t in tasks} == {"budget_exceeded"}
    child_turns = [t.result.turns for t in tasks if t.result is not None]
    assert len(child_turns) == len(tasks)
    # Alone, each child could have run 10 turns; together they shared 9 after the root's one.
    assert 9 <= sum(child_turns) <= 9 + 2  # a check passed by three concurrent children
    assert all(turns >= 1 for turns in child_turns)
    assert tree_tokens == 100 * (1 + sum(child_turns))
    assert result.status == "budget_exceeded"  # the root draws on the same budget
    for task in tasks:
        assert_consistent(task.run.messages)


async def test_a_tree_turn_budget_is_shared_by_the_children(tmp_path: Path) -> None:
    def child(request: ModelRequest) -> object:
        n = turn_of(request)
        return reply(f"step {n}", tool_call("step", n=n)) if n <= 10 else "Scope: done"

    calls = [tool_call("Agent", id=f"c{i}", prompt=f"part {i}", fork=True) for i in range(2)]
    model = tree_model([reply(*calls)], fork=child)  # type: ignore[arg-type]
    agent = make_agent(
        model, tmp_path, subagents=True, tools=[step], tree_limits=Limits(max_turns=6)
    )
    async with agent.session() as session:
        result = await session.send("go")
        tasks = list(session._runtime.tasks.values())
    total = 1 + sum(t.result.turns for t in tasks if t.result is not None)
    assert all(t.result is not None for t in tasks)
    assert total <= 6 + 1  # one concurrent overshoot at most
    assert {t.status for t in tasks} == {"budget_exceeded"}
    assert result.status == "budget_exceeded"


@pytest.mark.parametrize(
    "options",
    [
        {"limits": Limits(max_cost=1.0)},
        {"child_limits": Limits(max_cost=1.0)},
        {"tree_limits": Limits(max_cost=1.0)},
        {"options": RuntimeOptions(child_limits=Limits(max_cost=1.0))},
    ],
)
def test_max_cost_for_a_model_without_a_price_is_refused_up_front(
    tmp_path: Path, options: dict[str, object]
) -> None:
    with pytest.raises(ConfigurationError, match=r"max_cost is set but model 'tree' has no"):
        make_agent(tree_model([]), tmp_path, **options)
    with pytest.raises(ConfigurationError, match="'test:echo' has no known price"):
        Agent(model="test:echo", **options)  # type: ignore[arg-type]
    make_agent(tree_model([], name="claude-sonnet-4-6"), tmp_path, **options)
    Agent(model="emulator:claude-sonnet-4-6", **options)  # type: ignore[arg-type]


async def test_a_named_child_without_a_price_under_a_cost_cap_is_refused(tmp_path: Path) -> None:
    local = AgentDefinition(
        name="local", description="Runs on a local model.", system_prompt="Work.", model="test:echo"
    )
    model = tree_model(
        [reply(tool_call("Agent", id="job", prompt="work", subagent_type="local"))],
        name="claude-sonnet-4-6",
    )
    limits = Limits(max_cost=1.0)
    agent = make_agent(model, tmp_path, subagents=True, agents=[local], tree_limits=limits)
    result = await agent.run("go")
    refusal = results_by_id(result.messages)["job"]
    assert refusal.is_error
    assert "'echo' has no known price" in refusal.text
    assert [a.kind for a in result.agents] == ["main"]  # nothing was started
