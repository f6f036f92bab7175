"""``forkagent ps``, ``logs`` and ``stop``: agents of other processes, seen from here.

Everything goes through the registry and the transcripts, so these commands
work on agents run by any process on the machine, and on transcripts of
agents long gone.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ForkagentError
from ..messages import (
    ContentBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from ..state.registry import AgentRecord, Registry, RegistryError
from ..state.transcript import (
    CacheEntry,
    CompactionEntry,
    Entry,
    MessageEntry,
    StatusEntry,
    TranscriptHeader,
    TranscriptTail,
    TruncateEntry,
    UsageEntry,
    read_transcript,
)
from ..state.worktrees import LeftWorktree, left_worktree, sweep_worktrees
from ..usage import Usage

ABBREVIATE = 300
"""Characters of a tool call's input or result shown by ``logs``."""
UNREADABLE = "a cache report this forkagent cannot read (written by a newer one)"

RegistryOption = Annotated[
    Path | None,
    typer.Option(
        "--registry",
        envvar="FORKAGENT_REGISTRY",
        help="The agent registry database (default: <state dir>/registry.db).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def register(app: typer.Typer) -> None:
    """Add the commands to the ``forkagent`` app."""
    app.command("ps")(ps)
    app.command("logs")(logs)
    app.command("stop")(stop)
    app.command("prune")(prune)


# -- ps ------------------------------------------------------------------------


KEEP_DAYS = 30
"""``ps`` forgets the rows of agents that ended longer ago than this (transcripts stay)."""


def ps(
    as_json: JsonOption = False,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Every agent, not only the 50 latest.")
    ] = False,
    tree: Annotated[
        bool, typer.Option("--tree", help="Children under their parents, indented.")
    ] = False,
    registry: RegistryOption = None,
) -> None:
    """Running and recent agents: start, status, turns, tokens, cache hits, cost, label."""
    with user_errors():
        store = Registry(registry)
        store.mark_lost()
        store.forget_finished(KEEP_DAYS)
        limit = None if show_all else 50
        records = store.list(limit=limit)
        if tree:
            records = _as_tree(records)
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in records], indent=2))
        return
    if not records:
        typer.echo(f"No agents in {store.path}.")
        return
    depth = _depths(records) if tree else {}
    rows = [_ps_row(r, depth.get(r.id, 0)) for r in records]
    if sys.stdout.isatty():
        _print_table(rows)
    else:
        _print_plain(rows)
    if len(records) == limit:
        typer.echo(f"(the {limit} latest agents; --all shows every one)")
    left = _left_worktrees(records)
    if left:
        typer.echo(
            f"Lost agents left {len(left)} worktree(s); forkagent prune removes unchanged ones:"
        )
        for worktree in left:
            typer.echo(f"  {worktree.path} (branch {worktree.branch}, agent {worktree.agent_id})")


def _left_worktrees(records: Iterable[AgentRecord]) -> list[LeftWorktree]:
    """Worktrees still on disk whose agent was lost (its process died without finishing it)."""
    found = (left_worktree(r.cwd) for r in records if r.status == "lost" and r.cwd)
    return list({w.path: w for w in found if w is not None}.values())


# -- prune ---------------------------------------------------------------------


def prune(registry: RegistryOption = None) -> None:
    """Remove the worktrees and branches lost agents left behind, if they hold no changes."""
    with user_errors():
        store = Registry(registry)
        store.mark_lost()
        left = _left_worktrees(store.list(limit=None))
        for repo in {w.path for w in left}:
            if repo.exists():
                asyncio.run(sweep_worktrees(repo, older_than=0))
    if not left:
        typer.echo("Nothing to prune: no lost agent left a worktree.")
    for worktree in left:
        if worktree.path.exists():
            typer.echo(
                f"kept {worktree.path}: it has changes; review branch {worktree.branch}, "
                "then remove it with git worktree remove and git branch -D"
            )
        else:
            typer.echo(f"removed {worktree.path} and branch {worktree.branch}")


def _as_tree(records: Sequence[AgentRecord]) -> tuple[AgentRecord, ...]:
    """Each agent followed by its children (depth first), roots in the order given."""
    ids = {r.id for r in records}
    children: dict[str | None, list[AgentRecord]] = {}
    for record in sorted(records, key=lambda r: r.started_at):
        parent = record.parent_id if record.parent_id in ids else None
        children.setdefault(parent, []).append(record)
    out: list[AgentRecord] = []

    def visit(record: AgentRecord) -> None:
        out.append(record)
        for child in children.get(record.id, []):
            visit(child)

    for root in (r for r in records if r.parent_id not in ids):
        visit(root)
    return tuple(out)


def _depths(records: Sequence[AgentRecord]) -> dict[str, int]:
    parents = {r.id: r.parent_id for r in records}
    depth: dict[str, int] = {}
    for record in records:
        d, parent = 0, record.parent_id
        while parent in parents and d < 50:
            d, parent = d + 1, parents[parent]
        depth[record.id] = d
    return depth


