"""Grep: search file contents with a regular expression, in pure Python.

ripgrep is not guaranteed to be installed, so this walks the tree itself (in a
thread) with ripgrep's argument names and output shapes.
"""

from __future__ import annotations

import bisect
import itertools
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field

from ...errors import ToolError
from ..base import ArgsTool, ToolContext, ToolOutput
from ._common import ToolArgs, clip, counted, looks_binary, open_text, read_head, shown
from ._walk import GlobFilter, in_thread, mtime, walk

OutputMode = Literal["files_with_matches", "content", "count"]


def _flag(short: str, name: str) -> AliasChoices:
    """Accept ripgrep's flag (the name shown to the model) and the spelled-out field name."""
    return AliasChoices(short, name)


class GrepArgs(ToolArgs):
    pattern: str = Field(description="Regular expression to search for (Python `re` syntax).")
    path: str | None = Field(
        default=None, description="File or directory to search. Default: the working directory."
    )
    glob: str | None = Field(
        default=None,
        description="Only search files matching this glob, e.g. `*.py`, `*.{ts,tsx}` or "
        "`src/**/*.rs`. Without a `/` it is matched against the file name.",
    )
    exclude: str | None = Field(
        default=None,
        description="Skip files and directories matching this glob, e.g. `tests` or `*.min.js`.",
    )
    output_mode: OutputMode = Field(
        default="files_with_matches",
        description="files_with_matches: paths of matching files, newest first; content: the "
        "matching lines; count: matching lines per file.",
    )
    case_insensitive: bool = Field(
        default=False, validation_alias=_flag("-i", "case_insensitive"), description="Ignore case."
    )
    line_numbers: bool = Field(
        default=True,
        validation_alias=_flag("-n", "line_numbers"),
        description="Show line numbers (content mode).",
    )
    after: int | None = Field(
        default=None,
        ge=0,
        validation_alias=_flag("-A", "after"),
        description="Lines to show after each match (content mode).",
    )
    before: int | None = Field(
        default=None,
        ge=0,
        validation_alias=_flag("-B", "before"),
        description="Lines to show before each match (content mode).",
    )
    context: int | None = Field(
        default=None,
        ge=0,
        validation_alias=_flag("-C", "context"),
        description="Lines to show before and after each match (content mode).",
    )
    head_limit: int | None = Field(
        default=None,
        ge=1,
        description="Return at most this many entries: files, output lines or counts.",
    )
    multiline: bool = Field(
        default=False,
        description="Let a match span lines; `.` then matches newlines too.",
    )


@dataclass(frozen=True, slots=True)
class _Hit:
    """One matching file: how many lines matched and, in content mode, what to print."""

    path: Path
    name: str
    count: int
    rendered: list[str]


class Grep(ArgsTool):
    """Skips what is not source (binary, huge, vendored) so a broad search stays fast and useful."""

    name = "Grep"
    read_only = True
    Args = GrepArgs

    def __init__(
        self, *, max_entries: int = 250, max_file_bytes: int = 10_000_000, max_line_chars: int = 500
    ) -> None:
        self.max_entries = max_entries
        self.max_file_bytes = max_file_bytes
        self.max_line_chars = max_line_chars
        self.description = (
            "Search file contents with a Python regular expression. output_mode "
            "files_with_matches (default) lists matching files newest first; content shows "
            "matching lines (-n line numbers, -A/-B/-C context); count gives matching lines per "
            "file. Filter files with glob and exclude. Skips binary files, files over "
            f"{max_file_bytes // 1_000_000} MB, .git, node_modules, virtualenvs and caches. "
            f"Returns at most {max_entries} entries unless head_limit says otherwise; lines "
            f"over {max_line_chars} characters are cut."
        )

    async def run(self, args: GrepArgs, ctx: ToolContext) -> ToolOutput:
        root = ctx.resolve(args.path or ".")
        if not root.exists():
            raise ToolError(f"Path not found: {shown(root, ctx)}.")
        search = _Search(args, ctx, self.max_file_bytes, self.max_line_chars)
        hits, too_big = await in_thread(lambda stop: search.run(root, stop))
        report = _report(hits, args.output_mode, args.head_limit or self.max_entries, search.spaced)
        if too_big:
            report += f"\n[Skipped {counted(too_big, 'file')} over {self.max_file_bytes} bytes.]"
        return report


