"""The turn loop: request, dispatch tool calls, append results, repeat.

One ``AgentRun`` is one agent's live conversation. The loop mutates only its
``messages`` history, appending immutable messages; each request holds a
snapshot of it, so a child forked from it shares every earlier message
object, and the storage holding them, by reference. Whatever ends the loop
(the model stopping, a limit, an error, cancellation) leaves a history in
which every tool call has a result.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeGuard, get_args

from .._construct import slot_setters, trusted
from ..errors import BudgetExceededError, ModelError, ToolError
from ..events import (
    AgentKind,
    AgentStatus,
    Event,
    NotificationDelivered,
    OutputDelta,
    RequestSent,
    ResponseReceived,
    ToolCalled,
    ToolCallStarted,
    ToolFinished,
)
from ..history import HistoryField
from ..hooks import HookEvent, HookInput, HookOutcome, Hooks
from ..messages import (
    AssistantMessage,
    ImageBlock,
    JsonValue,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    pending_tool_uses,
    user,
)
from ..models.base import (
    CALLER,
    Caller,
    Model,
    ModelResponse,
    ResponseComplete,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolUseStarted,
)
from ..permissions import PermissionPolicy
from ..pricing import cost
from ..requests import BlockPosition, ModelRequest, ModelSettings, ToolSpec
from ..tools.base import Tool, ToolContext, ToolOutput
from ..usage import Usage
from .budget import Budget
from .fanout import ForkFamily, send_in_family
from .output import OUTPUT_TOOL, OutputInvalid, OutputSpec
from .timeouts import request_timeout

CANCELLED_RESULT = "Cancelled before this tool call finished."


class Decision(Protocol):
    @property
    def allowed(self) -> bool: ...

    @property
    def reason(self) -> str: ...


class Authorizer(Protocol):
    """Decides, before a call runs, whether it may (permission policy, filters)."""

    async def authorize(
        self, tool: Tool, args: Mapping[str, JsonValue], ctx: ToolContext
    ) -> Decision: ...


ToolGate = Callable[["AgentRun", ToolUseBlock], Awaitable[str | None]]
"""Returns a refusal message for a call, or None to let it run."""


class Report(Protocol):
    """What waits in a parent's inbox: whose report it is, and the block its next turn reads."""

    @property
    def task_id(self) -> str: ...

    @property
    def block(self) -> TextBlock: ...


@dataclass(frozen=True, slots=True)
class Notification:
    """A finished background child's report, waiting for its parent's next turn."""

    task_id: str
    block: TextBlock


_new_request = trusted(ModelRequest)
_REQUEST_FIELDS = set(ModelRequest.model_fields)
"""The fields a request is given: all of them, as ``model_construct`` records when given all.
Every request shares this one set: requests are frozen (pydantic refuses to set a field
before it would add to it; a copy gets its own), and each run keeps its last request for
the session's life, so a set per request would be one more object for the collector."""

_NO_USAGE = Usage()
"""Every run's usage before its first response: one frozen value, not one per run."""


