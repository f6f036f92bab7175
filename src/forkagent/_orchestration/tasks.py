"""Child agents as tasks: status, waiting, cancelling, moving to the background.

The runtime owns every task; a handle is only a view. Dropping a handle
leaves the task running under the runtime, which cancels whatever is still
running when the session closes: nothing leaks.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .._construct import slot_setters
from ..events import AgentKind, AgentStatus
from ..pricing import cost
from ..usage import Usage
from .loop import AgentRun


@dataclass(frozen=True, slots=True)
class TaskResult:
    task_id: str
    status: AgentStatus
    output: str
    usage: Usage
    turns: int
    seconds: float
    error: str | None = None
    worktree_path: str | None = None
    worktree_branch: str | None = None
    model: str = ""
    """The ``provider:model`` the child ran on."""
    value: object = None
    """The validated structured answer of a child given an ``output_type``; else None."""
    outside_worktree: tuple[str, ...] = ()
    """Calls of an isolated child that named the parent's checkout, refused."""

    @property
    def cost(self) -> float | None:
        """USD at the model's prices; None when the price is unknown (never 0)."""
        return cost(self.model, self.usage) if self.model else None

    @property
    def cache_hit_ratio(self) -> float | None:
        """Share of the child's prompt tokens read from the cache."""
        return self.usage.cache_hit_ratio


(
    _TASK_ID,
    _STATUS,
    _OUTPUT,
    _USAGE,
    _TURNS,
    _SECONDS,
    _ERROR,
    _WORKTREE_PATH,
    _WORKTREE_BRANCH,
    _MODEL,
    _VALUE,
    _OUTSIDE_WORKTREE,
) = slot_setters(TaskResult)


def task_result(
    *,
    task_id: str,
    status: AgentStatus,
    output: str,
    usage: Usage,
    turns: int,
    seconds: float,
    error: str | None,
    worktree_path: str | None,
    worktree_branch: str | None,
    model: str,
    value: object,
    outside_worktree: tuple[str, ...],
) -> TaskResult:
    """``TaskResult(...)`` with every field given, set through its slots (``slot_setters``):
    one per finished agent, at under half the cost of the frozen dataclass's ``__init__``."""
    result: TaskResult = object.__new__(TaskResult)
    _TASK_ID(result, task_id)
    _STATUS(result, status)
    _OUTPUT(result, output)
    _USAGE(result, usage)
    _TURNS(result, turns)
    _SECONDS(result, seconds)
    _ERROR(result, error)
    _WORKTREE_PATH(result, worktree_path)
    _WORKTREE_BRANCH(result, worktree_branch)
    _MODEL(result, model)
    _VALUE(result, value)
    _OUTSIDE_WORKTREE(result, outside_worktree)
    return result


_Waiters: TypeAlias = "asyncio.Future[TaskResult] | list[asyncio.Future[TaskResult]]"
"""A child's waiters: one alone, or several in a list."""


def _each(waiters: _Waiters | None) -> Sequence[asyncio.Future[TaskResult]]:
    """Every waiter, however they are kept."""
    if waiters is None:
        return ()
    return (waiters,) if isinstance(waiters, asyncio.Future) else waiters


