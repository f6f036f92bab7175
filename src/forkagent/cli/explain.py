"""``forkagent explain``: why each request of an agent read what it did from the cache.

The runtime writes one cache report per response into the agent's
transcript, so this works on agents of any process, running or long gone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from ..messages import JsonValue
from ..state.transcript import CacheEntry, Transcript, read_transcript, read_tree
from ..telemetry.cache import CacheReport
from .tasks import UNREADABLE, JsonOption, RegistryOption, locate_transcript, user_errors


def explain_command(
    agent: Annotated[
        str, typer.Argument(metavar="ID", help="Agent id (or its start), or a transcript file.")
    ],
    tree: Annotated[
        bool, typer.Option("--tree", help="The agent and every agent below it.")
    ] = False,
    as_json: JsonOption = False,
    registry: RegistryOption = None,
) -> None:
    """Explain each request's cache use: hit or miss, tokens read, and why it missed."""
    with user_errors():
        transcripts = _transcripts(agent, tree, registry)
    if as_json:
        typer.echo(json.dumps({"agents": [_agent_json(t) for t in transcripts]}, indent=2))
        return
    typer.echo(_describe(transcripts))


def explanation(agent: str, *, tree: bool = False, registry: Path | None = None) -> str:
    """What ``forkagent explain`` prints (``chat``'s ``/explain`` too); raises
    ``ForkagentError`` for an unknown agent or a transcript that cannot be read."""
    return _describe(_transcripts(agent, tree, registry))


def _transcripts(agent: str, tree: bool, registry: Path | None) -> list[Transcript]:
    path, _, _ = locate_transcript(agent, registry)
    return read_tree(path) if tree else [read_transcript(path)]


# -- plain ---------------------------------------------------------------------


def _describe(transcripts: Sequence[Transcript]) -> str:
    return "\n\n".join("\n".join(_describe_agent(t)) for t in transcripts)


def _describe_agent(transcript: Transcript) -> list[str]:
    header = transcript.header
    who = f"{header.kind} agent {header.agent_id}"
    if header.label:
        who += f" {header.label!r}"
    if header.parent_id:
        who += f" (parent {header.parent_id})"
    lines = [f"{who} · {header.model}"]
    entries = transcript.cache_entries
    if not entries:
        return [*lines, "  no cache reports: it sent no request, or its transcript predates them"]
    reports: list[CacheReport] = []
    for entry in entries:
        report = entry.cache_report()
        if report is None:
            lines.append(f"  turn {entry.turn:<3} {UNREADABLE}")
            continue
        reports.append(report)
        lines += _describe_report(entry.turn, report)
    return [*lines, _totals(reports)]


def _describe_report(turn: int, report: CacheReport) -> list[str]:
    """One request: the figures, then each finding and where the prefixes part."""
    head = (
        f"  turn {turn:<3} {report.status:<10} read {report.read_tokens:,} of "
        f"~{report.expected_tokens:,} expected · wrote {report.write_tokens:,} · "
        f"prompt {report.prompt_tokens:,}"
    )
    if report.compared_with:
        head += f" · against {report.compared_with}"
    lines = [head]
    lines += [f"      {f.reason}: {f.message}" for f in report.findings]
    diff = report.difference
    if diff is not None:
        block = "" if diff.block_index is None else f" block {diff.block_index} ({diff.label}),"
        lines.append(f"      first difference: {diff.layer} layer,{block} byte {diff.byte_offset}")
    return lines


def _totals(reports: Sequence[CacheReport]) -> str:
    counts = Counter(r.status for r in reports)
    parts = ", ".join(
        f"{counts[s]} {s}" for s in ("hit", "miss", "cold", "unmeasured") if counts[s]
    )
    read = sum(r.read_tokens for r in reports)
    prompt = sum(r.prompt_tokens for r in reports)
    noun = "request" if len(reports) == 1 else "requests"
    text = f"  {len(reports)} {noun}: {parts}"
    if prompt:
        # The one hit rate forkagent shows everywhere: prompt tokens read from the cache.
        text += (
            f" · read {read:,} of {prompt:,} prompt tokens from the cache (hit {read / prompt:.0%})"
        )
    return text


# -- json ----------------------------------------------------------------------


def _agent_json(transcript: Transcript) -> dict[str, JsonValue]:
    header = transcript.header
    return {
        "agent_id": header.agent_id,
        "parent_id": header.parent_id,
        "root_id": header.root_id,
        "kind": header.kind,
        "label": header.label,
        "model": header.model,
        "transcript": str(transcript.path),
        "reports": [_report_json(e) for e in transcript.cache_entries],
    }


def _report_json(entry: CacheEntry) -> dict[str, JsonValue]:
    return {"turn": entry.turn, **entry.report}
