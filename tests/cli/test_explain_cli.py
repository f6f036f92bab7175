"""``forkagent explain``, the transcripts' cache lines and the live board, on real emulator runs."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from forkagent.agent import Agent
from forkagent.cli import app
from forkagent.cli.live import AgentBoard
from forkagent.emulator import Emulator
from forkagent.messages import user
from forkagent.models.emulator import EmulatorModel
from forkagent.state.registry import Registry
from forkagent.state.transcript import (
    TranscriptHeader,
    TranscriptWriter,
    read_transcript,
)

runner = CliRunner()
PLAN = "Read the code and plan the review."
EDITED = "Read the code and plan the reviews."


@dataclass(frozen=True)
class Tree:
    registry: Path
    root: str
    forks: tuple[str, ...]


async def run_tree(cwd: Path, **options: Any) -> tuple[str, tuple[str, ...]]:
    """A main agent whose second request misses (its first message was edited), and two forks.

    Returns the ids of the main agent and the forks.
    """
    model = EmulatorModel("claude-sonnet-4-6", Emulator())
    agent = Agent(model=model, cwd=cwd, load_agent_files=False, **options)
    async with agent.session() as session:
        await session.send(PLAN)
        session.root.messages[0] = user(EDITED)
        await session.send("Continue.")
        tasks = await session.fork(["review module A", "review module B"])
    await model.aclose()
    return session.root.id, tuple(t.id for t in tasks)


@pytest.fixture
async def tree(tmp_path: Path) -> Tree:
    path = tmp_path / "registry.db"
    root, forks = await run_tree(tmp_path, registry=Registry(path))
    return Tree(path, root, forks)


def explain(tree: Tree, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["explain", *args, "--registry", str(tree.registry)])
    return result.exit_code, result.stdout + result.stderr


# -- transcripts ---------------------------------------------------------------------


def test_each_response_leaves_a_cache_line_after_its_usage(tree: Tree) -> None:
    record = Registry(tree.registry).get(tree.root)
    assert record.transcript is not None
    transcript = read_transcript(record.transcript)

    kinds = [e.type for e in transcript.entries if e.type in ("usage", "cache")]
    assert kinds == ["usage", "cache"] * 2
    cold, miss = (e.cache_report() for e in transcript.cache_entries)
    assert [e.turn for e in transcript.cache_entries] == [1, 2]
    assert cold is not None
    assert cold.status == "cold"
    assert miss is not None
    assert miss.reasons == ("messages_changed",)
    assert miss.difference is not None
    assert miss.difference.byte_offset == 70


def test_a_cache_line_from_a_newer_forkagent_does_not_break_the_transcript(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    header = TranscriptHeader(agent_id="a", root_id="a", model="test:m", cwd="/")
    with TranscriptWriter(path) as writer:
        writer.header(header)
    newer = {"type": "cache", "at": "2030-01-01T00:00:00Z", "turn": 1, "report": {"status": "x"}}
    with path.open("a") as file:
        file.write(json.dumps(newer) + "\n")
    with TranscriptWriter(path) as writer:
        writer.status("completed")

    transcript = read_transcript(path)

    assert transcript.finished
    (entry,) = transcript.cache_entries
    assert entry.cache_report() is None
    result = runner.invoke(app, ["logs", str(path)])
    assert "turn 1 a cache report this forkagent cannot read" in result.stdout


def test_logs_show_each_cache_report(tree: Tree) -> None:
    result = runner.invoke(app, ["logs", tree.root, "--registry", str(tree.registry)])

    assert result.exit_code == 0, result.output
    assert "· turn 1 cache cold: read 0 of ~0 expected tokens" in result.stdout
    assert "· turn 2 cache miss: read" in result.stdout
    assert "messages[0].content[0] changed at byte 70" in result.stdout


# -- explain -------------------------------------------------------------------------


def test_explain_prints_every_request_with_its_findings(tree: Tree) -> None:
    code, out = explain(tree, tree.root[:8])

    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"main agent {tree.root} 'main' · emulator:claude-sonnet-4-6"
    assert lines[1].split()[:4] == ["turn", "1", "cold", "read"]
    assert lines[2].split()[:4] == ["turn", "2", "miss", "read"]
    assert "against the agent's previous request" in lines[2]
    assert (
        lines[3].strip().startswith("messages_changed: messages[0].content[0] changed at byte 70")
    )
    assert "'code and plan the review.\"}' -> 'code and plan the reviews.\"}'" in lines[3]
    assert "first difference: messages layer, block" in lines[4]
    assert lines[4].endswith("(messages[0].content[0]), byte 70")
    assert lines[5].strip().startswith("2 requests: 1 miss, 1 cold · read")
    assert not any(f in out for f in tree.forks)


def test_explain_tree_covers_the_forks_in_start_order(tree: Tree) -> None:
    code, out = explain(tree, tree.root, "--tree")

    assert code == 0, out
    heads = [line for line in out.splitlines() if " agent " in line and not line.startswith(" ")]
    assert [h.split()[2] for h in heads] == [tree.root, *tree.forks]
    assert f"fork agent {tree.forks[0]} 'review module A' (parent {tree.root})" in heads[1]
    assert f"against parent {tree.root}'s last request" in out
    assert f"against fork {tree.forks[0]}'s shared prefix" in out


def test_explain_json_is_one_object(tree: Tree) -> None:
    code, out = explain(tree, tree.root, "--tree", "--json")

    assert code == 0, out
    data = json.loads(out)
    assert [a["agent_id"] for a in data["agents"]] == [tree.root, *tree.forks]
    main = data["agents"][0]
    assert [r["turn"] for r in main["reports"]] == [1, 2]
    miss = main["reports"][1]
    assert miss["status"] == "miss"
    assert miss["findings"][0]["reason"] == "messages_changed"
    assert miss["difference"]["label"] == "messages[0].content[0]"
    assert miss["difference"]["byte_offset"] == 70
    assert [r["status"] for r in data["agents"][1]["reports"]] == ["hit"]


def test_explain_says_what_is_wrong_with_an_unknown_id(tree: Tree) -> None:
    code, out = explain(tree, "nobody")

    assert code == 1
    assert "error: no agent id starts with 'nobody'" in out


async def test_explain_refuses_an_agent_without_a_transcript(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    root, _ = await run_tree(tmp_path, registry=Registry(path), skip_transcript=True)

    code, out = explain(Tree(path, root, ()), root)

    assert code == 1
    assert "keeps no transcript" in out


def test_explain_an_old_transcript_without_cache_lines(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    with TranscriptWriter(path) as writer:
        writer.header(TranscriptHeader(agent_id="a", root_id="a", model="test:m", cwd="/"))

    result = runner.invoke(app, ["explain", str(path)])

    assert result.exit_code == 0, result.output
    assert "no cache reports: it sent no request, or its transcript predates them" in result.stdout


# -- the live board and run --json -----------------------------------------------------


async def test_the_board_shows_hit_rate_and_the_reason_of_a_last_miss(tmp_path: Path) -> None:
    board = AgentBoard()
    root, _ = await run_tree(tmp_path, listeners=[board], registry=False, skip_transcript=True)

    plain = io.StringIO()
    board.plain(Console(file=plain, width=400))
    main, *children = plain.getvalue().splitlines()
    ratio = board.lines[root].usage.cache_hit_ratio
    assert ratio is not None
    assert 0.3 < ratio < 0.7
    assert f" · hit {ratio:.0%} · " in main
    assert main.endswith(
        "turn 2 cache miss: messages_changed (messages[0].content[0] differs at byte 70)"
    )
    for child in children:
        assert re.search(r" · hit (9\d|100)% · ", child)
        assert "cache miss" not in child
    rendered = io.StringIO()
    Console(file=rendered, width=400).print(board.render())
    assert "turn 2 cache miss: messages_changed" in rendered.getvalue()


def test_run_json_carries_each_agents_cache_reports() -> None:
    result = runner.invoke(app, ["run", "Say hello.", "--json", "--permission-mode", "bypass"])

    assert result.exit_code == 0, result.output
    (main,) = json.loads(result.stdout)["agents"]
    (report,) = main["cache"]
    assert report["turn"] == 1
    assert report["status"] == "cold"
    assert report["write_tokens"] == main["usage"]["cache_write"]
