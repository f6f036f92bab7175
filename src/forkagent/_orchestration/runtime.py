"""One agent tree: spawning children, running them, and reporting back.

The Agent tool and ``Session.fork`` both come here, so programmatic forks and
model-requested forks are the same machinery.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .._construct import slot_setters
from ..errors import (
    AgentLimitError,
    AgentSpawnError,
    ConfigurationError,
    ForkagentError,
    ToolError,
)
from ..events import AgentFinished, AgentMovedToBackground, AgentStarted, AgentStatus, Event
from ..messages import JsonValue, TextBlock, ToolUseBlock, user
from ..models.base import Model
from ..permissions import PermissionPolicy
from ..permissions.filters import ToolFilter
from ..requests import ModelRequest
from ..state.worktrees import Worktree, create_worktree, finish_worktree, worktree_notice
from ..telemetry.monitor import CacheMonitor
from ..tools.spawn import SpawnRequest
from .budget import Budget, Limits, require_price
from .estimate import ForkEstimate, ForkPolicy, allows_fork, estimate_fork, estimate_tokens
from .executor import Executor, InProcessExecutor, Placement, here
from .fanout import FanoutMode, ForkFamily
from .fork import ForkBase, cache_key_hash, fork_base, fork_messages, is_fork_history
from .loop import (
    AgentRun,
    LoopOutcome,
    ToolGate,
    close_pending,
    has_hooks,
    run_hooks,
    run_loop,
    within_deadline,
)
from .notify import (
    background_launch_text,
    moved_to_background_text,
    notification_text,
    usage_line,
)
from .output import OutputSpec
from .routing import ForkGate, Route, decide_route
from .tasks import AgentTask, TaskResult, task_result


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    gate: ForkGate = field(default_factory=ForkGate)
    implicit_fork: bool = False
    """The older seeds' mode: an Agent call without subagent_type forks."""
    fork_policy: ForkPolicy = "always"
    fanout: FanoutMode = "auto"
    max_depth: int = 2
    """How deep named agents may nest (the main agent is depth 0)."""
    max_agents: int = 50
    """Spawns allowed in the whole tree."""
    child_limits: Limits = field(default_factory=Limits)
    auto_background_after: float | None = None
    """Seconds after which a sync child moves to the background; None = never."""
    resume_on_notification: bool = True
    """An idle parent starts a new turn when a background child reports."""

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_agents", "auto_background_after"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigurationError(f"RuntimeOptions.{name} is {value}: give 0 or more")


@dataclass(frozen=True, slots=True)
class ForkParams:
    """One programmatic fork and its own options (``Session.fork``).

    Nothing here touches the bytes the child shares with its parent: the
    options act at dispatch (``tool_filter``), on its budget, on what is
    recorded, or after the shared prefix (``output_type`` adds to the directive).
    """

    directive: str
    label: str = ""
    max_turns: int | None = None
    timeout: float | None = None
    """Seconds for the whole child (its ``max_seconds``)."""
    limits: Limits | None = None
    """Token, cost and other caps; ``max_turns`` and ``timeout`` above override theirs."""
    tool_filter: ToolFilter | None = None
    """Checked on every call, on top of the parent's filters (e.g. ``MemoryDirFilter``)."""
    transcript: bool = True
    on_complete: Callable[[TaskResult], object] | None = None
    """Called with the child's result when it ends, however it ends."""
    cancel: asyncio.Event | None = None
    """An external token: setting it cancels the child."""
    output_type: Any = None
    """A structured answer (a pydantic model, dataclass or TypedDict) instead of text."""
    output_retries: int = 1


NamedBuilder = Callable[["Runtime", AgentRun, str, SpawnRequest], "PreparedChild"]


@dataclass(eq=False)
class PreparedChild:
    """A child run plus what to do when it ends (e.g. a worktree to finish)."""

    run: AgentRun
    background_default: bool = False
    isolation: Literal["worktree"] | None = None
    finish: Callable[[], Any] | None = None
    """Async callable returning ``(path, branch)`` of a kept worktree, or None."""
    worktree: Worktree | None = None
    """Its own checkout (worktree isolation), which the executor may have to ship."""
    refused: list[str] = field(default_factory=list)
    """Calls an isolated child aimed at the parent's checkout, refused and reported."""
    setup: Callable[[], Awaitable[None]] | None = None
    """Awaited before the child starts (a named agent's own MCP servers start here)."""
    teardown: Callable[[], Awaitable[None]] | None = None
    """Awaited when the child has ended, however it ended."""