@dataclass(eq=False)
class AgentTask:
    """A running child. ``background`` flips to True when it is moved there."""

    run: AgentRun
    kind: AgentKind
    label: str
    background: bool
    parent: AgentTask | None = None
    status: AgentStatus = "running"
    started: float = field(default_factory=time.monotonic)
    children: list[AgentTask] = field(default_factory=list)
    result: TaskResult | None = None
    notify: bool = True
    """Whether a background child's result goes into its parent's conversation."""
    cancel_requested: bool = False
    _driving: bool = False
    """True while its turns run: the only phase a cancel interrupts (the runtime sets it)."""
    _task: asyncio.Task[TaskResult] | None = None
    _moved: bool = False
    """Moved to the background by a call (``move_to_background``), not by the clock."""
    _foreground: asyncio.Future[TaskResult] | None = None
    """The parent's waiter while it waits in the foreground (``wait_foreground``)."""
    _waiters: _Waiters | None = None
    """``wait()``'s futures not handed the result yet; None until the first, which is kept
    alone (most children are waited for once: no list each)."""
    _held: Callable[[], Coroutine[Any, Any, TaskResult]] | None = None
    """Its run while its family holds it (``hold``): the task is made when released."""
    _context: contextvars.Context | None = None
    """The task's context, which ``_hand_out`` runs in too (see ``_call_at_end``)."""

    def begin(self, work: Callable[[], Coroutine[Any, Any, TaskResult]]) -> None:
        """Make ``work()`` this child's task."""
        if (family := self.run.family) is not None:
            family.began()
        # The loop's own ``create_task``, given the name: what ``asyncio.create_task`` does,
        # without its wrapper and its naming the task after it is made (two calls fewer). The
        # context is the copy ``create_task`` would make, kept for ``_call_at_end``.
        self._context = context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        self._task = task = loop.create_task(work(), name=self.run.id, context=context)
        if self._waiters is not None:  # waited for while it was held
            self._call_at_end(task)

    def hold(self, work: Callable[[], Coroutine[Any, Any, TaskResult]]) -> None:
        """Keep ``work`` until ``begin_held``: its family releases it, or it is cancelled."""
        self._held = work

    def begin_held(self) -> None:
        work, self._held = self._held, None
        if work is not None:
            self.begin(work)

    @property
    def id(self) -> str:
        return self.run.id

    @property
    def done(self) -> bool:
        return self.result is not None

    def wait(self) -> asyncio.Future[TaskResult]:
        """The final result, to await; cancelling the waiter does not cancel the task.

        A future of its own per call rather than a coroutine: ``asyncio.gather`` over
        many children then wraps no extra task around each (wrap it in
        ``asyncio.ensure_future`` where a task-like object is needed). What
        ``asyncio.shield`` would give, with one callback on the task for all of its
        waiters instead of two closures and a context per waiter.
        """
        task = self._task
        if task is not None and task.done():
            return task
        loop = task.get_loop() if task is not None else asyncio.get_running_loop()
        waiter: asyncio.Future[TaskResult] = loop.create_future()
        if (waiters := self._waiters) is None:
            self._waiters = waiter
            if task is not None:  # else ``begin`` adds it
                self._call_at_end(task)
        else:  # waiters given up on (cancelled) need not wait for the end to be dropped
            self._waiters = [*(w for w in _each(waiters) if not w.done()), waiter]
        return waiter

    def _call_at_end(self, task: asyncio.Task[TaskResult]) -> None:
        """``_hand_out`` when ``task`` ends, run in the task's own context: the task is done
        by then, so nothing else is in it (and it is only ever entered on its loop's thread),
        and no copy of the caller's context is kept per waited child."""
        task.add_done_callback(self._hand_out, context=self._context)

    def hand_out(self, result: TaskResult) -> None:
        """``result`` to each waiter still waiting, from the task's last step (it returns
        ``result`` right after): a waiter, resumed in a later step, finds the task ended, as
        from ``_hand_out``, without the loop callback the task's end would cost first.

        An end without a result (an exception, a cancellation) still goes through ``_hand_out``.
        """
        waiters, self._waiters = self._waiters, None
        if waiters is None:
            return
        assert self._task is not None
        self._task.remove_done_callback(self._hand_out)
        for waiter in _each(waiters):
            if not waiter.done():
                waiter.set_result(result)

    def _hand_out(self, task: asyncio.Task[TaskResult]) -> None:
        """The task ended: each waiter still waiting gets its outcome, as from a shield."""
        waiters, self._waiters = _each(self._waiters), None
        outcome = None if task.cancelled() else task.exception()  # marks it retrieved
        for waiter in waiters:
            if waiter.done():
                continue
            if task.cancelled():
                waiter.cancel()
            elif outcome is not None:
                waiter.set_exception(outcome)
            else:
                waiter.set_result(task.result())

    def cancel(self) -> None:
        """Stop this task and, through it, every task it started.

        At any moment: a task not yet running ends ``cancelled`` as soon as it
        starts, and one already wrapping up (hooks, worktree) finishes as it is.
        """
        for child in self.children:
            child.cancel()
        self.cancel_requested = True
        if self._held is not None:  # it begins now, sees the request and ends cancelled
            self.begin_held()
        elif self._driving and self._task is not None and not self._task.done():
            self._task.cancel()

    def move_to_background(self) -> None:
        """Let a waiting parent go on; the child continues the same loop."""
        self._moved = True
        self._leave_foreground()

    def _leave_foreground(self) -> None:
        """End the parent's foreground wait, if it waits: the child runs on in the background."""
        waiter = self._foreground
        if waiter is not None and not waiter.done():
            waiter.set_exception(_MovedToBackground())

    async def wait_foreground(self, auto_background_after: float | None) -> TaskResult | None:
        """Wait as a sync child; None when it went to the background first.

        If the waiter itself is cancelled (the parent's turn was interrupted),
        a foreground child is cancelled with it; a backgrounded one is spared.
        """
        if self._moved:  # moved before its parent began to wait
            self.background = True
            return None
        # One waiter ends the wait either way: handed the result as any other (``wait``), or
        # ended by a move to the background. No task, event or ``asyncio.wait`` per sync child:
        # a reply with N forks keeps N of them alive while the children run.
        waiter = self._foreground = self.wait()
        timer = (
            None
            if auto_background_after is None
            else waiter.get_loop().call_later(auto_background_after, self._leave_foreground)
        )
        try:
            return await waiter
        except _MovedToBackground:
            self.background = True
            return None
        except asyncio.CancelledError:
            if not self.background:
                self.cancel()
            raise
        finally:
            self._foreground = None
            if timer is not None:
                timer.cancel()


class _MovedToBackground(Exception):
    """Set on a sync child's foreground waiter: its parent goes on without the result."""