_PS_COLUMNS = (
    "ID",
    "STARTED",
    "PARENT",
    "KIND",
    "STATUS",
    "TURNS",
    "TOKENS",
    "CACHE",
    "COST",
    "TIME",
    "LABEL",
)


def _ps_row(record: AgentRecord, depth: int = 0) -> tuple[str, ...]:
    status: str = record.status
    if record.background:
        status += " (bg)"
    if record.stop_requested and not record.finished:
        status += " (stopping)"
    ratio = record.cache_hit_ratio
    end = record.ended_at or time.time()
    return (
        "  " * depth + record.id,
        time.strftime("%m-%d %H:%M:%S", time.localtime(record.started_at)),
        record.parent_id or "-",
        record.kind,
        status,
        str(record.turns),
        _count(record.total_tokens),
        "-" if ratio is None else f"{ratio:.0%}",
        _money(record.cost),
        _duration(end - record.started_at),
        record.label,
    )


def _print_table(rows: Sequence[tuple[str, ...]]) -> None:
    """Every column whole (ids are what ``logs`` and ``stop`` take); only labels wrap."""
    table = Table(box=None, header_style="bold")
    for index, name in enumerate(_PS_COLUMNS[:-1]):
        width = max(len(row[index]) for row in (_PS_COLUMNS, *rows))
        table.add_column(name, no_wrap=True, min_width=width)
    table.add_column(_PS_COLUMNS[-1], overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


def _print_plain(rows: Sequence[tuple[str, ...]]) -> None:
    """Aligned columns without colour or box characters, for pipes and files."""
    widths = [max(len(row[i]) for row in (_PS_COLUMNS, *rows)) for i in range(len(_PS_COLUMNS))]
    for row in (_PS_COLUMNS, *rows):
        typer.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


# -- logs ----------------------------------------------------------------------


def logs(
    agent: Annotated[
        str, typer.Argument(metavar="ID", help="Agent id (or its start), or a transcript file.")
    ],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the agent ends.")
    ] = False,
    as_json: JsonOption = False,
    interval: Annotated[
        float, typer.Option(help="Seconds between checks when following.", hidden=True)
    ] = 0.2,
    registry: RegistryOption = None,
) -> None:
    """Print an agent's transcript: messages, tool calls, usage and status."""
    with user_errors():
        path, record, store = locate_transcript(agent, registry)
        if follow:
            _follow(path, as_json, interval, record, store)
            return
        transcript = read_transcript(path)
    _Printer(as_json).show((transcript.header, *transcript.entries))
    if transcript.torn_tail and not as_json:
        typer.echo("(the last line was incomplete, the writer was killed mid-write; skipped)")


def locate_transcript(
    agent: str, registry: Path | None
) -> tuple[Path, AgentRecord | None, Registry | None]:
    """A transcript path given directly, or the one an agent's row points to."""
    candidate = Path(agent)
    if candidate.suffix == ".jsonl" and candidate.is_file():
        return candidate, None, None
    store = Registry(registry)
    record = store.get(agent)
    if record.transcript is None:
        raise RegistryError(f"agent {record.id} keeps no transcript (started with skip_transcript)")
    return record.transcript, record, store


def _follow(
    path: Path, as_json: bool, interval: float, record: AgentRecord | None, store: Registry | None
) -> None:
    """Print lines as they come until a final status, the row says it ended, or Ctrl-C."""
    tail = TranscriptTail(path)
    printer = _Printer(as_json)
    try:
        while True:
            printer.show(tail.poll())
            if tail.finished:
                return
            if record and store and store.get(record.id).finished:
                printer.show(tail.poll())  # lines written just before the end
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