_Marker = tuple[int, object, object, object]


def _marker(parent: AgentRun) -> _Marker:
    """Identifies a parent's state cheaply: length, first and last message, snapshot."""
    messages = parent.messages
    first, last = (messages[0], messages[-1]) if messages else (None, None)
    return (len(messages), first, last, parent.last_request)


@dataclass(eq=False, slots=True)
class _ParentState:
    """Computed for a family's first fork, reused by its siblings."""

    marker: _Marker
    base: ForkBase
    fork_history: bool
    """The history holds fork rules: the recursion guard's fallback."""
    estimate: ForkEstimate | None = None
    """Made when a fork policy first asks for it."""

    def matches(self, parent: AgentRun) -> bool:
        """Same length, and the same objects at both ends and as the snapshot."""
        now = _marker(parent)
        return now[0] == self.marker[0] and all(
            a is b for a, b in zip(now[1:], self.marker[1:], strict=True)
        )


@dataclass(eq=False)
class Runtime:
    options: RuntimeOptions
    tree_budget: Budget
    named_builder: NamedBuilder | None = None
    listeners: list[Callable[[Event], None]] = field(default_factory=list)
    runs: dict[str, AgentRun] = field(default_factory=dict)
    tasks: dict[str, AgentTask] = field(default_factory=dict)
    spawned: int = 0
    launching: int = 0
    """Agent-tool spawns past the limit check but not started yet (hooks, worktrees):
    they hold their place under ``max_agents``, so concurrent calls cannot overshoot."""
    owned_models: list[Model] = field(default_factory=list)
    """Models this tree created from strings; closed with it."""
    on_notification: Callable[[AgentRun], None] | None = None
    """Called when a notification lands in the main agent's inbox."""
    executor: Executor = field(default_factory=InProcessExecutor)
    """Where children's model requests and tool calls run; decisions stay here."""
    placements: dict[str, Placement] = field(default_factory=dict)
    """Where each child ran, by agent id (set as it starts)."""
    _families: dict[tuple[str, int], ForkFamily] = field(default_factory=dict)
    _children: dict[str | None, list[AgentTask]] = field(default_factory=dict)
    """Tasks by parent id, the finished ones dropped as ``open_children`` meets them."""
    _cache_keys: dict[str, tuple[ModelRequest | None, str]] = field(default_factory=dict)
    """Per parent: the snapshot its forks were last started from, and its ``cache_key_hash``."""
    _parent_states: dict[str, _ParentState] = field(default_factory=dict)
    """Per parent: what the forks of its current state share (history base, estimate)."""
    _signals: dict[str, asyncio.Event] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    cache_monitor: CacheMonitor = field(init=False)
    """Explains every response's cache use; its reports go out as ``CacheReported``."""
    _emit: Callable[[Event], None] = field(init=False, repr=False)
    """``emit`` bound once, for every run: not one bound method kept per run."""

    def __post_init__(self) -> None:
        # Its own reports go to the listeners only: the monitor has nothing to do with them.
        self.cache_monitor = CacheMonitor(on_report=self._tell_listeners)
        self._emit = self.emit

    # -- bookkeeping ---------------------------------------------------------

    def emit(self, event: Event) -> None:
        # ``_tell_listeners``' loop, not a call to it: every event of every run passes here.
        for listener in self.listeners:
            listener(event)
        self.cache_monitor(event)  # after the listeners: a report follows its response

    def _tell_listeners(self, event: Event) -> None:
        for listener in self.listeners:
            listener(event)

    def new_id(self, kind: str) -> str:
        # Six random hex digits tell runs apart; ``random`` needs no system call (uuid4 does).
        return f"{kind}-{next(self._ids)}-{random.getrandbits(24):06x}"

    def adopt(self, run: AgentRun, *, profile: bool = True) -> AgentRun:
        """Make ``run`` one of this tree's; ``profile=False`` when its model's profile is
        already set for the monitor (a fork's, set once for its family: ``_set_profile``)."""
        run.emit = self._emit
        run.runtime = self
        self.runs[run.id] = run
        if profile:
            self._set_profile(run.model)
        return run

    def _set_profile(self, model: Model) -> None:
        self.cache_monitor.set_profile(model.name, model.profile)

    def task(self, task_id: str) -> AgentTask:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise AgentSpawnError(f"no agent task with id {task_id!r}") from None

    def open_children(self, run: AgentRun) -> list[AgentTask]:
        """``run``'s children still running, found without walking the whole tree."""
        children = self._children.get(run.id)
        if children is None:
            return []
        children[:] = [t for t in children if not t.done]
        return list(children)

    # -- the Agent tool ------------------------------------------------------

    async def spawn(self, parent: AgentRun, request: SpawnRequest) -> str:
        """Run the Agent tool's call; every refusal is an error result for the model."""
        refusal = self._fork_refusal(parent) or self._limit_refusal()
        if refusal:
            raise ToolError(refusal)
        self.launching += 1
        try:
            task, header = await self._launch(parent, request)
        finally:
            self.launching -= 1
        # The report is made here, not in a coroutine of its own: a sync child's parent waits
        # in this frame, and N forks in one reply keep N such chains alive while they run.
        prefix = f"[{header}]\n" if header else ""
        if task.background:
            return prefix + background_launch_text(task.id, task.label)
        result = await task.wait_foreground(self.options.auto_background_after)
        if result is None:
            self.emit(AgentMovedToBackground(task.id))
            return prefix + moved_to_background_text(task.id, task.label)
        return prefix + _result_text(result)

    async def _launch(self, parent: AgentRun, request: SpawnRequest) -> tuple[AgentTask, str]:
        """Route, prepare and start the child; the header tells the model how it was routed."""
        route = decide_route(
            fork=request.fork,
            subagent_type=request.subagent_type,
            gate=self.options.gate,
            implicit=self.options.implicit_fork,
        )
        estimate: ForkEstimate | None = None
        policy = self.options.fork_policy
        if route.kind == "fork" and policy != "always":
            # "always" needs no estimate; the others decide on one, computed once per family.
            estimate = self._estimate(parent) if policy == "when_cheaper" else None
            if not allows_fork(policy, estimate):
                why = f": {estimate.summary()}" if estimate is not None else ""
                route = Route(
                    "named", "general-purpose", f"fork policy {policy!r} chose a fresh agent{why}"
                )
        try:
            task = await self._prepare_and_start(parent, route, request, estimate)
        except ForkagentError as exc:
            raise ToolError(f"Refused: {exc}") from None
        summary = estimate.summary() if estimate is not None and route.kind == "fork" else None
        header = "; ".join(n for n in (route.note, summary) if n)
        return task, header

    async def spawn_named(
        self,
        parent: AgentRun,
        request: SpawnRequest,
        *,
        output: OutputSpec | None = None,
    ) -> AgentTask:
        """A named agent started from code (``Session.spawn``), with the Agent tool's checks."""
        refusal = self._fork_refusal(parent) or self._limit_refusal()
        if refusal:
            raise AgentSpawnError(refusal.removeprefix("Refused: "))
        assert request.subagent_type is not None
        route = Route("named", request.subagent_type)
        self.launching += 1
        try:
            return await self._prepare_and_start(parent, route, request, None, output=output)
        finally:
            self.launching -= 1

    async def _prepare_and_start(
        self,
        parent: AgentRun,
        route: Route,
        request: SpawnRequest,
        estimate: ForkEstimate | None,
        *,
        output: OutputSpec | None = None,
    ) -> AgentTask:
        """Depth, price, SubagentStart and isolation checks, then the start; raises on refusal."""
        if route.kind == "named" and parent.depth >= self.options.max_depth:
            raise AgentSpawnError(
                f"agents may nest only {self.options.max_depth} levels deep and "
                "this agent is at the limit. Do the work with your own tools."
            )
        child = self._prepare(parent, route, request)
        if child.setup is not None:
            try:
                await child.setup()
            except BaseException:
                del self.runs[child.run.id]
                raise
        if output is not None:
            child.run.output_spec = output
            child.run.tool_specs = (*child.run.tool_specs, output.tool_spec())
        try:
            require_price(child.run.model.name, *child.run.budget.all_limits())
            await self._start_hook(child.run, request.prompt)
            if (request.isolation or child.isolation) == "worktree":
                await self._isolate(child, parent)
        except ForkagentError:
            del self.runs[child.run.id]
            raise
        background = (
            request.run_in_background
            if request.run_in_background is not None
            else child.background_default
        )
        return self.start(child, background=background, estimate=estimate)

    def _fork_refusal(self, parent: AgentRun) -> str | None:
        if parent.is_fork or self._parent_state(parent).fork_history:
            return (
                "Refused: you are a forked child and may not start agents of any kind. "
                "Do the work yourself with your tools, then report."
            )
        return None

    def _allowance(self) -> int:
        """How many more agents the tree may start."""
        return max(self.options.max_agents - self.spawned - self.launching, 0)

    def _limit_refusal(self) -> str | None:
        if self._allowance():
            return None
        return (
            f"Refused: this run has started {self.options.max_agents} agents, its limit. "
            "Finish the work with the agents you have."
        )

    def _prepare(self, parent: AgentRun, route: Route, request: SpawnRequest) -> PreparedChild:
        if route.kind == "fork":
            return PreparedChild(self.build_fork(parent, request.prompt, request.description))
        if self.named_builder is None:
            raise AgentSpawnError("no named agents are configured for this runtime")
        assert route.agent_type is not None
        return self.named_builder(self, parent, route.agent_type, request)

    async def _start_hook(self, run: AgentRun, prompt: str) -> None:
        """SubagentStart may refuse the child; its ``additionalContext`` joins the child's task."""
        outcome = await run_hooks(run, "SubagentStart", prompt=prompt)
        if outcome.blocked:
            raise AgentSpawnError(f"SubagentStart hook: {outcome.reason or 'blocked'}")
        if outcome.additional_context:
            _add_to_last_message(run, *outcome.additional_context)

    async def _isolate(self, child: PreparedChild, parent: AgentRun) -> None:
        """Give the child its own git worktree and tell it so, after its shared prefix."""
        worktree = await create_worktree(parent.cwd, child.run.id)
        run = child.run
        run.cwd = worktree.map_path(parent.cwd)
        run.gates = (*run.gates, confine_to(worktree, child.refused))
        _add_to_last_message(run, worktree_notice(worktree))
        child.worktree = worktree

        async def finish() -> tuple[str, str] | None:
            result = await finish_worktree(worktree)
            return (str(result.path), result.branch) if result.kept else None

        child.finish = finish

    def _parent_state(self, parent: AgentRun) -> _ParentState:
        """What the forks of ``parent``'s current state share, made by the first of them."""
        known = self._parent_states.get(parent.id)
        if known is not None and known.matches(parent):
            return known
        base = fork_base(parent.messages, style=parent.model.profile.history_style)
        state = _ParentState(_marker(parent), base, is_fork_history(parent.messages))
        self._parent_states[parent.id] = state
        return state

    def _estimate(self, parent: AgentRun) -> ForkEstimate:
        """Fork or fresh for ``parent``'s current state: once per family."""
        state = self._parent_state(parent)
        if state.estimate is None:
            fresh = sum(len(t.model_dump_json()) for t in parent.tool_specs) + 2000
            state.estimate = estimate_fork(
                parent.last_request,
                parent.last_usage,
                fresh_prompt_tokens=estimate_tokens(fresh),
                profile=parent.model.profile,
            )
        return state.estimate

    # -- forks ---------------------------------------------------------------

    def build_fork(
        self, parent: AgentRun, directive: str, label: str = "", params: ForkParams | None = None
    ) -> AgentRun:
        """A child from the parent's snapshot: same bytes up to its directive."""
        state, family = self._siblings_of(parent)
        return self._fork_child(parent, state, family, directive, label, params)

    def _siblings_of(self, parent: AgentRun) -> tuple[_ParentState, ForkFamily | None]:
        """What forks of ``parent``'s current state share: found once for many siblings,
        with the monitor told their model's profile (the parent's), so ``_fork_child``
        need not tell it per fork."""
        self._set_profile(parent.model)
        return self._parent_state(parent), self._family(parent)

    def _fork_child(
        self,
        parent: AgentRun,
        state: _ParentState,
        family: ForkFamily | None,
        directive: str,
        label: str,
        params: ForkParams | None,
    ) -> AgentRun:
        """``build_fork`` with what siblings share already found (``_siblings_of``)."""
        output = None
        if params is not None and params.output_type is not None:
            output = OutputSpec.of(params.output_type, mode="text", retries=params.output_retries)
            directive = f"{directive}\n\n{output.instructions()}"
        snapshot = parent.last_request
        child = AgentRun(
            id=self.new_id("fork"),
            model=parent.model,
            system=snapshot.system if snapshot else parent.system,
            tools=parent.tools,
            _by_name=parent._by_name,
            tool_specs=snapshot.tools if snapshot else parent.tool_specs,
            settings=snapshot.settings if snapshot else parent.settings,
            cwd=parent.cwd,
            budget=self.tree_budget.child(_child_limits(self.options.child_limits, params)),
            messages=fork_messages(state.base, directive),
            kind="fork",
            label=label or _first_line(directive),
            parent_id=parent.id,
            depth=parent.depth + 1,
            is_fork=True,
            shared_prefix_end=state.base.position,
            gates=parent.gates,
            redact=parent.redact,
            hooks=parent.hooks,
            policy=_child_policy(parent.policy, params),
            timeout=parent.timeout,
            family=family,
            prewarm=self.options.fanout == "prewarm",
            output_spec=output,
            keep_transcript=params.transcript if params is not None else True,
        )
        if family is not None:
            family.size += 1
        return self.adopt(child, profile=False)

    def _family(self, parent: AgentRun) -> ForkFamily | None:
        """The family of forks of ``parent``'s current length (``size`` counts its members)."""
        if self.options.fanout == "off":
            return None
        key = (parent.id, len(parent.messages))
        family = self._families.get(key)
        if family is None:
            warmup = parent.model.profile.warmup
            if self.options.fanout == "prewarm" and parent.model.profile.supports_prewarm:
                warmup = "first_response_starts"
            family = self._families[key] = ForkFamily(key, warmup)
        return family

    def fork_details(self, child: AgentRun, parent: AgentRun) -> dict[str, JsonValue]:
        snapshot = parent.last_request
        known = self._cache_keys.get(parent.id)
        if known is None or known[0] is not snapshot:
            # Once per family: siblings share the snapshot, and so the hash.
            known = (snapshot, cache_key_hash(snapshot or child.build_request()))
            self._cache_keys[parent.id] = known
        return {
            "cache_key_hash": known[1],
            "shares_cache": snapshot is not None,
            "note": None
            if snapshot
            else "the parent has not sent a request yet: nothing is cached to share",
        }

    # -- running -------------------------------------------------------------

    def start(
        self,
        child: PreparedChild | AgentRun,
        *,
        background: bool,
        estimate: ForkEstimate | None = None,
    ) -> AgentTask:
        # A bare run (every programmatic fork) has no worktree, setup or teardown to carry.
        prepared = child if isinstance(child, PreparedChild) else None
        run = child.run if isinstance(child, PreparedChild) else child
        parent_task = self.tasks.get(run.parent_id or "")
        task = AgentTask(run=run, kind=run.kind, label=run.label, background=background)
        task.parent = parent_task
        if parent_task is not None:
            parent_task.children.append(task)
        self.tasks[run.id] = task
        if (siblings := self._children.get(run.parent_id)) is None:
            siblings = self._children[run.parent_id] = []
        siblings.append(task)
        self.spawned += 1
        details: dict[str, JsonValue] = {}
        if run.is_fork and run.parent_id in self.runs:
            details = self.fork_details(run, self.runs[run.parent_id])
            details["mode"] = "background" if background else "sync"
            if estimate is not None:
                details["estimate"] = estimate.summary()
        self.emit(_agent_started(run, background, details))
        # The function and the runtime, not a bound method: a held sibling keeps its ``work``
        # until the release, and a bound method would be one object more each.
        work = functools.partial(Runtime._execute, self, task, prepared)
        if (family := run.family) is None:
            task.begin(work)
        elif family.holds() and self._may_hold(run):
            task.hold(work)
            family.hold(task)
        else:
            family.begin_held()  # those held begin first: every member begins in its order
            task.begin(work)
        return task

    def _may_hold(self, run: AgentRun) -> bool:
        """Whether a fork can wait for its family's release with no task of its own.

        Only without limits: a started fork checks its budget before it waits, and a
        wall-time limit must end it while it waits. Only in process: another executor
        places a child when it begins.
        """
        return run.budget.unlimited and type(self.executor) is InProcessExecutor

    async def _execute(self, task: AgentTask, prepared: PreparedChild | None) -> TaskResult:
        run = task.run
        family = run.family  # set until its first request
        status: AgentStatus = "failed"
        error: str | None = None
        executor = self.executor
        # The in-process executor's place and release do nothing: no coroutine for either.
        in_process = type(executor) is InProcessExecutor
        task._driving = True
        try:
            if task.cancel_requested:
                raise asyncio.CancelledError
            self.placements[run.id] = (
                here()
                if in_process
                else await executor.place(run, prepared.worktree if prepared else None)
            )
            work = self._drive_child(run) if run.hooks is not None else self._work(run)
            outcome = await within_deadline(run.budget, work)
            status, error = outcome.status, outcome.error
        except asyncio.CancelledError:
            _uncancel()
            status, error = "cancelled", "cancelled"
        except Exception as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            task._driving = False
            if family is not None:
                family.ended()
            for child in self.open_children(run):
                child.cancel()
            if status != "completed":  # a completed run ended on a reply with every call answered
                close_pending(run)
        try:
            if not in_process:
                await executor.release(run)
        except Exception as exc:  # its work did not come back: it is not a completed run
            lost = f"its work could not be brought back: {exc}"
            status, error = "failed", f"{error}; {lost}" if error else lost
        worktree = await prepared.finish() if prepared and prepared.finish else None
        if prepared is not None and prepared.teardown is not None:
            await prepared.teardown()
        # A completed child met its SubagentStop hooks already.
        if status != "completed" and has_hooks(run.hooks):
            await run_hooks(run, "SubagentStop", result=run.output)
        worktree_path, worktree_branch = worktree or (None, None)
        result = task_result(
            task_id=run.id,
            status=status,
            output=run.output,
            usage=run.usage,
            turns=run.turns,
            seconds=time.monotonic() - task.started,
            error=error,
            worktree_path=worktree_path,
            worktree_branch=worktree_branch,
            model=run.model.spec,
            value=run.output_value if run.output_ready else None,
            outside_worktree=tuple(prepared.refused) if prepared else (),
        )
        task.status, task.result = status, result
        self.emit(_agent_finished(run.id, status, result.output, error))
        if task.background and task.notify:
            self._notify_parent(task, result)
        task.hand_out(result)  # the last step: the task ends with this very result
        return result

    def _work(self, run: AgentRun) -> Coroutine[Any, Any, LoopOutcome]:
        """A run without hooks (no SubagentStop hook can send it back): ``drive``, or for a
        fork its turns alone, as a fork starts no agents (``_fork_refusal``) and so nothing
        reports to it: one coroutine fewer on every resumption of its requests."""
        return run_loop(run) if run.is_fork else self.drive(run)

    async def _drive_child(self, run: AgentRun) -> LoopOutcome:
        """Drive a child; a SubagentStop hook that blocks its end sends it back to work.

        The hook's reason becomes the child's next user message, as Claude Code
        does; ``stop_hook_active`` tells the hook when it already sent it back once.
        """
        outcome = await self.drive(run)
        sent_back = False
        while outcome.status == "completed" and has_hooks(run.hooks):
            verdict = await run_hooks(
                run, "SubagentStop", result=run.output, stop_hook_active=sent_back
            )
            if not verdict.blocked:
                break
            sent_back = True
            reason = verdict.reason or "no reason given"
            run.append(
                user(f"A SubagentStop hook did not let you stop yet: {reason}", origin="hook")
            )
            outcome = await self.drive(run)
        return outcome

    async def drive(self, run: AgentRun) -> LoopOutcome:
        """Run turns, then keep going while background children still report."""
        outcome = await run_loop(run)
        while outcome.status == "completed" and (run.inbox or self.open_children(run)):
            signal = self._signal(run)
            signal.clear()  # set by reports the loop has already read
            if not run.inbox:
                await signal.wait()
                continue
            outcome = await run_loop(run)
        return outcome

    def _signal(self, run: AgentRun) -> asyncio.Event:
        signal = self._signals.get(run.id)
        if signal is None:
            signal = self._signals[run.id] = asyncio.Event()
        return signal

    def _notify_parent(self, task: AgentTask, result: TaskResult) -> None:
        parent = self.runs.get(task.run.parent_id or "")
        if parent is None:
            return
        parent.inbox.append(_ChildReport(task.label, result))
        # Only a parent waiting in ``drive`` has a signal; one that does not yet reads its
        # inbox (after clearing the signal) before it ever waits.
        if (signal := self._signals.get(parent.id)) is not None:
            signal.set()
        if parent.parent_id is None and self.on_notification is not None:
            self.on_notification(parent)

    # -- programmatic forks and cancellation ---------------------------------

    def fork_many(
        self, parent: AgentRun, directives: Sequence[str | ForkParams], *, background: bool
    ) -> list[AgentTask]:
        """One fork per directive, while ``max_agents`` allows.

        Past the limit, the first directives still start and ``AgentLimitError``
        (holding their handles) refuses the rest, as the Agent tool refuses each
        call over the limit.
        """
        refusal = self._fork_refusal(parent)
        if refusal:
            raise AgentSpawnError(refusal)
        allowed = self._allowance()
        started: list[AgentTask] = []
        if directives[:allowed]:
            state, family = self._siblings_of(parent)  # the parent cannot change while these start
            started = [
                self.start(
                    self._fork_child(parent, state, family, *_fork_args(d)), background=background
                )
                for d in directives[:allowed]
            ]
        refused = [_fork_args(d)[0] for d in directives[allowed:]]
        if refused:
            raise AgentLimitError(
                f"this run may start {self.options.max_agents} agents: started "
                f"{len(started)} of these {len(directives)} forks, refused the last "
                f"{len(refused)}",
                started=started,
                refused=refused,
            )
        return started

    async def close_models(self) -> None:
        for model in self.owned_models:
            await model.aclose()
        self.owned_models.clear()

    def cancel_all(self) -> None:
        for task in self.tasks.values():
            task.cancel()

    async def settle(self) -> None:
        """Wait until no child task is running."""
        while pending := [t._task for t in self.tasks.values() if t._task and not t._task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)


