"""``forkagent report``: a run as one self-contained HTML page (timeline, cache use, cost)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..state.transcript import read_tree
from ..telemetry.report import render_html, run_view
from .tasks import RegistryOption, locate_transcript, user_errors


def report_command(
    agent: Annotated[
        str,
        typer.Argument(
            metavar="ID", help="Any agent of the run (id or its start), or a transcript file."
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The HTML file to write; default: <run id>.html here."),
    ] = None,
    registry: RegistryOption = None,
) -> None:
    """Write the whole run the agent belongs to as one HTML file that works offline."""
    with user_errors():
        path, _, _ = locate_transcript(agent, registry)
        root = read_tree(path)[0].header.root_id
        transcripts = read_tree(path.with_name(f"{root}.jsonl"))
        target = output or Path(f"{root}.html")
        target.write_text(render_html(run_view(transcripts)), encoding="utf-8")
    typer.echo(f"wrote {target} ({len(transcripts)} agents): open it in a browser")
