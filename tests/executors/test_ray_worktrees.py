"""Worktree isolation with the children's tools on Ray workers: on a shared disk, or shipped."""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from forkagent import Agent, RunResult, ToolResultBlock, tool
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall, use_emulator

from ._git import git, init_repo
from ._ray import require_ray

require_ray()  # before the import below, which needs the extra
from forkagent.executors.ray import RayExecutor  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo", {"shared.txt": b"original\n"})


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
        assert executor.seeds_put == 0  # "auto": the workers see the driver's disk
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


# -- workers that cannot see the driver's worktree: it is shipped to them ------------------

WORKTREE_AT = re.compile(r"isolated git worktree at (\S+), on branch")
SLUG = re.compile(r"fork-\d+-[0-9a-f]+-[0-9a-f]{8}")
"""A fork's worktree and branch name: its agent id and a random part."""


class ForkPolicy:
    """The main agent forks an editor and a reader, each in its own worktree; the editor
    edits a file by its absolute path, writes a new one and runs ``pwd``; every body kept."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[str]] = {}
        self.roles: dict[str, str] = {}
        """Each fork's role, by agent id: told in its first request."""

    def __call__(self, request: EmulatedRequest) -> Reply:
        agent = request.agent
        # Which sibling leads the family (and streams, to release the others at its first
        # event) depends on which copy is ready first, on a worker as in process: ``stream``
        # says how a body is sent, not what it holds, so it is left out of the comparison.
        sent = {key: value for key, value in request.body.items() if key != "stream"}
        body = json.dumps(sent, sort_keys=True)
        last = json.dumps(request.body["messages"][-1])
        if agent is None or agent.kind == "main":
            if "tool_result" in last:
                return Reply(text="Both reported.")
            return Reply(tool_calls=(self._fork("edit the files"), self._fork("only look")))
        told = "edit" if "edit the files" in request.last_user_text else "look"
        role = self.roles.setdefault(agent.id, told)
        if "toolu_fork_" in last:  # the results of its own calls: it reports
            self.bodies.setdefault(role, []).append(body)
            return Reply(text="Done.")
        self.bodies[role] = [body]
        match = WORKTREE_AT.search(request.last_user_text)
        assert match is not None, "the fork is told where its worktree is"
        root = match.group(1)
        if role == "look":
            read = ToolCall("Read", {"file_path": f"{root}/shared.txt"}, id="toolu_fork_read")
            return Reply(tool_calls=(read,))
        edit = {"file_path": f"{root}/shared.txt", "old_string": "original", "new_string": "new"}
        return Reply(
            tool_calls=(
                ToolCall("Edit", edit, id="toolu_fork_edit"),
                ToolCall(
                    "Write", {"file_path": "notes.md", "content": "notes\n"}, id="toolu_fork_w"
                ),
                ToolCall("Bash", {"command": "pwd && cat shared.txt"}, id="toolu_fork_pwd"),
            )
        )

    @staticmethod
    def _fork(prompt: str) -> ToolCall:
        arguments = {"prompt": prompt, "fork": True, "isolation": "worktree"}
        return ToolCall("Agent", arguments, id=f"toolu_{prompt.split()[0]}")

    def normalised(self, role: str) -> list[str]:
        """The role's bodies with the worktree's random name made constant."""
        return [SLUG.sub("WORKTREE", body) for body in self.bodies[role]]


def worktrees(repo: Path) -> list[Path]:
    listing = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [
        Path(line[9:]) for line in listing if line.startswith("worktree ") and line[9:] != str(repo)
    ]


async def run_forks(repo: Path, policy: ForkPolicy, executor: RayExecutor | None) -> RunResult:
    agent = Agent(model="emulator:claude-sonnet-4-6", cwd=repo, load_agent_files=False)
    if executor is not None:
        agent.executor = executor
    with use_emulator(Emulator(policy=policy)):
        return await agent.run("Split the work.")


