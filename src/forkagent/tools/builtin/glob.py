"""Glob: find files by name pattern, newest first."""

from __future__ import annotations

import threading
from pathlib import Path

from pydantic import Field

from ...errors import ToolError
from ..base import ArgsTool, ToolContext, ToolOutput
from ._common import ToolArgs, shown
from ._walk import glob_regex, in_thread, mtime, split_fixed, walk


class GlobArgs(ToolArgs):
    pattern: str = Field(
        description="Glob relative to path, e.g. `**/*.py` or `src/**/test_*.{js,ts}`. "
        "`*` stays within a directory, `**` spans any depth, `{a,b}` gives alternatives."
    )
    path: str | None = Field(
        default=None, description="Directory to search. Default: the working directory."
    )


class Glob(ArgsTool):
    """Newest first, because the files a model is after are usually the ones just changed."""

    name = "Glob"
    read_only = True
    Args = GlobArgs

    def __init__(self, *, max_results: int = 100) -> None:
        self.max_results = max_results
        self.description = (
            "Find files whose paths match a glob pattern (`**/*.py`, `src/**/*.{ts,tsx}`). "
            f"Returns at most {max_results} paths, most recently modified first. Skips .git, "
            "node_modules, virtualenvs and caches unless path or the pattern's leading "
            "directories name them. Use Grep to search file contents."
        )

    async def run(self, args: GlobArgs, ctx: ToolContext) -> ToolOutput:
        base = ctx.resolve(args.path or ".")
        if not base.is_dir():
            raise ToolError(f"{shown(base, ctx)} is not a directory; path must name one.")
        fixed, rest = split_fixed(args.pattern)
        found = await in_thread(lambda stop: _newest_first(base / fixed, rest, stop))
        if not found:
            return f"No files under {shown(base, ctx)} match {args.pattern!r}."
        lines = [shown(p, ctx) for p in found[: self.max_results]]
        if len(found) > self.max_results:
            lines.append(
                f"[{self.max_results} of {len(found)} matches shown, newest first; "
                "narrow the pattern or path to see the rest.]"
            )
        return "\n".join(lines)


def _newest_first(start: Path, rest: str, stop: threading.Event) -> list[Path]:
    if not rest:
        return [start] if start.is_file() else []
    regex = glob_regex(rest)
    found = [path for path, rel in walk(start, stop) if regex.fullmatch(rel)]
    return sorted(found, key=lambda p: (-mtime(p), p))
