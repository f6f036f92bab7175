from __future__ import annotations

from pathlib import Path

import pytest

from forkagent.agents import load_agent_file, load_agents, user_agent_dirs
from forkagent.errors import AgentSpawnError, ConfigurationError


def write(directory: Path, filename: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(text)
    return path


def agent_md(name: str, *extra: str, body: str = "You review code.") -> str:
    lines = ["---", f"name: {name}", f"description: The {name} agent", *extra, "---", body]
    return "\n".join(lines) + "\n"


CLAUDE_CODE_AGENT = """\
---
name: code-reviewer
description: Use this agent after writing code. Examples: <example>Context: a PR</example>
tools: Read, Grep, Glob
disallowedTools: Bash
model: sonnet
permissionMode: acceptEdits
maxTurns: 12
color: blue
initialPrompt: Start with the diff.
---

You are a senior reviewer. Look for bugs first, style last.
"""


def test_claude_code_file_loads_unchanged(tmp_path: Path) -> None:
    path = write(tmp_path / "proj" / ".claude" / "agents", "code-reviewer.md", CLAUDE_CODE_AGENT)
    catalog = load_agents(tmp_path / "proj", user_dir=tmp_path / "none")

    assert catalog.errors == ()
    assert catalog.warnings == ()
    agent = catalog.get("code-reviewer")
    assert agent.description.startswith("Use this agent after writing code. Examples: <example>")
    assert agent.tools == ("Read", "Grep", "Glob")
    assert agent.disallowed_tools == ("Bash",)
    assert agent.model == "sonnet"
    assert agent.permission_mode == "accept_edits"
    assert agent.max_turns == 12
    assert agent.initial_prompt == "Start with the diff."
    assert agent.system_prompt == "You are a senior reviewer. Look for bugs first, style last."
    assert agent.source == str(path)
    assert catalog.source_of("code-reviewer") == str(path)
    assert not agent.can_spawn_agents


def test_snake_case_fields_lists_and_hooks(tmp_path: Path) -> None:
    text = agent_md(
        "builder",
        "tools: [Read, Edit, Task]",
        "disallowed_tools: [Write]",
        "model: openai:gpt-5",
        "permission_mode: bubble",
        "max_turns: 3",
        "background: true",
        "isolation: worktree",
        "hooks:",
        "  PreToolUse:",
        "    - matcher: Edit",
        "      hooks:",
        "        - {type: command, command: ./lint.sh, timeout: 10}",
    )
    write(tmp_path / "proj" / ".forkagent" / "agents", "builder.md", text)
    agent = load_agents(tmp_path / "proj", user_dir=tmp_path / "none").get("builder")

    assert agent.tools == ("Read", "Edit", "Agent")
    assert agent.can_spawn_agents
    assert agent.background
    assert agent.isolation == "worktree"
    assert agent.permission_mode == "bubble"
    assert [(h.event, h.matcher, h.command) for h in agent.hooks] == [
        ("PreToolUse", "Edit", "./lint.sh")
    ]


BROKEN = [
    ("bad-yaml.md", "---\nname: [unclosed\ndescription: x\n---\nbody\n", None, "invalid YAML"),
    ("no-frontmatter.md", "Just a prompt.\n", None, "no YAML frontmatter"),
    ("not-a-mapping.md", "---\n- a\n- b\n---\nbody\n", None, "mapping"),
    ("no-description.md", "---\nname: lonely\n---\nbody\n", "description", "required"),
    ("no-name.md", "---\ndescription: nameless\n---\nbody\n", "name", "required"),
    ("bad-turns.md", agent_md("t", "maxTurns: many"), "maxTurns", "integer"),
    ("zero-turns.md", agent_md("z", "maxTurns: 0"), "maxTurns", "greater than or equal to 1"),
    ("bad-mode.md", agent_md("m", "permissionMode: yolo"), "permissionMode", "'plan'"),
    ("bad-tools.md", agent_md("b", "tools: {a: 1}"), "tools", "list of tool names"),
    ("bad-isolation.md", agent_md("i", "isolation: docker"), "isolation", "'worktree'"),
    ("bad-model.md", agent_md("n", "model: 4.5"), "model", "string"),
    ("bad-hook.md", agent_md("h", "hooks: {OnSave: []}"), "hooks", "unknown hook event 'OnSave'"),
]


@pytest.mark.parametrize(("filename", "text", "field", "reason"), BROKEN)
def test_broken_file_is_reported_and_others_still_load(
    tmp_path: Path, filename: str, text: str, field: str | None, reason: str
) -> None:
    agents_dir = tmp_path / "proj" / ".forkagent" / "agents"
    broken = write(agents_dir, filename, text)
    write(agents_dir, "zz-good.md", agent_md("good"))

    catalog = load_agents(tmp_path / "proj", user_dir=tmp_path / "none")

    assert "good" in catalog
    assert len(catalog.errors) == 1
    error = catalog.errors[0]
    assert (error.path, error.field) == (broken, field)
    assert reason in error.reason
    assert str(broken) in str(error)


def test_project_overrides_user_overrides_builtin(tmp_path: Path) -> None:
    user = tmp_path / "user"
    project = tmp_path / "proj"
    write(user, "reviewer.md", agent_md("reviewer", "model: haiku"))
    write(user, "explore.md", agent_md("Explore", "model: opus"))
    write(project / ".claude" / "agents", "reviewer.md", agent_md("reviewer", "model: sonnet"))
    winner = write(project / ".forkagent" / "agents", "r.md", agent_md("reviewer", "model: opus"))
    write(project / ".claude" / "agents", "plan.md", agent_md("Plan", "model: sonnet"))

    catalog = load_agents(project, user_dir=user)

    assert catalog.errors == ()
    assert catalog.get("reviewer").model == "opus"
    assert catalog.source_of("reviewer") == str(winner)
    assert catalog.get("Explore").model == "opus"
    assert catalog.get("Plan").model == "sonnet"
    assert catalog.get("general-purpose").source == "built-in"
    assert sorted(catalog.names()) == ["Explore", "Plan", "general-purpose", "reviewer"]


def test_default_user_dirs_follow_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKAGENT_CONFIG_DIR", str(tmp_path / "fa"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    assert user_agent_dirs() == [tmp_path / "cc" / "agents", tmp_path / "fa" / "agents"]

    write(tmp_path / "cc" / "agents", "a.md", agent_md("shared", "model: haiku"))
    write(tmp_path / "fa" / "agents", "a.md", agent_md("shared", "model: opus"))
    assert load_agents(None).get("shared").model == "opus"


def test_same_name_twice_in_one_directory_is_an_error(tmp_path: Path) -> None:
    agents_dir = tmp_path / "proj" / ".forkagent" / "agents"
    first = write(agents_dir, "a.md", agent_md("dup", "model: haiku"))
    second = write(agents_dir, "b.md", agent_md("dup", "model: opus"))

    catalog = load_agents(tmp_path / "proj", user_dir=tmp_path / "none")

    assert catalog.get("dup").model == "haiku"
    [error] = catalog.errors
    assert (error.path, error.field) == (second, "name")
    assert str(first) in error.reason


def test_unused_fields_are_warnings_not_errors(tmp_path: Path) -> None:
    agents_dir = tmp_path / "proj" / ".claude" / "agents"
    path = write(agents_dir, "a.md", agent_md("skilled", "skills: [pdf]", "color: red"))

    catalog = load_agents(tmp_path / "proj", user_dir=tmp_path / "none")

    assert "skilled" in catalog
    assert catalog.errors == ()
    assert [(w.path, w.field) for w in catalog.warnings] == [(path, "skills")]


def test_lookup_is_exact_first_then_case_insensitive(tmp_path: Path) -> None:
    write(tmp_path / "u", "a.md", agent_md("explore"))
    catalog = load_agents(None, user_dir=tmp_path / "u")

    assert catalog.get("explore").source != "built-in"
    assert catalog.get("Explore").source == "built-in"
    assert catalog.get("PLAN").name == "Plan"
    assert "EXPLORE" not in catalog
    with pytest.raises(AgentSpawnError, match="matches Explore, explore; use the exact name"):
        catalog.get("EXPLORE")


def test_unknown_name_lists_the_available_ones(tmp_path: Path) -> None:
    catalog = load_agents(None, user_dir=tmp_path / "none")
    with pytest.raises(AgentSpawnError, match="unknown agent type 'reviewer'") as info:
        catalog.get("reviewer")
    assert "available: general-purpose, Explore, Plan." in str(info.value)


def test_load_agent_file_raises_with_the_field(tmp_path: Path) -> None:
    good = write(tmp_path, "good.md", agent_md("good"))
    bad = write(tmp_path, "bad.md", agent_md("bad", "maxTurns: -1"))
    assert load_agent_file(good).name == "good"
    with pytest.raises(ConfigurationError, match=r"bad\.md \(maxTurns\)"):
        load_agent_file(bad)


def test_crlf_and_empty_body(tmp_path: Path) -> None:
    path = write(tmp_path, "w.md", "---\r\nname: win\r\ndescription: d\r\n---\r\n")
    agent = load_agent_file(path)
    assert (agent.name, agent.system_prompt) == ("win", "")