@dataclass(eq=False, slots=True)
class AgentRun:
    """One agent's conversation and everything its requests are made from.

    Slotted: with its 38 fields (past the 30 that CPython 3.11 keeps inline) every run would
    have a ``__dict__``, one object more per agent for the collector to walk.
    """

    id: str
    model: Model
    system: str | tuple[TextBlock, ...]
    tools: tuple[Tool, ...]
    tool_specs: tuple[ToolSpec, ...]
    """Exactly what is sent. A fork shares its parent's tuple, even for tools it may not call."""
    settings: ModelSettings
    cwd: Path
    budget: Budget
    # A descriptor over the field's slot (``HistoryField.over_slot``, after the class).
    messages: HistoryField[Message] = HistoryField()  # noqa: RUF009
    """A ``History``: behaves like a list; assigning any iterable of messages copies it
    (a ``HistoryView`` or another history is shared instead)."""
    kind: AgentKind = "main"
    label: str = "main"
    parent_id: str | None = None
    depth: int = 0
    is_fork: bool = False
    """The structural recursion marker, set when the fork is created."""
    shared_prefix_end: BlockPosition | None = None
    gates: tuple[ToolGate, ...] = ()
    emit: Callable[[Event], None] = lambda event: None
    runtime: Any = None
    timeout: float | None = None
    """Seconds for one model request before it counts as failed."""
    usage: Usage = _NO_USAGE
    turns: int = 0
    last_request: ModelRequest | None = None
    """The cache-safe snapshot: the last request actually sent."""
    last_usage: Usage | None = None
    inbox: list[Report] = field(default_factory=list)
    """Notifications to add to the conversation at the next turn boundary."""
    family: ForkFamily | None = None
    """Set on a fork child until its first request: orders it among its siblings."""
    prewarm: bool = False
    policy: PermissionPolicy | None = None
    """Permission mode, filters and the handler that answers questions; None allows all."""
    hooks: Hooks | None = None
    """PreToolUse / PostToolUse hooks; they can block a call or add context to its result."""
    on_change: Callable[[AgentRun], object] | None = None
    """Called after every change to ``messages`` (the transcript writer syncs here)."""
    output_spec: OutputSpec | None = None
    """Set when the caller asked for a structured answer instead of text."""
    output_value: object = None
    """The validated structured answer, once handed in."""
    output_ready: bool = False
    output_failures: int = 0
    stream: bool = False
    """Stream replies and emit ``OutputDelta`` / ``ToolCallStarted`` events as they arrive."""
    keep_transcript: bool = True
    redact: Callable[[str], str] | None = None
    """Masks secrets in tool output (``EnvironmentPolicy.redactor``); children share it."""
    before_request: Callable[[AgentRun], Awaitable[None]] | None = None
    """Awaited before each request (the session compacts the main agent here)."""
    _by_name: dict[str, Tool] = field(default_factory=dict, repr=False)
    """``tools`` by name; a fork shares its parent's (never changed in place, only replaced)."""

    def __post_init__(self) -> None:
        if not self._by_name:
            self._by_name = {t.name: t for t in self.tools}

    def append(self, message: Message) -> None:
        self.messages.append(message)
        if self.on_change is not None:  # ``changed()``, inlined: every reply is appended here
            self.on_change(self)

    def changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def tool(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    def replace_tools(self, old: Sequence[Tool], new: Sequence[Tool]) -> None:
        """Swap tools in place (an MCP server's changed list), specs included: the tool
        array changes, so the next request misses the cache there, as it must."""
        gone = {t.name for t in old}
        self.tools = (*(t for t in self.tools if t.name not in gone), *new)
        self._by_name = {t.name: t for t in self.tools}
        kept = tuple(s for s in self.tool_specs if s.name not in gone)
        self.tool_specs = (*kept, *(t.spec() for t in new))

    def rebind_tools(self, tools: Sequence[Tool]) -> None:
        """The same tools by name, run elsewhere (an executor's stand-ins): the tool array
        sent is not touched."""
        self.tools = tuple(tools)
        self._by_name = {t.name: t for t in self.tools}

    def add_tools(self, tools: Sequence[Tool]) -> None:
        """Tools that arrive after the run was made (MCP servers start with the session):
        callable at once; their specs join the tool array unless it already has them (a
        resumed agent's recorded array), so the bytes sent stay what they were."""
        self.tools = (*self.tools, *tools)
        self._by_name = {**self._by_name, **{t.name: t for t in tools}}
        sent = {spec.name for spec in self.tool_specs}
        self.tool_specs = (*self.tool_specs, *(t.spec() for t in tools if t.name not in sent))

    @property
    def output(self) -> str:
        """The last assistant text of its own: what the agent reports.

        A fork's inherited history is its parent's words, never its result.
        """
        own = self.shared_prefix_end.message + 1 if self.shared_prefix_end else 0
        messages = self.messages
        for index in range(len(messages) - 1, own - 1, -1):  # no copy of the history
            message = messages[index]
            if isinstance(message, AssistantMessage) and (text := message.text):
                return text
        return ""

    def build_request(self) -> ModelRequest:
        # Not validated: the parts are already valid values, and this is the hot path.
        values: dict[str, object] = {
            "model": self.model.name,
            "system": self.system,
            "tools": self.tool_specs,
            "messages": self.messages.snapshot(),
            "settings": self.settings,
            "shared_prefix_end": self.shared_prefix_end,
        }
        return _new_request(values, _REQUEST_FIELDS)


HistoryField.over_slot(AgentRun, "messages")


@dataclass(frozen=True, slots=True)
class LoopOutcome:
    status: AgentStatus
    stop_reason: str
    error: str | None = None


_COMPLETED = {reason: LoopOutcome("completed", reason) for reason in get_args(StopReason)}
"""A completed run's outcome for each stop reason: frozen, so one value serves every run."""


def within_deadline(
    budget: Budget, work: Coroutine[Any, Any, LoopOutcome]
) -> Coroutine[Any, Any, LoopOutcome]:
    """``work``, cut off at the budget tree's earliest wall-time limit even mid-request.

    The limit is checked between requests too (``Budget.check``); this makes
    it hold while a request or a tool call is in flight. Without a limit it is
    ``work`` itself: no coroutine wrapped around every child's whole run.
    """
    deadline = budget.deadline()
    return work if deadline is None else _cut_off(work, deadline)


async def _cut_off(
    work: Coroutine[Any, Any, LoopOutcome], deadline: tuple[float, float]
) -> LoopOutcome:
    loop = asyncio.get_running_loop()
    timeout = asyncio.timeout_at(loop.time() + deadline[0] - time.monotonic())
    try:
        async with timeout:
            return await work
    except TimeoutError:
        if not timeout.expired():
            raise
        return LoopOutcome(
            "timed_out", "max_seconds", f"ran past its wall-time limit of {deadline[1]:g}s"
        )


async def run_loop(run: AgentRun, *, continue_on_inbox: bool = True) -> LoopOutcome:
    """Run turns until the model stops or something ends the run.

    Returns the outcome instead of raising for budget limits; cancellation
    propagates (after the history is made consistent).
    """
    while True:
        if run.inbox:
            _deliver_inbox(run)
        try:
            run.budget.check(run.turns)
        except BudgetExceededError as exc:
            return LoopOutcome(_status_for(exc), exc.limit, str(exc))
        if run.before_request is not None:
            await run.before_request(run)
        response = await _request(run)
        uses = response.message.tool_uses
        if len(uses) > 1:  # one call or none cannot repeat an id
            _check_unique_ids(run, uses)
        run.append(response.message)
        if uses:
            results = await dispatch(run, uses)
            if response.stop_reason == "max_tokens":
                cut = TextBlock(text=f"Note: {_truncated_error(run)}.")
                results = UserMessage(content=(*results.content, cut), origin=results.origin)
            run.append(results)
            if (ended := _output_outcome(run)) is not None:
                return ended
            continue
        if response.stop_reason == "max_tokens":
            return LoopOutcome("truncated", "max_tokens", _truncated_error(run))
        if run.output_spec is not None and not run.output_ready:
            if (
                ended := _check_final_text(run, run.output_spec, response.message.text)
            ) is not None:
                return ended
            continue
        if continue_on_inbox and run.inbox:
            continue
        return _COMPLETED.get(response.stop_reason) or LoopOutcome(
            "completed", response.stop_reason
        )


def _check_unique_ids(run: AgentRun, uses: Sequence[ToolUseBlock]) -> None:
    """Two calls with one id could not each get their result: refuse the reply, loudly."""
    seen: dict[str, str] = {}
    for use in uses:
        if use.id in seen:
            raise ModelError(
                f"{run.model.spec} returned two tool calls with the id {use.id!r} "
                f"({seen[use.id]} and {use.name}); each call needs its own id, so neither "
                "was run. This is a fault of the model or its adapter: report it, or retry"
            )
        seen[use.id] = use.name


def _truncated_error(run: AgentRun) -> str:
    """A reply cut at ``max_tokens``: any tool call it was writing was lost with it."""
    return (
        f"the reply was cut at max_tokens ({run.settings.max_tokens}) before it ended, "
        "and a tool call it was writing, if any, was dropped: raise settings.max_tokens, "
        "or make fewer calls in one reply and send the dropped ones again"
    )


def _output_outcome(run: AgentRun) -> LoopOutcome | None:
    """After tool calls: the run ends once ``final_result`` took a valid answer, or gave up."""
    spec = run.output_spec
    if spec is None:
        return None
    if run.output_ready:
        return LoopOutcome("completed", "output")
    if run.output_failures > spec.retries:
        return _output_failed(spec)
    return None


def _check_final_text(run: AgentRun, spec: OutputSpec, text: str) -> LoopOutcome | None:
    """The model ended its turn: take its text as the answer (text mode) or ask for the tool."""
    try:
        if spec.mode == "tool":
            raise OutputInvalid("missing")
        run.output_value, run.output_ready = spec.from_text(text), True
        return LoopOutcome("completed", "output")
    except OutputInvalid as exc:
        run.output_failures += 1
        if run.output_failures > spec.retries:
            return _output_failed(spec)
        prompt = spec.missing_prompt() if spec.mode == "tool" else spec.retry_prompt(str(exc))
        run.append(user(prompt, origin="system"))
        return None


def _output_failed(spec: OutputSpec) -> LoopOutcome:
    return LoopOutcome(
        "failed",
        "output",
        f"the final answer did not match the output type after {spec.retries + 1} tries",
    )


def _status_for(exc: BudgetExceededError) -> AgentStatus:
    return "timed_out" if exc.limit == "max_seconds" else "budget_exceeded"


async def _request(run: AgentRun) -> ModelResponse:
    request = run.build_request()
    sibling = False
    if (family := run.family) is not None and not family.lead_or_wait(run.id):
        # A sibling waits here for its leader, then sends as ``send_in_family`` would: no
        # coroutine of the family's around the whole of its request. The wait is no part of
        # its request: neither its timeout nor its ``seconds`` count it (as for a sibling
        # held without a task until the release, which comes here released).
        run.family, sibling = None, True
        if (release := family.wait()) is not None:
            await release
    started = time.monotonic()
    # Set and put back by value, not by ``reset``: a ``Token`` would live as long as the request
    # (one object more per request in flight for the collector); CALLER's default is None.
    outer = CALLER.get()
    CALLER.set(_caller(run))
    try:
        # Its deadline is ended by hand, not by ``with``: a ``with`` would keep the bound
        # ``__exit__`` for the request's life (one object more per request in flight).
        deadline = request_timeout(run.timeout)
        try:
            if sibling:
                run.emit(_request_sent(run.id, run.turns, request))
                response = await run.model.request(request)
            else:
                response = await _send(run, request)
        except BaseException as exc:
            if deadline is not None and deadline.end(type(exc)):
                raise TimeoutError from None
            raise
        if deadline is not None:
            deadline.end(None)
    except TimeoutError:
        raise ModelError(
            f"{run.model.spec} did not answer within {run.timeout}s; "
            "raise request_timeout or check the provider"
        ) from None
    finally:
        CALLER.set(outer)
    run.last_request = request
    usage = run.last_usage = response.usage
    run.turns += 1
    price = _charge(run, request.model, usage, turn=True)
    seconds = time.monotonic() - started
    run.emit(_response_received(run.id, run.turns, response, seconds=seconds, cost=price))
    return response


# Every request's tag and two events are set through their slots: a frozen dataclass's ``__init__``
# sets each field through ``object.__setattr__``, at about twice the cost (``slot_setters``).
_SENT_AGENT, _SENT_TURN, _SENT_REQUEST, _SENT_PREWARM = slot_setters(RequestSent)
_RECEIVED_AGENT, _RECEIVED_TURN, _RECEIVED_RESPONSE, _RECEIVED_SECONDS, _RECEIVED_PREWARM, _COST = (
    slot_setters(ResponseReceived)
)


_CALLER_ID, _CALLER_LABEL, _CALLER_KIND, _CALLER_TURN = slot_setters(Caller)


def _caller(run: AgentRun) -> Caller:
    """``Caller(run.id, run.label, run.kind, run.turns + 1)``: the tag of ``run``'s next
    request, set through its slots."""
    caller: Caller = object.__new__(Caller)
    _CALLER_ID(caller, run.id)
    _CALLER_LABEL(caller, run.label)
    _CALLER_KIND(caller, run.kind)
    _CALLER_TURN(caller, run.turns + 1)
    return caller


def _request_sent(agent_id: str, turn: int, request: ModelRequest) -> RequestSent:
    """``RequestSent(agent_id, turn, request)`` (not a pre-warm), set through its slots."""
    event: RequestSent = object.__new__(RequestSent)
    _SENT_AGENT(event, agent_id)
    _SENT_TURN(event, turn)
    _SENT_REQUEST(event, request)
    _SENT_PREWARM(event, False)
    return event


def _response_received(
    agent_id: str, turn: int, response: ModelResponse, *, seconds: float, cost: float | None
) -> ResponseReceived:
    """``ResponseReceived(agent_id, turn, response, seconds, cost=cost)`` (not a pre-warm), set
    through its slots; keyword-only from ``seconds`` on, as an int would pass for a float."""
    event: ResponseReceived = object.__new__(ResponseReceived)
    _RECEIVED_AGENT(event, agent_id)
    _RECEIVED_TURN(event, turn)
    _RECEIVED_RESPONSE(event, response)
    _RECEIVED_SECONDS(event, seconds)
    _RECEIVED_PREWARM(event, False)
    _COST(event, cost)
    return event


def _charge(run: AgentRun, model: str, usage: Usage, *, turn: bool) -> float | None:
    """Count one response's usage for the run and its budgets, and return its cost.

    The one place a response is priced (at the model name its request was sent with):
    the budget and the ``ResponseReceived`` carrying the cost share that one figure.
    """
    # Usage is frozen: a run's first response's usage is its total, shared rather than summed.
    run.usage = usage if run.usage is _NO_USAGE else run.usage + usage
    price = cost(model, usage)
    run.budget.charge(usage, price, turn=turn)
    return price


def _send(run: AgentRun, request: ModelRequest) -> Awaitable[ModelResponse]:
    """The request's reply, to await at once (a plain function: one coroutine layer fewer on
    every resumption of the request); a family's leader goes through ``send_in_family``."""
    family, run.family = run.family, None
    sent = _request_sent(run.id, run.turns, request)
    if family is None:
        run.emit(sent)
        if run.stream:
            return _streamed(run, request)
        return run.model.request(request)
    prewarm = functools.partial(_prewarm, run) if run.prewarm else None
    on_send = functools.partial(run.emit, sent)  # emitted when it leaves, after any wait
    return send_in_family(family, run.id, run.model, request, prewarm=prewarm, on_send=on_send)


async def _streamed(run: AgentRun, request: ModelRequest) -> ModelResponse:
    """The reply as it arrives: text and thinking deltas and tool calls become events."""
    turn = run.turns + 1
    async for event in run.model.stream(request):
        if isinstance(event, TextDelta):
            run.emit(OutputDelta(run.id, turn, event.text))
        elif isinstance(event, ThinkingDelta):
            run.emit(OutputDelta(run.id, turn, event.text, thinking=True))
        elif isinstance(event, ToolUseStarted):
            run.emit(ToolCallStarted(run.id, turn, event.id, event.name))
        elif isinstance(event, ResponseComplete):
            return event.response
    raise ModelError(f"{run.model.spec} ended its stream without a complete response")


async def _prewarm(run: AgentRun, request: ModelRequest) -> bool:
    """Write ``request``'s cache with ``max_tokens: 0``: billed to this agent, not a turn.

    Its events are a ``RequestSent`` and a ``ResponseReceived`` flagged ``prewarm``, so
    every listener that adds up usage counts it.
    """
    if not run.model.can_prewarm(request):
        return False
    run.emit(RequestSent(run.id, run.turns, request, prewarm=True))
    started = time.monotonic()
    usage = await run.model.prewarm(request) or Usage()
    price = _charge(run, request.model, usage, turn=False)
    response = ModelResponse(
        message=AssistantMessage(content=()),
        stop_reason="max_tokens",
        usage=usage,
        model=request.model,
    )
    seconds = time.monotonic() - started
    run.emit(ResponseReceived(run.id, run.turns + 1, response, seconds, prewarm=True, cost=price))
    return True


def _deliver_inbox(run: AgentRun) -> None:
    """Fold pending notifications (there are some) into the conversation at a turn boundary."""
    pending, run.inbox = run.inbox, []
    blocks = tuple(n.block for n in pending)
    last = run.messages[-1] if run.messages else None
    if isinstance(last, UserMessage):
        # Merge so roles keep alternating (a tool-result message, or a prompt).
        run.messages[-1] = UserMessage(content=last.content + blocks, origin=last.origin)
    else:
        run.messages.append(UserMessage(content=blocks, origin="notification"))
    run.changed()
    for notification in pending:
        run.emit(NotificationDelivered(run.id, notification.task_id))


async def dispatch(run: AgentRun, uses: Sequence[ToolUseBlock]) -> UserMessage:
    """Run the calls concurrently; always return one result per call, in order."""
    results: dict[str, ToolResultBlock] = {}

    async def one(use: ToolUseBlock) -> None:
        results[use.id] = await call_tool(run, use)

    try:
        async with asyncio.TaskGroup() as group:
            for use in uses:
                group.create_task(one(use))
    except asyncio.CancelledError:
        run.append(_results_message(uses, results))
        raise
    return _results_message(uses, results)


def _results_message(
    uses: Sequence[ToolUseBlock], results: Mapping[str, ToolResultBlock]
) -> UserMessage:
    return UserMessage(
        content=tuple(results.get(u.id) or _error_result(u.id, CANCELLED_RESULT) for u in uses),
        origin="tool",
    )


async def call_tool(run: AgentRun, use: ToolUseBlock) -> ToolResultBlock:
    """One call, every failure turned into an error result the model can act on."""
    run.emit(ToolCalled(run.id, use.id, use.name, use.input))
    context: tuple[str, ...] = ()
    try:
        context = await _hook(run, "PreToolUse", use)
        output = await _checked_call(run, use)
        result = ToolResultBlock(tool_use_id=use.id, content=_as_blocks(output))
    except ToolError as exc:
        result = _error_result(use.id, str(exc))
    except Exception as exc:
        result = _error_result(use.id, f"{use.name} failed: {type(exc).__name__}: {exc}")
    try:
        context += await _hook(run, "PostToolUse", use, result.text)
    except ToolError as exc:
        result = _error_result(use.id, f"{result.text}\n{exc}")
    if context:
        extra = tuple(TextBlock(text=c) for c in context)
        result = result.model_copy(update={"content": result.content + extra})
    result = _redacted(run, result)
    run.emit(ToolFinished(run.id, use.id, use.name, result.is_error, result.text[:200]))
    return result


def has_hooks(hooks: Hooks | None) -> TypeGuard[Hooks]:
    """Whether there are hooks at all: without, ``run_hooks``' input need not be made."""
    return hooks is not None and len(hooks) > 0


async def run_hooks(run: AgentRun, event: HookEvent, **fields: Any) -> HookOutcome:
    """Run ``run``'s hooks for ``event``; ``fields`` fill the rest of the hook input."""
    hooks = run.hooks
    if not has_hooks(hooks):
        return HookOutcome()
    plan = run.policy is not None and run.policy.mode == "plan"
    return await hooks.run(
        event,
        HookInput(
            event=event,
            agent_id=run.id,
            agent_type=run.label if run.kind == "named" else run.kind,
            cwd=run.cwd,
            parent_agent_id=run.parent_id,
            **fields,
        ),
        # Plan mode changes nothing, and a hook is no side door: only read-only commands run.
        command_allowed=_read_only_command if plan else None,
    )


def _read_only_command(command: str) -> bool:
    from ..permissions import is_read_only_command  # tree-sitter loads only when needed

    return is_read_only_command(command)


async def _hook(
    run: AgentRun, event: HookEvent, use: ToolUseBlock, output: str | None = None
) -> tuple[str, ...]:
    """Tool hooks for one call; a block becomes a ``ToolError`` the model reads."""
    outcome = await run_hooks(
        run,
        event,
        tool_name=use.name,
        tool_input=use.input,
        tool_output=output,
        tool_use_id=use.id,
    )
    if outcome.blocked:
        raise ToolError(f"blocked by a {event} hook: {outcome.reason or 'no reason given'}")
    return outcome.additional_context


async def _checked_call(run: AgentRun, use: ToolUseBlock) -> ToolOutput:
    if use.name == OUTPUT_TOOL and run.output_spec is not None and run.output_spec.mode == "tool":
        return _hand_in(run, run.output_spec, use)
    tool = run.tool(use.name)
    if tool is None:
        names = ", ".join(sorted(t.name for t in run.tools)) or "none"
        raise ToolError(f"there is no tool named {use.name!r}; available tools: {names}")
    if use.raw_arguments is not None:
        raise ToolError(
            f"the arguments were not valid JSON ({use.raw_arguments[:200]!r}); "
            f"call {use.name} again with a JSON object matching its schema"
        )
    for gate in run.gates:
        refusal = await gate(run, use)
        if refusal is not None:
            raise ToolError(refusal)
    ctx = ToolContext(cwd=run.cwd, agent_id=run.id, tool_use_id=use.id, runtime=run.runtime)
    if run.policy is not None:
        decision = await run.policy.authorize(tool, use.input, ctx)
        if not decision.allowed:
            raise ToolError(f"not allowed: {decision.reason}")
    return await tool.call(dict(use.input), ctx)


def _hand_in(run: AgentRun, spec: OutputSpec, use: ToolUseBlock) -> str:
    """``final_result``: keep a valid answer; an invalid one is an error result to retry."""
    if use.raw_arguments is not None:
        problem = f"the arguments were not valid JSON ({use.raw_arguments[:200]!r})"
    else:
        try:
            run.output_value, run.output_ready = spec.from_arguments(use.input), True
            return "Final answer recorded."
        except OutputInvalid as exc:
            problem = str(exc)
    run.output_failures += 1
    raise ToolError(spec.retry_prompt(problem))


def _as_blocks(output: ToolOutput) -> tuple[TextBlock | ImageBlock, ...]:
    if isinstance(output, str):
        return (TextBlock(text=output),)
    return tuple(output)


def _redacted(run: AgentRun, result: ToolResultBlock) -> ToolResultBlock:
    """The one place tool output enters the history: secrets removed from the shell's
    environment are masked here, so neither the model nor any record sees them."""
    redact = run.redact
    if redact is None or not any(isinstance(b, TextBlock) for b in result.content):
        return result
    content = tuple(
        TextBlock(text=redact(b.text)) if isinstance(b, TextBlock) else b for b in result.content
    )
    return result if content == result.content else result.model_copy(update={"content": content})


def _error_result(tool_use_id: str, message: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=tool_use_id, content=(TextBlock(text=message),), is_error=True
    )


def close_pending(run: AgentRun, message: str = CANCELLED_RESULT) -> None:
    """Answer tool calls left open (a run stopped between reply and dispatch)."""
    open_uses = pending_tool_uses(run.messages)
    if open_uses:
        run.append(
            UserMessage(
                content=tuple(_error_result(u.id, message) for u in open_uses), origin="tool"
            )
        )
