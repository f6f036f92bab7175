"""What the file tools share: the argument base, path checks, error wording and sniffing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict

from ...errors import ToolError
from ..base import ToolContext

FILE_PATH_HELP = "Path of the file, absolute or relative to the working directory."
SNIFF_BYTES = 8192
"""How much of a file's start decides whether it is text (git and grep look at as much)."""


class ToolArgs(BaseModel):
    """Arguments of a built-in tool. Unknown fields are an error, so typos cannot pass."""

    model_config = ConfigDict(extra="forbid")


def shown(path: Path, ctx: ToolContext) -> str:
    """A path as the model should see it: relative to the cwd when inside, so it can reuse it."""
    try:
        return path.relative_to(ctx.cwd).as_posix()
    except ValueError:
        return str(path)


def existing_file(ctx: ToolContext, file_path: str) -> Path:
    """Resolve ``file_path``; unless it is a regular file, fail with a message the model can use."""
    path = ctx.resolve(file_path)
    if path.is_dir():
        raise ToolError(f"{shown(path, ctx)} is a directory, not a file; list it with Glob.")
    if not path.exists():
        raise ToolError(
            f"File not found: {shown(path, ctx)}. Check the path, or find it with Glob."
        )
    if not path.is_file():
        raise ToolError(f"{shown(path, ctx)} is not a regular file (a device, pipe or socket).")
    return path


@contextmanager
def os_errors(name: str, doing: str) -> Iterator[None]:
    """Turn an OS failure (permissions, a file in the way...) into a ToolError naming the path."""
    try:
        yield
    except OSError as exc:
        raise ToolError(f"Cannot {doing} {name}: {exc.strerror or exc}") from None


def read_head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(SNIFF_BYTES)


def looks_binary(head: bytes) -> bool:
    """A NUL byte, or mostly bytes that are not UTF-8: not something to show as text."""
    if b"\0" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    return text.count("\ufffd") * 10 > len(text)


def open_text(path: Path) -> TextIO:
    """Open a file as text the same way everywhere, so Read and Grep agree on line numbers."""
    return path.open(encoding="utf-8", errors="replace")


def clip(line: str, width: int) -> str:
    """Cut an over-long line (minified code, data) and say how much was cut."""
    if len(line) <= width:
        return line
    return f"{line[:width]}… [{len(line) - width} more characters]"


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
