"""The run path's shortcuts give what the general code gave.

A response is priced once and its cost is carried on ``ResponseReceived``; a budget
works out which of its tree's budgets can stop it, and its deadline, when it is made.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast, get_args

import pytest

from forkagent import RuntimeOptions
from forkagent._orchestration.budget import Budget, Limits
from forkagent._orchestration.loop import (
    _COMPLETED,
    AgentRun,
    LoopOutcome,
    _caller,
    _request_sent,
    _response_received,
)
from forkagent._orchestration.runtime import _agent_finished, _agent_started
from forkagent._orchestration.tasks import TaskResult, task_result
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.errors import BudgetExceededError
from forkagent.events import AgentFinished, AgentStarted, RequestSent, ResponseReceived
from forkagent.messages import AssistantMessage, JsonValue, user
from forkagent.models.base import Caller, ModelResponse, StopReason
from forkagent.models.emulator import EmulatorModel
from forkagent.pricing import cost
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel
from forkagent.usage import Usage

from ._support import Events, make_agent

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

CLAUDE = "claude-sonnet-4-6"
CONTEXT = "The module under review keeps its totals in integer cents. " * 300
"""Above the model's cacheable minimum, so the forks' family pre-warms its prompt."""


async def test_every_response_carries_the_cost_its_budget_counted(tmp_path: Path) -> None:
    events = Events()
    model = EmulatorModel(CLAUDE, Emulator(latency=NO_LATENCY))
    options = RuntimeOptions(fanout="prewarm")
    agent = make_agent(model, tmp_path, options=options, listeners=[events], registry=False)
    async with agent.session() as session:
        await session.send(CONTEXT)
        await session.fork(["check a", "check b", "check c"])
        budget = session._runtime.tree_budget

    received = events.of(ResponseReceived)
    sent = {(e.agent_id, e.prewarm): e.request for e in events.of(RequestSent)}
    assert len(received) == 5  # the parent, the pre-warm and three forks
    assert [e.prewarm for e in received].count(True) == 1
    for event in received:
        request = sent[event.agent_id, event.prewarm]
        assert event.cost is not None
        assert event.cost > 0
        assert event.cost == cost(request.model, event.response.usage)
    # The tree's budget added up those very figures, in the order they were emitted.
    assert budget.cost == sum(e.cost for e in received)


async def test_a_response_without_a_known_price_carries_no_cost(tmp_path: Path) -> None:
    events = Events()
    agent = make_agent(FunctionModel(lambda request: "done"), tmp_path, listeners=[events])
    async with agent.session() as session:
        await session.send("go")
        await session.fork(["a", "b"])
        budget = session._runtime.tree_budget

    received = events.of(ResponseReceived)
    assert len(received) == 3
    assert [e.cost for e in received] == [None, None, None]
    assert budget.cost == 0.0


def _reference_deadline(budget: Budget) -> tuple[float, float] | None:
    """What ``deadline`` computed before: every wall-time limit up the tree, the earliest."""
    found: list[tuple[float, float]] = []
    node: Budget | None = budget
    while node is not None:
        if (seconds := node.limits.max_seconds) is not None:
            found.append((node.started + seconds, seconds))
        node = node.parent
    return min(found, default=None)


@pytest.mark.parametrize(
    "seconds",
    [
        (None, None, None),
        (None, 5.0, None),
        (5.0, None, 1.0),
        (1.0, None, 5.0),
        (2.0, 2.0, 2.0),
        (None, None, 3.0),
    ],
)
def test_a_budgets_deadline_is_the_earliest_of_its_tree(
    seconds: tuple[float | None, float | None, float | None],
) -> None:
    root = Budget(Limits(max_seconds=seconds[0]))
    time.sleep(0.001)  # each budget starts its own clock
    middle = root.child(Limits(max_seconds=seconds[1]))
    time.sleep(0.001)
    leaf = middle.child(Limits(max_seconds=seconds[2]))
    for budget in (root, middle, leaf):
        assert budget.deadline() == _reference_deadline(budget)


def test_a_check_reads_every_capped_budget_up_the_tree_nearest_first() -> None:
    root = Budget(Limits(max_tokens=7))
    middle = root.child()  # no limit: nothing of its own to stop the leaf
    leaf = middle.child(Limits(max_tokens=5))
    leaf.charge(Usage(input_tokens=4), None)
    leaf.check(0)  # 4 tokens: under both caps

    leaf.charge(Usage(input_tokens=4), None)
    with pytest.raises(BudgetExceededError) as nearest:
        leaf.check(0)
    assert str(nearest.value) == "used 8 tokens of a 5 budget"
    # The middle budget has no cap of its own, yet its ancestor's still holds for it.
    with pytest.raises(BudgetExceededError) as inherited:
        middle.check(0)
    assert str(inherited.value) == "used 8 tokens of a 7 budget"


def test_a_budget_tree_without_limits_never_stops_an_agent() -> None:
    leaf = Budget().child().child()
    leaf.charge(Usage(input_tokens=10**9, output_tokens=10**9), 10.0**6)
    leaf.check(10**6)
    assert leaf.deadline() is None
    assert (leaf.tokens, leaf.cost, leaf.turns) == (2 * 10**9, 10.0**6, 1)


# -- events and results set through their slots ----------------------------------------------


def _slots(value: DataclassInstance) -> dict[str, object]:
    """Every field of a frozen slots dataclass, read back (a slot left unset would raise)."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


