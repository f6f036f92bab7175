"""The public facade: ``Agent`` (configuration) and ``Session`` (a live tree)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ._orchestration.budget import Budget, Limits, require_price
from ._orchestration.loop import (
    AgentRun,
    LoopOutcome,
    Notification,
    close_pending,
    run_loop,
    within_deadline,
)
from ._orchestration.named import NamedAgents
from ._orchestration.notify import notification_text
from ._orchestration.prompt import DEFAULT_SYSTEM_PROMPT, render_system_prompt
from ._orchestration.recording import Recorder
from ._orchestration.routing import ForkGate
from ._orchestration.runtime import Runtime, RuntimeOptions
from ._orchestration.tasks import AgentTask, TaskResult
from .agents import AgentCatalog, AgentDefinition
from .errors import AgentLimitError, ConfigurationError
from .events import AgentFinished, AgentKind, AgentStarted, AgentStatus, Event
from .hooks import Hooks
from .messages import JsonValue, Message, TextBlock, UserMessage, user
from .models import Model, resolve_model
from .permissions import PermissionPolicy
from .pricing import cost
from .requests import ModelSettings
from .state.lease import Lease
from .state.registry import Registry
from .state.transcript import (
    StatusEntry,
    Transcript,
    TranscriptError,
    UsageEntry,
    read_transcript,
)
from .tools.agent_tool import AgentTool
from .tools.base import Tool, ToolLike, as_tool
from .tools.builtin import builtin_tools
from .usage import Usage

if TYPE_CHECKING:
    from .telemetry.usage_tree import UsageNode

DEFAULT_MODEL = "emulator:claude-sonnet-4-5"


@dataclass(frozen=True, slots=True)
class AgentSummary:
    """One agent of a finished tree, for reports and cost tables."""

    id: str
    parent: str | None
    kind: AgentKind
    label: str
    status: AgentStatus
    background: bool
    model: str
    usage: Usage
    turns: int

    @property
    def cost(self) -> float | None:
        return cost(self.model, self.usage)

    def to_dict(self) -> dict[str, JsonValue]:
        """The JSON form ``--json`` outputs use; ``cost`` is null when the price is unknown."""
        from .telemetry.usage_tree import usage_dict  # the module renders with rich

        return {
            "id": self.id,
            "parent": self.parent,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "background": self.background,
            "model": self.model,
            "turns": self.turns,
            "usage": usage_dict(self.usage),
            "cost": self.cost,
        }


@dataclass(frozen=True, slots=True)
class RunResult:
    output: str
    status: AgentStatus
    messages: tuple[Message, ...]
    usage: Usage
    """The main agent's own usage."""
    agents: tuple[AgentSummary, ...]
    """Every agent of the tree, the main one first."""
    error: str | None = None
    stop_reason: str | None = None
    """Why the last turn stopped: the model's reason (``end_turn``, ``max_tokens``...)
    or the limit that ended it (``max_turns``, ``max_tokens``, ``max_cost``, ``max_seconds``)."""

    @property
    def total_usage(self) -> Usage:
        """Usage summed over the whole tree."""
        return sum((a.usage for a in self.agents), Usage())

    def usage_tree(self) -> UsageNode:
        """Usage per agent, per child and per model, summed to the root; see docs/telemetry.md."""
        from .telemetry.usage_tree import AgentUsage, build_usage_tree

        return build_usage_tree(
            # By the model's name, as its requests named it: what ``UsageRecorder`` keys on.
            AgentUsage(a.id, a.parent, a.kind, a.label, a.model.partition(":")[2], a.usage)
            for a in self.agents
        )