async def test_shipped_worktrees_bring_the_forks_work_back(repo: Path) -> None:
    here = ForkPolicy()
    await run_forks(repo, here, None)
    [local] = worktrees(repo)
    git(repo, "worktree", "remove", "--force", str(local))
    git(repo, "branch", "-D", git(repo, "branch", "--list", "forkagent/*").strip())

    there = ForkPolicy()
    async with RayExecutor(ship_worktrees=True) as executor:
        result = await run_forks(repo, there, executor)
        assert executor.seeds_put == 1  # both forks start from the same commit: one bundle

    forks = [a for a in result.agents if a.kind == "fork"]
    assert [a.status for a in forks] == ["completed", "completed"]
    assert all(a.executor == "ray" and a.worker_pid != os.getpid() for a in forks)
    [kept] = worktrees(repo)  # the reader's, unchanged, was removed
    assert (kept / "shared.txt").read_text() == "new\n"
    assert (kept / "notes.md").read_text() == "notes\n"
    assert sorted(git(kept, "status", "--porcelain").splitlines()) == [
        " M shared.txt",
        "?? notes.md",
    ]
    assert (repo / "shared.txt").read_text() == "original\n"  # the parent's checkout untouched
    # What the forks sent, tool results included (``pwd`` printed the worktree's path, not
    # the worker's copy), is what they sent in process.
    for role in ("edit", "look"):
        assert there.normalised(role) == here.normalised(role)
    assert str(kept) in there.bodies["edit"][-1]
    assert tempfile.gettempdir() + "/forkagent-worktrees" not in "".join(there.bodies["edit"])


async def test_a_cancelled_shipped_child_still_brings_back_what_it_did(
    repo: Path, tmp_path: Path
) -> None:
    """As locally, work done before the cancel is kept in the worktree, whole."""
    pidfile = tmp_path / "sleeper.pid"

    def policy(request: EmulatedRequest) -> Reply:
        if "toolu_w" not in json.dumps(request.body["messages"][-1]):
            write = {"file_path": "notes.md", "content": "before the cancel\n"}
            return Reply(tool_calls=(ToolCall("Write", write, id="toolu_w"),))
        sleep = {"command": f"echo $$ > {pidfile}; sleep 300"}
        return Reply(tool_calls=(ToolCall("Bash", sleep, id="toolu_sleep"),))

    agent = Agent(model="emulator:claude-sonnet-4-6", cwd=repo, load_agent_files=False)
    async with RayExecutor(ship_worktrees=True, workers=1) as executor:
        agent.executor = executor
        with use_emulator(Emulator(policy=policy)):
            async with agent.session() as session:
                child = await session.spawn(
                    "general-purpose", "Write, then wait.", background=True, isolation="worktree"
                )
                # Written by the command on the worker: there is no event here to wait on.
                while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                child.cancel()
                result = await child.wait()
    assert result.status == "cancelled"
    [kept] = worktrees(repo)
    assert result.worktree_path == str(kept)
    assert (kept / "notes.md").read_text() == "before the cancel\n"
    assert git(kept, "status", "--porcelain") == "?? notes.md\n"


async def test_a_shipped_child_whose_worker_dies_keeps_its_work(repo: Path, tmp_path: Path) -> None:
    """A worker restarted on the same node finds the child's copy where it left it."""
    marker = tmp_path / "died"

    @tool
    def flaky(text: str) -> str:
        """Kills its own worker process the first time, then answers."""
        if not marker.exists():
            marker.write_text("died once")
            os._exit(1)
        return f"survived: {text}"

    def policy(request: EmulatedRequest) -> Reply:
        agent = request.agent
        last = json.dumps(request.body["messages"][-1])
        if agent is None or agent.kind == "main":
            if "tool_result" in last:
                return Reply(text="Reported.")
            fork = {"prompt": "write, then call flaky", "fork": True, "isolation": "worktree"}
            return Reply(tool_calls=(ToolCall("Agent", fork, id="toolu_fork"),))
        if "toolu_fork_flaky" in last:
            return Reply(text="Done.")
        if "toolu_fork_write" in last:
            return Reply(tool_calls=(ToolCall("flaky", {"text": "x"}, id="toolu_fork_flaky"),))
        write = {"file_path": "notes.md", "content": "before the crash\n"}
        return Reply(tool_calls=(ToolCall("Write", write, id="toolu_fork_write"),))

    agent = Agent(
        model="emulator:claude-sonnet-4-6", cwd=repo, tools=(flaky,), load_agent_files=False
    )
    async with RayExecutor(ship_worktrees=True, workers=1) as executor:
        agent.executor = executor
        with use_emulator(Emulator(policy=policy)):
            result = await agent.run("Go.")
    [fork] = [a for a in result.agents if a.kind == "fork"]
    assert marker.exists()  # its worker did die
    assert fork.status == "completed"
    [kept] = worktrees(repo)
    assert (kept / "notes.md").read_text() == "before the crash\n"