def test_a_requests_events_set_through_slots_equal_the_dataclasses() -> None:
    request = ModelRequest(model=CLAUDE, messages=(user("hi"),))
    response = ModelResponse(message=AssistantMessage(content=()), usage=Usage(input_tokens=3))
    sent = _request_sent("fork-1", 2, request)
    assert sent == RequestSent("fork-1", 2, request)
    assert _slots(sent) == _slots(RequestSent("fork-1", 2, request))
    for price in (0.25, None):
        received = _response_received("fork-1", 3, response, seconds=0.5, cost=price)
        expected = ResponseReceived("fork-1", 3, response, 0.5, cost=price)
        assert received == expected
        assert repr(received) == repr(expected)
        assert _slots(received) == _slots(expected)


@pytest.mark.parametrize("error", [None, "ValueError: no"])
def test_a_finished_agents_event_and_result_set_through_slots_equal_the_dataclasses(
    error: str | None,
) -> None:
    finished = _agent_finished("fork-1", "failed", "partial", error)
    expected = AgentFinished("fork-1", "failed", "partial", error)
    assert finished == expected
    assert _slots(finished) == _slots(expected)
    assert finished.details is not _agent_finished("fork-2", "failed", "", None).details

    expected_result = _a_result(TaskResult, error)
    result = _a_result(task_result, error)
    assert result == expected_result
    assert repr(result) == repr(expected_result)
    assert _slots(result) == _slots(expected_result)
    assert result.cost == expected_result.cost


@pytest.mark.parametrize(("parent_id", "background"), [(None, False), ("main-0-abc", True)])
def test_a_started_agents_event_set_through_slots_equals_the_dataclass(
    parent_id: str | None, background: bool
) -> None:
    run = SimpleNamespace(id="fork-1", parent_id=parent_id, kind="fork", label="Do it.")
    details: dict[str, JsonValue] = {"cache_key_hash": "ab12", "mode": "sync"}
    started = _agent_started(cast(AgentRun, run), background, details)
    expected = AgentStarted("fork-1", parent_id, "fork", "Do it.", background, details)
    assert started == expected
    assert repr(started) == repr(expected)
    assert _slots(started) == _slots(expected)
    assert started.details is details  # the event carries the very dict it was given


def _a_result(make: Callable[..., TaskResult], error: str | None) -> TaskResult:
    """The same result made by ``make``: the dataclass or the slot-setting builder."""
    return make(
        task_id="fork-1",
        status="completed",
        output="done",
        usage=Usage(output_tokens=2, requests=1),
        turns=1,
        seconds=0.25,
        error=error,
        worktree_path="/tmp/w",
        worktree_branch="b",
        model=f"emulator:{CLAUDE}",
        value={"answer": 1},
        outside_worktree=("Read /x",),
    )


def test_a_requests_tag_set_through_slots_equals_the_dataclass(tmp_path: Path) -> None:
    agent = make_agent(FunctionModel(lambda request: "done"), tmp_path)
    run = agent.session().root
    run.turns = 4
    assert _caller(run) == Caller(run.id, run.label, run.kind, 5)
    assert _slots(_caller(run)) == _slots(Caller(run.id, run.label, run.kind, 5))


async def test_a_report_to_a_parent_not_waiting_is_read_when_it_drives_again(
    tmp_path: Path,
) -> None:
    """No signal is made for a parent that was not waiting: its next drive reads the inbox."""

    options = RuntimeOptions(resume_on_notification=False)
    agent = make_agent(FunctionModel(lambda request: "done"), tmp_path, options=options)
    async with agent.session() as session:
        await session.send("plan")
        [task] = await session.fork(["part 1"], background=True)
        await task.wait()
        runtime, root = session._runtime, session.root
        assert root.id not in runtime._signals
        assert len(root.inbox) == 1
        outcome = await runtime.drive(root)
    assert outcome.status == "completed"
    assert root.inbox == []
    assert f"task: {task.id}\nstatus: completed" in root.messages[-2].text  # the report, read


# -- what a family's forks share, found once ---------------------------------------------------


async def test_forks_set_their_models_profile_for_the_monitor_as_each_fork_did(
    tmp_path: Path,
) -> None:
    """The monitor explains a fork's request with its model's profile, set once per family
    (and once per Agent-tool fork) now rather than once per fork: a profile another run set
    for the same model name in between is replaced again, as each fork's own adoption did."""
    model = EmulatorModel(CLAUDE, Emulator(latency=NO_LATENCY))
    agent = make_agent(model, tmp_path, registry=False)
    async with agent.session() as session:
        await session.send("go")
        runtime = session._runtime
        other = replace(model.profile, min_cache_tokens=model.profile.min_cache_tokens + 1)
        runtime.cache_monitor.set_profile(CLAUDE, other)
        await session.fork(["a", "b"])
        assert runtime.cache_monitor._profiles[CLAUDE] is model.profile
        runtime.cache_monitor.set_profile(CLAUDE, other)
        runtime.build_fork(session.root, "c")  # the Agent tool's way: one fork at a time
        assert runtime.cache_monitor._profiles[CLAUDE] is model.profile


def test_a_completed_runs_shared_outcome_is_the_one_it_would_make() -> None:
    for reason in get_args(StopReason):
        assert _COMPLETED[reason] == LoopOutcome("completed", reason)


async def test_a_childs_asyncio_task_is_named_after_it(tmp_path: Path) -> None:
    """``AgentTask.begin`` makes the task through the loop, naming it as it is made: the name
    ``asyncio.create_task(..., name=...)`` gave (held forks begin at the release)."""
    agent = make_agent(EmulatorModel(CLAUDE, Emulator(latency=NO_LATENCY)), tmp_path)
    async with agent.session() as session:
        await session.send("go")
        tasks = await session.fork(["a", "b", "c"], background=True)
        await asyncio.gather(*(task.wait() for task in tasks))
    assert [t._task.get_name() if t._task else None for t in tasks] == [t.id for t in tasks]