@dataclass
class Agent:
    """An agent configuration. Each ``run`` or ``session`` starts a fresh tree.

    ``model`` is a ``provider:model`` string (``emulator:...`` runs offline)
    or a ``Model``. Tools are the built-ins plus ``tools``; the Agent tool is
    added when ``subagents`` is on.
    """

    model: str | Model = DEFAULT_MODEL
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tools: Sequence[ToolLike] = ()
    cwd: str | Path = "."
    settings: ModelSettings = field(default_factory=ModelSettings)
    builtin_tools: bool = True
    subagents: bool = True
    agents: Sequence[AgentDefinition] = ()
    """Named agents given in code; they override files of the same name."""
    load_agent_files: bool = True
    """Read ``.forkagent/agents`` and ``.claude/agents`` (project and user)."""
    forking: bool = True
    implicit_fork: bool = False
    coordinator: bool = False
    interactive: bool = True
    limits: Limits = field(default_factory=Limits)
    """Caps for the main agent."""
    child_limits: Limits = field(default_factory=Limits)
    tree_limits: Limits = field(default_factory=Limits)
    options: RuntimeOptions | None = None
    """Full control over fork policy, fan-out, nesting and backgrounding; it replaces
    ``forking``, ``implicit_fork``, ``coordinator``, ``interactive`` and ``child_limits``."""
    request_timeout: float | None = 600.0
    listeners: Sequence[Callable[[Event], None]] = ()
    permissions: PermissionPolicy | None = None
    """Mode, filters and question handler for the main agent (children derive theirs);
    None trusts every tool call."""
    hooks: Hooks | None = None
    """Python hooks; the project's settings file (``.forkagent/settings.json``) adds its own."""
    skip_transcript: bool = False
    """Write no transcript files (the registry still lists the agents)."""
    registry: Registry | Literal[False] | None = None
    """The agent registry; None = the default SQLite file, False = none."""

    def __post_init__(self) -> None:
        if self.options is not None and (dropped := _replaced_by_options(self)):
            raise ConfigurationError(
                f"Agent(options=...) replaces {', '.join(dropped)}, so setting them here too "
                "would have no effect: put them in the RuntimeOptions instead "
                "(child_limits=..., implicit_fork=..., and forking, coordinator, interactive "
                "as gate=ForkGate(enabled, coordinator, interactive))"
            )
        model = self.model.name if isinstance(self.model, Model) else self.model
        limits = (self.limits, self.tree_limits, self.runtime_options().child_limits)
        require_price(model, *limits)

    def session(self) -> Session:
        return Session(self)

    async def run(self, prompt: str) -> RunResult:
        """Run one prompt to the end, background children and their reports included."""
        async with self.session() as session:
            return await session.send(prompt, wait_for_background=True)

    def run_sync(self, prompt: str) -> RunResult:
        return asyncio.run(self.run(prompt))

    async def stream(self, prompt: str) -> AsyncIterator[Event]:
        """The run's events as they happen; the last one is the main agent's finish."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        session = Session(self, extra_listeners=(queue.put_nowait,))

        async def drive() -> None:
            try:
                async with session:
                    await session.send(prompt, wait_for_background=True)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(drive())
        while (event := await queue.get()) is not None:
            yield event
        await task

    def runtime_options(self) -> RuntimeOptions:
        if self.options is not None:
            return self.options
        gate = ForkGate(self.forking, self.coordinator, self.interactive)
        return RuntimeOptions(
            gate=gate, implicit_fork=self.implicit_fork, child_limits=self.child_limits
        )

    def catalog(self) -> AgentCatalog:
        from .agents.loader import load_agents  # YAML loads only when files are read

        base = load_agents(self.cwd) if self.load_agent_files else AgentCatalog()
        return base.with_agents(*self.agents)


class Session:
    """A live conversation with the main agent and its children.

    Use as an async context manager: leaving it cancels children still running.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        extra_listeners: Sequence[Callable[[Event], None]] = (),
        resume: Transcript | None = None,
    ) -> None:
        options = agent.runtime_options()
        cwd = Path(agent.cwd).resolve()
        model = resolve_model(agent.model)
        catalog = agent.catalog()
        tools = _assemble_tools(agent, options, catalog)
        named = NamedAgents(catalog, tools)
        self._runtime = Runtime(
            options=options,
            tree_budget=Budget(agent.tree_limits),
            named_builder=named.build,
            listeners=[*agent.listeners, *extra_listeners],
        )
        root_id = resume.header.agent_id if resume else self._runtime.new_id("main")
        settings = agent.settings
        if settings.cache_key is None:
            # One routing key for the whole tree: children inherit it (LESSONS 16).
            settings = settings.model_copy(update={"cache_key": f"forkagent-{root_id}"})
        root = AgentRun(
            id=root_id,
            model=model,
            system=render_system_prompt(agent.system_prompt, cwd),
            tools=tools,
            tool_specs=tuple(t.spec() for t in tools),
            settings=settings,
            cwd=cwd,
            budget=self._runtime.tree_budget.child(agent.limits),
            timeout=agent.request_timeout,
            hooks=_session_hooks(agent, cwd),
            policy=agent.permissions,
        )
        if resume is not None:
            # The exact bytes it sent before, so the resumed agent still hits the cache.
            header = resume.header
            root.system, root.tool_specs, root.settings = (
                header.system,
                header.tools,
                header.settings,
            )
            root.messages = list(resume.messages)
            root.inbox.extend(_undelivered_reports(resume))
        self.root = self._runtime.adopt(root)
        if resume is not None:
            self._seed_cache_monitor(resume)
        if not isinstance(agent.model, Model):
            self._runtime.owned_models.append(model)
        self._runtime.on_notification = self._on_notification
        # Before anything is written: a second process must not append to a live transcript.
        self._lease = None if agent.skip_transcript else Lease(root_id)
        try:
            self.recorder = self._record(agent, root_id)
        except BaseException:
            if self._lease is not None:
                self._lease.release()
            raise
        self._stop_poller: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._resumes: set[asyncio.Task[None]] = set()
        self._status: AgentStatus = "completed"
        self._error: str | None = None
        self._stop_reason: str | None = None
        self._finished = False
        self._turn: asyncio.Task[LoopOutcome] | None = None

    def _record(self, agent: Agent, root_id: str) -> Recorder:
        """Start the transcripts and registry rows (sweeping a crashed run's rows first)."""
        registry = Registry() if agent.registry is None else agent.registry or None
        recorder = Recorder(self._runtime.runs, root_id, registry, not agent.skip_transcript)
        if (writes := recorder.registry_writes) is not None:
            writes.write(writes.registry.mark_lost)
        self._runtime.listeners.insert(0, recorder)
        self._runtime.emit(AgentStarted(root_id, None, "main", "main", False))
        return recorder

    @classmethod
    def resume(cls, agent: Agent, transcript: Transcript | Path | str) -> Session:
        """Continue a main agent from its transcript: same prompt, tools, settings, history.

        ``agent`` supplies what a transcript cannot hold (tool implementations,
        listeners); its model and cwd are replaced by the transcript's.
        """
        if not isinstance(transcript, Transcript):
            transcript = read_transcript(transcript)
        header = transcript.header
        if header.kind != "main":
            raise ConfigurationError(
                f"{header.agent_id} is a {header.kind} agent; resume its main agent "
                f"({header.root_id}) instead"
            )
        agent = replace(agent, model=header.model, cwd=header.cwd)
        return cls(agent, resume=transcript)

    def _seed_cache_monitor(self, transcript: Transcript) -> None:
        """Let the first resumed request be compared with the last one sent before the resume.

        The transcript's time of that answer stands for when it was sent (no
        line records the sending), so a pause is measured a response's length short.
        """
        answered = transcript.last_answered()
        if answered is None:
            return  # it never had an answer: its first request is cold
        request = self.root.build_request().model_copy(update={"messages": answered.messages})
        age = time.time() - answered.at.timestamp()
        self._runtime.cache_monitor.seed(self.root.id, request, age=age)

    async def proceed(self) -> RunResult:
        """Run the main agent from where its history stands (after a resume)."""
        async with self._lock:
            close_pending(self.root)
            awaits_answer = self.root.messages and isinstance(self.root.messages[-1], UserMessage)
            if awaits_answer or self.root.inbox:
                await self._turns(drive=True)
        return self.result()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self.root.messages)

    async def send(self, prompt: str, *, wait_for_background: bool = False) -> RunResult:
        """Add a user message and run the main agent until it stops.

        With ``wait_for_background`` it also waits for background children and
        runs the turns their notifications start.
        """
        async with self._lock:
            self.root.append(user(prompt))
            await self._turns(wait_for_background)
        return self.result()

    async def _turns(self, drive: bool) -> None:
        """Run the main agent's turns and record how they ended, whatever ends them.

        The turns run as their own task, so ``forkagent stop`` can cancel them
        (``cancelled``); cancelling the caller (Ctrl-C, a signal) ends them
        ``interrupted`` and propagates; an error ends them ``failed`` and is raised.
        """
        if self.recorder.registry is not None and self._stop_poller is None:
            self._stop_poller = asyncio.create_task(self._poll_stop_requests())
        work = self._runtime.drive(self.root) if drive else run_loop(self.root)
        self._turn = asyncio.create_task(within_deadline(self.root.budget, work))
        try:
            outcome = await self._turn
            self._status, self._error = outcome.status, outcome.error
            self._stop_reason = outcome.stop_reason
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                self._status = "interrupted"
                self._error = f"interrupted; continue it with: forkagent resume {self.root.id}"
                raise
            self._status, self._error = "cancelled", "stopped on request"
        except Exception as exc:
            self._status, self._error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._turn = None
            close_pending(self.root)
            self._finish()

    def _finish(self) -> None:
        """Report how the main agent ended (its transcript and registry row record it)."""
        self._finished = True
        self._runtime.emit(AgentFinished(self.root.id, self._status, self.root.output, self._error))

    async def _poll_stop_requests(self, interval: float = 0.5) -> None:
        """Honour ``forkagent stop ID`` from other processes, for the main agent too."""
        registry = self.recorder.registry
        assert registry is not None
        while True:
            await asyncio.sleep(interval)
            running = [t for t in self._runtime.tasks.values() if not t.done]
            ids = [self.root.id, *(t.id for t in running)]
            asked = await asyncio.to_thread(_asked_to_stop, registry, ids)
            if self.root.id in asked and self._turn is not None:
                self._turn.cancel()
            for task in running:
                if task.id in asked:
                    task.cancel()

    async def fork(self, directives: Sequence[str], *, background: bool = False) -> list[AgentTask]:
        """Fork one child per directive from the conversation as it stands.

        Without ``background`` this waits for all of them; either way the
        handles carry the results. Background children also report into the
        conversation, like forks the model starts.

        More directives than ``max_agents`` leaves: the first ones run, then
        ``AgentLimitError`` names the refused ones and holds the started
        handles (waited for too, without ``background``).
        """
        try:
            tasks = self._runtime.fork_many(self.root, directives, background=background)
        except AgentLimitError as exc:
            if not background:
                await asyncio.gather(*(t.wait() for t in exc.started))
            raise
        if not background:
            await asyncio.gather(*(t.wait() for t in tasks))
        return tasks

    def task(self, task_id: str) -> AgentTask:
        return self._runtime.task(task_id)

    def move_to_background(self, task_id: str) -> None:
        self._runtime.task(task_id).move_to_background()

    def cancel(self, task_id: str) -> None:
        """Stop one child (and its own children) by id."""
        self._runtime.task(task_id).cancel()

    async def idle(self) -> None:
        """Wait until no child runs and every notification has been answered."""
        while True:
            await self._runtime.settle()
            if not self._resumes:
                return
            await asyncio.gather(*self._resumes)

    async def aclose(self) -> None:
        """Cancel every child still running and wait for them to stop."""
        # The cancelled children's reports must not start a new main-agent turn.
        self._runtime.on_notification = None
        self._runtime.cancel_all()
        for resume in self._resumes:
            resume.cancel()
        await self._runtime.settle()
        await asyncio.gather(*self._resumes, return_exceptions=True)
        if self._stop_poller is not None:
            self._stop_poller.cancel()
            await asyncio.gather(self._stop_poller, return_exceptions=True)
        if not self._finished:
            # No turn ran (nothing sent, or a resumed agent whose turn had ended): say so,
            # or its registry row would stay "running" and later read as lost.
            self._finish()
        await asyncio.to_thread(self.recorder.close)  # waits for the queued registry writes
        await self._runtime.close_models()
        if self._lease is not None:
            self._lease.release()

    def result(self) -> RunResult:
        return RunResult(
            output=self.root.output,
            status=self._status,
            messages=self.messages,
            usage=self.root.usage,
            agents=tuple(self._summaries()),
            error=self._error,
            stop_reason=self._stop_reason,
        )

    def _summaries(self) -> list[AgentSummary]:
        tasks = self._runtime.tasks
        return [
            AgentSummary(
                id=run.id,
                parent=run.parent_id,
                kind=run.kind,
                label=run.label,
                status=tasks[run.id].status if run.id in tasks else self._status,
                background=tasks[run.id].background if run.id in tasks else False,
                model=run.model.spec,
                usage=run.usage,
                turns=run.turns,
            )
            for run in self._runtime.runs.values()
        ]

    def _on_notification(self, run: AgentRun) -> None:
        if not self._runtime.options.resume_on_notification or self._lock.locked():
            return  # a running turn picks it up at its next boundary
        resume = asyncio.create_task(self._resume())
        self._resumes.add(resume)
        resume.add_done_callback(self._resumes.discard)

    async def _resume(self) -> None:
        async with self._lock:
            if self.root.inbox:
                await self._turns(drive=False)


