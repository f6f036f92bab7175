"""What the emulated model says.

Replies are neutral (text, tool calls, thinking); each wire module renders
them in its provider's format. A policy is any callable from the parsed
request to a reply; scripted replies (queued per conversation, matched on the
last user text, or global) are served before the policy is asked.
"""

from __future__ import annotations

import inspect
import itertools
import json
import re
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .sample import sample, sample_object

Provider: TypeAlias = Literal["anthropic", "openai", "gemini"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    """Left ``None``, the emulator makes a deterministic id in the provider's style."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A model turn: thinking first, then text, then tool calls."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        calls = tuple(
            ToolCall(name=c["name"], input=c.get("input", {}), id=c.get("id"))
            for c in data.get("tool_calls", ())
        )
        return cls(text=data.get("text", ""), tool_calls=calls, thinking=data.get("thinking"))


AGENT_HEADER = "x-emulator-agent"
"""forkagent's emulator models name the calling agent here: ``id;label;kind;turn``."""


def agent_header(agent_id: str, label: str, kind: str, turn: int) -> str:
    """``AGENT_HEADER``'s value; a function so a model can tag a request without a ``CallingAgent``."""
    return f"{agent_id};{label.replace(';', ',')};{kind};{turn}"


@dataclass(frozen=True, slots=True)
class CallingAgent:
    """Which agent of a forkagent tree sent a request (from ``AGENT_HEADER``)."""

    id: str
    label: str
    kind: str
    """``main``, ``fork`` or ``named`` (a named agent's label is its type)."""
    turn: int
    """The agent's turn this request is for, from 1."""

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> CallingAgent | None:
        parts = headers.get(AGENT_HEADER, "").split(";")
        if len(parts) != 4 or not parts[3].isdigit():
            return None
        return cls(parts[0], parts[1], parts[2], int(parts[3]))

    @classmethod
    def tagged(cls, agent_id: str, label: str, kind: str, turn: int) -> CallingAgent | None:
        """What ``from_headers`` reads from ``agent_header(agent_id, label, kind, turn)``,
        without writing and parsing the header (an in-process caller hands it over)."""
        if ";" in agent_id or ";" in kind or turn < 0:
            return None
        return cls(agent_id, label.replace(";", ","), kind, turn)

    def header(self) -> str:
        return agent_header(self.id, self.label, self.kind, self.turn)

    def matches(self, agent: str) -> bool:
        """``agent`` names this one: its id (or the id's start), its label, or its kind."""
        return self.id.startswith(agent) or agent in (self.label, self.kind)


@dataclass(frozen=True, slots=True)
class Contract:
    """What the request obliges a reply to be, as the real API guarantees it."""

    forced_tools: tuple[str, ...] = ()
    """A forced tool choice: the reply must call one of these (empty: not forced)."""
    tool_schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each tool's input schema, by name."""
    output_schema: Mapping[str, Any] | None = None
    """Structured output: the reply's text is JSON valid against this schema."""
    json_object: bool = False
    """JSON mode: the reply's text is a JSON object."""
    thinking: bool = False
    """Thinking (reasoning) is on: the reply thinks first."""
    tools_allowed: bool = True
    """False under a ``none`` tool choice: the reply may not call a tool."""


@dataclass(frozen=True, slots=True)
class EmulatedRequest:
    """The parts of a wire request a policy decides on."""

    provider: Provider
    model: str
    system: str
    last_user_text: str
    tool_names: tuple[str, ...]
    message_count: int
    conversation: str
    """``x-emulator-conversation`` header, else a digest of model, system and first user turn."""
    body: Mapping[str, Any]
    agent: CallingAgent | None = None
    """The forkagent agent that sent it, when its model is an ``emulator:`` one."""
    contract: Contract = field(default_factory=Contract)


Policy: TypeAlias = Callable[[EmulatedRequest], Reply | Awaitable[Reply]]


_HARNESS_MARKUP = re.compile(r"<([a-z][a-z0-9-]*)>.*?</\1>", re.DOTALL)
"""Tagged sections an agent harness adds around the user's words (a fork's rules)."""
_WORD = re.compile(r"\S+")
"""What ``str.split`` splits out; the summary needs the first 13 only, not all of a long prompt."""


def default_policy(request: EmulatedRequest) -> Reply:
    """A short deterministic acknowledgement of the last user text, minus harness markup,
    in the form the request's contract demands: a call of a forced tool with input made
    from its schema, JSON made from a requested schema, thinking first when it is on."""
    text = _HARNESS_MARKUP.sub(" ", request.last_user_text)
    words = [word.group() for word in itertools.islice(_WORD.finditer(text), 13)]
    summary = " ".join(words[:12]) + (" ..." if len(words) > 12 else "")
    contract = request.contract
    thinking = (
        f"The user wrote: {summary or 'nothing'}. A short answer will do."
        if contract.thinking
        else None
    )
    if contract.forced_tools:
        name = contract.forced_tools[0]
        call = ToolCall(name, sample_object(contract.tool_schemas.get(name, {})))
        return Reply(tool_calls=(call,), thinking=thinking)
    if contract.output_schema is not None:
        return Reply(text=json.dumps(sample(contract.output_schema)), thinking=thinking)
    if contract.json_object:
        return Reply(text=json.dumps({"answer": summary or "OK."}), thinking=thinking)
    return Reply(text=f"Understood: {summary}" if words else "OK.", thinking=thinking)


def tool_choosing_policy(request: EmulatedRequest) -> Reply:
    """``default_policy``, except that a request offering tools (and not forbidding them)
    whose last turn is the user's own words gets a call of its first tool, input made from
    its schema: a model deciding to use one, which the SDKs' tool examples expect under
    ``tool_choice: auto``. The turn after, which carries the tool's result, gets text.
    Opt-in (``forkagent emulator serve --call-tools``): agents are tested on plain replies."""
    contract = request.contract
    offered = contract.tool_schemas and contract.tools_allowed and not contract.forced_tools
    if offered and request.last_user_text.strip():
        name, schema = next(iter(contract.tool_schemas.items()))
        return Reply(tool_calls=(ToolCall(name, sample_object(schema)),))
    return default_policy(request)


async def ask(policy: Policy, request: EmulatedRequest) -> Reply:
    reply = policy(request)
    if inspect.isawaitable(reply):
        return await reply
    return reply


@dataclass(frozen=True, slots=True)
class _Target:
    """Which agent and turn a queue of replies is for."""

    agent: str
    turn: int | None

    def wants(self, request: EmulatedRequest) -> bool:
        caller = request.agent
        if caller is None or not caller.matches(self.agent):
            return False
        return self.turn is None or caller.turn >= self.turn


class Script:
    """Queued replies, consumed before the policy: by agent, matched, per conversation, global."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._global: deque[Reply] = deque()
        self._by_conversation: dict[str, deque[Reply]] = {}
        self._by_match: list[tuple[str, deque[Reply]]] = []
        self._by_agent: list[tuple[_Target, deque[Reply]]] = []

    def add(
        self,
        replies: Iterable[Reply | str],
        *,
        conversation: str | None = None,
        match: str | None = None,
        agent: str | None = None,
        turn: int | None = None,
    ) -> None:
        """Queue replies; ``match`` is a substring of the last user text.

        ``agent`` (an agent id or its start, a label, a named agent's type, or
        ``main``/``fork``/``named``) serves them only to that agent's requests,
        from its turn ``turn`` on (default: its next request).
        """
        if turn is not None and agent is None:
            raise ValueError("turn= needs agent=: a turn counts one agent's requests")
        queued = [Reply(text=r) if isinstance(r, str) else r for r in replies]
        with self._lock:
            if agent is not None:
                self._by_agent.append((_Target(agent, turn), deque(queued)))
            elif match is not None:
                self._by_match.append((match, deque(queued)))
            elif conversation is not None:
                self._by_conversation.setdefault(conversation, deque()).extend(queued)
            else:
                self._global.extend(queued)

    def take(self, request: EmulatedRequest) -> Reply | None:
        with self._lock:
            for target, queue in self._by_agent:
                if queue and target.wants(request):
                    return queue.popleft()
            for text, queue in self._by_match:
                if queue and text in request.last_user_text:
                    return queue.popleft()
            mine = self._by_conversation.get(request.conversation)
            if mine:
                return mine.popleft()
            return self._global.popleft() if self._global else None

    def pending(self) -> int:
        with self._lock:
            queues = [self._global, *self._by_conversation.values()]
            queues += [q for _, q in self._by_match]
            queues += [q for _, q in self._by_agent]
            return sum(len(q) for q in queues)

    def clear(self) -> None:
        with self._lock:
            self._global.clear()
            self._by_conversation.clear()
            self._by_match.clear()
