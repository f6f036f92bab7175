"""Children on a local Ray instance: same bytes, same records, their work in worker processes."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkagent import (
    Agent,
    Executor,
    FanoutMode,
    InProcessExecutor,
    Limits,
    ModelSettings,
    RunResult,
    RuntimeOptions,
    tool,
)
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall, use_emulator
from forkagent.state import read_tree, transcript_path

from ._ray import require_ray

require_ray()  # before the import below, which needs the extra
from forkagent.executors.ray import RayExecutor  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_cluster")

PROMPT = "Read the code base and plan the refactor. " * 300
"""Long enough for Anthropic's minimum cacheable prefix: the forks read it from the cache."""
DIRECTIVES = ["migrate the schema", "rewrite the tests"]


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


@tool
def where(text: str) -> str:
    """Which process runs this call."""
    return str(os.getpid())


class Recorder:
    """An emulator policy: forks call ``tool_name`` once, then answer; every body is kept."""

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name
        self.bodies: dict[str, list[str]] = {}
        self.tool_results: dict[str, str] = {}

    def __call__(self, request: EmulatedRequest) -> Reply:
        agent = request.agent
        label = agent.label if agent is not None else "?"
        self.bodies.setdefault(label, []).append(json.dumps(request.body, sort_keys=True))
        if agent is None or agent.kind != "fork":
            return Reply(text="Planned.")
        last = request.body["messages"][-1]["content"]
        results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            self.tool_results[label] = json.dumps(results[0]["content"])
            return Reply(text=f"Done: {label}.")
        call_id = "toolu_" + label.replace(" ", "_")  # not the emulator's counter: siblings race
        return Reply(tool_calls=(ToolCall(self.tool_name, {"text": label}, id=call_id),))


async def run_tree(
    cwd: Path, executor: Executor, recorder: Recorder, tools: tuple[Any, ...], **options: Any
) -> RunResult:
    """The main agent plans, then forks two background children that each call a tool."""
    agent = Agent(
        **options,
        model="emulator:claude-sonnet-4-6",
        cwd=cwd,
        tools=tools,
        builtin_tools=False,
        load_agent_files=False,
        settings=ModelSettings(cache_key="ray-test"),
        executor=executor,
    )
    with use_emulator(Emulator(policy=recorder)):
        async with agent.session() as session:
            await session.send(PROMPT)
            children = await session.fork(DIRECTIVES, background=True)
            for child in children:
                await child.wait()
            return session.result()


@pytest.mark.parametrize("fanout", ["auto", "prewarm"])
async def test_forks_send_the_same_bytes_on_ray_as_in_process(
    tmp_path: Path, fanout: FanoutMode
) -> None:
    """``auto``: the leader streams, its siblings wait for its first event; ``prewarm``: a
    ``max_tokens: 0`` request from the leader's worker first."""
    here, there = Recorder("shout"), Recorder("shout")
    options = RuntimeOptions(fanout=fanout)
    local = await run_tree(tmp_path, InProcessExecutor(), here, (shout,), options=options)
    async with RayExecutor() as executor:
        remote = await run_tree(tmp_path, executor, there, (shout,), options=options)
    assert set(here.bodies) == {"main", *DIRECTIVES}
    prewarmed = any('"max_tokens": 0' in body for body in there.bodies[DIRECTIVES[0]])
    assert prewarmed == (fanout == "prewarm")
    for fork in DIRECTIVES:  # every request of every fork, byte for byte
        assert there.bodies[fork] == here.bodies[fork]
    # The main agent's first request; its later ones carry the notifications, whose task
    # ids and timings differ from run to run whatever the executor.
    assert there.bodies["main"][0] == here.bodies["main"][0]
    assert there.tool_results == here.tool_results
    assert [a.status for a in remote.agents] == [a.status for a in local.agents]
    assert [a.usage for a in remote.agents[1:]] == [a.usage for a in local.agents[1:]]


async def test_the_forks_tools_run_in_worker_processes(tmp_path: Path) -> None:
    recorder = Recorder("where")
    async with RayExecutor() as executor:
        result = await run_tree(tmp_path, executor, recorder, (where,))
    main, *forks = result.agents
    assert (main.executor, main.worker_pid) == ("in-process", os.getpid())
    assert [f.executor for f in forks] == ["ray", "ray"]
    for fork in forks:
        assert fork.status == "completed"
        assert fork.worker_pid not in (None, os.getpid())
        # The tool reported the pid of the process that ran it: the fork's worker.
        assert json.loads(recorder.tool_results[fork.label])[0]["text"] == str(fork.worker_pid)


async def test_a_family_snapshot_goes_into_the_object_store_once(tmp_path: Path) -> None:
    async with RayExecutor() as executor:
        result = await run_tree(tmp_path, executor, Recorder("shout"), (shout,))
        assert executor.snapshots_put == 1
    forks = [a for a in result.agents if a.kind == "fork"]
    assert len(forks) == 2
    assert all(f.usage.cache_read_tokens > 0 for f in forks)


async def test_remote_children_are_recorded_in_the_drivers_state(tmp_path: Path) -> None:
    async with RayExecutor() as executor:
        result = await run_tree(tmp_path, executor, Recorder("shout"), (shout,))
    root = result.agents[0].id
    tree = read_tree(transcript_path(root, root))
    forks = {a.id: a.label for a in result.agents if a.kind == "fork"}
    assert {t.header.agent_id for t in tree[1:]} == set(forks)
    for transcript in tree[1:]:  # the whole conversation, down to the worker's tool results
        assert transcript.messages[-1].text == f"Done: {forks[transcript.header.agent_id]}."