_OPTIONS_FIELDS = frozenset(
    {"forking", "implicit_fork", "coordinator", "interactive", "child_limits"}
)
"""Fields that ``runtime_options()`` folds into ``RuntimeOptions``; ``options`` replaces them."""


def _replaced_by_options(agent: Agent) -> list[str]:
    """The fields in ``_OPTIONS_FIELDS`` set to something other than their default."""
    return [
        f.name
        for f in fields(agent)
        if f.name in _OPTIONS_FIELDS
        and getattr(agent, f.name)
        != (f.default_factory() if callable(f.default_factory) else f.default)
    ]


def _asked_to_stop(registry: Registry, agent_ids: Sequence[str]) -> set[str]:
    return {i for i in agent_ids if registry.stop_requested(i)}


def _undelivered_reports(transcript: Transcript) -> list[Notification]:
    """A report for each background child whose report never reached the resumed agent.

    Its process died (or was interrupted) first: a child that never finished
    is reported ``lost``, one that did with its own status and output. The
    agent reads them at the top of its next turn, so it can start lost work
    again instead of waiting for results that will never come.
    """
    history = "\n".join(
        b.text for m in transcript.messages for b in m.content if isinstance(b, TextBlock)
    )
    notices = []
    for child in _background_children(transcript):
        header, final = child.header, child.status if child.finished else None
        if f"task: {header.agent_id}\n" in history:
            continue  # delivered before the process ended
        lost = (
            "the process running this agent ended before it finished, so its result will "
            "never arrive; start it again if you still need it"
        )
        text = notification_text(
            task_id=header.agent_id,
            status=final.status if final else "lost",
            label=header.label,
            result=(final.output or "") if final else "",
            usage=child.usage,
            turns=sum(1 for e in child.entries if isinstance(e, UsageEntry) and not e.prewarm),
            seconds=0.0,
            error=final.error if final else lost,
        )
        notices.append(Notification(header.agent_id, TextBlock(text=text)))
    return notices


