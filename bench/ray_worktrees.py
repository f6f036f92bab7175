"""Isolated forks on Ray: what shipping each child's worktree to its worker costs.

N forks with ``isolation: worktree`` (default 20), started by one Agent-tool
reply of the main agent, each write one file and answer, in a generated
repository (``--files`` files over a few commits). Three runs in one process,
on the in-process emulator without latency:

- ``in_process``: worktrees and tools here;
- ``ray_shared``: tools on Ray workers that see the driver's disk
  (``ship_worktrees=False``);
- ``ray_shipped``: each worktree shipped to its worker and the work replayed
  back (``ship_worktrees=True``, what a cluster without a shared disk does).

``shipping_ms_per_child`` = (shipped - shared) / N: the bundle, the clone on the
worker, and the changes brought back, per child.

    python -m bench.ray_worktrees [--forks N] [--files N] [--json]   (needs the ray extra)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from forkagent import Agent, Executor, InProcessExecutor, RuntimeOptions
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall
from forkagent.emulator.timing import NO_LATENCY
from forkagent.executors.ray import RayExecutor
from forkagent.models.emulator import EmulatorModel

from ._agents import MODEL


class _Policy:
    """The main agent forks ``forks`` isolated children; each writes a file, then answers."""

    def __init__(self, forks: int) -> None:
        self.forks = forks

    def __call__(self, request: EmulatedRequest) -> Reply:
        agent = request.agent
        last = json.dumps(request.body["messages"][-1])
        if agent is None or agent.kind == "main":
            if "tool_result" in last:
                return Reply(text="All done.")
            return Reply(tool_calls=tuple(self._fork(n) for n in range(self.forks)))
        if "toolu_fork_write" in last:
            return Reply(text="Written.")
        write = {"file_path": "result.txt", "content": f"work of {agent.id}\n"}
        return Reply(tool_calls=(ToolCall("Write", write, id="toolu_fork_write"),))

    @staticmethod
    def _fork(n: int) -> ToolCall:
        arguments = {"prompt": f"Do task {n}.", "fork": True, "isolation": "worktree"}
        return ToolCall("Agent", arguments, id=f"toolu_agent_{n}")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(root: Path, files: int) -> None:
    """``files`` source files over five commits."""
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "Bench")
    _git(root, "config", "user.email", "bench@example.com")
    for commit in range(5):
        for n in range(commit, files, 5):
            (root / f"module_{n}.py").write_text(f"VALUE = {n * commit}\n" * 40)
        _git(root, "add", ".")
        _git(root, "commit", "-q", "-m", f"commit {commit}")


def clear_worktrees(repo: Path) -> int:
    """Remove the kept worktrees and their branches; how many there were."""
    listing = _git(repo, "worktree", "list", "--porcelain").splitlines()
    paths = [line[9:] for line in listing[1:] if line.startswith("worktree ")]
    for path in paths:
        _git(repo, "worktree", "remove", "--force", path)
    for branch in _git(
        repo, "branch", "--list", "forkagent/*", "--format=%(refname:short)"
    ).split():
        _git(repo, "branch", "-D", branch)
    return len(paths)


async def run_forks(repo: Path, forks: int, executor: Executor) -> float:
    """Seconds for the whole run; every fork's worktree must come back kept."""
    agent = Agent(
        model=EmulatorModel(MODEL, Emulator(latency=NO_LATENCY, policy=_Policy(forks))),
        cwd=repo,
        options=RuntimeOptions(max_agents=forks),
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
        executor=executor,
    )
    started = time.perf_counter()
    result = await agent.run("Split the work.")
    seconds = time.perf_counter() - started
    done = [a for a in result.agents if a.kind == "fork" and a.status == "completed"]
    if len(done) != forks or clear_worktrees(repo) != forks:
        raise RuntimeError("not every fork completed with its work kept in its worktree")
    return seconds


@dataclass(frozen=True, slots=True)
class Row:
    forks: int
    files: int
    in_process_seconds: float
    ray_shared_seconds: float
    ray_shipped_seconds: float
    seeds_put: int
    """Bundles put in the object store over the shipped runs (warm-up included): all
    their children started from the same commit, so one."""

    def to_dict(self) -> dict[str, float]:
        shipping = (self.ray_shipped_seconds - self.ray_shared_seconds) / self.forks * 1000
        return {
            **{k: round(v, 3) for k, v in asdict(self).items()},
            "shipped_to_in_process": round(self.in_process_seconds / self.ray_shipped_seconds, 3),
            "shipping_ms_per_child": round(shipping, 1),
        }


async def measure(forks: int, files: int) -> Row:
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        make_repo(repo, files)
        await run_forks(repo, 2, InProcessExecutor())  # imports and git's first calls
        local = await run_forks(repo, forks, InProcessExecutor())
        async with RayExecutor(local_cpus=2, ship_worktrees=False) as shared_executor:
            await run_forks(repo, 2, shared_executor)  # workers and HTTP server warm
            shared = await run_forks(repo, forks, shared_executor)
        async with RayExecutor(local_cpus=2, ship_worktrees=True) as shipping_executor:
            await run_forks(repo, 2, shipping_executor)
            shipped = await run_forks(repo, forks, shipping_executor)
        return Row(forks, files, local, shared, shipped, shipping_executor.seeds_put)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance
    row = asyncio.run(measure(args.forks, args.files)).to_dict()
    if args.json:
        print(json.dumps(row, indent=2))
        return
    for key, value in row.items():
        print(f"{key:>24}  {value}")


if __name__ == "__main__":
    main()
