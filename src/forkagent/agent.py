"""The public facade: ``Agent`` (configuration) and ``Session`` (a live tree)."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, cast

from typing_extensions import TypeVar

from ._orchestration.budget import Budget, Limits, require_price
from ._orchestration.compaction import CompactionResult, compact, prompt_size, threshold
from ._orchestration.executor import Executor, InProcessExecutor, here
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
from ._orchestration.output import OutputSpec
from ._orchestration.prompt import DEFAULT_SYSTEM_PROMPT, render_system_prompt
from ._orchestration.recording import Recorder
from ._orchestration.routing import ForkGate
from ._orchestration.runtime import ForkParams, Runtime, RuntimeOptions
from ._orchestration.tasks import AgentTask, TaskResult
from .agents import AgentCatalog, AgentDefinition
from .errors import AgentLimitError, ConfigurationError, OutputError
from .events import AgentFinished, AgentKind, AgentStarted, AgentStatus, Event
from .hooks import Hooks
from .mcp import McpPool, McpServer, load_project_servers
from .messages import JsonValue, Message, TextBlock, UserMessage, user
from .models import Model, resolve_model
from .permissions import PermissionPolicy
from .permissions.record import recorded_trust, restored_policy
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
from .tools.environment import DEFAULT_POLICY, EnvironmentPolicy
from .tools.spawn import SpawnRequest
from .usage import Usage

if TYPE_CHECKING:
    from .telemetry.usage_tree import UsageNode

DEFAULT_MODEL = "emulator:claude-sonnet-4-6"

OutputT = TypeVar("OutputT", default=str)
"""What a run returns as ``output``: the final text, or the ``output_type`` given to ``Agent``."""
_TEXT: Any = str


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
    executor: str = InProcessExecutor.name
    """Where its model requests and tool calls ran (``in-process``, ``ray``)."""
    worker_pid: int | None = None
    """The process that ran them; None for an agent that never started."""

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
            "executor": self.executor,
            "worker_pid": self.worker_pid,
        }


@dataclass(frozen=True, slots=True)
class RunResult(Generic[OutputT]):
    output: OutputT
    """The final text, or the validated ``output_type`` object."""
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
    text: str = ""
    """The main agent's last text (with an ``output_type``, what came with the answer)."""

    @property
    def total_usage(self) -> Usage:
        """Usage summed over the whole tree."""
        return sum((a.usage for a in self.agents), Usage())

    def _repr_markdown_(self) -> str:
        """How a notebook shows a result: the outcome, then one row per agent."""
        rows = [
            f"| {a.id} | {a.kind} | {a.label} | {a.status} | {a.usage.cache_read_tokens:,} | "
            + ("unknown" if a.cost is None else f"${a.cost:.4f}")
            + " |"
            for a in self.agents
        ]
        return "\n".join(
            [
                f"**{self.status}**" + (f": {self.error}" if self.error else ""),
                "",
                f"```\n{self.output}\n```",
                "",
                "| agent | kind | label | status | cache read | cost |",
                "|---|---|---|---|---:|---:|",
                *rows,
            ]
        )

    def usage_tree(self) -> UsageNode:
        """Usage per agent, per child and per model, summed to the root; see docs/telemetry.md."""
        from .telemetry.usage_tree import AgentUsage, build_usage_tree

        return build_usage_tree(
            # By the model's name, as its requests named it: what ``UsageRecorder`` keys on.
            AgentUsage(a.id, a.parent, a.kind, a.label, a.model.partition(":")[2], a.usage)
            for a in self.agents
        )