class _Search:
    """One Grep call's settings, applied file by file in a worker thread."""

    def __init__(
        self, args: GrepArgs, ctx: ToolContext, max_file_bytes: int, max_line_chars: int
    ) -> None:
        self.regex = _compile(args)
        self.multiline = args.multiline
        self.content = args.output_mode == "content"
        self.before = _first_set(args.before, args.context)
        self.after = _first_set(args.after, args.context)
        self.spaced = self.content and max(self.before, self.after) > 0
        self.numbered = args.line_numbers
        self.include = GlobFilter(args.glob) if args.glob else None
        self.exclude = GlobFilter(args.exclude) if args.exclude else None
        self.ctx = ctx
        self.max_file_bytes = max_file_bytes
        self.max_line_chars = max_line_chars

    def run(self, root: Path, stop: threading.Event) -> tuple[list[_Hit], int]:
        """The matching files under ``root``, and how many were skipped for their size."""
        hits: list[_Hit] = []
        too_big = 0
        for path in self._candidates(root, stop):
            try:
                info = path.stat()
                if not stat.S_ISREG(info.st_mode):
                    continue
                if info.st_size > self.max_file_bytes:
                    too_big += 1
                    continue
                hit = self._search_file(path)
            except OSError:
                continue
            if hit is not None:
                hits.append(hit)
        return hits, too_big

    def _candidates(self, root: Path, stop: threading.Event) -> Iterator[Path]:
        if root.is_file():
            yield root
            return
        skip = self.exclude.matches if self.exclude else None
        for path, rel in walk(root, stop, skip_dir=skip):
            if self.include and not self.include.matches(rel):
                continue
            if not (self.exclude and self.exclude.matches(rel)):
                yield path

    def _search_file(self, path: Path) -> _Hit | None:
        if looks_binary(read_head(path)):
            return None
        with open_text(path) as f:
            text = f.read()
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        matched = self._matched(text, lines)
        if not matched:
            return None
        name = shown(path, self.ctx)
        rendered = self._render(name, lines, matched) if self.content else []
        return _Hit(path, name, len(matched), rendered)

    def _matched(self, text: str, lines: list[str]) -> list[int]:
        """Indexes of the lines a match touches (a multiline match touches several)."""
        if not self.multiline:
            return [i for i, line in enumerate(lines) if self.regex.search(line)]
        starts = [0, *itertools.accumulate(len(line) + 1 for line in lines)]
        touched: set[int] = set()
        for m in self.regex.finditer(text):
            first = bisect.bisect_right(starts, m.start()) - 1
            last = bisect.bisect_right(starts, max(m.end() - 1, m.start())) - 1
            touched.update(range(first, min(last, len(lines) - 1) + 1))
        return sorted(touched)

    def _render(self, name: str, lines: list[str], matched: list[int]) -> list[str]:
        """ripgrep's layout: ``name:12:text`` matches, ``name-13-text`` context, ``--`` gaps."""
        is_match = dict.fromkeys(matched, True)
        for i in matched:
            for j in range(max(0, i - self.before), min(len(lines), i + self.after + 1)):
                is_match.setdefault(j, False)
        out: list[str] = []
        previous = -1
        for j in sorted(is_match):
            if out and j != previous + 1:
                out.append("--")
            sep = ":" if is_match[j] else "-"
            number = f"{j + 1}{sep}" if self.numbered else ""
            out.append(f"{name}{sep}{number}{clip(lines[j], self.max_line_chars)}")
            previous = j
        return out


def _first_set(specific: int | None, general: int | None) -> int:
    return specific if specific is not None else general or 0


def _compile(args: GrepArgs) -> re.Pattern[str]:
    flags = re.IGNORECASE if args.case_insensitive else 0
    if args.multiline:
        flags |= re.MULTILINE | re.DOTALL
    try:
        return re.compile(args.pattern, flags)
    except re.error as exc:
        raise ToolError(f"Invalid regular expression {args.pattern!r}: {exc}.") from None


def _report(hits: list[_Hit], mode: OutputMode, limit: int, spaced: bool) -> str:
    if not hits:
        return "No matches found."
    entries = _entries(hits, mode, spaced)
    kept = entries[:limit]
    if mode == "files_with_matches":
        kept.insert(0, f"Found {counted(len(hits), 'file')}")
    elif mode == "count":
        total = sum(hit.count for hit in hits)
        kept.append(f"Found {counted(total, 'matching line')} in {counted(len(hits), 'file')}")
    if len(entries) > limit:
        kept.append(
            f"[Showing the first {limit} of {len(entries)} entries; narrow the search "
            "(path, glob, pattern) or raise head_limit.]"
        )
    return "\n".join(kept)


def _entries(hits: list[_Hit], mode: OutputMode, spaced: bool) -> list[str]:
    if mode == "files_with_matches":
        return [hit.name for hit in sorted(hits, key=lambda h: (-mtime(h.path), h.path))]
    if mode == "count":
        return [f"{hit.name}:{hit.count}" for hit in hits]
    out: list[str] = []
    for hit in hits:
        if out and spaced:
            out.append("--")
        out.extend(hit.rendered)
    return out
