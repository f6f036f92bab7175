"""Edit: replace an exact string in a file."""

from __future__ import annotations

from pydantic import Field

from ...errors import ToolError
from ..base import ArgsTool, ToolContext, ToolOutput
from ._common import (
    FILE_PATH_HELP,
    SNIFF_BYTES,
    ToolArgs,
    counted,
    existing_file,
    looks_binary,
    os_errors,
    shown,
)


class EditArgs(ToolArgs):
    file_path: str = Field(description=FILE_PATH_HELP)
    old_string: str = Field(
        min_length=1,
        description="The exact text to replace, whitespace and indentation included "
        "(without Read's line-number prefixes).",
    )
    new_string: str = Field(description="The text to put in its place (empty deletes it).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of requiring exactly one."
    )


class Edit(ArgsTool):
    """Exact replacement only: an edit either lands where the model meant or fails loudly."""

    name = "Edit"
    description = (
        "Replace exact text in a UTF-8 file. old_string must match the file exactly "
        "(whitespace and indentation included) and occur exactly once, unless replace_all is "
        "true; include surrounding lines to make it unique. Fails when old_string is missing "
        "or equals new_string. To create a file, use Write."
    )
    Args = EditArgs

    async def run(self, args: EditArgs, ctx: ToolContext) -> ToolOutput:
        if args.old_string == args.new_string:
            raise ToolError("old_string and new_string are the same; there is nothing to change.")
        path = existing_file(ctx, args.file_path)
        name = shown(path, ctx)
        with os_errors(name, "read"):
            text = _decode(path.read_bytes(), name)
        old, new = _with_file_newlines(text, args.old_string, args.new_string)
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"old_string was not found in {name}. It must match exactly, whitespace and "
                "indentation included; Read the file and copy the text."
            )
        if count > 1 and not args.replace_all:
            raise ToolError(
                f"old_string occurs {count} times in {name}. Include more surrounding text to "
                "make it unique, or set replace_all to true to replace every occurrence."
            )
        with os_errors(name, "write"):
            path.write_bytes(text.replace(old, new, -1 if args.replace_all else 1).encode("utf-8"))
        return f"Replaced {counted(count, 'occurrence')} in {name}."


def _decode(data: bytes, name: str) -> str:
    if looks_binary(data[:SNIFF_BYTES]):
        raise ToolError(f"{name} is a binary file; Edit changes text files only.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{name} is not UTF-8 text; Edit changes UTF-8 files only.") from None


def _with_file_newlines(text: str, old: str, new: str) -> tuple[str, str]:
    """Read shows CRLF files with bare newlines; use the file's CRLFs when only that matches."""
    if old in text or "\r\n" not in text:
        return old, new
    return old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
