from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from forkagent.agents import AgentDefinition
from forkagent.errors import ConfigurationError
from forkagent.hooks import CommandHook, HookInput, HookOutcome, Hooks, parse_hook_config


def tool_event(tmp_path: Path, tool: str = "Bash", event: str = "PreToolUse") -> HookInput:
    return HookInput(
        event=event,  # type: ignore[arg-type]
        agent_id="child-1",
        agent_type="Explore",
        cwd=tmp_path,
        tool_name=tool,
        tool_input={"command": "rm -rf build"},
        tool_use_id="tu_1",
    )


def command_hooks(*commands: str, matcher: str | None = None, timeout: float = 10) -> Hooks:
    return Hooks.from_commands(
        CommandHook("PreToolUse", c, matcher=matcher, timeout=timeout) for c in commands
    )


async def test_python_hook_blocks_only_matching_tools(tmp_path: Path) -> None:
    hooks = Hooks()
    seen: list[str | None] = []

    @hooks.on("PreToolUse", matcher="Bash|Write")
    def no_shell(event: HookInput) -> HookOutcome:
        seen.append(event.tool_name)
        return HookOutcome.block("shell is off today")

    blocked = await hooks.run("PreToolUse", tool_event(tmp_path, "Bash"))
    allowed = await hooks.run("PreToolUse", tool_event(tmp_path, "Read"))
    partial = await hooks.run("PreToolUse", tool_event(tmp_path, "BashOutput"))

    assert (blocked.blocked, blocked.reason) == (True, "shell is off today")
    assert allowed == HookOutcome()
    assert not partial.blocked, "matchers must match the whole tool name"
    assert seen == ["Bash"]


async def test_async_hooks_add_context_in_registration_order(tmp_path: Path) -> None:
    hooks = Hooks()

    async def first(event: HookInput) -> HookOutcome:
        return HookOutcome.context(f"{event.agent_type} started in {event.cwd.name}")

    hooks.add("SubagentStart", first, matcher="Explore")
    hooks.add("SubagentStart", lambda e: HookOutcome.context("second"))
    hooks.add("SubagentStart", lambda e: None)
    hooks.add("SubagentStart", lambda e: HookOutcome.block("never"), matcher="Plan")

    event = HookInput(event="SubagentStart", agent_id="c", agent_type="Explore", cwd=tmp_path)
    outcome = await hooks.run("SubagentStart", event)

    assert outcome == HookOutcome(
        additional_context=(f"Explore started in {tmp_path.name}", "second")
    )


async def test_a_failing_python_hook_is_an_error_not_a_block(tmp_path: Path) -> None:
    hooks = Hooks()

    def broken(event: HookInput) -> None:
        raise RuntimeError("boom")

    hooks.add("PreToolUse", broken)
    outcome = await hooks.run("PreToolUse", tool_event(tmp_path))
    assert not outcome.blocked
    assert outcome.errors == (
        "hook test_a_failing_python_hook_is_an_error_not_a_block.<locals>.broken raised RuntimeError: boom",
    )


async def test_merged_runs_both_and_any_block_wins(tmp_path: Path) -> None:
    settings = Hooks()
    settings.add("PostToolUse", lambda e: HookOutcome.context("from settings"))
    agent = Hooks()
    agent.add(
        "PostToolUse",
        lambda e: HookOutcome(
            blocked=True, reason="bad output", additional_context=("from agent",)
        ),
    )

    outcome = await settings.merged(agent).run(
        "PostToolUse", tool_event(tmp_path, event="PostToolUse")
    )

    assert (outcome.blocked, outcome.reason) == (True, "bad output")
    assert outcome.additional_context == ("from settings", "from agent")
    assert (len(settings), len(agent)) == (1, 1)


async def test_command_exit_2_blocks_with_stderr_and_gets_the_event_on_stdin(
    tmp_path: Path,
) -> None:
    captured = tmp_path / "event.json"
    hooks = command_hooks(
        f"cat > {captured}; echo 'no deleting builds' >&2; exit 2", matcher="Bash"
    )

    outcome = await hooks.run("PreToolUse", tool_event(tmp_path))

    assert (outcome.blocked, outcome.reason) == (True, "no deleting builds")
    event = json.loads(captured.read_text())
    assert event == {
        "hook_event_name": "PreToolUse",
        "cwd": str(tmp_path),
        "agent_id": "child-1",
        "agent_type": "Explore",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf build"},
        "tool_use_id": "tu_1",
    }


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        (
            '{"decision": "block", "reason": "use the Edit tool"}',
            HookOutcome.block("use the Edit tool"),
        ),
        (
            '{"additionalContext": "tests live in tests/"}',
            HookOutcome.context("tests live in tests/"),
        ),
        (
            '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",'
            ' "permissionDecisionReason": "not on main"}}',
            HookOutcome.block("not on main"),
        ),
        (
            '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "ctx"}}',
            HookOutcome.context("ctx"),
        ),
        ('{"decision": "block"}', HookOutcome.block("blocked by hook command 'sh out.sh'")),
        ("all good, nothing to add", HookOutcome()),
        ("", HookOutcome()),
    ],
)
async def test_command_json_output(tmp_path: Path, stdout: str, expected: HookOutcome) -> None:
    (tmp_path / "out.txt").write_text(stdout)
    (tmp_path / "out.sh").write_text("cat >/dev/null; cat out.txt\n")
    outcome = await command_hooks("sh out.sh").run("PreToolUse", tool_event(tmp_path))
    assert outcome == expected