_STARTED_AGENT, _STARTED_PARENT, _STARTED_KIND, _STARTED_LABEL, _STARTED_BACKGROUND, _DETAILS = (
    slot_setters(AgentStarted)
)


def _agent_started(run: AgentRun, background: bool, details: dict[str, JsonValue]) -> AgentStarted:
    """``AgentStarted(run.id, run.parent_id, run.kind, run.label, background, details)``, set
    through its slots (``slot_setters``), as ``_agent_finished``: one per started agent."""
    event: AgentStarted = object.__new__(AgentStarted)
    _STARTED_AGENT(event, run.id)
    _STARTED_PARENT(event, run.parent_id)
    _STARTED_KIND(event, run.kind)
    _STARTED_LABEL(event, run.label)
    _STARTED_BACKGROUND(event, background)
    _DETAILS(event, details)
    return event


_FINISHED_AGENT, _FINISHED_STATUS, _FINISHED_OUTPUT, _FINISHED_ERROR, _FINISHED_DETAILS = (
    slot_setters(AgentFinished)
)


def _agent_finished(
    agent_id: str, status: AgentStatus, output: str, error: str | None
) -> AgentFinished:
    """``AgentFinished(agent_id, status, output, error)``, set through its slots
    (``slot_setters``): one per finished child, at under half the cost of ``__init__``."""
    event: AgentFinished = object.__new__(AgentFinished)
    _FINISHED_AGENT(event, agent_id)
    _FINISHED_STATUS(event, status)
    _FINISHED_OUTPUT(event, output)
    _FINISHED_ERROR(event, error)
    _FINISHED_DETAILS(event, {})
    return event


