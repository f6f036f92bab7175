"""What a fork costs does not grow with its parent's history where it need not.

A fork's transcript refers to the history its parent already recorded instead
of copying it; reading it (``read_transcript``, ``forkagent logs``, a resume)
follows the reference, and a missing parent transcript is a clear error.
Siblings share their fork base, so the cache monitor proves their common
prefix by identity and reports what it reported before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent import Agent, RuntimeOptions, Session
from forkagent.cli import app
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall, use_emulator
from forkagent.emulator.profiles import CacheSettings
from forkagent.messages import UserMessage
from forkagent.models.emulator import EmulatorModel
from forkagent.state.transcript import (
    MessageEntry,
    TranscriptError,
    read_transcript,
    transcript_path,
)

from ._support import Events

MODEL = "emulator:claude-sonnet-4-6"
PROMPT = "Review this code.\n" + "def f(x):\n    return x * 2\n" * 300
"""About 3k tokens: above the model's 2,048-token cache minimum."""


def make_agent(cwd: Path, options: RuntimeOptions | None = None) -> Agent:
    return Agent(
        model=MODEL,
        cwd=cwd,
        load_agent_files=False,
        registry=False,
        options=options or RuntimeOptions(),
    )


async def forked_tree(cwd: Path) -> tuple[Path, list[Path]]:
    """A main agent that answered twice, then two forks; the transcripts' paths."""
    with use_emulator(Emulator()):
        async with make_agent(cwd).session() as session:
            await session.send(PROMPT)
            await session.send("And the tests?")
            tasks = await session.fork(["Check f.", "Check g."])
            for task in tasks:
                assert (await task.wait()).status == "completed"
            root = session.root.id
            children = [task.id for task in tasks]
    return transcript_path(root, root), [transcript_path(root, child) for child in children]


async def test_a_forks_transcript_refers_to_its_parents_history(tmp_path: Path) -> None:
    parent_path, children = await forked_tree(tmp_path)
    parent = read_transcript(parent_path)

    for path in children:
        child = read_transcript(path)
        reference = child.header.history_from
        assert reference is not None
        assert reference.agent_id == parent.header.agent_id
        assert reference.messages == len(parent.messages)
        # The system prompt and tools are its parent's: kept once, in the parent's header.
        assert reference.prompt
        written = json.loads(path.read_text().splitlines()[0])
        assert (written["system"], written["tools"]) == ("", [])
        assert (child.header.system, child.header.tools) == (
            parent.header.system,
            parent.header.tools,
        )
        assert child.header.tools
        # Only the fork's own messages are in its file...
        own = [e for e in child.entries if isinstance(e, MessageEntry)]
        assert [e.index for e in own] == [len(parent.messages), len(parent.messages) + 1]
        # ...and reading it puts the parent's history in front of them.
        assert child.messages[: len(parent.messages)] == parent.messages
        assert isinstance(child.messages[len(parent.messages)], UserMessage)
        answered = child.last_answered()
        assert answered is not None
        assert answered.messages == child.messages[:-1]


async def test_the_reference_is_the_history_when_the_fork_was_made(tmp_path: Path) -> None:
    """The parent going on afterwards does not change what its forks inherited."""
    with use_emulator(Emulator()):
        async with make_agent(tmp_path).session() as session:
            await session.send(PROMPT)
            [task] = await session.fork(["Check f."])
            await task.wait()
            await session.send("Now something else.")
            root, child = session.root.id, task.id
    parent = read_transcript(transcript_path(root, root))
    forked = read_transcript(transcript_path(root, child))
    reference = forked.header.history_from
    assert reference is not None
    assert len(parent.messages) == reference.messages + 2
    assert forked.messages[: reference.messages] == parent.messages[: reference.messages]


async def test_a_missing_parent_transcript_is_a_clear_error(tmp_path: Path) -> None:
    parent_path, children = await forked_tree(tmp_path)
    parent_path.unlink()

    with pytest.raises(TranscriptError, match=r"parent's transcript .* is missing"):
        read_transcript(children[0])


async def test_logs_show_where_a_forks_history_starts(tmp_path: Path) -> None:
    parent_path, children = await forked_tree(tmp_path)
    parent = read_transcript(parent_path)

    result = CliRunner().invoke(app, ["logs", str(children[0])])

    assert result.exit_code == 0, result.output
    inherited = len(parent.messages)
    assert f"the first {inherited} messages are its parent {parent.header.agent_id}'s" in (
        result.output
    )
    assert f"#{inherited} user (fork)" in result.output
    assert "#0 " not in result.output