@dataclass
class Agent(Generic[OutputT]):
    """An agent configuration. Each ``run`` or ``session`` starts a fresh tree.

    ``model`` is a ``provider:model`` string (``emulator:...`` runs offline)
    or a ``Model``. Tools are the built-ins plus ``tools``; the Agent tool is
    added when ``subagents`` is on. With ``output_type`` (a pydantic model,
    dataclass, TypedDict or any type pydantic validates) the run's ``output``
    is a validated object of that type.
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
    env_policy: EnvironmentPolicy = DEFAULT_POLICY
    """Which environment variables the Bash tool's commands see; removed values are masked
    in tool output (provider keys and secret-looking names by default)."""
    mcp_servers: Sequence[McpServer] = ()
    """MCP servers whose tools the agents get (``mcp__<server>__<tool>``); the project's
    ``.mcp.json`` adds its servers when the directory is trusted."""
    trust_project: bool | None = None
    """Whether the project's own executables (settings hooks, agent files' hooks) may run:
    None asks ``forkagent.permissions.trust.is_trusted(cwd)``; True or False decides for
    this agent. Hooks passed in code and the user's own files are not affected."""
    registry: Registry | Literal[False] | None = None
    """The agent registry; None = the default SQLite file, False = none."""
    output_type: type[OutputT] = _TEXT
    """``str`` (the final text) or a type the answer is validated against."""
    output_retries: int = 1
    """How often an answer that does not validate is sent back to the model before the run fails."""
    load_user_agents: bool = False
    """Also read the user's agent files (``~/.forkagent/agents``, ``~/.claude/agents``). Off
    by default so that a program behaves the same on every machine; the CLI turns it on."""
    compact_at: float | None = 0.8
    """Compact the main agent's conversation before a request that would hold more: up to 1,
    a fraction of the model's context window (models without a known window never
    compact on their own); above 1, a token count; None, never."""
    compact_keep: float = 0.25
    """How much of the threshold the latest turns kept after the summary may take."""
    after_turn: Sequence[ForkParams | Callable[[Session[Any]], ForkParams | None]] = ()
    """Forks started in the background, not reported into the conversation, each time the
    main agent ends a turn (memory consolidation, a session summary): a ``ForkParams``,
    or a function of the session that returns one or None (skip this turn)."""
    executor: Executor | None = None
    """Where children's model requests and tool calls run: None, in this process;
    ``forkagent.executors.ray.RayExecutor(...)``, on a Ray cluster. The main agent, and
    every decision about a child, stays in this process."""

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
        self.output_spec()  # an output type pydantic cannot validate fails here, not mid-run

    def project_trusted(self, cwd: Path) -> bool:
        """Whether the project's hooks may run; says once (a log warning) when they may not."""
        from .permissions.trust import is_trusted, project_executables, untrusted_reason

        trusted = self.trust_project if self.trust_project is not None else is_trusted(cwd)
        if not trusted and self.load_agent_files and (found := project_executables(cwd)):
            logging.getLogger("forkagent.trust").warning(untrusted_reason(cwd, found))
        return trusted

    def output_spec(self) -> OutputSpec | None:
        if self.output_type is str:
            return None
        try:
            return OutputSpec.of(self.output_type, mode="tool", retries=self.output_retries)
        except Exception as exc:
            raise ConfigurationError(
                f"output_type {self.output_type!r} cannot be used: {exc}"
            ) from exc

    def session(self) -> Session[OutputT]:
        return Session(self)

    async def run(self, prompt: str) -> RunResult[OutputT]:
        """Run one prompt to the end, background children and their reports included."""
        async with self.session() as session:
            return await session.send(prompt, wait_for_background=True)

    def run_sync(self, prompt: str) -> RunResult[OutputT]:
        """``run`` for code without an event loop; in a notebook (a loop is running), ``await agent.run(...)``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(prompt))
        raise ConfigurationError(
            "run_sync cannot start a second event loop inside a running one (a Jupyter "
            "notebook, an async framework): use `await agent.run(...)` there instead"
        )

    async def stream(self, prompt: str) -> AsyncIterator[Event]:
        """The run's events as they happen, the main agent's text and thinking as
        ``OutputDelta``s among them; the last one is the main agent's finish.
        For the result too, use ``Session.stream`` and then ``session.result()``."""
        async with self.session() as session:
            async for event in session.stream(prompt, wait_for_background=True):
                yield event

    def runtime_options(self) -> RuntimeOptions:
        if self.options is not None:
            return self.options
        gate = ForkGate(self.forking, self.coordinator, self.interactive)
        return RuntimeOptions(
            gate=gate, implicit_fork=self.implicit_fork, child_limits=self.child_limits
        )

    def catalog(self) -> AgentCatalog:
        from .agents.loader import load_agents  # YAML loads only when files are read

        if not self.load_agent_files:
            return AgentCatalog().with_agents(*self.agents)
        base = load_agents(self.cwd, user=self.load_user_agents)
        return base.with_agents(*self.agents)


class Session(Generic[OutputT]):
    """A live conversation with the main agent and its children.

    Use as an async context manager: leaving it cancels children still running.
    """

    def __init__(
        self,
        agent: Agent[OutputT],
        *,
        extra_listeners: Sequence[Callable[[Event], None]] = (),
        resume: Transcript | None = None,
    ) -> None:
        options = agent.runtime_options()
        cwd = Path(agent.cwd).resolve()
        model = resolve_model(agent.model)
        catalog = agent.catalog()
        tools = _assemble_tools(agent, options, catalog)
        trusted = agent.project_trusted(cwd)
        self._mcp_servers = [
            *agent.mcp_servers,
            *(load_project_servers(cwd, trusted=trusted) if agent.load_agent_files else ()),
        ]
        self._mcp = McpPool(self._mcp_servers)
        self._mcp_started = False
        self._announced = False
        named = NamedAgents(catalog, tools, untrusted_dir=None if trusted else cwd, mcp=self._mcp)
        self._named = named
        self._runtime = Runtime(
            options=options,
            tree_budget=Budget(agent.tree_limits),
            named_builder=named.build,
            listeners=[*agent.listeners, *extra_listeners],
            executor=agent.executor or InProcessExecutor(),
        )
        root_id = resume.header.agent_id if resume else self._runtime.new_id("main")
        settings = agent.settings
        if settings.cache_key is None:
            # One routing key for the whole tree: children inherit it (LESSONS 16).
            settings = settings.model_copy(update={"cache_key": f"forkagent-{root_id}"})
        output = agent.output_spec()
        root = AgentRun(
            id=root_id,
            model=model,
            system=render_system_prompt(agent.system_prompt, cwd),
            tools=tools,
            # The output tool is there from the first request, so it never moves the prefix.
            tool_specs=(*(t.spec() for t in tools), *((output.tool_spec(),) if output else ())),
            settings=settings,
            cwd=cwd,
            budget=self._runtime.tree_budget.child(agent.limits),
            timeout=agent.request_timeout,
            hooks=_session_hooks(agent, cwd, trusted),
            policy=agent.permissions,
            output_spec=output,
            redact=agent.env_policy.redactor() or None,
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
        self._compact_at = threshold(model.context_window, agent.compact_at)
        self._keep_tokens = int((self._compact_at or 0) * agent.compact_keep)
        self.root.before_request = self._before_request
        self._after_turn = tuple(agent.after_turn)
        self.after_turn_handles: list[ForkHandle] = []
        """This session's after-turn forks still running; they are cancelled with it."""
        if not isinstance(agent.model, Model):
            self._runtime.owned_models.append(model)
        self._runtime.on_notification = self._on_notification
        # Before anything is written: a second process must not append to a live transcript.
        self._lease = None if agent.skip_transcript else Lease(root_id)
        try:
            self.recorder = self._record(agent, root_id, trusted)
        except BaseException:
            if self._lease is not None:
                self._lease.release()
            raise
        self._stop_poller: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        """Set by ``aclose``: the stop poller ends between queries, never inside one."""
        self._lock = asyncio.Lock()
        self._resumes: set[asyncio.Task[bool]] = set()
        self._status: AgentStatus = "completed"
        self._error: str | None = None
        self._stop_reason: str | None = None
        self._finished = False
        self._turn: asyncio.Task[LoopOutcome] | None = None
        self._watchers: set[asyncio.Task[None]] = set()

    def _record(self, agent: Agent[Any], root_id: str, trusted: bool) -> Recorder:
        """Start the transcripts and registry rows (sweeping a crashed run's rows first)."""
        registry = Registry() if agent.registry is None else agent.registry or None
        recorder = Recorder(
            self._runtime.runs, root_id, registry, not agent.skip_transcript, trusted=trusted
        )
        if (writes := recorder.registry_writes) is not None:
            writes.mark_lost()
        if recorder.transcripts or recorder.registry_writes is not None:
            self._runtime.listeners.insert(0, recorder)  # else it has no event to record
        if not self._mcp_servers:
            self._announce()
        # else: once the MCP tools are in, so the transcript header has the array really sent
        return recorder

    def _announce(self) -> None:
        """The main agent's start (its transcript header and registry row), once."""
        if not self._announced:
            self._announced = True
            self._runtime.emit(AgentStarted(self.root.id, None, "main", "main", False))

    @classmethod
    def resume(
        cls, agent: Agent[OutputT], transcript: Transcript | Path | str, *, loosen: bool = False
    ) -> Session[OutputT]:
        """Continue a main agent from its transcript: same prompt, tools, settings, history.

        ``agent`` supplies what a transcript cannot hold (tool implementations,
        listeners); its model and cwd are replaced by the transcript's. The
        permission mode, tool filters, added directories and trust decision the
        agent ran under are restored: ``agent.permissions`` may tighten them, and
        loosens them only with ``loosen=True`` (else ``ConfigurationError``).
        """
        if not isinstance(transcript, Transcript):
            transcript = read_transcript(transcript)
        header = transcript.header
        if header.kind != "main":
            raise ConfigurationError(
                f"{header.agent_id} is a {header.kind} agent; resume its main agent "
                f"({header.root_id}) instead"
            )
        record = header.extra.get("permissions")
        record = record if isinstance(record, dict) else None
        trust = agent.trust_project
        if trust is None and recorded_trust(record):
            trust = True  # trusted for that run (--trust): the same run goes on
        agent = replace(
            agent,
            model=header.model,
            cwd=header.cwd,
            permissions=restored_policy(record, agent.permissions, loosen=loosen),
            trust_project=trust,
        )
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
        # The cache-safe snapshot, as before the resume: forks and compaction build on it.
        self.root.last_request = request
        usages = [
            e.usage for e in transcript.entries if isinstance(e, UsageEntry) and not e.prewarm
        ]
        self.root.last_usage = usages[-1] if usages else None

    async def proceed(self) -> RunResult[OutputT]:
        """Run the main agent from where its history stands (after a resume)."""
        async with self._lock:
            await self._start_mcp()
            close_pending(self.root)
            awaits_answer = self.root.messages and isinstance(self.root.messages[-1], UserMessage)
            if awaits_answer or self.root.inbox:
                await self._turns(drive=True)
        return self.result()

    async def __aenter__(self) -> Session[OutputT]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def id(self) -> str:
        """The main agent's id: what ``forkagent resume``, ``explain`` and ``logs`` take."""
        return self.root.id

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self.root.messages)

    @property
    def permissions(self) -> PermissionPolicy | None:
        """The main agent's policy: the one given, or on a resume the recorded one restored."""
        return self.root.policy

    @property
    def streaming(self) -> bool:
        """Whether the main agent streams its replies in every turn (``OutputDelta`` and
        ``ToolCallStarted`` events to the listeners), not only in ``stream(...)``."""
        return self.root.stream

    @streaming.setter
    def streaming(self, on: bool) -> None:
        self.root.stream = on

    async def send(self, prompt: str, *, wait_for_background: bool = False) -> RunResult[OutputT]:
        """Add a user message and run the main agent until it stops.

        With ``wait_for_background`` it also waits for background children and
        runs the turns their notifications start.
        """
        async with self._lock:
            await self._start_mcp()
            self.root.output_ready, self.root.output_failures = False, 0
            self.root.append(user(prompt))
            await self._turns(wait_for_background)
            # At the turn's end the whole conversation is cached: the cheapest moment.
            await self._compact_if_due(self.root)
            self._start_after_turn_forks()
        return self.result()

    async def _start_mcp(self) -> None:
        """Start the MCP servers once, before the first request, and give their tools to
        the main agent and the named agents (forks share the main agent's)."""
        if self._mcp_started or not self._mcp_servers:
            return
        self._mcp_started = True
        try:
            connections = await self._mcp.acquire(self._mcp_servers)
        except Exception as exc:
            self._status, self._error = "failed", str(exc)  # the record must not say completed
            raise
        mcp_tools = [t for connection in connections for t in connection.tools]
        self.root.add_tools(mcp_tools)
        self._announce()
        self._give_named_agents_mcp_tools()

    def _give_named_agents_mcp_tools(self) -> None:
        """Named agents pick from the built-in and given tools plus the servers' current ones."""
        current = [t for connection in self._mcp.connections for t in connection.tools]
        named = replace(self._named, available_tools=(*self._named.available_tools, *current))
        self._runtime.named_builder = named.build

    async def compact(self) -> CompactionResult:
        """Summarise the conversation now, through a fork that reads it from the cache,
        and continue from the summary and the latest turns (``CompactionError`` if the
        summary fails; the conversation is then unchanged)."""
        async with self._lock:
            return await compact(self.root, keep_tokens=self._keep_tokens or 2_000)

    async def _before_request(self, run: AgentRun) -> None:
        """At the main agent's turn boundaries: MCP tool lists that changed, then compaction.
        Forks already running keep the tool array they were made with."""
        changed = [c for c in self._mcp.connections if c.changed]
        for connection in changed:
            old = list(connection.tools)
            run.replace_tools(old, await connection.refresh())
        if changed:
            self._give_named_agents_mcp_tools()
        await self._compact_if_due(run)

    async def _compact_if_due(self, run: AgentRun) -> None:
        if self._compact_at is not None and prompt_size(run) >= self._compact_at:
            await compact(run, keep_tokens=self._keep_tokens)

    def _start_after_turn_forks(self) -> None:
        self.after_turn_handles = [h for h in self.after_turn_handles if not h.task.done]
        for item in self._after_turn:
            params = item(self) if callable(item) else item
            if params is not None:
                self.after_turn_handles.append(self.fork_and_forget(params))

    async def stream(
        self, prompt: str, *, wait_for_background: bool = False
    ) -> AsyncIterator[Event]:
        """``send``, yielding the tree's events as they happen, with the main agent's
        reply streamed as ``OutputDelta`` and ``ToolCallStarted`` events. Afterwards
        ``result()`` has the outcome (and raises what ``send`` would have raised)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._runtime.listeners.append(queue.put_nowait)
        streaming, self.root.stream = self.root.stream, True

        async def drive() -> None:
            try:
                await self.send(prompt, wait_for_background=wait_for_background)
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(drive())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task
        finally:
            task.cancel()
            self.root.stream = streaming
            self._runtime.listeners.remove(queue.put_nowait)

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
        while not await _set_within(self._closing, interval):
            running = [t for t in self._runtime.tasks.values() if not t.done]
            ids = [self.root.id, *(t.id for t in running)]
            asked = await asyncio.to_thread(registry.stops_requested, ids)
            if self.root.id in asked and self._turn is not None:
                self._turn.cancel()
            for task in running:
                if task.id in asked:
                    task.cancel()

    async def fork(
        self, directives: Sequence[str | ForkParams], *, background: bool = False
    ) -> list[AgentTask]:
        """Fork one child per directive from the conversation as it stands.

        A directive is a string, or a ``ForkParams`` with the child's own label,
        limits, tool filter, transcript choice, callback, cancel token or
        ``output_type`` (its validated answer is ``result.value``). None of these
        changes the prefix the children share with this conversation.

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
            self._watch(exc.started, directives)
            if not background:
                await asyncio.gather(*(t.wait() for t in exc.started))
            raise
        self._watch(tasks, directives)
        if not background:
            await asyncio.gather(*(t.wait() for t in tasks))
        return tasks

    def fork_and_forget(self, directive: str | ForkParams) -> ForkHandle:
        """A background fork whose result is not reported into the conversation.

        For housekeeping the conversation does not wait for (a summary, memory
        consolidation). Keep the handle to ``wait()`` for it; dropping the
        handle cancels the child, so a forgotten one cannot run on unseen.
        """
        [task] = self._runtime.fork_many(self.root, [directive], background=True)
        task.notify = False
        self._watch([task], [directive])
        return ForkHandle(task)

    async def spawn(
        self,
        agent_type: str,
        prompt: str,
        *,
        background: bool = False,
        model: str | None = None,
        isolation: Literal["worktree"] | None = None,
        output_type: Any = None,
        output_retries: int = 1,
    ) -> AgentTask:
        """Start a named agent (built-in or from a file) the way the Agent tool does.

        Same checks (nesting depth, ``max_agents``, prices, SubagentStart hooks,
        worktree isolation); an unknown type raises ``AgentSpawnError`` listing
        the known ones. Without ``background`` this waits for it to finish.
        """
        output = (
            OutputSpec.of(output_type, mode="tool", retries=output_retries)
            if output_type is not None
            else None
        )
        request = SpawnRequest(
            prompt=prompt,
            description=agent_type,
            subagent_type=agent_type,
            run_in_background=background,
            model=model,
            isolation=isolation,
        )
        task = await self._runtime.spawn_named(self.root, request, output=output)
        if not background:
            await task.wait()
        return task

    def _watch(self, tasks: Sequence[AgentTask], directives: Sequence[str | ForkParams]) -> None:
        """Wire each ``ForkParams``' callback and external cancel token to its child."""
        for task, params in zip(tasks, directives, strict=False):
            if isinstance(params, ForkParams) and (params.on_complete or params.cancel):
                watcher = asyncio.create_task(_watch_fork(task, params))
                self._watchers.add(watcher)
                watcher.add_done_callback(self._watchers.discard)

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
        """Cancel every child still running and wait for them to stop.

        Raises ``TranscriptError``, once everything is closed, if a transcript lost lines
        (its folder was removed, or the disk filled).
        """
        # The cancelled children's reports must not start a new main-agent turn.
        self._runtime.on_notification = None
        self._runtime.cancel_all()
        for resume in self._resumes:
            resume.cancel()
        await self._runtime.settle()
        await asyncio.gather(*self._resumes, *self._watchers, return_exceptions=True)
        if self._stop_poller is not None:
            # Not cancelled: a query in flight runs on in its thread after a cancel, and would
            # open the registry after the session (and its state folder) is gone.
            self._closing.set()
            await asyncio.gather(self._stop_poller, return_exceptions=True)
        if not self._finished:
            # No turn ran (nothing sent, or a resumed agent whose turn had ended): say so,
            # or its registry row would stay "running" and later read as lost.
            self._announce()
            self._finish()
        recorder = self.recorder
        try:
            if recorder.has_records:  # waits for the queued writes; raises a lost line
                await asyncio.to_thread(recorder.close)
        finally:
            await self._runtime.close_models()
            await self._mcp.close()
            if self._lease is not None:
                self._lease.release()

    def result(self) -> RunResult[OutputT]:
        """The main agent's result so far; raises ``OutputError`` when an ``output_type``
        was asked for and the run ended without a valid answer."""
        return RunResult(
            output=self._output(),
            status=self._status,
            messages=self.messages,
            usage=self.root.usage,
            agents=tuple(self._summaries()),
            error=self._error,
            stop_reason=self._stop_reason,
            text=self.root.output,
        )

    def _output(self) -> OutputT:
        spec = self.root.output_spec
        if spec is None:
            return cast(OutputT, self.root.output)
        if self.root.output_ready:
            return cast(OutputT, self.root.output_value)
        raise OutputError(
            f"the main agent ended {self._status} without a valid {_type_name(spec.output_type)}: "
            f"{self._error or 'it never handed in an answer'}",
            status=self._status,
            text=self.root.output,
        )

    def _summaries(self) -> list[AgentSummary]:
        tasks = self._runtime.tasks
        placements = {**self._runtime.placements, self.root.id: here()}
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
                executor=placement.executor if placement else InProcessExecutor.name,
                worker_pid=placement.worker_pid if placement else None,
            )
            for run in self._runtime.runs.values()
            for placement in (placements.get(run.id),)
        ]

    def _on_notification(self, run: AgentRun) -> None:
        if not self._runtime.options.resume_on_notification or self._lock.locked():
            return  # a running turn picks it up at its next boundary
        resume = asyncio.create_task(self.answer_notifications())
        self._resumes.add(resume)
        resume.add_done_callback(self._resumes.discard)

    async def answer_notifications(self) -> bool:
        """Run a turn for the background reports waiting for the main agent, if any (a turn
        already running reads them itself). With ``RuntimeOptions(resume_on_notification=
        False)`` the caller decides when: ``forkagent chat`` runs it between the user's turns.
        Returns whether a turn ran."""
        async with self._lock:
            if not self.root.inbox:
                return False
            await self._turns(drive=False)
            return True


