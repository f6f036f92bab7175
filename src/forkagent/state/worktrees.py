"""Worktree isolation: each child with ``isolation: worktree`` edits its own checkout.

A child gets a git worktree under ``<repo>/.forkagent/worktrees/<slug>`` on a
new branch ``forkagent/<slug>``, started from the caller's ``HEAD``. When it
ends, a worktree with nothing in it (clean status, untracked files included,
and ``HEAD`` still at the base commit) is removed with its branch; anything
else is kept and reported, so no work is ever thrown away.

Git serialises changes to a repository's worktree list badly (``index.lock``,
ref locks), so adding and removing run one at a time per repository, with a
retry when another process holds a lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import secrets
import shutil
import socket
import time
import weakref
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from ..errors import ConfigurationError, ForkagentError

WORKTREES_DIR = Path(".forkagent") / "worktrees"
BRANCH_PREFIX = "forkagent/"
_EXCLUDE_LINE = "/.forkagent/worktrees/"
_META_FILE = "forkagent-worktree.json"
"""Kept in the worktree's git admin dir, so it never shows in ``git status``."""

_LOCK_MARKERS = ("index.lock", "could not lock", "cannot lock", "unable to create", ".lock'")
_RETRIES = 6
_UNSET_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


class WorktreeError(ForkagentError):
    """A git command on a worktree failed for a reason other than setup."""


@dataclass(frozen=True, slots=True)
class Worktree:
    """A child's checkout. ``repo`` is the working tree it was made from."""

    path: Path
    branch: str
    base_commit: str
    repo: Path

    def escapes(self, path: Path) -> bool:
        """A path of the parent's checkout outside this worktree: isolation would leak there."""
        target = path.resolve()
        return target.is_relative_to(self.repo) and not target.is_relative_to(self.path)

    def map_path(self, path: Path) -> Path:
        """The same place inside the worktree for a path of ``repo``; others unchanged."""
        try:
            return self.path / path.resolve().relative_to(self.repo)
        except ValueError:
            return path


@dataclass(frozen=True, slots=True)
class WorktreeResult:
    """What became of a worktree when its child ended."""

    kept: bool
    path: Path
    branch: str
    changed_files: tuple[str, ...] = ()
    new_commits: int = 0

    @property
    def summary(self) -> str:
        if not self.kept:
            return f"No changes: worktree {self.path} and branch {self.branch} were removed."
        parts = []
        if files := self.changed_files:
            more = f" and {len(files) - 10} more" if len(files) > 10 else ""
            parts.append(f"{len(files)} uncommitted file(s): {', '.join(files[:10])}{more}")
        if self.new_commits:
            parts.append(f"{self.new_commits} new commit(s)")
        what = "; ".join(parts) or "HEAD moved away from the base commit"
        return f"Changes kept in worktree {self.path} on branch {self.branch} ({what})."


async def create_worktree(repo_dir: Path, agent_id: str) -> Worktree:
    """A new worktree and branch for ``agent_id``, from ``repo_dir``'s ``HEAD``."""
    top = await _toplevel(repo_dir)
    base = await _head_commit(top)
    root = await _main_root(top)
    slug = _slug(agent_id)
    path = root / WORKTREES_DIR / slug
    branch = BRANCH_PREFIX + slug
    async with _lock_for(root):
        await _exclude_worktrees_dir(root)
        await _git_retrying(root, "worktree", "add", "-b", branch, str(path), base)
    _Meta(agent_id, branch, base, time.time(), os.getpid(), socket.gethostname()).write(path)
    return Worktree(path=path, branch=branch, base_commit=base, repo=top)


async def finish_worktree(worktree: Worktree) -> WorktreeResult:
    """Remove the worktree and its branch if the child changed nothing; else keep both."""
    result = await _inspect(worktree.path, worktree.branch, worktree.base_commit)
    if not result.kept:
        await _remove(await _main_root(worktree.path), worktree.path, worktree.branch)
    return result


