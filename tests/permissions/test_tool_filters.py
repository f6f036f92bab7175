"""Tool filters, including the memory-directory filter's path handling."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from forkagent.errors import ConfigurationError
from forkagent.messages import JsonValue
from forkagent.permissions import (
    AllowAll,
    AllowTools,
    DenyTools,
    FilterDecision,
    MemoryDirFilter,
    ReadOnlyFilter,
    ToolFilter,
    all_of,
    any_of,
)


def test_decision_is_frozen_and_has_helpers() -> None:
    assert FilterDecision.allow() == FilterDecision(True, "")
    denied = FilterDecision.deny("no")
    assert (denied.allowed, denied.reason) == (False, "no")
    with pytest.raises(dataclasses.FrozenInstanceError):
        denied.allowed = True  # type: ignore[misc]


@pytest.mark.parametrize(
    "tool_filter",
    [AllowAll(), AllowTools(["Read"]), DenyTools(["Read"]), ReadOnlyFilter()],
)
def test_provided_filters_satisfy_the_protocol(tool_filter: ToolFilter) -> None:
    assert isinstance(tool_filter, ToolFilter)


def test_allow_all() -> None:
    assert AllowAll().check("Anything", {"x": 1}).allowed


def test_allow_and_deny_tools_by_name() -> None:
    only = AllowTools(["Read", "Grep"])
    assert only.check("Read", {}).allowed
    refused = only.check("Write", {})
    assert not refused.allowed
    assert "Grep, Read" in refused.reason
    assert not DenyTools(["Agent"]).check("Agent", {}).allowed
    assert DenyTools(["Agent"]).check("Read", {}).allowed


def test_all_of_gives_the_first_denial_and_any_of_the_first_allowance() -> None:
    no_write = DenyTools(["Write"])
    no_agent = DenyTools(["Agent"])
    both = all_of(no_write, no_agent)
    assert both.check("Read", {}).allowed
    assert "`Agent`" in both.check("Agent", {}).reason
    either = any_of(AllowTools(["Read"]), AllowTools(["Write"]))
    assert either.check("Write", {}).allowed
    refused = either.check("Bash", {})
    assert not refused.allowed
    assert refused.reason.count("not available") == 2


class TestReadOnlyFilter:
    filter = ReadOnlyFilter()

    @pytest.mark.parametrize("name", ["Read", "Glob", "Grep"])
    def test_read_tools_pass(self, name: str) -> None:
        assert self.filter.check(name, {"file_path": "/etc/passwd"}).allowed

    def test_read_only_shell_passes(self) -> None:
        assert self.filter.check("Bash", {"command": "git log --oneline -5"}).allowed

    def test_writing_shell_is_denied_with_the_classifier_reason(self) -> None:
        decision = self.filter.check("Bash", {"command": "find . -delete"})
        assert not decision.allowed
        assert "find -delete" in decision.reason
        assert "may only read" in decision.reason

    @pytest.mark.parametrize("args", [{}, {"command": ["ls"]}, {"arguments": {"command": "ls"}}])
    def test_shell_needs_a_top_level_command_string(self, args: dict[str, JsonValue]) -> None:
        assert not self.filter.check("Bash", args).allowed

    @pytest.mark.parametrize("name", ["Write", "Edit", "Agent", "WebFetch"])
    def test_other_tools_are_denied_saying_what_is_allowed(self, name: str) -> None:
        decision = self.filter.check(name, {"file_path": "/tmp/x"})
        assert not decision.allowed
        assert "`Read`" in decision.reason
        assert "read-only `Bash`" in decision.reason

    def test_extra_read_tools(self) -> None:
        assert ReadOnlyFilter(read_tools={"Read", "Search"}).check("Search", {}).allowed


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    (tmp_path / "mem" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return tmp_path / "mem"


def write(tool_filter: MemoryDirFilter, path: str | Path, tool: str = "Write") -> FilterDecision:
    return tool_filter.check(tool, {"file_path": str(path), "content": "x"})


class TestMemoryDirFilter:
    def test_writes_inside_the_directory_pass(self, memory: Path) -> None:
        tool_filter = MemoryDirFilter(memory)
        assert write(tool_filter, memory / "notes.md").allowed
        assert write(tool_filter, memory / "sub" / "deep.md", tool="Edit").allowed

    def test_an_existing_file_inside_passes(self, memory: Path) -> None:
        (memory / "old.md").write_text("x")
        assert write(MemoryDirFilter(memory), memory / "old.md", tool="Edit").allowed

    @pytest.mark.parametrize("name", ["Read", "Glob", "Grep"])
    def test_read_tools_pass_anywhere(self, memory: Path, name: str) -> None:
        assert MemoryDirFilter(memory).check(name, {"file_path": "/etc/hosts"}).allowed

    def test_shell_only_when_read_only(self, memory: Path) -> None:
        tool_filter = MemoryDirFilter(memory)
        assert tool_filter.check("Bash", {"command": f"ls {memory}"}).allowed
        assert not tool_filter.check("Bash", {"command": f"touch {memory}/x"}).allowed
        assert not tool_filter.check("Bash", {"command": f"echo x > {memory}/x"}).allowed

    def test_outside_is_denied_saying_what_is_allowed(self, memory: Path) -> None:
        decision = write(MemoryDirFilter(memory), memory.parent / "outside" / "x.md")
        assert not decision.allowed
        assert "outside" in decision.reason
        assert str(memory) in decision.reason
        assert "`Read`" in decision.reason

    @pytest.mark.parametrize("path", ["notes.md", "mem/notes.md", "./notes.md", "~/notes.md"])
    def test_relative_paths_are_denied(self, memory: Path, path: str) -> None:
        decision = write(MemoryDirFilter(memory), path)
        assert not decision.allowed
        assert "absolute" in decision.reason

    def test_dot_dot_is_denied_even_when_it_lands_inside(self, memory: Path) -> None:
        tool_filter = MemoryDirFilter(memory)
        assert not write(tool_filter, f"{memory}/../outside/x.md").allowed
        assert "`..`" in write(tool_filter, f"{memory}/sub/../x.md").reason

    def test_missing_parent_is_denied(self, memory: Path) -> None:
        decision = write(MemoryDirFilter(memory), memory / "nope" / "x.md")
        assert not decision.allowed
        assert "does not exist" in decision.reason

    def test_symlinked_directory_inside_pointing_out(self, memory: Path) -> None:
        (memory / "escape").symlink_to(memory.parent / "outside")
        assert not write(MemoryDirFilter(memory), memory / "escape" / "x.md").allowed

    def test_symlinked_file_inside_pointing_out(self, memory: Path) -> None:
        target = memory.parent / "outside" / "victim.md"
        target.write_text("x")
        (memory / "link.md").symlink_to(target)
        assert not write(MemoryDirFilter(memory), memory / "link.md", tool="Edit").allowed

    def test_dangling_symlink_pointing_out(self, memory: Path) -> None:
        (memory / "new.md").symlink_to(memory.parent / "outside" / "new.md")
        assert not write(MemoryDirFilter(memory), memory / "new.md").allowed

    def test_symlink_inside_pointing_inside_passes(self, memory: Path) -> None:
        (memory / "alias").symlink_to(memory / "sub")
        assert write(MemoryDirFilter(memory), memory / "alias" / "x.md").allowed

    def test_directory_swapped_for_a_symlink_after_construction(self, memory: Path) -> None:
        tool_filter = MemoryDirFilter(memory)
        memory.rename(memory.parent / "moved")
        memory.symlink_to(memory.parent / "outside")
        assert not write(tool_filter, memory / "x.md").allowed

    def test_directory_given_through_a_symlink(self, memory: Path) -> None:
        link = memory.parent / "link-to-mem"
        link.symlink_to(memory)
        tool_filter = MemoryDirFilter(link)
        assert tool_filter.memory_dir == memory.resolve()
        assert write(tool_filter, link / "x.md").allowed
        assert write(tool_filter, memory / "x.md").allowed

    @pytest.mark.parametrize("key", ["arguments", "input", "params"])
    @pytest.mark.parametrize("name", ["Write", "Read", "Bash"])
    def test_envelope_wrapped_arguments_are_denied(self, memory: Path, key: str, name: str) -> None:
        inner: dict[str, JsonValue] = {
            "file_path": str(memory / "x.md"),
            "command": "ls",
            "content": "x",
        }
        wrapped: list[dict[str, JsonValue]] = [{key: inner}, {**inner, key: {}}]
        for args in wrapped:
            decision = MemoryDirFilter(memory).check(name, args)
            assert not decision.allowed
            assert "top level" in decision.reason

    @pytest.mark.parametrize("value", [None, 3, "", ["/x"]])
    def test_file_path_must_be_a_string(self, memory: Path, value: JsonValue) -> None:
        assert not MemoryDirFilter(memory).check("Write", {"file_path": value}).allowed

    def test_nul_byte_and_the_directory_itself_are_denied(self, memory: Path) -> None:
        tool_filter = MemoryDirFilter(memory)
        assert not write(tool_filter, f"{memory}/x\0.md").allowed
        assert not write(tool_filter, memory).allowed

    def test_other_tools_are_denied(self, memory: Path) -> None:
        assert not MemoryDirFilter(memory).check("Agent", {"prompt": "x"}).allowed

    def test_directory_must_exist(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigurationError, match="create it first"):
            MemoryDirFilter(tmp_path / "missing")
        (tmp_path / "file").write_text("x")
        with pytest.raises(ConfigurationError, match="not a directory"):
            MemoryDirFilter(tmp_path / "file")

    def test_accepts_path_like(self, memory: Path) -> None:
        tool_filter = MemoryDirFilter(os.fspath(memory))
        assert write(tool_filter, memory / "x.md").allowed


def test_a_server_wildcard_names_every_tool_of_that_mcp_server() -> None:
    from forkagent.agents import AgentDefinition
    from forkagent.permissions import AllowTools, DenyTools

    allow = AllowTools(["Read", "mcp__orders__*"])
    assert allow.check("mcp__orders__find_order", {}).allowed
    assert not allow.check("mcp__billing__charge", {}).allowed
    assert not DenyTools(["mcp__orders__*"]).check("mcp__orders__cancel_order", {}).allowed
    clerk = AgentDefinition(name="clerk", description="d", tools=("mcp__orders__*",))
    assert clerk.allows_tool("mcp__orders__find_order")
    assert not clerk.allows_tool("Write")
