"""``@tool``: the schema from hints and docstring, a hidden context, validated input."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Literal

import pytest

from forkagent.errors import ToolError
from forkagent.messages import JsonValue, TextBlock
from forkagent.testing import wire
from forkagent.tools import FunctionTool, Tool, ToolContext, as_tool, tool


@tool
def lookup(ticket: str, limit: int = 5, mode: Literal["fast", "full"] = "fast") -> str:
    """Look a ticket up in the tracker.

    Returns the ticket's summary.

    Args:
        ticket: The ticket id, e.g. ABC-12.
        limit: How many comments to include.
        mode: How much to fetch.
    """
    return f"{ticket}:{limit}:{mode}"


@tool(name="where", read_only=True)
async def where_am_i(ctx: ToolContext, suffix: str = "") -> str:
    """Say where the agent works."""
    await asyncio.sleep(0)
    return f"{ctx.agent_id}@{ctx.cwd}{suffix}"


@tool
def optional_ctx(x: int, ctx: ToolContext | None = None) -> str:
    """Takes an optional context."""
    return f"{x}:{ctx.agent_id if ctx else None}"


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path, agent_id="agent-7")


def test_decorator_makes_a_tool() -> None:
    assert isinstance(lookup, FunctionTool)
    assert isinstance(lookup, Tool)
    assert lookup.name == "lookup"
    assert where_am_i.name == "where"
    assert where_am_i.read_only
    assert not lookup.read_only


def test_description_comes_from_the_docstring_without_params() -> None:
    assert lookup.description.startswith("Look a ticket up in the tracker.")
    assert "Returns the ticket's summary." in lookup.description
    assert "Args" not in lookup.description
    assert "limit" not in lookup.description


def test_schema_from_hints_and_docstring() -> None:
    schema = wire(lookup.input_schema)
    assert schema["type"] == "object"
    assert schema["required"] == ["ticket"]
    props = schema["properties"]
    assert list(props) == ["ticket", "limit", "mode"]  # signature order
    assert props["ticket"] == {"type": "string", "description": "The ticket id, e.g. ABC-12."}
    assert props["limit"]["type"] == "integer"
    assert props["limit"]["default"] == 5
    assert props["limit"]["description"] == "How many comments to include."
    assert props["mode"]["enum"] == ["fast", "full"]
    assert schema.get("additionalProperties") is False
    assert "title" not in schema
    assert all("title" not in p for p in props.values())


def test_context_parameter_is_hidden() -> None:
    assert list(wire(where_am_i.input_schema)["properties"]) == ["suffix"]
    assert "required" not in where_am_i.input_schema
    assert list(wire(optional_ctx.input_schema)["properties"]) == ["x"]


def test_spec_is_what_the_model_sees() -> None:
    spec = lookup.spec()
    assert (spec.name, spec.description, spec.input_schema) == (
        "lookup",
        lookup.description,
        lookup.input_schema,
    )


async def test_sync_function_is_called_with_validated_args(ctx: ToolContext) -> None:
    assert await lookup.call({"ticket": "A-1"}, ctx) == "A-1:5:fast"
    assert await lookup.call({"ticket": "A-1", "limit": "7", "mode": "full"}, ctx) == "A-1:7:full"


async def test_async_function_receives_the_context(ctx: ToolContext) -> None:
    assert await where_am_i.call({"suffix": "!"}, ctx) == f"agent-7@{ctx.cwd}!"
    assert await optional_ctx.call({"x": 3}, ctx) == "3:agent-7"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "ticket: Field required"),
        ({"ticket": "A", "limit": "many"}, "limit:"),
        ({"ticket": "A", "mode": "slow"}, "mode:"),
        ({"ticket": "A", "tiket": "typo"}, "tiket: Extra inputs are not permitted"),
    ],
)
async def test_invalid_arguments_raise_tool_error(
    ctx: ToolContext, args: dict[str, JsonValue], fragment: str
) -> None:
    with pytest.raises(ToolError, match="invalid arguments") as raised:
        await lookup.call(args, ctx)
    assert fragment in str(raised.value)


async def test_context_cannot_be_passed_by_the_model(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="ctx"):
        await where_am_i.call({"ctx": "x"}, ctx)


async def test_outputs_are_text_or_blocks(ctx: ToolContext) -> None:
    @tool
    def number() -> int:
        """A number."""
        return 42

    @tool
    def blocks() -> list[TextBlock]:
        """Blocks."""
        return [TextBlock(text="a"), TextBlock(text="b")]

    @tool
    def names() -> list[str]:
        """Names of things."""
        return ["alpha", "beta"]

    @tool
    def record() -> dict[str, object]:
        """A record."""
        return {"ok": True, "n": 1}

    assert await number.call({}, ctx) == "42"
    assert await blocks.call({}, ctx) == [TextBlock(text="a"), TextBlock(text="b")]
    # Plain data becomes text the model can read (a list of str is not a list of blocks).
    listed = await names.call({}, ctx)
    assert isinstance(listed, str)
    assert "alpha" in listed
    assert "beta" in listed
    recorded = await record.call({}, ctx)
    assert isinstance(recorded, str)
    assert '"ok"' in recorded or "'ok'" in recorded


def test_as_tool_wraps_plain_functions() -> None:
    def plain(a: int) -> str:
        """Plain."""
        return str(a)

    wrapped = as_tool(plain)
    assert isinstance(wrapped, FunctionTool)
    assert wrapped.name == "plain"
    assert as_tool(lookup) is lookup


def test_options_override_name_and_description() -> None:
    @tool(name="X", description="Custom.")
    def f() -> str:
        """Docstring."""
        return ""

    assert (f.name, f.description) == ("X", "Custom.")


def test_function_without_docstring_uses_its_name() -> None:
    def bare(x: str) -> str:
        return x

    assert FunctionTool(bare).description == "bare"


def test_tool_context_resolves_paths(tmp_path: Path) -> None:
    ctx = ToolContext(cwd=tmp_path)
    assert ctx.resolve("a/b.txt") == tmp_path / "a" / "b.txt"
    assert ctx.resolve("/etc/x") == Path("/etc/x")


_USER_PROGRAMS = {
    "typed_calls.py": """
