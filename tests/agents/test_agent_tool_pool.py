from __future__ import annotations

import logging

import pytest

from forkagent.agents import EXPLORE, GENERAL_PURPOSE, AgentDefinition, assemble_tool_pool
from forkagent.tools import FunctionTool, Tool


def _noop() -> str:
    return ""


AVAILABLE: list[Tool] = [
    FunctionTool(_noop, name=n) for n in ("Read", "Write", "Edit", "Glob", "Grep", "Bash", "Agent")
]


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def test_all_tools_keep_the_registry_order_and_objects() -> None:
    pool = assemble_tool_pool(GENERAL_PURPOSE, AVAILABLE)
    assert pool == AVAILABLE
    assert all(a is b for a, b in zip(pool, AVAILABLE, strict=True))
    assert pool.unknown == ()


def test_explore_gets_read_only_tools_and_no_agent_tool() -> None:
    pool = assemble_tool_pool(EXPLORE, AVAILABLE)
    assert names(pool) == ["Read", "Glob", "Grep", "Bash"]


def test_listed_names_follow_available_order_minus_disallowed() -> None:
    agent = AgentDefinition(
        name="a", description="d", tools=("Task", "Bash", "Read"), disallowed_tools=("Bash",)
    )
    pool = assemble_tool_pool(agent, AVAILABLE)
    assert names(pool) == ["Read", "Agent"]
    assert agent.can_spawn_agents


def test_disallowed_from_all() -> None:
    agent = AgentDefinition(name="a", description="d", disallowed_tools="Agent, Write, Edit")
    assert names(assemble_tool_pool(agent, AVAILABLE)) == ["Read", "Glob", "Grep", "Bash"]
    assert not agent.can_spawn_agents


def test_unknown_listed_names_are_reported_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    agent = AgentDefinition(name="web", description="d", tools="Read, WebFetch, NotebookEdit")
    with caplog.at_level(logging.WARNING, logger="forkagent.agents"):
        pool = assemble_tool_pool(agent, AVAILABLE)
    assert names(pool) == ["Read"]
    assert pool.unknown == ("WebFetch", "NotebookEdit")
    assert "'web' lists tools that are not available: WebFetch, NotebookEdit" in caplog.text


def test_empty_tool_list_means_no_tools() -> None:
    agent = AgentDefinition(name="thinker", description="d", tools=())
    assert assemble_tool_pool(agent, AVAILABLE) == []