@dataclass(frozen=True, slots=True)
class _ChildReport:
    """A background child's notification, its text written when the parent's turn reads it:
    a report waits for that turn (or for none, when the session ends first), and its
    frozen result gives the same text then as now."""

    label: str
    result: TaskResult

    @property
    def task_id(self) -> str:
        return self.result.task_id

    @property
    def block(self) -> TextBlock:
        result = self.result
        worktree = (
            f"{result.worktree_path} (branch {result.worktree_branch})"
            if result.worktree_path
            else None
        )
        text = notification_text(
            task_id=result.task_id,
            status=result.status,
            label=self.label,
            result=result.output,
            usage=result.usage,
            turns=result.turns,
            seconds=result.seconds,
            error=result.error,
            worktree=worktree,
        )
        return TextBlock(text=text)


def _add_to_last_message(run: AgentRun, *texts: str) -> None:
    """Append to a new child's task, after its shared prefix (the cache is not touched)."""
    last = run.messages[-1]
    extra = tuple(TextBlock(text=t) for t in texts)
    run.messages[-1] = last.model_copy(update={"content": (*last.content, *extra)})


def _uncancel() -> None:
    """Forget a cancellation once handled, so the task's wrap-up can await normally."""
    if (current := asyncio.current_task()) is not None:
        current.uncancel()


