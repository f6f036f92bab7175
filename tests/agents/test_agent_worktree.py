from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from forkagent.errors import ConfigurationError
from forkagent.state.worktrees import (
    _META_FILE,
    WorktreeResult,
    create_worktree,
    finish_worktree,
    sweep_worktrees,
    worktree_notice,
)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit holding ``shared.txt``."""
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


def branches(repo: Path) -> set[str]:
    return set(git(repo, "branch", "--format=%(refname:short)").split())


def registered(repo: Path) -> set[Path]:
    listing = git(repo, "worktree", "list", "--porcelain").splitlines()
    return {
        Path(line.removeprefix("worktree ")) for line in listing if line.startswith("worktree ")
    }


async def test_eight_children_edit_the_same_file_without_interfering(repo: Path) -> None:
    """Even children change shared.txt (one commits, one only adds a file); odd ones don't."""

    async def child(i: int) -> WorktreeResult:
        wt = await create_worktree(repo, f"agent-{i}")
        assert (wt.path / "shared.txt").read_text() == "original\n"
        if i % 2 == 0:
            (wt.path / "shared.txt").write_text(f"child {i}\n")
        if i == 2:
            git(wt.path, "commit", "-qam", "child 2 work")
        if i == 3:
            (wt.path / "notes.md").write_text("untracked but real work\n")
        await asyncio.sleep(0)
        return await finish_worktree(wt)

    results = await asyncio.gather(*(child(i) for i in range(8)))

    kept = {i for i, r in enumerate(results) if r.kept}
    assert kept == {0, 2, 3, 4, 6}
    assert len({r.path for r in results}) == len({r.branch for r in results}) == 8
    for i, result in enumerate(results):
        if i in kept:
            assert result.path.is_dir()
            assert result.branch in branches(repo)
            assert str(result.path) in result.summary
            assert result.branch in result.summary
        else:
            assert not result.path.exists()
            assert result.branch not in branches(repo)
            assert "removed" in result.summary
    for i in (0, 2, 4, 6):
        assert (results[i].path / "shared.txt").read_text() == f"child {i}\n"
    assert (results[2].changed_files, results[2].new_commits) == ((), 1)
    assert results[3].changed_files == ("notes.md",)
    assert results[0].changed_files == ("shared.txt",)

    assert (repo / "shared.txt").read_text() == "original\n"
    assert git(repo, "status", "--porcelain") == "", (
        "worktrees must not show in the parent's status"
    )
    assert registered(repo) == {repo, *(results[i].path for i in kept)}


async def test_worktree_from_a_subdirectory_maps_paths_and_explains_itself(repo: Path) -> None:
    (repo / "pkg").mkdir()
    wt = await create_worktree(repo / "pkg", "sub/agent: 1")
    try:
        assert wt.repo == repo
        assert wt.path.parent == repo / ".forkagent" / "worktrees"
        assert wt.branch == f"forkagent/{wt.path.name}"
        assert wt.path.name.startswith("sub-agent-1-")
        assert wt.base_commit == git(repo, "rev-parse", "HEAD").strip()
        assert wt.map_path(repo / "pkg") == wt.path / "pkg"
        assert wt.map_path(Path("/elsewhere")) == Path("/elsewhere")
        notice = worktree_notice(wt)
        for fact in (str(wt.path), wt.branch, str(repo), wt.base_commit[:12]):
            assert fact in notice
    finally:
        assert not (await finish_worktree(wt)).kept


async def test_a_child_of_a_child_lands_in_the_main_repository(repo: Path) -> None:
    outer = await create_worktree(repo, "outer")
    inner = await create_worktree(outer.path, "inner")
    assert inner.path.parent == repo / ".forkagent" / "worktrees"
    assert inner.repo == outer.path
    assert not (await finish_worktree(inner)).kept
    assert not (await finish_worktree(outer)).kept
    assert registered(repo) == {repo}


async def test_outside_a_git_repository_is_a_clear_error(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ConfigurationError, match="needs a git repository") as info:
        await create_worktree(plain, "a")
    assert "git init" in str(info.value)


async def test_a_repository_without_commits_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(ConfigurationError, match="first commit"):
        await create_worktree(empty, "a")


def _age(path: Path, *, seconds: float, dead_owner: bool) -> None:
    """Pretend the worktree was made ``seconds`` ago by a process that may have died."""
    gitdir = Path((path / ".git").read_text().removeprefix("gitdir:").strip())
    meta_file = gitdir / _META_FILE
    meta = json.loads(meta_file.read_text())
    meta["created_at"] -= seconds
    if dead_owner:
        gone = subprocess.Popen(["true"])
        gone.wait()
        meta["pid"] = gone.pid
    meta_file.write_text(json.dumps(meta))


async def test_sweep_removes_only_stale_unchanged_orphans(repo: Path) -> None:
    stale, dirty, young, alive, deleted = [
        await create_worktree(repo, name)
        for name in ("stale", "dirty", "young", "alive", "deleted")
    ]
    (dirty.path / "shared.txt").write_text("work in progress\n")
    for wt in (stale, dirty, deleted):
        _age(wt.path, seconds=7200, dead_owner=True)
    _age(young.path, seconds=60, dead_owner=True)
    _age(alive.path, seconds=7200, dead_owner=False)
    shutil.rmtree(deleted.path)

    removed = await sweep_worktrees(repo, older_than=3600)

    assert removed == [stale.path]
    assert not stale.path.exists()
    assert stale.branch not in branches(repo)
    assert registered(repo) == {repo, dirty.path, young.path, alive.path}
    assert deleted.branch in branches(repo), "a branch may hold commits: never deleted by a prune"
    assert (dirty.path / "shared.txt").read_text() == "work in progress\n"