async def test_command_failures_are_reported_without_blocking(tmp_path: Path) -> None:
    hooks = command_hooks("echo oops >&2; exit 1", "echo '{not json'", "sleep 5", timeout=0.3)
    outcome = await hooks.run("PreToolUse", tool_event(tmp_path))
    assert not outcome.blocked
    assert outcome.errors[0] == "hook command 'echo oops >&2; exit 1' exited with 1: oops"
    assert outcome.errors[1].startswith("hook command \"echo '{not json'\" printed invalid JSON")
    assert outcome.errors[2] == "hook command 'sleep 5' timed out after 0.3s"


async def test_settings_files_of_both_kinds_are_loaded(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".forkagent").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": []},
                "hooks": {
                    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "false"}]}],
                    "PreToolUse": [
                        {
                            "matcher": "Bash|Write",
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f'echo "claude $CLAUDE_PROJECT_DIR" >> {log}',
                                }
                            ],
                        }
                    ],
                },
            }
        )
    )
    (tmp_path / ".forkagent" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f'echo "forkagent $FORKAGENT_PROJECT_DIR" >> {log}',
                                }
                            ]
                        }
                    ]
                },
            }
        )
    )
    hooks = Hooks.from_settings(tmp_path)
    assert len(hooks) == 2

    await hooks.run("PreToolUse", tool_event(tmp_path / ".claude", "Write"))
    await hooks.run("PreToolUse", tool_event(tmp_path / ".claude", "Read"))

    assert sorted(log.read_text().splitlines()) == [
        f"claude {tmp_path}",
        f"forkagent {tmp_path}",
        f"forkagent {tmp_path}",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "hooks cannot be loaded"),
        ('{"hooks": {"BeforeTool": []}}', "unknown hook event 'BeforeTool'"),
        ('{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}', "PreToolUse[0].matcher"),
        ('{"hooks": {"PreToolUse": [{"hooks": [{"type": "prompt"}]}]}}', "only 'command' hooks"),
        ('{"hooks": {"PreToolUse": [{"hooks": [{"command": "x", "timeout": -1}]}]}}', "timeout"),
        ('{"hooks": {"PreToolUse": {"hooks": []}}}', "expected a list"),
    ],
)
def test_broken_settings_name_the_file_and_place(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / ".forkagent").mkdir()
    path = tmp_path / ".forkagent" / "settings.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=r"settings\.json") as info:
        Hooks.from_settings(tmp_path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


async def test_definition_hooks_run_on_subagent_stop(tmp_path: Path) -> None:
    agent = AgentDefinition(
        name="writer",
        description="d",
        hooks={
            "Stop": [
                {"hooks": [{"type": "command", "command": "echo 'summarise first' >&2; exit 2"}]}
            ]
        },
    )
    hooks = Hooks.from_commands(agent.hooks)
    event = HookInput(
        event="SubagentStop", agent_id="w", agent_type="writer", cwd=tmp_path, result="done"
    )
    outcome = await hooks.run("SubagentStop", event)
    assert (outcome.blocked, outcome.reason) == (True, "summarise first")


async def test_run_refuses_an_input_for_another_event(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PreToolUse, not PostToolUse"):
        await Hooks().run("PostToolUse", tool_event(tmp_path))


def test_unknown_event_names_are_refused_when_registering() -> None:
    with pytest.raises(ValueError, match="unknown hook event"):
        Hooks().add("OnSave", lambda e: None)  # type: ignore[arg-type]
    assert parse_hook_config({"Stop": []}) == ()


async def test_a_command_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    outcome = await command_hooks("true").run("PreToolUse", tool_event(tmp_path / "gone"))
    assert not outcome.blocked
    assert outcome.errors[0].startswith("hook command 'true' could not start:")


async def test_a_hook_command_is_killed_with_its_children_when_the_run_is_cancelled(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "hook.pid"
    command = f"sleep 300 & echo $! > {pid_file}; wait"
    hooks = Hooks.from_commands([CommandHook(event="PreToolUse", command=command)])
    call = HookInput(event="PreToolUse", agent_id="main", agent_type="main", cwd=tmp_path)

    running = asyncio.create_task(hooks.run("PreToolUse", call))
    sleeper = await asyncio.to_thread(_pid_in, pid_file)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert await asyncio.to_thread(_ends, sleeper)


def _pid_in(path: Path) -> int:
    while not path.exists() or not path.read_text().strip():
        time.sleep(0.02)
    return int(path.read_text())


def _ends(pid: int) -> bool:
    """Whether the process is gone (or a zombie) within a few seconds: a kill takes a moment."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False
