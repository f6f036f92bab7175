"""Shipping a child's worktree to a worker that cannot see it, and its work back.

The driver packs the worktree as it stands when the child starts: a git bundle
of its ``HEAD`` and a binary patch of everything not committed (untracked
files included, ignored ones not). A worker makes a clone from them in a
directory of its own, the child's tools work there, and when the child ends the
worker packs what changed the same way (a bundle of new commits, a patch of
the rest). The driver replays that on the child's worktree, all of it or
nothing, so the worktree's kept/removed rules see what a local child left.

The model never sees the worker's directory: ``PathMap`` swaps the two roots
in tool arguments on the way out and in tool output on the way back.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ToolError
from ..messages import JsonValue, TextBlock
from ..state.worktrees import WorktreeError, run_git
from ..tools.base import ToolOutput


@dataclass(frozen=True, slots=True)
class Seed:
    """A worktree's starting state: ``head`` (in ``bundle``) plus ``patch`` on top, and the
    repository's ``user.*`` settings, so the child commits as it would locally."""

    head: str
    bundle: bytes
    patch: bytes
    identity: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Changes:
    """What a child did to its copy: ``head`` now (new commits in ``bundle``) and ``patch``."""

    head: str
    bundle: bytes
    patch: bytes


@dataclass(frozen=True, slots=True)
class PathMap:
    """The child's worktree root on the driver and the root of its copy on the worker."""

    driver: str
    worker: str

    def to_worker(self, value: JsonValue) -> JsonValue:
        """Tool arguments with the driver's root swapped for the worker's, at any depth."""
        if isinstance(value, str):
            return self.worker_text(value)
        if isinstance(value, list):
            return [self.to_worker(v) for v in value]
        if isinstance(value, dict):
            return {k: self.to_worker(v) for k, v in value.items()}
        return value

    def to_driver(self, output: ToolOutput) -> ToolOutput:
        """Tool output as the model would read it from a local run."""
        if isinstance(output, str):
            return self.driver_text(output)
        return [
            TextBlock(text=self.driver_text(b.text)) if isinstance(b, TextBlock) else b
            for b in output
        ]

    def error(self, error: ToolError) -> ToolError:
        return ToolError(self.driver_text(str(error)))

    def worker_text(self, text: str) -> str:
        return text.replace(self.driver, self.worker)

    def driver_text(self, text: str) -> str:
        return text.replace(self.worker, self.driver)


# -- the driver's side ---------------------------------------------------------


async def state(worktree: Path) -> tuple[str, bytes]:
    """The worktree as it stands: its ``HEAD`` and a patch of its uncommitted changes."""
    return await _head(worktree), await _patch(worktree)


async def pack(worktree: Path, head: str, patch: bytes) -> Seed:
    """``state`` with ``HEAD``'s history bundled: what a worker clones."""
    return Seed(head, await _bundle(worktree, "HEAD"), patch, await _identity(worktree))


async def replay(worktree: Path, start: str, changes: Changes) -> None:
    """Give ``worktree`` (still at ``start``, clean) the child's changes: all or none.

    Runs to the end even when the caller is cancelled, so the worktree is never left
    half done; on a failure it is put back at ``start``.
    """
    await asyncio.shield(_replay(worktree, start, changes))


async def _replay(worktree: Path, start: str, changes: Changes) -> None:
    if changes.head != start:
        if changes.bundle:
            with _scratch_file(changes.bundle) as bundle:
                await run_git(worktree, "fetch", "-q", str(bundle), "HEAD")
        await run_git(worktree, "reset", "-q", "--hard", changes.head)
    try:
        if changes.patch:
            await run_git(
                worktree, "apply", "--binary", "--whitespace=nowarn", "-", stdin=changes.patch
            )
    except BaseException:
        await run_git(worktree, "reset", "-q", "--hard", start)
        raise


# -- the worker's side ----------------------------------------------------------


def copy_dir(worktree_name: str) -> Path:
    """Where a worker keeps a child's copy: named after its worktree (unique), under the
    node's temp dir, so a worker restarted on the same node finds it again."""
    return Path(tempfile.gettempdir()) / "forkagent-worktrees" / worktree_name


async def unpack(seed: Seed, branch: str, dest: Path) -> None:
    """A clone of ``seed`` at ``dest`` on ``branch``; kept as is if it is already there."""
    if (dest / ".git").is_dir():
        return
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    await run_git(partial, "init", "-q")
    with _scratch_file(seed.bundle) as bundle:
        await run_git(partial, "fetch", "-q", str(bundle), "HEAD")
    await run_git(partial, "checkout", "-q", "-b", branch, seed.head)
    for key, value in seed.identity:
        await run_git(partial, "config", key, value)
    if seed.patch:
        await run_git(partial, "apply", "--binary", "--whitespace=nowarn", "-", stdin=seed.patch)
    partial.rename(dest)  # whole or not at all: a restarted worker never sees half a clone


async def collect(copy: Path, start: str) -> Changes:
    """What the child did to its copy since ``start``."""
    head = await _head(copy)
    ahead = int((await run_git(copy, "rev-list", "--count", f"{start}..{head}")).strip() or b"0")
    bundle = await _bundle(copy, "HEAD", f"^{start}") if ahead else b""
    return Changes(head, bundle, await _patch(copy))


# -- git ------------------------------------------------------------------------


async def _head(repo: Path) -> str:
    return (await run_git(repo, "rev-parse", "HEAD")).decode().strip()


async def _identity(repo: Path) -> tuple[tuple[str, str], ...]:
    try:
        listing = await run_git(repo, "config", "--get-regexp", r"^user\.")
    except WorktreeError:  # none set
        return ()
    pairs = (line.partition(" ") for line in listing.decode().splitlines())
    return tuple((key, value) for key, _, value in pairs)


async def _bundle(repo: Path, *revs: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="forkagent-bundle-") as scratch:
        path = Path(scratch) / "repo.bundle"
        await run_git(repo, "bundle", "create", "-q", str(path), *revs)
        return path.read_bytes()


async def _patch(repo: Path) -> bytes:
    """Everything not committed, untracked files included, as one binary patch; the
    repository's own index is left alone (a scratch index stages it all)."""
    with tempfile.TemporaryDirectory(prefix="forkagent-index-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        await run_git(repo, "read-tree", "HEAD", env=index)
        await run_git(repo, "add", "-A", env=index)
        return await run_git(repo, "diff", "--cached", "--binary", "HEAD", env=index)


@contextmanager
def _scratch_file(data: bytes) -> Iterator[Path]:
    """``data`` in a temporary file for as long as the ``with`` lasts."""
    with tempfile.TemporaryDirectory(prefix="forkagent-ship-") as scratch:
        path = Path(scratch) / "data"
        path.write_bytes(data)
        yield path
