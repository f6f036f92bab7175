"""``forkagent demo``: the main job, offline: a multi-agent session on the emulator."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table

from .errors import fail
from .executors import ExecutorOption, RayAddressOption, closing, executor_for

if TYPE_CHECKING:
    from ..demo import DemoReport
    from .live import AgentBoard


def demo_command(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object at the end.")
    ] = False,
    fast: Annotated[
        bool, typer.Option("--fast", help="No simulated model latency (what the tests run).")
    ] = False,
    workdir: Annotated[
        Path | None,
        typer.Option(help="Where to copy the sample repository and keep it; default: a temp dir."),
    ] = None,
    executor_name: ExecutorOption = "in-process",
    ray_address: RayAddressOption = None,
) -> None:
    """Run a forking multi-agent session on the offline emulator and show what it cost."""
    from ..demo import FAST_LATENCY, LIVE_LATENCY, run_demo
    from .live import AgentBoard, watch

    board = AgentBoard()
    console = Console(stderr=as_json)
    if not as_json:
        console.print(_intro())
    latency = FAST_LATENCY if fast else LIVE_LATENCY
    executor = executor_for(executor_name, ray_address, as_json=as_json)
    with tempfile.TemporaryDirectory(prefix="forkagent-demo-") as scratch:
        base = workdir.resolve() if workdir else Path(scratch)
        if (base / "shelf-repo").exists():
            fail(
                f"{base / 'shelf-repo'} is left from an earlier demo: remove it, or pass "
                "another --workdir",
                as_json=as_json,
            )
        base.mkdir(parents=True, exist_ok=True)
        report = asyncio.run(
            watch(
                lambda: closing(
                    executor,
                    lambda: run_demo(base, latency=latency, listeners=[board], executor=executor),
                ),
                board,
                console,
                live=console.is_terminal and not as_json,
            )
        )
        if as_json:
            sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        else:
            _show(report, board, console, kept=workdir is not None)
    if report.result.status != "completed":
        raise typer.Exit(1)


def _intro() -> Panel:
    from ..demo import DEMO_MODEL
    from ..demo.brain import MAIN_PROMPT

    return Panel(
        f"[bold]forkagent demo[/bold]: a real agent tree on the offline emulator "
        f"({DEMO_MODEL}, Anthropic's cache rules).\n"
        f"The user asks: [italic]{MAIN_PROMPT}[/italic]\n"
        "The main agent reads the sample repository, then forks children that inherit its "
        "whole conversation (two in the background) and starts an Explore agent.",
        expand=False,
    )


def _show(report: DemoReport, board: AgentBoard, console: Console, *, kept: bool) -> None:
    if not console.is_terminal:
        board.plain(console)
    console.rule("the main agent's report")
    console.print(Markdown(report.result.output))
    console.rule("usage")
    console.print(report.usage.to_rich())
    console.print(_cost_table(report))
    console.print(
        f"notifications delivered: {report.notifications_delivered} · "
        f"files changed: {', '.join(report.changed_files) or 'none'}"
        + (f" (in {report.workdir})" if kept else "")
    )
    if report.html_report is not None:
        console.print(
            f"The run as a timeline: [bold]{report.html_report}[/bold] (open it in a browser)"
        )
    fork = next((a for a in report.result.agents if a.kind == "fork"), None)
    if fork is not None:
        console.print(
            f"Transcripts are kept: [bold]forkagent explain {fork.id}[/bold] shows how each "
            f"of that fork's requests used the cache, [bold]forkagent logs {fork.id}[/bold] "
            "its whole history."
        )


def _cost_table(report: DemoReport) -> Table:
    comparison = report.comparison
    table = Table(
        title="the same work, three ways",
        caption="input side, in full-price input tokens at each model's prices; "
        "fresh: each child pays for its context in full; "
        "lower bound: the shared prefix written once, each child's own part at full price",
    )
    table.add_column("")
    table.add_column("input-token equivalents", justify="right")
    table.add_column("x lower bound", justify="right")
    rows = (
        ("this run", comparison.this_run),
        ("fresh sub-agents", comparison.fresh_subagents),
        ("lower bound", comparison.lower_bound),
    )
    for name, tokens in rows:
        ratio = comparison.to_bound(tokens)
        table.add_row(name, f"{tokens:,.0f}", "-" if ratio is None else f"{ratio:.2f}")
    return table
