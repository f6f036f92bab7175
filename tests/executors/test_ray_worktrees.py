"""Worktree isolation with the children's tools on Ray workers (one machine: a shared disk)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from forkagent import Agent, ToolResultBlock
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall, use_emulator

from ._ray import require_ray

require_ray()  # before the import below, which needs the extra
from forkagent.executors.ray import RayExecutor  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_cluster")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "commit.gpgsign", "false")
    (root / "shared.txt").write_text("original\n")
    git(root, "add", "shared.txt")
    git(root, "commit", "-q", "-m", "init")
    return root


def _isolated(prompt: str) -> ToolCall:
    arguments = {"prompt": prompt, "subagent_type": "general-purpose", "isolation": "worktree"}
    return ToolCall("Agent", arguments, id=f"toolu_{prompt.split()[0]}")


def _policy(request: EmulatedRequest) -> Reply:
    """The main agent starts a writer and a reader, each in its own worktree."""
    agent = request.agent
    last = json.dumps(request.body["messages"][-1])
    if agent is None or agent.kind == "main":
        if "tool_result" in last:
            return Reply(text="Both reported.")
        return Reply(tool_calls=(_isolated("write the notes"), _isolated("read only")))
    if "write the notes" in request.last_user_text and "tool_result" not in last:
        call = ToolCall("Write", {"file_path": "notes.md", "content": "from a worker\n"})
        return Reply(tool_calls=(call,))
    return Reply(text="Done.")


async def test_isolated_children_on_workers_keep_only_real_work(repo: Path) -> None:
    agent = Agent(model="emulator:claude-sonnet-4-6", cwd=repo, load_agent_files=False)
    async with RayExecutor() as executor:
        agent.executor = executor
        with use_emulator(Emulator(policy=_policy)):
            result = await agent.run("Split the work.")
    named = [a for a in result.agents if a.kind == "named"]
    assert [a.status for a in named] == ["completed", "completed"]
    assert all(a.executor == "ray" for a in named)
    worktrees = [
        Path(line[9:])
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    [kept] = [path for path in worktrees if path != repo]  # the reader's was removed
    assert (kept / "notes.md").read_text() == "from a worker\n"
    assert not (repo / "notes.md").exists()  # the parent's checkout is untouched
    reported = [
        b.text for m in result.messages for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert sum(f"Its changes are kept in worktree {kept}" in text for text in reported) == 1