from forkagent import tool

@tool
def lookup(ticket: str, limit: int = 3) -> str:
    '''Look a ticket up.'''
    return ticket

@tool(read_only=True)
async def count(word: str) -> int:
    '''Count.'''
    return len(word)

answer: str = lookup("T-7", limit=2)
""",
    "wrong_call.py": """
from forkagent import tool

@tool
def lookup(ticket: str) -> str:
    '''Look a ticket up.'''
    return ticket

lookup(7)
""",
}


@pytest.fixture(scope="module")
def mypy_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """A user's ``mypy --strict`` over every program above in one run (a run costs
    seconds): each program's diagnostics, by file name."""
    from mypy import api

    folder = tmp_path_factory.mktemp("user_programs")
    paths = {name: folder / name for name in _USER_PROGRAMS}
    for name, path in paths.items():
        path.write_text(_USER_PROGRAMS[name])
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir=/dev/null", *map(str, paths.values())]
    )
    report = (out + err).splitlines()
    lines = {
        name: [line for line in report if line.startswith(f"{path}:")]
        for name, path in paths.items()
    }
    # 2 is mypy failing to run (a crash, a bad option): no program would have been checked.
    assert status in (0, 1), report
    return lines


def test_a_decorated_function_keeps_its_type_for_a_users_mypy(
    mypy_lines: dict[str, list[str]],
) -> None:
    assert mypy_lines["typed_calls.py"] == []


def test_a_wrong_call_of_a_decorated_function_is_reported(
    mypy_lines: dict[str, list[str]],
) -> None:
    (line,) = mypy_lines["wrong_call.py"]
    assert 'incompatible type "int"; expected "str"' in line