def _background_children(transcript: Transcript) -> list[Transcript]:
    """The agent's direct children that ran in the background, from the tree's folder."""
    found = []
    for path in sorted(transcript.path.parent.glob("*.jsonl")):
        try:
            child = read_transcript(path) if path != transcript.path else None
        except TranscriptError:
            continue  # damaged: nothing reliable to tell
        if child is None or child.header.parent_id != transcript.header.agent_id:
            continue
        moved = any(isinstance(e, StatusEntry) and e.status == "background" for e in child.entries)
        if child.header.background or moved:
            found.append(child)
    return found


def _session_hooks(agent: Agent, cwd: Path) -> Hooks | None:
    found = Hooks.from_settings(cwd) if agent.load_agent_files else Hooks()
    hooks = agent.hooks.merged(found) if agent.hooks else found
    return hooks if len(hooks) else None


def _assemble_tools(
    agent: Agent, options: RuntimeOptions, catalog: AgentCatalog
) -> tuple[Tool, ...]:
    tools: list[Tool] = list(builtin_tools()) if agent.builtin_tools else []
    tools += [as_tool(t) for t in agent.tools]
    if agent.subagents:
        tools.append(
            AgentTool(
                fork_available=options.gate.open,
                agent_types=[(d.name, d.description) for d in catalog],
            )
        )
    return tuple(tools)


__all__ = [
    "Agent",
    "AgentSummary",
    "RunResult",
    "Session",
    "TaskResult",
]
