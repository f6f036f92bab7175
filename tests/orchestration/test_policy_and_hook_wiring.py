"""Permission policies reach every call: the main agent's, and each named agent's mode."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from forkagent import Agent
from forkagent.messages import ToolResultBlock, UserMessage
from forkagent.models.function import FunctionModel, Reply
from forkagent.permissions import PermissionDecision, PermissionPolicy, PermissionRequest
from forkagent.requests import ModelRequest
from forkagent.testing import ScriptedModel, reply, tool_call


def _results(messages: Sequence[object]) -> list[ToolResultBlock]:
    return [
        b
        for m in messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


def test_explore_runs_in_plan_mode_and_cannot_write_through_the_shell(tmp_path: Path) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("data")
    seen: list[str] = []

    def model(request: ModelRequest) -> Reply:
        is_explore = "Agent" not in {t.name for t in request.tools}
        last = request.messages[-1]
        if is_explore:
            if len(request.messages) == 1:
                return reply(
                    tool_call("Bash", command="rm -f keep.txt"), tool_call("Bash", command="ls")
                )
            seen.extend(r.text for r in _results(request.messages))
            return "Scope: explored"
        if len(request.messages) == 1:
            return reply(tool_call("Agent", prompt="look around", subagent_type="Explore"))
        assert isinstance(last, UserMessage)
        return "done"

    result = Agent(model=FunctionModel(model), cwd=tmp_path, load_agent_files=False).run_sync("go")

    assert result.status == "completed"
    assert victim.read_text() == "data"
    assert seen[0].startswith("not allowed")
    assert "keep.txt" in seen[1]  # `ls` is read-only, so it ran


def test_main_agent_policy_asks_the_handler_and_respects_its_answer(tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []

    def handler(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision(allowed=False, reason="the user said no")

    model = ScriptedModel([reply(tool_call("Write", file_path="new.txt", content="x")), "ok"])
    result = Agent(
        model=model,
        cwd=tmp_path,
        load_agent_files=False,
        permissions=PermissionPolicy(mode="default", handler=handler),
    ).run_sync("write a file")

    assert [r.tool_name for r in asked] == ["Write"]
    assert not (tmp_path / "new.txt").exists()
    (denied,) = _results(result.messages)
    assert denied.is_error
    assert "the user said no" in denied.text


def test_subagent_start_hook_can_refuse_a_child_and_stop_hook_sees_its_result(
    tmp_path: Path,
) -> None:
    from forkagent.hooks import HookInput, HookOutcome, Hooks

    stopped: list[HookInput] = []
    hooks = Hooks()
    hooks.add(
        "SubagentStart",
        lambda i: HookOutcome(blocked=True, reason="no explorers today"),
        matcher="Explore",
    )

    def on_stop(hook_input: HookInput) -> HookOutcome:
        stopped.append(hook_input)
        return HookOutcome()

    hooks.add("SubagentStop", on_stop)
    model = ScriptedModel(
        [
            reply(
                tool_call("Agent", prompt="look", subagent_type="Explore"),
                tool_call("Agent", prompt="work", subagent_type="general-purpose"),
            ),
            "child report",
            "done",
        ]
    )
    result = Agent(model=model, cwd=tmp_path, load_agent_files=False, hooks=hooks).run_sync("go")

    refused, ran = _results(result.messages)
    assert refused.is_error
    assert "no explorers today" in refused.text
    assert not ran.is_error
    assert [i.result for i in stopped] == ["child report"]
    assert [a.kind for a in result.agents] == ["main", "named"]