class _Printer:
    """Prints lines in order; keeps the history length to spot replaced messages."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.length = 0

    def show(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            if self.as_json:
                typer.echo(entry.model_dump_json())
            else:
                typer.echo("\n".join(self._describe(entry)))

    def _describe(self, entry: Entry) -> list[str]:
        if isinstance(entry, TranscriptHeader):
            if entry.history_from is not None:
                self.length = entry.history_from.messages
            return _describe_header(entry)
        if isinstance(entry, MessageEntry):
            replaces = entry.index < self.length
            self.length = entry.index + 1
            return _describe_message(entry, replaces=replaces)
        if isinstance(entry, TruncateEntry):
            self.length = entry.length
            return [f"(history cut back to {entry.length} messages)"]
        if isinstance(entry, UsageEntry):
            return [_describe_usage(entry)]
        if isinstance(entry, CacheEntry):
            report = entry.cache_report()
            return [f"· turn {entry.turn} {UNREADABLE if report is None else report.summary}"]
        if isinstance(entry, CompactionEntry):
            return [
                f"── compacted at {_time(entry.at)}: {entry.messages_before} messages "
                f"(~{entry.tokens_before:,} tokens) -> {entry.messages_after}, "
                f"summary by {entry.summary_agent} ──"
            ]
        return _describe_status(entry)


def _describe_header(header: TranscriptHeader) -> list[str]:
    who = f"{header.kind} agent {header.agent_id}"
    if header.label:
        who += f" {header.label!r}"
    family = f"parent {header.parent_id}, root {header.root_id}" if header.parent_id else "root"
    system = (
        header.system if isinstance(header.system, str) else "".join(b.text for b in header.system)
    )
    lines = [
        f"{who} ({family}){', in the background' if header.background else ''}",
        f"model {header.model} · cwd {header.cwd} · created {_time(header.at)}",
        f"system prompt {len(system):,} chars · {len(header.tools)} tools",
    ]
    if header.shared_prefix_end:
        end = header.shared_prefix_end
        lines.append(f"shares the cache up to message {end.message}, block {end.block}")
    if (start := header.history_from) is not None:
        lines.append(
            f"the first {start.messages} messages are its parent {start.agent_id}'s "
            f"(forkagent logs {start.agent_id}); its own follow"
        )
    return lines


def _describe_message(entry: MessageEntry, *, replaces: bool) -> list[str]:
    message = entry.message
    role: str = message.role
    if isinstance(message, UserMessage) and message.origin != "user":
        role += f" ({message.origin})"
    replaced = ", replacing the one before" if replaces else ""
    lines = [f"── #{entry.index} {role}{replaced} " + "─" * 20]
    for block in message.content:
        lines += _describe_block(block)
    return lines


def _describe_block(block: ContentBlock) -> list[str]:
    if isinstance(block, TextBlock):
        return block.text.splitlines() or [""]
    if isinstance(block, ThinkingBlock):
        signed = ", signed" if block.signature else ""
        kind = "redacted thinking" if block.redacted else "thinking"
        return [f"[{kind}: {len(block.thinking):,} chars{signed}]"]
    if isinstance(block, ImageBlock):
        return [f"[{_describe_image(block)}]"]
    if isinstance(block, ToolUseBlock):
        arguments = block.raw_arguments or json.dumps(block.input, ensure_ascii=False)
        return [f"→ {block.name}({_abbreviate(arguments)})  [{block.id}]"]
    return _describe_result(block)


def _describe_result(block: ToolResultBlock) -> list[str]:
    mark = "error" if block.is_error else "result"
    images = [_describe_image(b) for b in block.content if isinstance(b, ImageBlock)]
    text = _abbreviate(block.text) + "".join(f" [{i}]" for i in images)
    return [f"← {mark} [{block.tool_use_id}]: {text}"]


def _describe_image(block: ImageBlock) -> str:
    where = block.url or f"{len(block.data or ''):,} base64 chars"
    return f"image {block.media_type}, {where}"


def _describe_usage(entry: UsageEntry) -> str:
    usage: Usage = entry.usage
    turn = f"turn {entry.turn} " if entry.turn is not None else ""
    turn += "pre-warm " if entry.prewarm else ""
    ratio = usage.cache_hit_ratio
    hits = "" if ratio is None else f" ({ratio:.0%} cached)"
    return (
        f"· usage {turn}{entry.model}: in {usage.input_tokens:,} · out {usage.output_tokens:,}"
        f" · cache read {usage.cache_read_tokens:,} · cache write {usage.cache_write_tokens:,}"
        f"{hits} · {_money(entry.cost)}"
    )


def _describe_status(entry: StatusEntry) -> list[str]:
    lines = [f"■ {entry.status} at {_time(entry.at)}"]
    if entry.error:
        lines.append(f"  error: {entry.error}")
    return lines


# -- stop ----------------------------------------------------------------------


def stop(
    agent: Annotated[str, typer.Argument(metavar="ID", help="Agent id, or the start of one.")],
    as_json: JsonOption = False,
    registry: RegistryOption = None,
) -> None:
    """Ask an agent's process to stop it (it checks about every half second)."""
    with user_errors():
        result = Registry(registry).request_stop(agent)
    record = result.record
    if as_json:
        typer.echo(
            json.dumps({"agent": record.id, "outcome": result.outcome, "status": record.status})
        )
        return
    if result.outcome == "requested":
        typer.echo(
            f"Asked process {record.pid} on {record.host} to stop agent {record.id}; "
            "it stops at its next check."
        )
    elif result.outcome == "lost":
        typer.echo(
            f"Agent {record.id} was not running any more: process {record.pid} is gone. "
            "Marked it lost."
        )
    else:
        typer.echo(f"Agent {record.id} has already ended ({record.status}); nothing to stop.")


# -- helpers -------------------------------------------------------------------


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the errors a user can cause into a message and exit status 1."""
    try:
        yield
    except (ForkagentError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _abbreviate(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) <= ABBREVIATE:
        return flat
    return f"{flat[:ABBREVIATE]}… (+{len(flat) - ABBREVIATE:,} chars)"


def _count(tokens: int) -> str:
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if tokens >= size:
            return f"{tokens / size:.1f}{suffix}"
    return str(tokens)


def _money(cost: float | None) -> str:
    return "unknown" if cost is None else f"${cost:.4f}"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _time(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
