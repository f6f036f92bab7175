"""The demo on Ray: the same agents, notifications and cache figures as in process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forkagent.demo import run_demo
from forkagent.emulator import Latency
from forkagent.testing import wire

from ._ray import require_ray

require_ray()  # before the import below, which needs the extra
from forkagent.executors.ray import RayExecutor  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_cluster")

LATENCY = Latency(ttft=0.175, tokens_per_second=500.0)
"""The live demo's latency at twice its speed. Whether the background reports reach the
main agent before its next turn is a race in process too; model latency of this order
decides it, where with none at all the executors' own costs would."""


async def test_the_demo_on_ray_matches_the_demo_in_process(tmp_path: Path) -> None:
    here = await run_demo(tmp_path, latency=LATENCY)
    # The same place again: the paths the agents read are part of what they send.
    shutil.rmtree(tmp_path / "shelf-repo")
    async with RayExecutor() as executor:
        there = await run_demo(tmp_path, latency=LATENCY, executor=executor)
    local, remote = here.to_dict(), there.to_dict()
    assert remote["status"] == local["status"] == "completed"
    assert remote["notifications_delivered"] == local["notifications_delivered"] == 2
    assert remote["changed_files"] == local["changed_files"]
    # Every child sent the same bytes and so used the cache alike, to the token.
    assert [_comparable(a) for a in there.result.agents[1:]] == [
        _comparable(a) for a in here.result.agents[1:]
    ]
    # Whether the two background reports reach the main agent in one turn or two is a
    # race in process too (a loaded machine decides it either way), so the main agent's
    # figures are compared when it took the same turns: then its prompts differ only by
    # the children's wall times in the reports ("3 turns, 1.2s"), a few tokens.
    figures = ("this_run", "fresh_subagents", "lower_bound", "this_run_ratio", "forks")
    if there.result.agents[0].turns == here.result.agents[0].turns:
        assert _pick(remote["comparison"], figures) == pytest.approx(
            _pick(local["comparison"], figures), rel=0.002
        )
    assert wire(remote)["comparison"]["this_run_ratio"] < 1.05
    main, *children = there.result.agents
    assert (main.executor, main.worker_pid) == ("in-process", os.getpid())
    assert {a.kind for a in children} == {"fork", "named"}
    for child in children:
        assert child.executor == "ray"
        assert child.worker_pid not in (None, os.getpid())


def _pick(data: object, keys: tuple[str, ...]) -> dict[str, object]:
    assert isinstance(data, dict)
    return {key: data[key] for key in keys}


def _comparable(agent: object) -> dict[str, object]:
    """An agent's JSON without what names its run (ids) or its process."""
    from forkagent import AgentSummary

    assert isinstance(agent, AgentSummary)
    names_its_run = ("id", "parent", "executor", "worker_pid")
    return {key: value for key, value in agent.to_dict().items() if key not in names_its_run}
