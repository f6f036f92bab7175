"""Test doubles shared by the permission tests."""

from __future__ import annotations

from forkagent.messages import JsonValue
from forkagent.tools.base import Tool, ToolContext, ToolOutput


class FakeTool(Tool):
    """A tool that only records that it ran; ``read_only`` as given."""

    def __init__(self, name: str, *, read_only: bool = False) -> None:
        self.name = name
        self.description = name
        self.read_only = read_only

    @property
    def input_schema(self) -> dict[str, JsonValue]:
        return {"type": "object", "properties": {}}

    async def call(self, args: dict[str, JsonValue], ctx: ToolContext) -> ToolOutput:
        return "ran"
