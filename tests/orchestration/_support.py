"""Helpers shared by the orchestration tests (not a test module)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from forkagent import Agent
from forkagent._orchestration.fork import is_fork_history
from forkagent.events import AgentStarted, Event
from forkagent.messages import AssistantMessage, Message, ToolResultBlock, UserMessage
from forkagent.models import Model
from forkagent.models.function import Reply, ReplyFunction
from forkagent.requests import ModelRequest
from forkagent.state import _rows
from forkagent.testing import FunctionModel

ROOT_PROMPT = "You are the root agent of a forkagent test."

Answer: TypeAlias = Reply | ReplyFunction


def make_agent(model: Model, cwd: Path, **options: Any) -> Agent:
    """An agent that reads no agent files and has only the tools the test gives it."""
    options.setdefault("builtin_tools", False)
    options.setdefault("subagents", False)
    options.setdefault("system_prompt", ROOT_PROMPT)
    return Agent(model=model, cwd=cwd, load_agent_files=False, **options)


def is_root(request: ModelRequest) -> bool:
    return request.system_text.startswith(ROOT_PROMPT) and not is_child(request)


def turn_of(request: ModelRequest) -> int:
    """How many answers the agent sending ``request`` has had so far."""
    return sum(isinstance(m, AssistantMessage) for m in request.messages)


def tree_model(
    root: Sequence[Answer],
    *,
    fork: ReplyFunction = lambda r: "Scope: fork done.",
    named: ReplyFunction = lambda r: "named done",
    name: str = "tree",
) -> FunctionModel:
    """One model for a whole tree: the root follows ``root`` turn by turn (then says
    "root done"); fork children answer with ``fork``, named agents with ``named``."""

    def answer(request: ModelRequest) -> Reply | Awaitable[Reply]:
        if is_child(request):
            return fork(request)
        if not is_root(request):
            return named(request)
        turn = turn_of(request)
        item = root[turn] if turn < len(root) else "root done"
        return item(request) if callable(item) else item

    return FunctionModel(answer, name=name)


class Events(list[Event]):
    """A listener that keeps every event."""

    def __call__(self, event: Event) -> None:
        self.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self if isinstance(e, kind)]

    @property
    def started(self) -> list[AgentStarted]:
        return self.of(AgentStarted)


def assert_consistent(messages: Sequence[Message]) -> None:
    """Every tool call is answered in the very next message, and every result has a call."""
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage) and message.tool_uses:
            assert index + 1 < len(messages), f"message {index}: tool calls without results"
            following = messages[index + 1]
            assert isinstance(following, UserMessage)
            answered = [r.tool_use_id for r in following.tool_results]
            assert answered[: len(message.tool_uses)] == [u.id for u in message.tool_uses], (
                f"message {index}: calls {[u.id for u in message.tool_uses]} answered {answered}"
            )
        if isinstance(message, UserMessage) and message.tool_results:
            previous = messages[index - 1] if index else None
            assert isinstance(previous, AssistantMessage)
            ids = {u.id for u in previous.tool_uses}
            assert all(r.tool_use_id in ids for r in message.tool_results)


def results_by_id(messages: Sequence[Message]) -> dict[str, ToolResultBlock]:
    return {
        r.tool_use_id: r for m in messages if isinstance(m, UserMessage) for r in m.tool_results
    }


def is_child(request: ModelRequest) -> bool:
    """A request sent by a fork child (its history holds the fork rules block)."""
    return is_fork_history(request.messages)


def last_text(request: ModelRequest) -> str:
    """Text of the request's last message, tool results included."""
    last = request.messages[-1]
    parts = [last.text]
    if isinstance(last, UserMessage):
        parts += [r.text for r in last.tool_results]
    return "\n".join(p for p in parts if p)


def threads_writing_rows(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The threads of this process that write registry rows (``_rows.write_rows``), once each
    time, from now on; the helper process's writes are not among them."""
    threads: list[threading.Thread] = []
    write_rows = _rows.write_rows

    def spy(db: sqlite3.Connection, rows: Mapping[str, _rows.Row], where: str) -> list[str]:
        threads.append(threading.current_thread())
        return write_rows(db, rows, where)

    monkeypatch.setattr(_rows, "write_rows", spy)
    return threads
