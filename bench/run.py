"""Both benchmarks in one run, checked against their targets.

``collect`` returns the JSON object ``forkagent bench --json`` prints;
``tables`` renders it for a terminal.

    python -m bench [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from . import compaction, economics, overhead
from ._agents import MODEL

TARGETS: dict[str, float] = {
    "warmup_ratio_to_bound": 1.02,
    "auto_ratio_to_bound": 1.02,
    "fork_build_ms_per_child": 1.0,
    "fork_bytes_per_child": 50_000,
    "cancel_ms": 100.0,
    "fork_build_ms_per_child_50k": 0.1,
    "fork_bytes_per_child_50k": 8_000,
    "agent_tool_spawn_ms_per_child": 2.0,
    "one_reply_scaling": 1.3,
    "inflight_kb_per_child_2k": 200.0,
}
"""Upper limits: warm-up forks and the default strategy within 2% of the bound, a fork under 1 ms and 50 kB, cancel under
100 ms; at 50,000 messages a fork under 0.1 ms and 8 kB; an Agent-tool spawn under 2 ms; N forks
in one reply linear within 30%; an in-flight child under 200 kB."""
_BOUND_CHECKS = {"warmup_ratio_to_bound": "forks_with_warmup", "auto_ratio_to_bound": "auto"}
"""Targets on the economics: each strategy's worst ratio to the lower bound."""
FLOORS: dict[str, float] = {"throughput_ratio": 0.9, "throughput_ratio_default": 0.8}
"""Lower limits: 1,000 background forks at 0.9 of the ideal stripped, 0.8 at the defaults."""


async def _measure(
    quick: bool,
) -> tuple[list[economics.Row], overhead.Overhead, compaction.Compaction]:
    return (
        await economics.measure(quick),
        await overhead.measure(quick),
        await compaction.measure(),
    )


def collect(quick: bool = False) -> dict[str, Any]:
    """Run both benchmarks: ``economics`` rows, ``overhead`` figures, ``targets`` and ``checks``."""
    rows, costs, compacted = asyncio.run(_measure(quick))
    worst = {
        name: max(r.ratio_to_bound for r in rows if r.strategy == strategy)
        for name, strategy in _BOUND_CHECKS.items()
    }
    figures = asdict(costs)
    checks = {name: worst[name] <= TARGETS[name] for name in _BOUND_CHECKS}
    checks |= {name: figures[name] <= TARGETS[name] for name in TARGETS if name not in worst}
    checks |= {name: figures[name] >= FLOORS[name] for name in FLOORS}
    return {
        "quick": quick,
        "model": MODEL,
        "economics": [asdict(row) for row in rows],
        "overhead": figures,
        "compaction": {**asdict(compacted), "ratio": round(compacted.ratio, 4)},
        "targets": TARGETS,
        "floors": FLOORS,
        "checks": checks,
    }


def _mark(passed: bool) -> str:
    return "[green]✓[/green]" if passed else "[red]✗[/red]"


_HEADINGS = {
    "fresh": "fresh",
    "forks_all_at_once": "all at once",
    "forks_with_warmup": "warm-up",
    "forks_with_prewarm": "pre-warm",
    "auto": "auto",
}


def economics_table(report: dict[str, Any]) -> Table:
    """One line per prefix and family size: the bound, and each strategy as a multiple of it."""
    table = Table(title=f"Cache economics on {report['model']}")
    for heading in ("prefix", "children", "lower bound", *_HEADINGS.values()):
        table.add_column(heading, justify="right")
    limit = TARGETS["warmup_ratio_to_bound"]
    lines: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for row in report["economics"]:
        lines.setdefault((row["prefix_tokens"], row["children"]), {})[row["strategy"]] = row
    for (prefix, children), cells in lines.items():
        ratios = {name: f"{cells[name]['ratio_to_bound']:.3f}x" for name in _HEADINGS}
        for name in ("forks_with_warmup", "auto"):
            ratios[name] += " " + _mark(cells[name]["ratio_to_bound"] <= limit)
        bound = f"{cells['lower_bound']['billed']:,.0f}"
        table.add_row(f"{prefix:,}", str(children), bound, *ratios.values())
    table.caption = (
        "lower bound in billed input-token equivalents; the others as multiples of it. "
        f"Target: warm-up and auto (the defaults) within {limit - 1:.0%} of the bound."
    )
    return table


