"""One demo session: a copy of the sample repository, the emulator, a real agent tree."""

from __future__ import annotations

import filecmp
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path

from .. import Executor
from ..agent import Agent, RunResult
from ..emulator import Emulator, Latency, use_emulator
from ..events import Event, NotificationDelivered
from ..mcp import McpServer
from ..messages import JsonValue
from ..permissions import PermissionPolicy
from ..state import read_tree, transcript_path
from ..telemetry import UsageNode, UsageRecorder
from ..telemetry.economics import Comparison, EconomicsRecorder
from ..telemetry.report import render_html, run_view
from .brain import MAIN_PROMPT, DemoBrain

DEMO_MODEL = "emulator:claude-sonnet-4-6"
ORDER_BOOK = McpServer("orders", command=sys.executable, args=("-m", "forkagent.demo.order_book"))
"""The shop's order book, an MCP server the main agent and its stock fork call."""
LIVE_LATENCY = Latency(ttft=0.35, tokens_per_second=250.0)
"""Slow enough to watch the tree grow and the background agents overlap."""
FAST_LATENCY = Latency()
"""The emulator's default: what the test suite runs the demo with."""


@dataclass(frozen=True, slots=True)
class DemoReport:
    """What the demo did and what it cost."""

    result: RunResult
    workdir: Path
    usage: UsageNode
    comparison: Comparison
    notifications_delivered: int
    changed_files: tuple[str, ...]
    html_report: Path | None
    """The run's timeline page (``forkagent report``); None when transcripts are off."""

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "status": self.result.status,
            "model": DEMO_MODEL,
            "workdir": str(self.workdir),
            "report": self.result.output,
            "agents": [agent.to_dict() for agent in self.result.agents],
            "notifications_delivered": self.notifications_delivered,
            "comparison": self.comparison.to_dict(),
            "changed_files": list(self.changed_files),
            "html_report": None if self.html_report is None else str(self.html_report),
            "usage_tree": self.usage.to_dict(),
        }


def copy_sample(workdir: Path) -> Path:
    """Copy the sample repository shipped in the package into ``workdir/shelf-repo``."""
    target = workdir / "shelf-repo"
    with as_file(files(__package__) / "sample") as sample:
        shutil.copytree(sample, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def changed_files(repo: Path) -> tuple[str, ...]:
    """Files the agents created or changed, against the shipped sample."""
    with as_file(files(__package__) / "sample") as sample:
        return tuple(sorted(_diff(filecmp.dircmp(sample, repo), Path())))


def _diff(compared: filecmp.dircmp[str], where: Path) -> list[str]:
    out = [str(where / name) for name in (*compared.right_only, *compared.diff_files)]
    for name, sub in compared.subdirs.items():
        out += _diff(sub, where / name)
    return out


class _Counter:
    def __init__(self) -> None:
        self.notifications = 0

    def __call__(self, event: Event) -> None:
        self.notifications += isinstance(event, NotificationDelivered)


async def run_demo(
    workdir: Path,
    *,
    latency: Latency = LIVE_LATENCY,
    listeners: Sequence[Callable[[Event], None]] = (),
    executor: Executor | None = None,
) -> DemoReport:
    """Run the demo session in a fresh copy of the sample under ``workdir``.

    The emulator is private to this run (``use_emulator``), so its cache
    starts cold and nothing else in the process shares it. With ``executor`` (a
    ``RayExecutor``) the children's requests and tools run on its workers, which reach
    this same emulator over HTTP.
    """
    repo = copy_sample(workdir)
    usage, economics, counter = UsageRecorder(), EconomicsRecorder(), _Counter()
    agent = Agent(
        model=DEMO_MODEL,
        cwd=repo,
        permissions=PermissionPolicy(mode="accept_edits"),
        listeners=[usage, economics, counter, *listeners],
        mcp_servers=[ORDER_BOOK],
        executor=executor,
    )
    with use_emulator(Emulator(latency=latency, policy=DemoBrain())):
        result = await agent.run(MAIN_PROMPT)
    comparison = economics.comparison()
    return DemoReport(
        result=result,
        workdir=repo,
        usage=usage.tree(),
        comparison=comparison,
        notifications_delivered=counter.notifications,
        changed_files=changed_files(repo),
        html_report=write_report(result.agents[0].id, comparison),
    )


def write_report(root_id: str, comparison: Comparison) -> Path | None:
    """The run's HTML timeline, next to its transcripts, with the comparison measured live."""
    root = transcript_path(root_id, root_id)
    if not root.exists():
        return None
    target = root.with_name("report.html")
    target.write_text(render_html(run_view(read_tree(root), comparison=comparison)), "utf-8")
    return target
