"""Walking directory trees for Glob and Grep: glob patterns, pruning, and running off the loop."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath
from typing import TypeVar

from ._secrets import SECRET_DIRS, is_secret

T = TypeVar("T")


NOISE_DIRS = frozenset(
    {
        ".git", ".hg", ".svn",
        ".venv", "venv", "node_modules",
        "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox",
    }
)  # fmt: skip
"""Directories a search skips below its starting point: VCS data, installed packages, caches."""

_MAGIC = frozenset("*?[{\\")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob over ``/``-separated relative paths.

    ``*`` and ``?`` stay within one path segment, ``**`` spans any number of
    them (``**/`` also matches none), ``[...]`` is a character class (``!``
    negates) and ``{a,b}`` gives alternatives.
    """
    return re.compile(_translate(pattern), re.DOTALL)


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        else:
            piece, i = _translate_one(pattern, i)
            out.append(piece)
    return "".join(out)


def _translate_one(pattern: str, i: int) -> tuple[str, int]:
    """The regex for the glob element at ``i``, and the index after it."""
    char = pattern[i]
    if char == "*":
        return "[^/]*", i + 1
    if char == "?":
        return "[^/]", i + 1
    if char == "\\" and i + 1 < len(pattern):
        return re.escape(pattern[i + 1]), i + 2
    if char == "[":
        end = pattern.find("]", i + 2)
        if end != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = re.sub(r"([\\\[\]&~|^])", r"\\\1", body[1:] if negate else body)
            return ("[^" if negate else "[") + body + "]", end + 1
    if char == "{":
        end = _closing_brace(pattern, i)
        if end != -1:
            options = _split_top_level(pattern[i + 1 : end])
            return f"(?:{'|'.join(_translate(o) for o in options)})", end + 1
    return re.escape(char), i + 1


def _closing_brace(pattern: str, start: int) -> int:
    depth = 0
    for j in range(start, len(pattern)):
        depth += {"{": 1, "}": -1}.get(pattern[j], 0)
        if depth == 0:
            return j
    return -1


def _split_top_level(body: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in body:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        current.append(char)
    parts.append("".join(current))
    return parts


class GlobFilter:
    """A filter read the way ripgrep reads ``--glob``.

    Without a ``/`` (a trailing one aside) it matches file and directory names at
    any depth; otherwise the path from the search root.
    """

    def __init__(self, pattern: str) -> None:
        trimmed = pattern.rstrip("/")
        self._whole_path = "/" in trimmed
        self._regex = glob_regex(trimmed.lstrip("/"))

    def matches(self, rel: str) -> bool:
        return (
            self._regex.fullmatch(rel if self._whole_path else rel.rpartition("/")[2]) is not None
        )


def split_fixed(pattern: str) -> tuple[str, str]:
    """Split a glob into its leading wildcard-free directories and the rest.

    A search starts at the fixed part, so ``src/**/*.py`` walks ``src`` only and
    ``node_modules/x/**`` may enter a directory that a search would otherwise skip.
    """
    segments = pattern.split("/")
    n = 0
    while n < len(segments) - 1 and not _MAGIC.intersection(segments[n]):
        n += 1
    if n == len(segments) - 1 and not _MAGIC.intersection(segments[n]):
        n += 1
    fixed = "/".join(segments[:n]) or ("/" if pattern.startswith("/") else ".")
    return fixed, "/".join(segments[n:])


def walk(
    root: Path, stop: threading.Event, skip_dir: Callable[[str], bool] | None = None
) -> Iterator[tuple[Path, str]]:
    """Files under ``root`` in name order, with their ``/``-separated path relative to it.

    Skips ``NOISE_DIRS``, directories ``skip_dir`` rejects and credential files
    (``_secrets``: search and listing never show them), does not follow
    directory symlinks, and ends early once ``stop`` is set.
    """
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        prefix = here.relative_to(root).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in NOISE_DIRS
            and d not in SECRET_DIRS
            and not (skip_dir is not None and skip_dir(prefix + d))
        )
        for name in sorted(filenames):
            if stop.is_set():
                return
            if not is_secret(PurePath(name)):
                yield here / name, prefix + name


def mtime(path: Path) -> float:
    """Modification time, or 0 for a file that vanished or is a dangling link."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


async def in_thread(work: Callable[[threading.Event], T]) -> T:
    """Run blocking tree work in a thread; when the caller is cancelled, tell the work to stop."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(work, stop)
    finally:
        stop.set()
