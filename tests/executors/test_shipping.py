"""Shipping a worktree to a worker and its work back, with real git (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent import TextBlock
from forkagent.errors import ToolError
from forkagent.executors._shipping import Changes, PathMap, collect, pack, replay, state, unpack
from forkagent.messages import JsonValue
from forkagent.state.worktrees import WorktreeError

from ._git import git, init_repo

BINARY = bytes(range(256))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {
        "shared.txt": b"original\n",
        "gone.txt": b"to delete\n",
        "image.bin": BINARY,
        ".gitignore": b"*.log\n",
    }
    return init_repo(tmp_path / "repo", files)


async def ship(repo: Path, dest: Path) -> str:
    head, patch = await state(repo)
    await unpack(await pack(repo, head, patch), "forkagent/child", dest)
    return head


@pytest.fixture
async def shipped(repo: Path, tmp_path: Path) -> tuple[Path, Path, str]:
    """A child's worktree, its copy with one commit of the child's, and where both started."""
    worktree = tmp_path / "worktree"
    git(repo, "worktree", "add", "-q", "-b", "forkagent/child", str(worktree))
    copy = tmp_path / "copy"
    start = await ship(worktree, copy)
    (copy / "committed.txt").write_text("in a commit\n")
    git(copy, "add", "committed.txt")
    git(copy, "commit", "-q", "-m", "child's commit")
    return worktree, copy, start


async def test_a_copy_has_the_commit_and_the_uncommitted_changes_not_the_ignored(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "shared.txt").write_text("edited, not committed\n")
    (repo / "untracked.txt").write_text("new\n")
    (repo / "build.log").write_text("ignored\n")
    copy = tmp_path / "copy"
    head = await ship(repo, copy)
    assert git(copy, "rev-parse", "HEAD").strip() == head
    assert git(copy, "branch", "--show-current").strip() == "forkagent/child"
    assert (copy / "shared.txt").read_text() == "edited, not committed\n"
    assert (copy / "untracked.txt").read_text() == "new\n"
    assert (copy / "image.bin").read_bytes() == BINARY
    assert not (copy / "build.log").exists()
    assert git(repo, "status", "--porcelain") == " M shared.txt\n?? untracked.txt\n"  # index kept


async def test_work_in_a_copy_comes_back_whole(shipped: tuple[Path, Path, str]) -> None:
    worktree, copy, start = shipped
    (copy / "shared.txt").write_text("changed\n")
    (copy / "gone.txt").unlink()
    (copy / "image.bin").write_bytes(BINARY[::-1])
    (copy / "new.bin").write_bytes(b"\x00\xff" * 50)
    (copy / "debug.log").write_text("ignored stays behind\n")

    await replay(worktree, start, await collect(copy, start))

    assert git(worktree, "log", "--format=%s", "-1").strip() == "child's commit"
    assert (worktree / "committed.txt").read_text() == "in a commit\n"
    assert (worktree / "shared.txt").read_text() == "changed\n"
    assert not (worktree / "gone.txt").exists()
    assert (worktree / "image.bin").read_bytes() == BINARY[::-1]
    assert (worktree / "new.bin").read_bytes() == b"\x00\xff" * 50
    assert not (worktree / "debug.log").exists()
    status = sorted(git(worktree, "status", "--porcelain").splitlines())
    assert status == [" D gone.txt", " M image.bin", " M shared.txt", "?? new.bin"]


async def test_an_untouched_copy_brings_nothing_back(repo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    start = await ship(repo, copy)
    changes = await collect(copy, start)
    assert changes == Changes(start, b"", b"")


async def test_a_failed_replay_leaves_the_worktree_as_it_was(
    shipped: tuple[Path, Path, str],
) -> None:
    worktree, copy, start = shipped
    (copy / "shared.txt").write_text("changed\n")
    made = await collect(copy, start)
    # The commit comes back, then the patch fails: the commit must not stay either.
    broken = Changes(made.head, made.bundle, made.patch.replace(b"-original", b"-other"))

    with pytest.raises(WorktreeError, match="git apply"):
        await replay(worktree, start, broken)

    assert git(worktree, "rev-parse", "HEAD").strip() == start
    assert git(worktree, "status", "--porcelain") == ""
    assert not (worktree / "committed.txt").exists()


def test_paths_swap_both_ways() -> None:
    paths = PathMap("/repo/.forkagent/worktrees/fork-1", "/tmp/forkagent-worktrees/fork-1")
    args: JsonValue = {"file_path": "/repo/.forkagent/worktrees/fork-1/a.py", "n": 3, "list": ["x"]}
    assert paths.to_worker(args) == {
        "file_path": "/tmp/forkagent-worktrees/fork-1/a.py",
        "n": 3,
        "list": ["x"],
    }
    assert paths.to_driver("/tmp/forkagent-worktrees/fork-1/a.py:1: x") == (
        "/repo/.forkagent/worktrees/fork-1/a.py:1: x"
    )
    assert paths.to_driver([TextBlock(text="in /tmp/forkagent-worktrees/fork-1")]) == [
        TextBlock(text="in /repo/.forkagent/worktrees/fork-1")
    ]
    error = paths.error(ToolError("no file /tmp/forkagent-worktrees/fork-1/b.py"))
    assert str(error) == "no file /repo/.forkagent/worktrees/fork-1/b.py"
