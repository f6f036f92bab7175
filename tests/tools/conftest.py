from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from forkagent.messages import JsonValue, TextBlock
from forkagent.tools import Tool, ToolContext

Run = Callable[..., Awaitable[str]]


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path)


@pytest.fixture
def run(ctx: ToolContext) -> Run:
    """Call a tool as the turn loop does (raw arguments, validated by the tool); return its text."""

    async def run(tool: Tool, **args: JsonValue) -> str:
        output = await tool.call(dict(args), ctx)
        if isinstance(output, str):
            return output
        return "".join(block.text for block in output if isinstance(block, TextBlock))

    return run