async def test_a_resumed_main_agent_reads_its_forks_through_the_reference(
    tmp_path: Path,
) -> None:
    """Background forks whose reports never reached the main agent are found on resume."""
    options = RuntimeOptions(resume_on_notification=False)
    with use_emulator(Emulator()):
        async with make_agent(tmp_path, options).session() as session:
            await session.send(PROMPT)
            tasks = await session.fork(["Check f.", "Check g."], background=True)
            for task in tasks:
                assert (await task.wait()).status == "completed"
            root = session.root.id
        path = transcript_path(root, root)
        async with Session.resume(make_agent(tmp_path, options), path) as resumed:
            waiting = {n.task_id for n in resumed.root.inbox}
    assert waiting == {task.id for task in tasks}


async def test_siblings_cache_reports_compare_with_the_first_siblings_prefix(
    tmp_path: Path,
) -> None:
    """The shared prefix is proven by identity, and every sibling after the first hits."""
    with use_emulator(Emulator()):
        async with make_agent(tmp_path).session() as session:
            await session.send(PROMPT)
            tasks = await session.fork([f"Check part {n}." for n in range(4)])
            for task in tasks:
                await task.wait()
            reports = [session._runtime.cache_monitor.reports(task.id)[0] for task in tasks]
    first, *others = reports
    assert first.report.status == "hit"  # it extends the parent's last request
    for explained in others:
        assert explained.report.status == "hit"
        assert explained.report.difference is None
        assert explained.report.compared_with is not None
        assert "shared prefix" in explained.report.compared_with


def _fork_once(request: EmulatedRequest) -> Reply:
    """The main agent asks for one fork, which reports; then the main agent ends."""
    caller = request.agent
    if caller is not None and caller.kind == "main" and caller.turn == 1:
        return Reply(tool_calls=(ToolCall("Agent", {"prompt": "Check f.", "fork": True}),))
    if "Directive:\n" in request.last_user_text:
        return Reply(text="Scope: f. Result: fine.")
    return Reply(text="Done.")


@pytest.mark.parametrize(
    "model_id",
    ["claude-sonnet-4-6", "gpt-4.1", "gemini-2.5-flash", "deepseek-chat", "qwen-plus"],
)
async def test_when_cheaper_forks_from_a_warm_cache_on_every_provider(
    tmp_path: Path, model_id: str
) -> None:
    """The parent's ~3k-token prompt is cached (written, or cached on its own where the
    provider reports no writes), so re-reading it costs less than a fresh agent's prompt."""
    events = Events()
    agent = Agent(
        model=EmulatorModel(model_id, Emulator(policy=_fork_once)),
        cwd=tmp_path,
        load_agent_files=False,
        registry=False,
        options=RuntimeOptions(fork_policy="when_cheaper"),
        listeners=[events],
    )

    result = await agent.run(PROMPT)

    [child] = [e for e in events.started if e.parent_id is not None]
    assert child.kind == "fork"
    [answer] = [b for m in result.messages if isinstance(m, UserMessage) for b in m.tool_results]
    assert answer.text.count("cache warm") == 1  # one summary, in the tool result's header
    assert "fork policy" not in answer.text


async def test_deepseek_siblings_wait_until_the_cache_is_built(tmp_path: Path) -> None:
    """DeepSeek serves a prefix only some time after the reply that wrote it ends:
    released at once, every sibling would read nothing."""
    model = EmulatorModel(
        "deepseek-chat", Emulator(settings=CacheSettings(deepseek_build_delay=0.3))
    )
    assert model.profile.cache_visible_after == 0.3
    agent = Agent(model=model, cwd=tmp_path, load_agent_files=False, registry=False)
    async with agent.session() as session:
        await session.send(PROMPT)
        tasks = await session.fork([f"Check part {n}." for n in range(3)])
        results = [await task.wait() for task in tasks]
    reads = sorted(result.usage.cache_read_tokens for result in results)
    # The first child went alone; the two after it read the prefix it left.
    assert reads[1] > 2_000
    assert reads[2] > 2_000
