from __future__ import annotations

import pytest
from pydantic import ValidationError

from forkagent.agents import BUILTIN_AGENTS, EXPLORE, GENERAL_PURPOSE, PLAN, AgentDefinition


def test_builtins_have_distinct_names_and_real_prompts() -> None:
    assert [a.name for a in BUILTIN_AGENTS] == ["general-purpose", "Explore", "Plan"]
    for agent in BUILTIN_AGENTS:
        assert agent.source == "built-in"
        assert len(agent.system_prompt) > 400
        assert "final message" in agent.system_prompt


def test_general_purpose_has_everything_and_inherits() -> None:
    assert GENERAL_PURPOSE.tools is None
    assert GENERAL_PURPOSE.model == "inherit"
    assert GENERAL_PURPOSE.can_spawn_agents


def test_explore_is_read_only_cheap_and_cannot_spawn() -> None:
    assert EXPLORE.tools == ("Read", "Glob", "Grep", "Bash")
    assert EXPLORE.permission_mode == "plan"
    assert EXPLORE.model == "haiku"
    assert not EXPLORE.can_spawn_agents
    assert not EXPLORE.allows_tool("Edit")


def test_plan_is_read_only_and_inherits() -> None:
    assert PLAN.model == "inherit"
    assert PLAN.permission_mode == "plan"
    assert not PLAN.allows_tool("Write")
    assert not PLAN.can_spawn_agents


def make(**fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate({"name": "x", "description": "d", **fields})


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (None, None),
        ("*", None),
        (["Read", "*"], None),
        ("Read, Grep,Glob", ("Read", "Grep", "Glob")),
        (["Read", "Task"], ("Read", "Agent")),
        ([], ()),
    ],
)
def test_tools_field_forms(tools: object, expected: tuple[str, ...] | None) -> None:
    assert make(tools=tools).tools == expected


def test_disallowed_tools_win_and_old_names_map() -> None:
    agent = make(disallowed_tools="Task, Bash")
    assert agent.disallowed_tools == ("Agent", "Bash")
    assert not agent.can_spawn_agents
    assert not agent.allows_tool("Bash")
    assert agent.allows_tool("Read")
    assert not agent.allows_tool("Task")


def test_disallowing_everything_is_rejected() -> None:
    with pytest.raises(ValidationError, match="cannot be disallowed"):
        make(disallowed_tools="*")


@pytest.mark.parametrize(
    ("written", "mode"),
    [
        ("acceptEdits", "accept_edits"),
        ("bypassPermissions", "bypass"),
        ("plan", "plan"),
        (None, None),
    ],
)
def test_permission_modes_in_either_spelling(written: str | None, mode: str | None) -> None:
    assert make(permission_mode=written).permission_mode == mode


def test_unknown_permission_mode_and_isolation_are_rejected() -> None:
    with pytest.raises(ValidationError):
        make(permission_mode="dontAsk")
    with pytest.raises(ValidationError):
        make(isolation="docker")


def test_definitions_are_frozen() -> None:
    with pytest.raises(ValidationError):
        EXPLORE.model = "opus"  # type: ignore[misc]


def test_hooks_in_settings_shape_with_stop_meaning_this_agent() -> None:
    agent = make(
        hooks={
            "Stop": [{"hooks": [{"type": "command", "command": "echo done"}]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "check", "timeout": 5}]}],
        }
    )
    assert [(h.event, h.matcher, h.command, h.timeout) for h in agent.hooks] == [
        ("SubagentStop", None, "echo done", 60.0),
        ("PreToolUse", "Bash", "check", 5.0),
    ]