class ForkHandle:
    """A fire-and-forget fork (``Session.fork_and_forget``): dropping this handle cancels it."""

    def __init__(self, task: AgentTask) -> None:
        self.task = task
        self._finalizer = weakref.finalize(self, task.cancel)

    @property
    def id(self) -> str:
        return self.task.id

    async def wait(self) -> TaskResult:
        """The child's result; once waited for, dropping the handle no longer cancels it."""
        result = await self.task.wait()
        self._finalizer.detach()
        return result

    def cancel(self) -> None:
        self.task.cancel()


async def _watch_fork(task: AgentTask, params: ForkParams) -> None:
    """Cancel ``task`` when ``params.cancel`` is set; call ``on_complete`` when it ends."""
    waiter = task.wait()
    try:
        if params.cancel is not None:
            token = asyncio.ensure_future(params.cancel.wait())
            racing: list[asyncio.Future[Any]] = [waiter, token]
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            token.cancel()
            if params.cancel.is_set():
                task.cancel()
        result = await waiter
    finally:
        waiter.cancel()
    if params.on_complete is not None:
        params.on_complete(result)


def _type_name(output_type: Any) -> str:
    return getattr(output_type, "__name__", repr(output_type))


_OPTIONS_FIELDS = frozenset(
    {"forking", "implicit_fork", "coordinator", "interactive", "child_limits"}
)
"""Fields that ``runtime_options()`` folds into ``RuntimeOptions``; ``options`` replaces them."""


def _replaced_by_options(agent: Agent[Any]) -> list[str]:
    """The fields in ``_OPTIONS_FIELDS`` set to something other than their default."""
    return [
        f.name
        for f in fields(agent)
        if f.name in _OPTIONS_FIELDS
        and getattr(agent, f.name)
        != (f.default_factory() if callable(f.default_factory) else f.default)
    ]


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` is set within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


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


def _session_hooks(agent: Agent[Any], cwd: Path, trusted: bool) -> Hooks | None:
    found = Hooks.from_settings(cwd) if agent.load_agent_files and trusted else Hooks()
    hooks = agent.hooks.merged(found) if agent.hooks else found
    return hooks if len(hooks) else None


def _assemble_tools(
    agent: Agent[Any], options: RuntimeOptions, catalog: AgentCatalog
) -> tuple[Tool, ...]:
    tools: list[Tool] = list(builtin_tools(agent.env_policy)) if agent.builtin_tools else []
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
    "ForkHandle",
    "RunResult",
    "Session",
    "TaskResult",
]
