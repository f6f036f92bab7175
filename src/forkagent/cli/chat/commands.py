"""The slash commands of ``forkagent chat``. Each acts at once, mid-turn too, except
``/compact``, which waits for the main agent's turn to end (it rewrites its history)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...agent import Session
from ...agents import load_agents
from ...errors import ForkagentError
from ...state.transcript import transcript_path
from ..agents import catalog_lines
from ..explain import explanation
from .ask import InlineQuestions
from .view import ChatView, agent_row

Job = Callable[[], Coroutine[Any, Any, object]]
"""A piece of work for the main agent, run between its turns."""


class Chat(Protocol):
    """What the commands use of the app."""

    session: Session[Any]
    view: ChatView
    questions: InlineQuestions
    cwd: Path

    def enqueue(self, job: Job) -> None: ...

    def to_background(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Command:
    usage: str
    help: str
    act: Callable[[Chat, str], None]


def run(chat: Chat, text: str) -> None:
    """Run a line that starts with ``/``."""
    name, _, arg = text.removeprefix("/").partition(" ")
    command = COMMANDS.get(name)
    if command is None:
        chat.view.say(f"unknown command /{name}: /help lists them")
        return
    command.act(chat, arg.strip())


def _help(chat: Chat, arg: str) -> None:
    lines = [f"  {c.usage:<16} {c.help}" for c in COMMANDS.values()]
    keys = [
        "  Enter            send; a line ending in \\ (or Esc Enter, Ctrl+J) starts a new line",
        "  Ctrl+B           move the sync child the main agent waits for to the background",
        "  Ctrl+C           interrupt the turn (background children go on); clear the line; "
        "twice on an empty prompt: leave",
        "  Ctrl+D           leave",
        "  y / n / a        answer a permission question (a: always, this session)",
    ]
    chat.view.say("\n".join(["commands:", *lines, "keys:", *keys]))


def _agents(chat: Chat, arg: str) -> None:
    chat.view.say("\n".join(catalog_lines(load_agents(chat.cwd))))


def _cost(chat: Chat, arg: str) -> None:
    chat.view.say(chat.session.result().usage_tree().to_text())


def _explain(chat: Chat, arg: str) -> None:
    try:
        chat.view.say(explanation(_transcript_of(chat, arg or chat.session.id)))
    except (ForkagentError, OSError) as exc:
        chat.view.say(f"error: {exc}")


def _transcript_of(chat: Chat, agent: str) -> str:
    """This session's own agents by their file (their registry rows are written off the
    event loop, a moment later); anything else, such as the start of an id, by the registry."""
    try:
        own = transcript_path(chat.session.id, agent)
    except ValueError:  # not an id at all: the registry says what it is not
        return agent
    return str(own) if own.is_file() else agent


def _compact(chat: Chat, arg: str) -> None:
    if chat.view.children(running=True):
        chat.view.say("(children still running keep their own histories)")
    chat.enqueue(chat.session.compact)


def _model(chat: Chat, arg: str) -> None:
    agents = chat.session.result().agents
    others = sorted({a.model for a in agents[1:]} - {agents[0].model})
    lines = [f"main agent: {agents[0].model}"]
    if others:
        lines.append(f"children also ran on: {', '.join(others)}")
    if arg:
        lines.append(
            "the main agent keeps its model for the whole session (its cached prefix is that "
            f"model's); start another session with: forkagent chat --model {arg}"
        )
    chat.view.say("\n".join(lines))


def _permissions(chat: Chat, arg: str) -> None:
    policy = chat.session.permissions
    if policy is None:
        chat.view.say("no permission policy: every tool call runs")
        return
    dirs = ", ".join(str(d) for d in policy.add_dirs) or "none"
    always = ", ".join(chat.questions.always_allowed) or "none yet"
    lines = [
        f"mode: {policy.mode} (set with --permission-mode when the chat starts; a resumed "
        "session keeps its recorded mode or a tighter one)",
        f"added directories: {dirs}",
        f"tool filter: {type(policy.filter).__name__ if policy.filter else 'none'}",
        f"allowed always (this session): {always}",
    ]
    chat.view.say("\n".join(lines))


def _tasks(chat: Chat, arg: str) -> None:
    rows = [agent_row(line) for line in chat.view.children()]
    chat.view.say("\n".join(rows) if rows else "no children yet")


def _stop(chat: Chat, arg: str) -> None:
    line = chat.view.find(arg) if arg else None
    if line is None:
        chat.view.say(f"no single child matches {arg!r}: /tasks lists them")
    elif line.status != "running":
        chat.view.say(f"{line.id} already ended: {line.status}")
    else:
        chat.session.cancel(line.id)
        chat.view.say(f"stopping {line.id} (and the agents it started)")


def _background(chat: Chat, arg: str) -> None:
    chat.to_background()


COMMANDS: dict[str, Command] = {
    "help": Command("/help", "this list", _help),
    "tasks": Command("/tasks", "the children: status, sync or background, cache hit, cost", _tasks),
    "bg": Command("/bg", "move the running sync child to the background (Ctrl+B)", _background),
    "stop": Command("/stop ID", "stop a child (an id or its start)", _stop),
    "cost": Command("/cost", "the usage tree: tokens and cost per agent and per model", _cost),
    "explain": Command("/explain [ID]", "each request's cache hit or miss, and why", _explain),
    "agents": Command("/agents", "the named agents the main agent can start", _agents),
    "compact": Command("/compact", "summarise the conversation through a fork", _compact),
    "model": Command("/model", "the models in use", _model),
    "permissions": Command(
        "/permissions", "the permission mode and what was allowed", _permissions
    ),
}