def _result_text(result: TaskResult) -> str:
    lines = [
        f"Agent {result.task_id} finished: {result.status} "
        f"({usage_line(result.usage, result.turns, result.seconds)})."
    ]
    if result.worktree_path:
        lines.append(
            f"Its changes are kept in worktree {result.worktree_path} "
            f"on branch {result.worktree_branch}."
        )
    if result.outside_worktree:
        lines.append(
            "Refused, aimed at your checkout outside its worktree: "
            + "; ".join(result.outside_worktree)
        )
    if result.error:
        lines.append(f"Error: {result.error}")
    lines.append(result.output or "(no output)")
    return "\n".join(lines)


def confine_to(worktree: Worktree, refused: list[str]) -> ToolGate:
    """A gate for an isolated child: no path of the parent's checkout outside its worktree.

    File tools are judged by their path argument (symlinks resolved), Bash by any
    absolute path of the checkout its command names; each refusal says where to work
    instead and is listed in the child's result.
    """
    repo = str(worktree.repo)

    def check(use: ToolUseBlock) -> str | None:
        named = [
            v for k, v in use.input.items() if k in ("file_path", "path") and isinstance(v, str)
        ]
        command = use.input.get("command")
        if isinstance(command, str):
            named += re.findall(rf"{re.escape(repo)}[^\s'\";|&)]*", command)
        for value in named:
            path = Path(value).expanduser()
            if path.is_absolute() and worktree.escapes(path):
                refused.append(f"{use.name} {value}")
                return (
                    f"{value} is in your parent's checkout; you work in your own worktree "
                    f"{worktree.path}. Use {worktree.map_path(path)} instead."
                )
        return None

    async def gate(run: AgentRun, use: ToolUseBlock) -> str | None:
        return check(use)

    return gate