async def test_a_tree_budget_holds_across_workers(tmp_path: Path) -> None:
    # The main agent's first request takes just over 4,000 tokens (the tool-use system
    # prompt included): the forks may start, and the first reply to come back spends
    # the rest, wherever it was sent from.
    limits = Limits(max_tokens=4_400)
    here = await run_tree(
        tmp_path, InProcessExecutor(), Recorder("shout"), (shout,), tree_limits=limits
    )
    async with RayExecutor() as executor:
        there = await run_tree(tmp_path, executor, Recorder("shout"), (shout,), tree_limits=limits)
    statuses = [(a.status, a.turns) for a in there.agents[1:]]
    assert statuses == [("budget_exceeded", 1), ("budget_exceeded", 1)]
    assert statuses == [(a.status, a.turns) for a in here.agents[1:]]


@pytest.mark.parametrize(
    ("env_keys", "fork_status"), [((), "failed"), (("ANTHROPIC_API_KEY",), "completed")]
)
async def test_workers_call_the_provider_with_the_keys_they_are_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_keys: tuple[str, ...], fork_status: str
) -> None:
    """The official SDK on the workers, against an emulator that wants a key."""
    from forkagent.emulator import serve

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-emulated")
    with serve(Emulator(require_key=True)) as server:
        agent = Agent(
            model=f"anthropic:claude-sonnet-4-6@{server.url}",
            cwd=tmp_path,
            builtin_tools=False,
            load_agent_files=False,
        )
        async with RayExecutor(env_keys=env_keys, workers=1) as executor:
            agent.executor = executor
            async with agent.session() as session:
                await session.send("Plan.")
                [child] = await session.fork(["check"], background=True)
                result = await child.wait()
    assert result.status == fork_status
    if fork_status == "failed":
        assert result.error is not None
        assert "ANTHROPIC_API_KEY" in result.error  # said by the worker, raised here as it was


def test_env_keys_name_variables_this_process_has() -> None:
    from forkagent.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="FORKAGENT_NO_SUCH_KEY"):
        RayExecutor(env_keys=["FORKAGENT_NO_SUCH_KEY"])


def _key_reader() -> Callable[[str], str]:
    @tool
    def key(text: str) -> str:
        """The worker's Anthropic key, if it has one."""
        return os.environ.get("ANTHROPIC_API_KEY", "none")

    return key


@pytest.mark.parametrize(("env_keys", "seen"), [((), "none"), (("ANTHROPIC_API_KEY",), "sk-x")])
async def test_provider_keys_reach_workers_only_when_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_keys: tuple[str, ...], seen: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-x")
    recorder = Recorder("key")
    async with RayExecutor(env_keys=env_keys, workers=1) as executor:
        await run_tree(tmp_path, executor, recorder, (_key_reader(),))
    assert {json.loads(t)[0]["text"] for t in recorder.tool_results.values()} == {seen}


async def test_cancelling_a_remote_child_kills_its_commands(tmp_path: Path) -> None:
    from forkagent.tools.builtin import Bash

    pidfile = tmp_path / "sleeper.pid"
    emulator = Emulator()
    command = f"echo $$ > {pidfile}; sleep 300"
    emulator.script(Reply(tool_calls=(ToolCall("Bash", {"command": command}),)), agent="fork")
    agent = Agent(
        model="emulator:claude-sonnet-4-6",
        cwd=tmp_path,
        tools=(Bash(),),
        builtin_tools=False,
        load_agent_files=False,
    )
    async with RayExecutor(workers=1) as executor:
        agent.executor = executor
        with use_emulator(emulator):
            async with agent.session() as session:
                await session.send("Plan.")
                [child] = await session.fork(["sleep"], background=True)
                # Written by the command on the worker: there is no event here to wait on.
                while not pidfile.exists() or not pidfile.read_text().strip():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                child.cancel()
                result = await child.wait()
    assert result.status == "cancelled"
    pid = int(pidfile.read_text())
    for _ in range(200):  # the worker's kill is asynchronous to the driver's cancel
        if not _alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return status != "Z"  # a zombie has exited: only its parent has not reaped it yet


def _dies_once(marker: Path) -> Callable[[str], str]:
    @tool
    def flaky(text: str) -> str:
        """Kills its own worker process the first time, then answers."""
        if not marker.exists():
            marker.write_text("died once")
            os._exit(1)
        return f"survived: {text}"

    return flaky


async def test_a_child_whose_worker_dies_is_carried_on_elsewhere(tmp_path: Path) -> None:
    recorder = Recorder("flaky")
    async with RayExecutor(workers=1) as executor:
        result = await run_tree(tmp_path, executor, recorder, (_dies_once(tmp_path / "m"),))
    forks = [a for a in result.agents if a.kind == "fork"]
    assert [f.status for f in forks] == ["completed", "completed"]
    # What had finished was kept, and what had not was sent again: two turns each, the
    # tool call that took its worker down answered by the restarted one.
    assert [f.turns for f in forks] == [2, 2]
    assert all("survived" in text for text in recorder.tool_results.values())
