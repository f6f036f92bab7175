"""Read: a file's text with line numbers, page by page; images as images."""

from __future__ import annotations

import base64
from pathlib import Path

from pydantic import Field

from ...errors import ToolError
from ...messages import ImageBlock, TextBlock
from ..base import ArgsTool, ToolContext, ToolOutput
from ._common import (
    FILE_PATH_HELP,
    ToolArgs,
    clip,
    existing_file,
    looks_binary,
    open_text,
    os_errors,
    read_head,
    shown,
)

_IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(head: bytes) -> str | None:
    """The media type of a PNG, JPEG, GIF or WebP file, judged by its bytes, not its name."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((media for magic, media in _IMAGE_SIGNATURES if head.startswith(magic)), None)


class ReadArgs(ToolArgs):
    file_path: str = Field(description=FILE_PATH_HELP)
    offset: int | None = Field(
        default=None, ge=1, description="Line number to start at (1-based). Default: 1."
    )
    limit: int | None = Field(
        default=None, ge=1, description="How many lines to read. Default: up to the cap."
    )


class Read(ArgsTool):
    """Numbers lines as ``cat -n`` does and as Grep does, so the two agree on line numbers."""

    name = "Read"
    read_only = True
    Args = ReadArgs

    def __init__(
        self,
        *,
        max_lines: int = 2000,
        max_bytes: int = 256_000,
        max_line_chars: int = 2000,
        max_image_bytes: int = 3_750_000,
    ) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.max_line_chars = max_line_chars
        self.max_image_bytes = max_image_bytes
        self.description = (
            "Read a file from the local filesystem. Text comes back with 1-based line numbers "
            f"(`cat -n` style), at most {max_lines} lines or ~{max_bytes // 1000} KB per call; "
            f"lines over {max_line_chars} characters are cut. Page through longer files with "
            "offset and limit. PNG, JPEG, GIF and WebP files come back as images; other binary "
            "files are refused. Use Glob to list a directory."
        )

    async def run(self, args: ReadArgs, ctx: ToolContext) -> ToolOutput:
        path = existing_file(ctx, args.file_path)
        name = shown(path, ctx)
        with os_errors(name, "read"):
            head = read_head(path)
            media = image_type(head)
            if media is not None:
                return self._image(path, name, media)
            if looks_binary(head):
                size = path.stat().st_size
                raise ToolError(
                    f"{name} is a binary file ({size} bytes); Read shows text and images only."
                )
            return self._text(path, name, args.offset or 1, args.limit)

    def _image(self, path: Path, name: str, media: str) -> ToolOutput:
        size = path.stat().st_size
        if size > self.max_image_bytes:
            raise ToolError(
                f"{name} is a {size}-byte image; Read sends images of at most "
                f"{self.max_image_bytes} bytes. Make a smaller copy (e.g. with Bash) and read that."
            )
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return [
            TextBlock(text=f"{name}: {media}, {size} bytes"),
            ImageBlock(media_type=media, data=data),
        ]

    def _text(self, path: Path, name: str, first: int, limit: int | None) -> str:
        wanted = min(limit or self.max_lines, self.max_lines)
        out: list[str] = []
        size = 0
        seen = 0
        more = False
        with open_text(path) as f:
            for seen, line in enumerate(f, 1):
                if seen < first:
                    continue
                if len(out) == wanted or size >= self.max_bytes:
                    more = True
                    break
                text = clip(line.rstrip("\n"), self.max_line_chars)
                out.append(f"{seen:6}\t{text}")
                size += len(text) + 8
        if not out:
            if seen == 0:
                return f"({name} is empty)"
            raise ToolError(f"offset {first} is past the end of {name}, which has {seen} lines.")
        if more:
            served = limit is not None and len(out) == limit
            out.append(self._continues(first + len(out) - 1, capped=not served))
        return "\n".join(out)

    def _continues(self, last: int, *, capped: bool) -> str:
        why = ""
        if capped:
            why = f" (Read returns at most {self.max_lines} lines / ~{self.max_bytes // 1000} KB)"
        return (
            f"[Stopped after line {last}{why}; the file goes on. Read more with offset={last + 1}.]"
        )
