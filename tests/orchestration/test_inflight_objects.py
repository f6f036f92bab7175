"""What an in-flight fork keeps for the collector: no object it can do without.

Each cut must behave as the general path it replaces: the caller tag put back by value, a
waited child's end handed out in its task's own context, a lone waiter kept without a list,
one budget for every agent without limits of its own, a held sibling kept by its handle, one
bound ``on_change`` for every recorded run, a request's deadline ended without a ``with``, and
a run without a ``__dict__``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import types
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from forkagent import ForkParams, Limits, RuntimeOptions
from forkagent._orchestration.budget import Budget
from forkagent._orchestration.loop import AgentRun, run_loop
from forkagent._orchestration.tasks import AgentTask, TaskResult
from forkagent._orchestration.timeouts import RequestTimeout
from forkagent.emulator import Emulator
from forkagent.emulator.timing import NO_LATENCY
from forkagent.errors import BudgetExceededError
from forkagent.history import History
from forkagent.messages import user
from forkagent.models.base import CALLER, Caller
from forkagent.models.emulator import EmulatorModel
from forkagent.models.function import Reply
from forkagent.requests import ModelRequest
from forkagent.state.transcript import read_transcript, transcript_path
from forkagent.testing import FunctionModel, reply, tool_call
from forkagent.tools import tool
from forkagent.usage import Usage

from ._support import make_agent

OUTER = Caller("outer-1", "outer", "main", 7)
RESULT = TaskResult(
    task_id="t", status="completed", output="done", usage=Usage(), turns=1, seconds=0
)


# -- the caller tag ----------------------------------------------------------------------------


async def test_each_request_is_tagged_and_the_outer_caller_is_back_for_the_tools(
    tmp_path: Path,
) -> None:
    seen: list[Caller | None] = []

    @tool
    def look() -> str:
        """Say who the caller is."""
        seen.append(CALLER.get())
        return "looked"

    def answer(request: ModelRequest) -> Reply:
        seen.append(CALLER.get())
        return reply(tool_call("look", id="c1")) if len(request.messages) == 1 else "done"

    CALLER.set(OUTER)  # this test's own context: the turn's task starts from a copy of it
    result = await make_agent(FunctionModel(answer), tmp_path, tools=[look]).run("go")

    assert result.status == "completed"
    first, during_tool, second = seen
    assert first is not None
    assert second is not None
    assert (first.kind, first.turn, second.turn) == ("main", 1, 2)
    assert first.agent_id == second.agent_id == result.agents[0].id
    assert during_tool is OUTER  # between requests the tag is what it was before them
    assert CALLER.get() is OUTER


async def test_a_failed_request_puts_the_outer_caller_back_too(tmp_path: Path) -> None:
    def down(request: ModelRequest) -> str:
        raise RuntimeError("provider is down")

    agent = make_agent(FunctionModel(down), tmp_path)
    async with agent.session() as session:
        for outer in (OUTER, None):
            CALLER.set(outer)
            with pytest.raises(RuntimeError, match="provider is down"):
                await run_loop(session.root)  # in this very task: its context is ours
            assert CALLER.get() is outer


# -- a waited child's end ----------------------------------------------------------------------


def _handle() -> AgentTask:
    """A handle whose run only says what ``begin`` reads: no family, an id."""
    run = cast(AgentRun, SimpleNamespace(family=None, id="t"))
    return AgentTask(run=run, kind="fork", label="t", background=True)


def _contexts(task: asyncio.Task[TaskResult]) -> int:
    """The distinct contexts the task holds: its own and those of its done callbacks."""
    return len({id(o) for o in gc.get_referents(task) if isinstance(o, contextvars.Context)})


@pytest.mark.parametrize("waited_first", [True, False], ids=["held", "running"])
async def test_a_waited_child_ends_in_its_own_context_and_keeps_no_other(
    waited_first: bool,
) -> None:
    go = asyncio.Event()

    async def body() -> TaskResult:
        await go.wait()
        return RESULT

    async def fails() -> TaskResult:
        await go.wait()
        raise RuntimeError("lost")

    answered, failed = _handle(), _handle()
    waiters = []
    for handle, work in ((answered, body), (failed, fails)):
        if waited_first:  # as a held sibling: waited for before its task exists
            waiters.append(handle.wait())
            handle.begin(work)
        else:
            handle.begin(work)
            waiters.append(handle.wait())
        assert handle._task is not None
        assert _contexts(handle._task) == 1  # a copy of the caller's would make two
    go.set()
    assert (await waiters[0]).output == "done"  # through ``_hand_out``: no ``hand_out`` here
    with pytest.raises(RuntimeError, match="lost"):
        await waiters[1]


# -- a request's deadline and a run's attributes -----------------------------------------------


def _deadline_objects() -> list[object]:
    """Every ``RequestTimeout`` alive, and every bound method of one, after a collection."""
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, RequestTimeout)
        or (isinstance(o, types.MethodType) and isinstance(o.__self__, RequestTimeout))
    ]


async def test_a_request_in_flight_keeps_no_bound_method_of_its_deadline(tmp_path: Path) -> None:
    """The deadline is ended by hand: a ``with`` would keep its bound ``__exit__`` alive for
    the request's life. The request still answers, and its deadline is let go after.

    Counted against what other tests of the worker left alive before this one began."""
    before = _deadline_objects()
    during: list[list[str]] = []

    def answer(request: ModelRequest) -> str:
        added = [o for o in _deadline_objects() if not any(o is b for b in before)]
        during.append(sorted(type(o).__name__ for o in added))
        return "done"

    result = await make_agent(FunctionModel(answer), tmp_path, request_timeout=600).run("go")
    assert result.status == "completed"
    assert during == [["RequestTimeout"]]  # the deadline itself, and no bound method of it
    assert not [o for o in _deadline_objects() if not any(o is b for b in before)]


async def test_a_run_has_no_dict_and_its_messages_stay_a_history(tmp_path: Path) -> None:
    model = FunctionModel(lambda request: "done")
    async with make_agent(model, tmp_path).session() as session:
        run = session.root
        assert not hasattr(run, "__dict__")  # slotted: no dict per run for the collector
        assert isinstance(run.messages, History)
        run.messages = [user("a"), user("b")]  # any iterable becomes a history
        assert isinstance(run.messages, History)
        assert run.messages == [user("a"), user("b")]
    bare = AgentRun(
        id="r",
        model=model,
        system="",
        tools=(),
        tool_specs=(),
        settings=run.settings,
        cwd=tmp_path,
        budget=run.budget,
    )
    assert isinstance(bare.messages, History)
    assert len(bare.messages) == 0


# -- budgets -----------------------------------------------------------------------------------


def test_agents_without_limits_share_one_budget_and_capped_ones_have_their_own() -> None:
    tree = Budget(Limits(max_tokens=100))
    assert tree.child() is tree.child(Limits()) is tree.child(Limits(max_seconds=None))
    capped = tree.child(Limits(max_turns=3))
    assert capped is not tree.child(Limits(max_turns=3))
    assert capped.child() is not tree.child()  # one per parent budget


@pytest.mark.parametrize(
    "tree_limits",
    [Limits(), Limits(max_tokens=25), Limits(max_turns=4), Limits(max_cost=0.5)],
)
def test_a_shared_budget_stops_and_charges_as_a_budget_per_agent_would(
    tree_limits: Limits,
) -> None:
    shared_tree, own_tree = Budget(tree_limits), Budget(tree_limits)
    shared = [shared_tree.child() for _ in range(3)]
    own = [Budget(Limits(), parent=own_tree) for _ in range(3)]  # what ``child`` made before

    def outcome(budget: Budget, turns: int) -> str:
        try:
            budget.check(turns)
        except BudgetExceededError as exc:
            return str(exc)
        return "ok"

    for step in range(8):
        agent = step % 3
        usage = Usage(input_tokens=step + 1, output_tokens=2)
        shared[agent].charge(usage, 0.1 * step)
        own[agent].charge(usage, 0.1 * step)
        for turns in (0, step):
            assert [outcome(b, turns) for b in shared] == [outcome(b, turns) for b in own]
        assert (shared_tree.tokens, shared_tree.cost, shared_tree.turns) == (
            own_tree.tokens,
            own_tree.cost,
            own_tree.turns,
        )
    for mine, theirs in zip(shared, own, strict=True):
        assert mine.deadline() == theirs.deadline()
        assert mine.unlimited == theirs.unlimited
        assert mine.all_limits() == theirs.all_limits()


async def test_forks_without_limits_share_a_budget_and_the_tree_counts_them_all(
    tmp_path: Path,
) -> None:
    model = FunctionModel(lambda request: "Scope: done.")
    async with make_agent(model, tmp_path).session() as session:
        await session.send("plan")
        tasks = await session.fork(["a", "b", ForkParams("c", max_turns=5)], background=True)
        results = await asyncio.gather(*(task.wait() for task in tasks))
        runtime = session._runtime
    runs = [runtime.runs[task.id] for task in tasks]
    assert runs[0].budget is runs[1].budget
    assert runs[2].budget is not runs[0].budget  # a limit of its own: a budget of its own
    assert runs[2].budget.turns == 1
    everyone = sum((run.usage for run in runtime.runs.values()), Usage())
    assert runtime.tree_budget.tokens == everyone.total_tokens
    assert runtime.tree_budget.turns == sum(run.turns for run in runtime.runs.values())
    assert [result.status for result in results] == ["completed"] * 3


@pytest.mark.parametrize("ending", ["result", "error", "cancelled"])
@pytest.mark.parametrize("count", [1, 2, 3])
async def test_one_waiter_kept_alone_gets_what_several_in_a_list_get(
    ending: str, count: int
) -> None:
    go = asyncio.Event()

    async def body() -> TaskResult:
        await go.wait()
        if ending == "error":
            raise RuntimeError("lost")
        if ending == "cancelled":
            raise asyncio.CancelledError
        return RESULT

    async def outcome(waiter: asyncio.Future[TaskResult]) -> str:
        try:
            return (await waiter).output
        except asyncio.CancelledError:
            return "cancelled"
        except RuntimeError as exc:
            return str(exc)

    handle = _handle()
    handle.begin(body)
    waiters = [handle.wait() for _ in range(count)]
    assert (handle._waiters is waiters[0]) == (count == 1)  # alone, else listed
    go.set()
    expected = {"result": "done", "error": "lost", "cancelled": "cancelled"}[ending]
    assert [await outcome(w) for w in waiters] == [expected] * count
    assert handle._waiters is None


async def test_a_held_sibling_keeps_no_bound_method_of_its_own(tmp_path: Path) -> None:
    """Its family keeps the handle itself, and its work is the runtime's function with its
    arguments; the held still begin in order and complete."""
    model = EmulatorModel("claude-sonnet-4-6", Emulator(latency=NO_LATENCY))
    options = RuntimeOptions(resume_on_notification=False)
    agent = make_agent(model, tmp_path, registry=False, skip_transcript=True, options=options)
    async with agent.session() as session:
        await session.send("Plan the work.")
        tasks = await session.fork([f"Do task {n}." for n in range(5)], background=True)
        held = [task for task in tasks if task._held is not None]
        assert len(held) == 4  # all but the leader, until its response starts
        family = held[0].run.family
        assert family is not None
        assert family._held == held
        for task in held:
            work = task._held
            assert isinstance(work, functools.partial)
            assert not isinstance(work.func, types.MethodType)
        results = await asyncio.gather(*(task.wait() for task in tasks))
    assert [result.status for result in results] == ["completed"] * 5


async def test_recorded_runs_share_the_recorders_one_bound_sync(tmp_path: Path) -> None:
    """Every recorded run is told of its changes through one bound method, and a fork's
    transcript still gets its reply."""
    model = FunctionModel(lambda request: "Scope: done.")
    async with make_agent(model, tmp_path, registry=False).session() as session:
        await session.send("plan")
        tasks = await session.fork(["a", "b"], background=True)
        await asyncio.gather(*(task.wait() for task in tasks))
        runs = [session.root, *(session._runtime.runs[task.id] for task in tasks)]
    assert runs[0].on_change is not None
    assert all(run.on_change is runs[0].on_change for run in runs)
    for task in tasks:
        transcript = read_transcript(transcript_path(session.root.id, task.id))
        assert transcript.messages[-1].text == "Scope: done."
