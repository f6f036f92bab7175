"""The tool set as a whole: names, order, argument contract, validation, off-loop walking."""

from __future__ import annotations

import asyncio
import threading

import pytest

from forkagent.errors import ToolError
from forkagent.messages import JsonValue
from forkagent.testing import wire
from forkagent.tools import ToolContext
from forkagent.tools.builtin import builtin_tools
from forkagent.tools.builtin._walk import in_thread

CONTRACT = {
    "Read": (["file_path", "offset", "limit"], ["file_path"], True),
    "Glob": (["pattern", "path"], ["pattern"], True),
    "Grep": (
        ["pattern", "path", "glob", "exclude", "output_mode", "-i", "-n", "-A", "-B", "-C",
         "head_limit", "multiline"],
        ["pattern"],
        True,
    ),
    "Edit": (["file_path", "old_string", "new_string", "replace_all"], ["file_path", "old_string", "new_string"], False),
    "Write": (["file_path", "content"], ["file_path", "content"], False),
    "Bash": (["command", "timeout", "description"], ["command"], False),
}  # fmt: skip


def test_names_order_and_argument_contract() -> None:
    tools = builtin_tools()
    assert [t.name for t in tools] == list(CONTRACT)
    for tool in tools:
        properties, required, read_only = CONTRACT[tool.name]
        schema = wire(tool.input_schema)
        assert list(schema["properties"]) == properties
        assert schema.get("required", []) == required
        assert tool.read_only is read_only
        assert tool.description
        assert all(prop.get("description") for prop in schema["properties"].values())


def test_fresh_instances_with_stable_specs() -> None:
    first, second = builtin_tools(), builtin_tools()
    assert all(a is not b for a, b in zip(first, second, strict=True))
    assert [t.spec() for t in first] == [t.spec() for t in second]


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("Read", {}, "file_path: Field required"),
        ("Read", {"file_path": "a", "offset": 0}, "offset: Input should be greater than or equal to 1"),
        ("Read", {"file_path": "a", "limit": "many"}, "limit: Input should be a valid integer"),
        ("Glob", {"pattern": "*", "recursive": True}, "recursive: Extra inputs are not permitted"),
        ("Grep", {"pattern": "x", "-C": -1}, "-C: Input should be greater than or equal to 0"),
        ("Edit", {"file_path": "a", "old_string": "", "new_string": "b"}, "old_string: String should have at least 1 character"),
        ("Write", {"file_path": "a"}, "content: Field required"),
    ],
)  # fmt: skip
async def test_bad_arguments_are_tool_errors(
    ctx: ToolContext, name: str, args: dict[str, JsonValue], message: str
) -> None:
    tool = next(t for t in builtin_tools() if t.name == name)
    with pytest.raises(ToolError, match=f"^invalid arguments: {message}"):
        await tool.call(args, ctx)


async def test_grep_accepts_spelled_out_flag_names(ctx: ToolContext) -> None:
    grep = builtin_tools()[2]
    (ctx.cwd / "f.txt").write_text("Needle\n")
    out = await grep.call(
        {"pattern": "needle", "case_insensitive": True, "output_mode": "content",
         "line_numbers": False},
        ctx,
    )  # fmt: skip
    assert out == "f.txt:Needle"


async def test_cancelled_tree_work_is_told_to_stop() -> None:
    started, stopped = threading.Event(), threading.Event()

    def work(stop: threading.Event) -> None:
        started.set()
        if stop.wait(5):
            stopped.set()

    task = asyncio.create_task(in_thread(work))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 5)
