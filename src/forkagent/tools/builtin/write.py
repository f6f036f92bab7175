"""Write: create or replace a whole file."""

from __future__ import annotations

from pydantic import Field

from ...errors import ToolError
from ..base import ArgsTool, ToolContext, ToolOutput
from ._common import FILE_PATH_HELP, ToolArgs, os_errors, shown


class WriteArgs(ToolArgs):
    file_path: str = Field(description=FILE_PATH_HELP)
    content: str = Field(description="The complete content of the file, written as UTF-8.")


class Write(ArgsTool):
    """Writes the bytes as given (no newline translation): what the model wrote is on disk."""

    name = "Write"
    description = (
        "Write a file, replacing it if it exists; missing parent directories are created. "
        "Prefer Edit to change part of an existing file."
    )
    Args = WriteArgs

    async def run(self, args: WriteArgs, ctx: ToolContext) -> ToolOutput:
        path = ctx.resolve(args.file_path)
        name = shown(path, ctx)
        if path.is_dir():
            raise ToolError(f"{name} is a directory; give the path of a file.")
        existed = path.exists()
        data = args.content.encode("utf-8")
        with os_errors(name, "write"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return f"Wrote {len(data)} bytes to {name} ({'replaced' if existed else 'new file'})."