def overhead_table(report: dict[str, Any]) -> Table:
    figures, targets = report["overhead"], report["targets"]
    table = Table(title="Runtime overhead")
    for column in ("measure", "forkagent", "baseline", "target", ""):
        table.add_column(column, justify="left" if column == "measure" else "right")
    messages = figures["history_messages"]
    table.add_row(
        f"fork build per child, {messages:,} messages",
        f"{figures['fork_build_ms_per_child']:.3f} ms",
        f"{figures['deepcopy_build_ms_per_child']:.1f} ms (deepcopy)",
        f"< {targets['fork_build_ms_per_child']:g} ms",
        _mark(report["checks"]["fork_build_ms_per_child"]),
    )
    table.add_row(
        f"fork memory per child, {messages:,} messages",
        f"{figures['fork_bytes_per_child'] / 1000:,.1f} kB",
        f"{figures['deepcopy_bytes_per_child'] / 1000:,.0f} kB (deepcopy)",
        f"< {targets['fork_bytes_per_child'] / 1000:g} kB",
        _mark(report["checks"]["fork_bytes_per_child"]),
    )
    table.add_row(
        f"{figures['background_forks']:,} background forks",
        f"{figures['forks_per_second']:,.0f}/s ({figures['throughput_ratio']:.2f}x)",
        f"{figures['ideal_requests_per_second']:,.0f}/s (ideal)",
        "",
        "",
    )
    table.add_row(
        "the same as bare forks (requests built, nothing else)",
        f"({figures['bare_fork_ratio']:.2f}x)",
        "",
        "",
        "",
    )
    table.add_row(
        "the same at the defaults (registry, transcripts)",
        f"{figures['forks_per_second_default']:,.0f}/s ({figures['throughput_ratio_default']:.2f}x)",
        "",
        f">= {report['floors']['throughput_ratio_default']:g}x",
        _mark(report["checks"]["throughput_ratio_default"]),
    )
    for name, label, unit, scale in _SCALING_ROWS:
        table.add_row(
            label,
            f"{figures[name] * scale:,.3f} {unit}",
            "",
            f"< {targets[name] * scale:g} {unit}",
            _mark(report["checks"][name]),
        )
    table.add_row(
        f"cancel a {figures['tree_agents']}-agent tree",
        f"{figures['cancel_ms']:.1f} ms",
        "",
        f"< {targets['cancel_ms']:g} ms",
        _mark(report["checks"]["cancel_ms"]),
    )
    return table


_SCALING_ROWS = (
    ("fork_build_ms_per_child_50k", "fork build per child, 50,000 messages", "ms", 1.0),
    ("fork_bytes_per_child_50k", "fork memory per child, 50,000 messages", "kB", 0.001),
    ("agent_tool_spawn_ms_per_child", "Agent-tool spawn per child, 2,000 messages", "ms", 1.0),
    ("one_reply_scaling", "time per fork, ten times the forks in one reply", "x", 1.0),
    ("inflight_kb_per_child_2k", "in-flight child, 2,000 messages", "kB", 1.0),
)
"""Overhead figures at the defaults: (name, row label, unit, scale from the JSON figure)."""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset, for a smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = collect(args.quick)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        console = Console()
        console.print(economics_table(report))
        console.print(overhead_table(report))
        console.print(compaction_line(report))
    return report


def compaction_line(report: dict[str, Any]) -> str:
    c = report["compaction"]
    return (
        f"compaction of a {c['prompt_tokens']:,}-token conversation: by a fork "
        f"{c['fork']:,.0f}, by a fresh agent {c['fresh']:,.0f} input-token equivalents "
        f"({c['ratio']:.2f}x)"
    )
