"""What ``forkagent chat`` shows: the conversation as lines above the prompt, the line
of the main agent's reply still streaming in, and the agent-tree panel under the prompt.

The view is an event listener of the session; it writes through a function it is
given (the terminal, or nothing in tests) and keeps every line it wrote in ``lines``.
"""

from __future__ import annotations

from collections.abc import Callable

from ...events import (
    AgentFinished,
    AgentMovedToBackground,
    AgentStarted,
    Compacted,
    Event,
    NotificationDelivered,
    OutputDelta,
    RequestSent,
    ToolCalled,
    ToolFinished,
)
from ...messages import JsonValue
from ..live import AgentBoard, AgentLine

SHOWN_ARGS = ("command", "file_path", "path", "pattern", "url", "description", "prompt")
"""The argument a tool call is shown by, the first one it has."""
ARG_WIDTH = 70
PANEL_ROWS = 4
"""Running children listed in the panel; more are counted."""


class ChatView:
    """Turns the tree's events into lines, and the agent board into the panel."""

    def __init__(self) -> None:
        self.board = AgentBoard()
        self.main_id: str | None = None
        """Set once the session exists: events of other agents are shown as children's."""
        self.lines: list[str] = []
        self.partial = ""
        """The main agent's line still streaming in (shown above the prompt)."""
        self.on_report: Callable[[str], None] = lambda task_id: None
        """Called when a background child of the main agent ends: its report is waiting."""
        self.changed: Callable[[], None] = lambda: None
        """Called after every event, so the screen redraws the panel."""
        self.write: Callable[[str], None] = lambda text: None
        """Where lines go: the app prints them above the prompt."""

    def say(self, text: str) -> None:
        """Show ``text`` above the prompt, after whatever the main agent streamed so far."""
        self.end_stream()
        self._show(text)

    def echo(self, text: str) -> None:
        """Record what the user typed (the terminal shows it already)."""
        self.lines.extend(f"› {line}" for line in text.splitlines())

    def end_stream(self) -> None:
        if self.partial:
            line, self.partial = self.partial, ""
            self._show(line)

    def _show(self, text: str) -> None:
        self.lines.extend(text.splitlines() or [""])
        self.write(text)

    def __call__(self, event: Event) -> None:
        self.board(event)
        if event.agent_id == self.main_id:
            self._main_event(event)
        elif not (isinstance(event, AgentStarted) and event.parent_id is None):
            self._child_event(event)  # the main agent's start is the panel's first line
        self.changed()

    def _main_event(self, event: Event) -> None:
        if isinstance(event, OutputDelta) and not event.thinking:
            done, newline, self.partial = (self.partial + event.text).rpartition("\n")
            if newline:
                self._show(done)
        elif isinstance(event, RequestSent):
            self.end_stream()
        elif isinstance(event, ToolCalled):
            self.say(f"⏺ {event.name}({shown_args(event.args)})")
        elif isinstance(event, ToolFinished) and event.is_error:
            self.say(f"  ⎿ {event.preview}")
        elif isinstance(event, NotificationDelivered):
            self.say(f"↩ {event.task_id} reported back; the main agent reads its report")
        elif isinstance(event, Compacted):
            self.say(
                f"compacted {event.messages_before} messages into {event.messages_after} "
                f"(summary by {event.summary_agent})"
            )

    def _child_event(self, event: Event) -> None:
        if isinstance(event, AgentStarted):
            mode = "background" if event.background else "sync, Ctrl+B sends it to the background"
            self.say(f"⑂ {event.kind} {event.agent_id} {event.label!r} started ({mode})")
        elif isinstance(event, AgentMovedToBackground):
            self.say(f"⇣ {event.agent_id} now runs in the background")
        elif isinstance(event, AgentFinished):
            line = self.board.lines.get(event.agent_id)
            self.say(f"✓ {event.agent_id} {event.status}")
            if line is not None and line.background and line.parent == self.main_id:
                self.on_report(event.agent_id)

    # -- the agent tree ----------------------------------------------------------

    def children(self, *, running: bool = False) -> list[AgentLine]:
        """Every agent below the main one (only those still running, with ``running``)."""
        return [
            line
            for line in self.board.lines.values()
            if line.id != self.main_id and (not running or line.status == "running")
        ]

    def sync_children(self) -> list[AgentLine]:
        """The main agent's children it is waiting for: what Ctrl+B moves."""
        return [
            line
            for line in self.children(running=True)
            if line.parent == self.main_id and not line.background
        ]

    def find(self, prefix: str) -> AgentLine | None:
        """The child whose id is ``prefix`` or the only one starting with it."""
        found = [line for line in self.children() if line.id.startswith(prefix)]
        exact = [line for line in found if line.id == prefix]
        return (exact or found)[0] if len(exact or found) == 1 else None

    def panel(self, *, busy: bool) -> str:
        """The main agent and the running children: status, cache hit and cost."""
        main = self.board.lines.get(self.main_id or "")
        everyone = list(self.board.lines.values())
        total = [line.cost for line in everyone if line.model]  # no model yet: no response
        cost = "cost unknown" if None in total else f"${sum(c for c in total if c):.4f} total"
        running = self.children(running=True)
        head = (
            f"main {'working' if busy else 'idle'}"
            + (f" · hit {_hit(main)}" if main else "")
            + f" · {cost} · {len(everyone) - 1 if main else len(everyone)} children"
            + f" ({len(running)} running)"
        )
        rows = [f"  {agent_row(line)}" for line in running[:PANEL_ROWS]]
        if len(running) > PANEL_ROWS:
            rows.append(f"  … {len(running) - PANEL_ROWS} more (/tasks)")
        return "\n".join([head, *rows])


def agent_row(line: AgentLine) -> str:
    """One agent in a line: id, label, status and where it runs, cache hit, cost."""
    mode = "bg" if line.background else "sync"
    price = "cost unknown" if line.cost is None else f"${line.cost:.4f}"
    return (
        f"{line.id} {line.label!r} {line.kind} {mode} {line.status} · turns {line.turns} · "
        f"hit {_hit(line)} · {price}"
    )


def _hit(line: AgentLine) -> str:
    ratio = line.usage.cache_hit_ratio
    return "-" if ratio is None else f"{ratio:.0%}"


def shown_args(args: dict[str, JsonValue]) -> str:
    """A tool call's main argument, cut to a line; ``…`` when it has others only."""
    for name in SHOWN_ARGS:
        value = args.get(name)
        if isinstance(value, str) and value:
            flat = " ".join(value.split())
            return flat if len(flat) <= ARG_WIDTH else flat[: ARG_WIDTH - 1] + "…"
    return "…" if args else ""
