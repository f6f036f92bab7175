"""End to end: an agent driven by a function model fixes a bug with Grep, Read and Edit.

The model is a plain function of the request it receives: it decides each step
from the tool results it has seen, as a real model would, so the test checks
that the built-in tools' outputs are usable and that paths resolve against
the agent's cwd.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from forkagent import Agent
from forkagent.messages import AssistantMessage, Message, UserMessage
from forkagent.requests import ModelRequest
from forkagent.testing import FunctionModel, reply, tool_call

BUGGY = '''"""Arithmetic helpers."""


def add(a, b):
    return a - b  # TODO: should add


def sub(a, b):
    return a - b
'''

FIXED = BUGGY.replace("return a - b  # TODO: should add", "return a + b")


def _results(messages: Sequence[Message]) -> list[str]:
    return [r.text for m in messages if isinstance(m, UserMessage) for r in m.tool_results]


def engineer(request: ModelRequest) -> AssistantMessage | str:
    """Find the TODO, read the file, fix the line, check the fix."""
    step = sum(isinstance(m, AssistantMessage) for m in request.messages)
    results = _results(request.messages)
    if step == 0:
        return reply("Looking for the TODO.", tool_call("Grep", pattern=r"TODO", glob="*.py"))
    if step == 1:
        path = results[-1].splitlines()[-1]  # "Found 1 file\n<path>"
        return reply(tool_call("Read", file_path=path))
    if step == 2:
        message = request.messages[-2]
        assert isinstance(message, AssistantMessage)
        path = str(message.tool_uses[0].input["file_path"])
        numbered = next(line for line in results[-1].splitlines() if "TODO" in line)
        old = re.sub(r"^\s*\d+\t", "", numbered)  # strip Read's line-number prefix
        new = re.sub(r"a - b\s+# TODO.*", "a + b", old)
        return reply(tool_call("Edit", file_path=path, old_string=old, new_string=new))
    if step == 3:
        assert "error" not in results[-1].lower(), results[-1]
        return reply(tool_call("Grep", pattern="TODO", output_mode="count"))
    return f"Fixed add() in src/mathlib/ops.py. Check: {results[-1]!r}"


async def test_agent_fixes_a_bug_with_read_grep_and_edit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "mathlib").mkdir(parents=True)
    (repo / "src" / "mathlib" / "ops.py").write_text(BUGGY)
    (repo / "src" / "mathlib" / "__init__.py").write_text("")
    (repo / "README.md").write_text("# mathlib\nTODO: docs\n")  # not a .py file: excluded
    model = FunctionModel(engineer)
    agent = Agent(model=model, cwd=repo, load_agent_files=False, subagents=False)

    result = await agent.run("Fix the TODO in the Python code.")

    assert result.status == "completed"
    assert (repo / "src" / "mathlib" / "ops.py").read_text() == FIXED
    assert (repo / "README.md").read_text() == "# mathlib\nTODO: docs\n"
    assert result.output.startswith("Fixed add()")
    tool_names = [
        u.name for m in result.messages if isinstance(m, AssistantMessage) for u in m.tool_uses
    ]
    assert tool_names == ["Grep", "Read", "Edit", "Grep"]
    results = [r for m in result.messages if isinstance(m, UserMessage) for r in m.tool_results]
    assert not any(r.is_error for r in results), [r.text for r in results if r.is_error]
    assert "TODO" not in (repo / "src" / "mathlib" / "ops.py").read_text()
    assert len(model.requests) == 5
    # Every request carried the same tools and system prompt: one cacheable prefix.
    first = model.requests[0]
    assert all(r.tools is first.tools and r.system == first.system for r in model.requests)