def _fork_args(directive: str | ForkParams) -> tuple[str, str, ForkParams | None]:
    """Directive, label and options of one ``fork_many`` entry (a plain string has defaults)."""
    if isinstance(directive, str):
        return directive, "", None
    return directive.directive, directive.label, directive


def _child_limits(defaults: Limits, params: ForkParams | None) -> Limits:
    """A fork's caps: its own ``limits`` (else the runtime's), then ``max_turns`` and ``timeout``."""
    if params is None:
        return defaults
    limits = params.limits or defaults
    if params.max_turns is not None:
        limits = replace(limits, max_turns=params.max_turns)
    if params.timeout is not None:
        limits = replace(limits, max_seconds=params.timeout)
    return limits


def _child_policy(
    policy: PermissionPolicy | None, params: ForkParams | None
) -> PermissionPolicy | None:
    """The parent's policy, plus the fork's own filter: checked at dispatch, tool bytes unchanged."""
    extra = params.tool_filter if params is not None else None
    if extra is None:
        return policy
    if policy is None:
        return PermissionPolicy(mode="bypass", filter=extra)
    return policy.for_child(filter=extra)


def _first_line(text: str, limit: int = 60) -> str:
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else "fork"
    return line if len(line) <= limit else line[: limit - 1] + "…"