async def sweep_worktrees(
    repo_dir: Path, older_than: timedelta | float = timedelta(hours=24)
) -> list[Path]:
    """Remove stale, unchanged worktrees left by children that never finished.

    A worktree is stale when it is older than ``older_than`` (seconds or a
    timedelta) and the process that made it is gone. Changed ones are kept.
    Registrations whose directory was deleted are pruned. Returns the removed paths.
    """
    root = await _main_root(await _toplevel(repo_dir))
    max_age = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
    async with _lock_for(root):
        await _git_retrying(root, "worktree", "prune")
    removed: list[Path] = []
    for path in await _listed_worktrees(root):
        meta = _Meta.read(path)
        if meta is None or time.time() - meta.created_at < max_age or meta.owner_alive():
            continue
        if not (await _inspect(path, meta.branch, meta.base_commit)).kept:
            await _remove(root, path, meta.branch)
            removed.append(path)
    return removed


@dataclass(frozen=True, slots=True)
class LeftWorktree:
    """A worktree still on disk, made for ``agent_id``."""

    path: Path
    branch: str
    agent_id: str


def left_worktree(cwd: Path | str) -> LeftWorktree | None:
    """The forkagent worktree an agent's ``cwd`` lies in, if it still exists.

    ``forkagent ps`` uses it to list what lost agents left behind; ``sweep_worktrees``
    (``forkagent prune``) removes the unchanged ones.
    """
    cwd = Path(cwd)
    for candidate in (cwd, *cwd.parents):
        if candidate.parent.parts[-len(WORKTREES_DIR.parts) :] == WORKTREES_DIR.parts:
            meta = _Meta.read(candidate) if candidate.is_dir() else None
            return LeftWorktree(candidate, meta.branch, meta.agent_id) if meta else None
    return None


def worktree_notice(worktree: Worktree) -> str:
    """What a child is told about where it works (part of its first message)."""
    return (
        f"You are working in an isolated git worktree at {worktree.path}, on branch "
        f"{worktree.branch}, checked out from commit {worktree.base_commit[:12]}. It is a "
        f"separate copy of the repository at {worktree.repo}: paths under {worktree.repo} "
        f"that appear in the task or the conversation refer to the same files under "
        f"{worktree.path}, so read and edit them there. Uncommitted changes in the original "
        f"checkout are not in this copy, and other agents cannot see your edits. When you "
        f"finish, the worktree is kept for review if you changed anything (commit your work "
        f"if that helps the reviewer) and removed if you changed nothing."
    )


async def _inspect(path: Path, branch: str, base: str) -> WorktreeResult:
    status = await _git(
        path, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"
    )
    files = tuple(line[3:] for line in status.splitlines() if line.strip())
    head = (await _git(path, "rev-parse", "HEAD")).strip()
    commits = int((await _git(path, "rev-list", "--count", f"{base}..{head}")).strip())
    kept = bool(files) or head != base
    return WorktreeResult(
        kept=kept, path=path, branch=branch, changed_files=files, new_commits=commits
    )


async def _remove(root: Path, path: Path, branch: str) -> None:
    """``--force`` only gets past ignored files (build output): the tree was checked clean."""
    async with _lock_for(root):
        await _git_retrying(root, "worktree", "remove", "--force", str(path))
        await _git_retrying(root, "branch", "-D", branch)


async def _listed_worktrees(root: Path) -> list[Path]:
    listing = await _git(root, "worktree", "list", "--porcelain")
    ours = root / WORKTREES_DIR
    paths = [
        Path(line[len("worktree ") :])
        for line in listing.splitlines()
        if line.startswith("worktree ")
    ]
    return [p for p in paths if p.parent == ours]


