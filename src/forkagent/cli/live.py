"""The live agent tree: status, turns, tokens, cache hit % and cost per agent.

An agent whose last response missed the cache also shows why (its report's
first finding); ``forkagent explain ID`` gives the whole story.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.tree import Tree

from ..events import (
    AgentFinished,
    AgentKind,
    AgentMovedToBackground,
    AgentStarted,
    AgentStatus,
    CacheReported,
    Event,
    ResponseReceived,
)
from ..messages import JsonValue
from ..pricing import cost
from ..telemetry.cache import CacheReport
from ..usage import Usage

T = TypeVar("T")


@dataclass
class AgentLine:
    id: str
    parent: str | None
    kind: AgentKind
    label: str
    background: bool
    status: AgentStatus = "running"
    turns: int = 0
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    cache: list[tuple[int, CacheReport]] = field(default_factory=list)
    """Each response's turn and cache report."""

    @property
    def cost(self) -> float | None:
        return cost(self.model, self.usage) if self.model else None

    def describe(self) -> str:
        hit = self.usage.cache_hit_ratio
        price = self.cost
        mode = " bg" if self.background else ""
        return (
            f"{self.kind}{mode} {self.label!r} ({self.status}) turns {self.turns} · "
            f"in {self.usage.input_tokens} · read {self.usage.cache_read_tokens} · "
            f"write {self.usage.cache_write_tokens} · out {self.usage.output_tokens} · "
            f"hit {'-' if hit is None else f'{hit:.0%}'} · "
            f"{'cost unknown' if price is None else f'${price:.4f}'}{self._last_miss()}"
        )

    def _last_miss(self) -> str:
        if not self.cache or self.cache[-1][1].status != "miss":
            return ""
        turn, report = self.cache[-1]
        return f" · turn {turn} cache {report.short}"

    def cache_json(self) -> list[JsonValue]:
        return [{"turn": turn, **report.to_dict()} for turn, report in self.cache]


class AgentBoard:
    """An event listener that keeps one line per agent, for live and final views."""

    def __init__(self) -> None:
        self.lines: dict[str, AgentLine] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, AgentStarted):
            self.lines[event.agent_id] = AgentLine(
                event.agent_id, event.parent_id, event.kind, event.label, event.background
            )
            return
        line = self.lines.get(event.agent_id)
        if line is None:
            if not isinstance(event, ResponseReceived):
                return
            line = self.lines[event.agent_id] = AgentLine(
                event.agent_id, None, "main", "main", False
            )
        if isinstance(event, ResponseReceived):
            line.turns = event.turn
            line.model = event.response.model or line.model
            line.usage = line.usage + event.response.usage
        elif isinstance(event, CacheReported):
            line.cache.append((event.turn, event.report))
        elif isinstance(event, AgentMovedToBackground):
            line.background = True
        elif isinstance(event, AgentFinished):
            line.status = event.status

    @property
    def main_id(self) -> str | None:
        """The main agent's id, once it has started."""
        return next((line.id for line in self.lines.values() if line.parent is None), None)

    def finish_main(self, status: AgentStatus) -> None:
        for line in self.lines.values():
            if line.parent is None:
                line.status = status

    def _walk(self) -> list[tuple[int, AgentLine]]:
        """Agents depth first, each with its depth."""
        out: list[tuple[int, AgentLine]] = []

        def visit(line: AgentLine, depth: int) -> None:
            out.append((depth, line))
            for child in self.lines.values():
                if child.parent == line.id:
                    visit(child, depth + 1)

        for root in self.lines.values():
            if root.parent not in self.lines:
                visit(root, 0)
        return out

    def render(self) -> RenderableType:
        tree = Tree("agents")
        nodes: dict[str, Tree] = {}
        for _, line in self._walk():
            parent = nodes.get(line.parent or "", tree)
            nodes[line.id] = parent.add(escape(line.describe()))
        return tree

    def plain(self, console: Console) -> None:
        for depth, line in self._walk():
            console.print("  " * depth + line.describe(), markup=False, soft_wrap=True)

    def cache_json(self, agent_id: str) -> list[JsonValue]:
        """One agent's cache reports, each with its turn."""
        line = self.lines.get(agent_id)
        return line.cache_json() if line else []


class LiveSwitch:
    """Lets a permission question stop the live view while it waits for an answer."""

    def __init__(self) -> None:
        self.view: Live | None = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        view = self.view
        if view is None or not view.is_started:
            yield
            return
        view.stop()
        try:
            yield
        finally:
            view.start()


async def watch(
    start: Callable[[], Awaitable[T]],
    board: AgentBoard,
    console: Console,
    *,
    live: bool,
    switch: LiveSwitch | None = None,
) -> T:
    """Await ``start()``, redrawing the agent tree while it runs when ``live``."""
    if not live:
        return await start()
    with Live(board.render(), console=console, refresh_per_second=8) as view:
        if switch is not None:
            switch.view = view
        task = asyncio.ensure_future(start())
        try:
            while not task.done():
                view.update(board.render())
                await asyncio.sleep(0.125)
        except asyncio.CancelledError:  # Ctrl-C or a signal: the run records it and cleans up
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        view.update(board.render())
        return await task
