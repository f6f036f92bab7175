"""N forks asked for in one reply: each sibling's transcript line refers to the family's
placeholder results, written once, instead of repeating them.

Every child of a reply with N Agent calls ends with the same N placeholder results and
the fork rules, then its own directive. The first sibling to record that message writes
it whole; the others write a ``shared_message`` line with their directive and a
reference. Readers (``read_transcript``, ``forkagent logs``, a writer reopening the file)
put the blocks back and see the messages they saw before; a missing referenced
transcript is a clear error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from forkagent import Agent, RuntimeOptions
from forkagent.cli import app
from forkagent.emulator import EmulatedRequest, Emulator, Reply, ToolCall
from forkagent.messages import TextBlock, ToolResultBlock, UserMessage
from forkagent.models.emulator import EmulatorModel
from forkagent.state.transcript import (
    MessageEntry,
    TranscriptError,
    TranscriptHeader,
    TranscriptWriter,
    read_transcript,
    transcript_path,
)

CHILDREN = 12
"""More than the 8 blocks below which a message is written whole anyway."""


def _one_reply(request: EmulatedRequest) -> Reply:
    """The main agent asks for ``CHILDREN`` forks in its first reply; each child reports."""
    if request.message_count == 1:
        calls = tuple(
            ToolCall("Agent", {"prompt": f"Review part {n}.", "fork": True})
            for n in range(CHILDREN)
        )
        return Reply(tool_calls=calls)
    if "Directive:\n" in request.last_user_text:
        return Reply(text="Scope: one part. Result: done.")
    return Reply(text="All parts reviewed.")


async def one_reply_tree(cwd: Path) -> tuple[Path, list[Path]]:
    """The main agent's transcript and its children's, in the order they were made."""
    agent = Agent(
        model=EmulatorModel("claude-sonnet-4-6", Emulator(policy=_one_reply)),
        cwd=cwd,
        load_agent_files=False,
        registry=False,
        options=RuntimeOptions(max_agents=CHILDREN),
    )
    async with agent.session() as session:
        result = await session.send("Review every part.")
        root = session.root.id
    assert result.status == "completed"
    main = transcript_path(root, root)
    children = [read_transcript(p) for p in main.parent.glob("*.jsonl") if p != main]
    children.sort(key=lambda t: t.header.at)
    assert len(children) == CHILDREN
    return main, [t.path for t in children]


def _last_inherited(path: Path) -> tuple[str, dict[str, Any]]:
    """The type and JSON of the fork's first message line."""
    for line in path.read_text().splitlines()[1:]:
        data = json.loads(line)
        if data["type"] in ("message", "shared_message"):
            return data["type"], data
    raise AssertionError(f"no message line in {path}")


async def test_siblings_write_the_shared_blocks_once_and_read_them_back(tmp_path: Path) -> None:
    _, children = await one_reply_tree(tmp_path)
    kinds = [_last_inherited(path)[0] for path in children]
    # One sibling holds the placeholders; every other line refers to its line.
    assert sorted(kinds) == ["message"] + ["shared_message"] * (CHILDREN - 1)
    whole = children[kinds.index("message")]
    for path, kind in zip(children, kinds, strict=True):
        if kind == "shared_message":
            data = _last_inherited(path)[1]
            assert data["head"]["agent_id"] == whole.stem
            assert data["head"]["blocks"] == CHILDREN + 1  # the placeholders and the rules
            assert len(data["message"]["content"]) == 1  # its directive alone

    read = [read_transcript(path) for path in children]
    firsts = [next(e.message for e in t.entries if isinstance(e, MessageEntry)) for t in read]
    for transcript, message in zip(read, firsts, strict=True):
        assert isinstance(message, UserMessage)
        assert message.origin == "fork"
        placeholders = message.content[:CHILDREN]
        assert all(isinstance(b, ToolResultBlock) for b in placeholders)
        directive = message.content[-1]
        assert isinstance(directive, TextBlock)
        assert directive.text.startswith("Directive:\n")
        reference = transcript.header.history_from
        assert reference is not None
        assert transcript.messages[reference.messages] == message
        assert transcript.last_answered() is not None
    # The same head for every sibling, each with its own directive.
    assert len({m.content[:-1] for m in firsts}) == 1
    assert len({m.content[-1] for m in firsts}) == CHILDREN


async def test_a_shared_line_is_o1_in_the_number_of_siblings(tmp_path: Path) -> None:
    _, children = await one_reply_tree(tmp_path)
    sizes = {kind: len(json.dumps(data)) for kind, data in map(_last_inherited, children)}
    assert sizes["shared_message"] < 400
    assert sizes["message"] > CHILDREN * 100


async def test_logs_of_a_sibling_show_the_whole_message(tmp_path: Path) -> None:
    _, children = await one_reply_tree(tmp_path)
    sibling = next(p for p in children if _last_inherited(p)[0] == "shared_message")

    result = CliRunner().invoke(app, ["logs", str(sibling)])

    assert result.exit_code == 0, result.output
    assert "Forked: this call's work continues in a child agent." in result.output
    assert "Directive:" in result.output


async def test_a_missing_referenced_transcript_is_a_clear_error(tmp_path: Path) -> None:
    _, children = await one_reply_tree(tmp_path)
    whole = next(p for p in children if _last_inherited(p)[0] == "message")
    sibling = next(p for p in children if _last_inherited(p)[0] == "shared_message")
    whole.rename(whole.with_suffix(".moved"))

    with pytest.raises(TranscriptError, match=r"recorded in .*, which is missing"):
        read_transcript(sibling)


def _header(agent: str) -> TranscriptHeader:
    return TranscriptHeader(agent_id=agent, root_id="root", model="test:m", cwd=".")


def _long_message(directive: str, head: tuple[TextBlock, ...]) -> UserMessage:
    return UserMessage(content=(*head, TextBlock(text=directive)))


def test_a_reopened_writer_continues_from_the_whole_history(tmp_path: Path) -> None:
    head = tuple(TextBlock(text=f"shared {n}") for n in range(20))
    first_message, second_message = _long_message("one", head), _long_message("two", head)
    with TranscriptWriter(tmp_path / "a.jsonl") as first:
        first.header(_header("a"))
        first.sync([first_message])
    with TranscriptWriter(tmp_path / "b.jsonl") as second:
        second.header(_header("b"))
        second.sync([second_message])
    assert json.loads((tmp_path / "b.jsonl").read_text().splitlines()[1])["type"] == (
        "shared_message"
    )

    reopened = TranscriptWriter(tmp_path / "b.jsonl")
    assert list(reopened.history) == [second_message]
    reopened.sync([second_message, UserMessage(content=(TextBlock(text="more"),))])
    reopened.close()
    assert read_transcript(tmp_path / "b.jsonl").messages[0] == second_message


def test_a_referenced_line_that_is_not_a_message_is_a_clear_error(tmp_path: Path) -> None:
    head = tuple(TextBlock(text=f"shared {n}") for n in range(20))
    with TranscriptWriter(tmp_path / "a.jsonl") as first:
        first.header(_header("a"))
        first.sync([_long_message("one", head)])
    with TranscriptWriter(tmp_path / "b.jsonl") as second:
        second.header(_header("b"))
        second.sync([_long_message("two", head)])
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    lines[1] = json.dumps({"type": "truncate", "at": "2026-01-01T00:00:00Z", "length": 0})
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")

    with pytest.raises(TranscriptError, match="not a whole message line"):
        read_transcript(tmp_path / "b.jsonl")