@dataclass(frozen=True, slots=True)
class _Meta:
    """What sweep needs to know about a worktree, written when it is made."""

    agent_id: str
    branch: str
    base_commit: str
    created_at: float
    pid: int
    host: str

    def write(self, path: Path) -> None:
        (_admin_dir(path) / _META_FILE).write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> _Meta | None:
        """``None`` for a worktree this module did not make (or a damaged record)."""
        try:
            return cls(**json.loads((_admin_dir(path) / _META_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None

    def owner_alive(self) -> bool:
        """True while the creating process runs (one on another host counts as gone)."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _admin_dir(path: Path) -> Path:
    """The worktree's private git dir, named by its ``.git`` file."""
    gitdir = (path / ".git").read_text(encoding="utf-8").removeprefix("gitdir:").strip()
    return path / gitdir if not Path(gitdir).is_absolute() else Path(gitdir)


def _slug(agent_id: str) -> str:
    """Safe as a directory and a branch name, and unique even for the same agent id."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", agent_id).strip("-")[:40] or "agent"
    return f"{stem}-{secrets.token_hex(4)}"


async def _main_root(top: Path) -> Path:
    """The main working tree (the first one git lists), where all worktrees are kept."""
    listing = await _git(top, "worktree", "list", "--porcelain")
    return Path(listing.splitlines()[0].removeprefix("worktree "))


async def _exclude_worktrees_dir(root: Path) -> None:
    """Keep the worktrees out of the parent's ``git status`` without touching .gitignore."""
    common = Path(
        (await _git(root, "rev-parse", "--path-format=absolute", "--git-common-dir")).strip()
    )
    exclude = common / "info" / "exclude"
    current = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    if _EXCLUDE_LINE not in current.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        separator = "" if current.endswith("\n") or not current else "\n"
        exclude.write_text(f"{current}{separator}{_EXCLUDE_LINE}\n", encoding="utf-8")


async def _toplevel(repo_dir: Path) -> Path:
    try:
        return Path((await _git(repo_dir, "rev-parse", "--show-toplevel")).strip())
    except WorktreeError:
        raise ConfigurationError(
            f"worktree isolation needs a git repository, and {repo_dir} is not inside one. "
            f"Run `git init` and make a first commit there, or remove `isolation: worktree` "
            f"from the agent definition."
        ) from None


async def _head_commit(top: Path) -> str:
    try:
        return (await _git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")).strip()
    except WorktreeError:
        raise ConfigurationError(
            f"worktree isolation needs a commit to start from, and the repository at {top} "
            f"has none yet. Make a first commit (for example `git commit --allow-empty -m init`)."
        ) from None


_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _lock_for(root: Path) -> asyncio.Lock:
    """One lock per repository and event loop (an asyncio lock belongs to one loop)."""
    per_loop = _locks.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(root.resolve(), asyncio.Lock())


async def _git_retrying(cwd: Path, *args: str) -> str:
    """A mutating command, retried with backoff while another process holds a git lock."""
    for attempt in range(_RETRIES - 1):
        try:
            return await _git(cwd, *args)
        except WorktreeError as exc:
            if not any(m in str(exc).lower() for m in _LOCK_MARKERS):
                raise
            await asyncio.sleep(0.05 * 2**attempt * (1 + random.random()))
    return await _git(cwd, *args)


async def _git(cwd: Path, *args: str) -> str:
    return (await run_git(cwd, *args)).decode(errors="replace")


async def run_git(
    cwd: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> bytes:
    """A git command's output as bytes (patches need not be text), in an environment that
    cannot point it at another repository; a failure is a ``WorktreeError``."""
    clean = {k: v for k, v in os.environ.items() if k not in _UNSET_GIT_ENV}
    clean |= {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=cwd,
            env=clean,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as exc:
        if shutil.which("git") is None:
            raise ConfigurationError(
                "worktree isolation needs git, which is not installed"
            ) from exc
        raise WorktreeError(f"cannot run git in {cwd}: {exc}") from exc
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip()
        raise WorktreeError(f"git {' '.join(args)} failed in {cwd}: {message}")
    return out
