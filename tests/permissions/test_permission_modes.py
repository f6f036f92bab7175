"""Permission modes, the handler callback, and deriving a child's policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent.permissions import (
    DenyTools,
    PermissionDecision,
    PermissionPolicy,
    PermissionRequest,
    ReadOnlyFilter,
)
from forkagent.tools.base import ToolContext

from ._fakes import FakeTool

READ = FakeTool("Read", read_only=True)
WRITE = FakeTool("Write")
EDIT = FakeTool("Edit")
BASH = FakeTool("Bash")
DEPLOY = FakeTool("Deploy")


class Recorder:
    """A sync handler that answers ``answer`` and keeps every request."""

    def __init__(self, answer: PermissionDecision | bool = True) -> None:
        self.answer = answer
        self.requests: list[PermissionRequest] = []

    def __call__(self, request: PermissionRequest) -> PermissionDecision | bool:
        self.requests.append(request)
        return self.answer


async def test_default_mode_asks_the_handler_for_anything_not_read_only(ctx: ToolContext) -> None:
    handler = Recorder(True)
    policy = PermissionPolicy("default", handler)
    assert (await policy.authorize(READ, {"file_path": "x"}, ctx)).allowed
    assert (await policy.authorize(BASH, {"command": "git status"}, ctx)).allowed
    assert handler.requests == []
    assert (await policy.authorize(BASH, {"command": "rm -rf build"}, ctx)).allowed
    (request,) = handler.requests
    assert (request.agent_id, request.tool_name) == ("child-1", "Bash")
    assert request.args == {"command": "rm -rf build"}
    assert "`rm`" in request.reason


async def test_a_denial_reaches_the_model_with_the_handlers_reason(ctx: ToolContext) -> None:
    policy = PermissionPolicy("default", Recorder(PermissionDecision.deny("not on Fridays")))
    decision = await policy.authorize(DEPLOY, {}, ctx)
    assert not decision.allowed
    assert "not on Fridays" in decision.reason
    assert not (
        await PermissionPolicy("default", Recorder(False)).authorize(WRITE, {}, ctx)
    ).allowed


async def test_default_mode_without_handler_denies_and_says_how_to_allow(ctx: ToolContext) -> None:
    decision = await PermissionPolicy().authorize(WRITE, {"file_path": "a"}, ctx)
    assert not decision.allowed
    assert "handler" in decision.reason
    assert "bypass" in decision.reason


async def test_async_handler(ctx: ToolContext) -> None:
    seen: list[str] = []

    async def handler(request: PermissionRequest) -> PermissionDecision:
        seen.append(request.tool_name)
        return PermissionDecision.allow()

    assert (await PermissionPolicy("default", handler).authorize(DEPLOY, {}, ctx)).allowed
    assert seen == ["Deploy"]


async def test_a_failing_handler_denies(ctx: ToolContext) -> None:
    def handler(request: PermissionRequest) -> bool:
        raise RuntimeError("terminal gone")

    decision = await PermissionPolicy("default", handler).authorize(WRITE, {}, ctx)
    assert not decision.allowed
    assert "terminal gone" in decision.reason


async def test_accept_edits_allows_edits_inside_the_cwd_only(ctx: ToolContext) -> None:
    handler = Recorder(False)
    policy = PermissionPolicy("accept_edits", handler)
    inside = str(ctx.cwd / "src" / "a.py")
    assert (await policy.authorize(WRITE, {"file_path": inside}, ctx)).allowed
    assert (await policy.authorize(EDIT, {"file_path": "relative/b.py"}, ctx)).allowed
    assert handler.requests == []
    outside = str(ctx.cwd.parent / "elsewhere.py")
    for path in (outside, f"{ctx.cwd}/../elsewhere.py", "../elsewhere.py"):
        assert not (await policy.authorize(WRITE, {"file_path": path}, ctx)).allowed
    assert not (await policy.authorize(BASH, {"command": "make"}, ctx)).allowed
    assert (await policy.authorize(BASH, {"command": "ls"}, ctx)).allowed
    assert [r.tool_name for r in handler.requests] == ["Write", "Write", "Write", "Bash"]


async def test_accept_edits_follows_symlinks_out_of_the_cwd(
    ctx: ToolContext, tmp_path: Path
) -> None:
    (ctx.cwd / "out").symlink_to(tmp_path)
    policy = PermissionPolicy("accept_edits")
    assert not (await policy.authorize(WRITE, {"file_path": "out/x.py"}, ctx)).allowed


async def test_plan_mode_reads_but_never_writes(ctx: ToolContext) -> None:
    handler = Recorder(True)
    policy = PermissionPolicy("plan", handler)
    assert (await policy.authorize(READ, {}, ctx)).allowed
    assert (await policy.authorize(BASH, {"command": "grep -rn foo ."}, ctx)).allowed
    for tool, args in ((WRITE, {"file_path": "a"}), (BASH, {"command": "sed -i s/a/b/ f"})):
        decision = await policy.authorize(tool, args, ctx)
        assert not decision.allowed
        assert "plan mode" in decision.reason
    assert handler.requests == []


async def test_bypass_allows_everything_but_the_filter_still_applies(ctx: ToolContext) -> None:
    policy = PermissionPolicy("bypass", filter=DenyTools(["Deploy"]))
    assert (await policy.authorize(BASH, {"command": "rm -rf /tmp/x"}, ctx)).allowed
    assert not (await policy.authorize(DEPLOY, {}, ctx)).allowed


async def test_the_filter_is_checked_before_the_handler(ctx: ToolContext) -> None:
    handler = Recorder(True)
    policy = PermissionPolicy("default", handler, ReadOnlyFilter())
    decision = await policy.authorize(WRITE, {"file_path": "a"}, ctx)
    assert not decision.allowed
    assert "may only read" in decision.reason
    assert handler.requests == []


async def test_bubble_sends_a_childs_questions_to_the_parents_handler(ctx: ToolContext) -> None:
    parent_handler = Recorder(True)
    parent = PermissionPolicy("default", parent_handler)
    child = parent.for_child(mode="bubble")
    assert child.mode == "bubble"
    assert child.handler is parent_handler
    assert (await child.authorize(WRITE, {"file_path": "a"}, ctx)).allowed
    assert [(r.agent_id, r.tool_name) for r in parent_handler.requests] == [("child-1", "Write")]


def test_for_child_inherits_without_a_mode() -> None:
    handler = Recorder()
    parent = PermissionPolicy("accept_edits", handler)
    assert parent.for_child() == PermissionPolicy("accept_edits", handler, None)


async def test_an_explicit_non_bubble_mode_has_no_one_to_ask(ctx: ToolContext) -> None:
    child = PermissionPolicy("bypass", Recorder(True)).for_child(mode="default")
    assert child.handler is None
    decision = await child.authorize(WRITE, {"file_path": "a"}, ctx)
    assert not decision.allowed
    assert "bubble" in decision.reason


@pytest.mark.parametrize(
    ("parent", "asked", "expected"),
    [
        ("plan", "bypass", "plan"),
        ("default", "accept_edits", "default"),
        ("bubble", "bypass", "bubble"),
        ("bypass", "plan", "plan"),
        ("accept_edits", "default", "default"),
    ],
)
def test_a_child_never_gets_more_latitude_than_its_parent(
    parent: str, asked: str, expected: str
) -> None:
    policy = PermissionPolicy(parent)  # type: ignore[arg-type]
    assert policy.for_child(mode=asked).mode == expected  # type: ignore[arg-type]


async def test_child_filters_add_up(ctx: ToolContext) -> None:
    parent = PermissionPolicy("bypass", filter=ReadOnlyFilter())
    child = parent.for_child(filter=DenyTools(["Grep"]))
    assert (await child.authorize(READ, {}, ctx)).allowed
    assert not (await child.authorize(FakeTool("Grep", read_only=True), {}, ctx)).allowed
    assert not (await child.authorize(WRITE, {"file_path": "a"}, ctx)).allowed
    assert PermissionPolicy().for_child(filter=ReadOnlyFilter()).filter is not None
