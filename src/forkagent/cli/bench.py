"""``forkagent bench``: the cache-economics and overhead benchmarks of a source checkout.

The benchmarks live in the checkout's ``bench/`` directory, next to ``src/``,
not in the installed package; this command finds them from the package's own
location, so it works from an editable install or with ``PYTHONPATH=src``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from rich.console import Console

import forkagent


def checkout_bench() -> Path:
    """The ``bench/`` directory of the checkout this package was imported from."""
    return Path(forkagent.__file__).resolve().parents[2] / "bench"


def _load_bench() -> ModuleType:
    bench = checkout_bench()
    if not (bench / "run.py").is_file():
        typer.echo(
            f"forkagent bench runs the benchmarks of a source checkout, and {bench} has none: "
            "this forkagent is installed from a package. Clone the repository and run "
            "`pip install -e .` (or set PYTHONPATH=src) there.",
            err=True,
        )
        raise typer.Exit(2)
    if str(bench.parent) not in sys.path:
        sys.path.insert(0, str(bench.parent))
    return importlib.import_module("bench.run")


def bench_command(
    quick: Annotated[
        bool, typer.Option("--quick", help="A smaller subset, in half a minute to a minute.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="DIR",
            help="Also draw the charts (SVG) into DIR; needs forkagent[plot] (matplotlib).",
        ),
    ] = None,
) -> None:
    """Measure fork cache economics and runtime overhead on the in-process emulator.

    Economics: billed input-token equivalents of N forked children (1 to 16) by
    shared prefix (5k to 200k tokens): fresh sub-agents, forks all at once, with
    warm-up, with pre-warm, and the lower bound. Overhead: building a fork from
    a 2,000-message history, 1,000 background forks, cancelling a 100-agent tree.
    """
    run = _load_bench()
    if plot is not None:
        _require_matplotlib()
    report = run.collect(quick)
    if plot is not None:
        charts = importlib.import_module("bench.plot").write_charts(report, plot)
        report["charts"] = [str(path) for path in charts]
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    console = Console()
    console.print(run.economics_table(report))
    console.print(run.overhead_table(report))
    console.print(run.compaction_line(report))
    for chart in report.get("charts", []):
        console.print(f"chart: {chart}")


def _require_matplotlib() -> None:
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        typer.echo(
            "forkagent bench --plot draws with matplotlib: pip install 'forkagent[plot]'", err=True
        )
        raise typer.Exit(2) from None
