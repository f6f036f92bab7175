from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, MutableSequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkagent._orchestration.budget import Budget
from forkagent._orchestration.loop import AgentRun, run_loop
from forkagent._orchestration.recording import header_for
from forkagent.events import (
    AgentFinished,
    AgentMovedToBackground,
    AgentStarted,
    CacheReported,
    ResponseReceived,
    ToolCalled,
)
from forkagent.history import History
from forkagent.messages import (
    AssistantMessage,
    ImageBlock,
    JsonValue,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    assistant,
    messages_to_json,
    tool_result,
    user,
)
from forkagent.models.base import ModelResponse
from forkagent.models.function import ScriptedModel
from forkagent.requests import (
    BlockPosition,
    Difference,
    ModelRequest,
    ModelSettings,
    ThinkingConfig,
    ToolSpec,
)
from forkagent.state.transcript import (
    FORMAT_VERSION,
    CacheEntry,
    HeaderTemplate,
    MessageEntry,
    StateDirError,
    StatusEntry,
    TranscriptError,
    TranscriptHeader,
    TranscriptTail,
    TranscriptWriter,
    flush_transcripts,
    read_transcript,
    state_dir,
    transcript_path,
)
from forkagent.telemetry.cache import CacheFinding, CacheReport
from forkagent.tools.base import FunctionTool
from forkagent.usage import Usage

HEADER = TranscriptHeader(
    agent_id="fork-1-abc123",
    parent_id="main-0-def456",
    root_id="main-0-def456",
    kind="fork",
    label="review the schema",
    model="anthropic:claude-sonnet-4-6",
    system=(TextBlock(text="You are a careful reviewer."), TextBlock(text="Env: cwd=/w")),
    tools=(
        ToolSpec(
            name="Read",
            description="Read a file.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        ),
    ),
    settings=ModelSettings(
        max_tokens=2048,
        temperature=0.3,
        thinking=ThinkingConfig(type="enabled", budget_tokens=1024),
        cache_key="tree-1",
        extra={"cache_salt": "s"},
    ),
    cwd="/work",
    shared_prefix_end=BlockPosition(message=3, block=0),
    background=True,
    extra={"subagent_type": None},
)


def conversation() -> list[Message]:
    return [
        user("Review the schema ✓ — ünïcödé"),
        assistant(
            ThinkingBlock(thinking="Let me look.", signature="c2lnbmF0dXJl"),
            ToolUseBlock(id="toolu_1", name="Read", input={"path": "schema.sql"}),
        ),
        user(tool_result("toolu_1", "CREATE TABLE t (id int);"), origin="tool"),
        assistant("Looks fine."),
    ]


def assert_lines_are_their_entries_json(path: Path) -> None:
    """Every line after the header is byte for byte its entry's own JSON: the lines the
    writer makes without building the pydantic entry say exactly what the entry would."""
    transcript = read_transcript(path)
    lines = path.read_bytes().splitlines()[1:]
    assert len(lines) == len(transcript.entries)
    for line, entry in zip(lines, transcript.entries, strict=True):
        assert line == entry.__pydantic_serializer__.to_json(entry)


def write(path: Path, messages: list[Message], header: TranscriptHeader = HEADER) -> None:
    with TranscriptWriter(path) as writer:
        writer.header(header)
        writer.sync(messages)


# -- round trip ----------------------------------------------------------------

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
_text = st.builds(TextBlock, text=st.text())
_image = st.builds(
    ImageBlock,
    media_type=st.sampled_from(["image/png", "image/jpeg"]),
    data=st.none() | st.text(alphabet="ABCDEFabcdef0123456789+/=", max_size=40),
    url=st.none() | st.just("https://example.com/a.png"),
)
_thinking = st.builds(
    ThinkingBlock, thinking=st.text(), signature=st.none() | st.text(), redacted=st.booleans()
)
_tool_use = st.builds(
    ToolUseBlock,
    id=st.text(min_size=1, max_size=8),
    name=st.text(min_size=1, max_size=8),
    input=st.dictionaries(st.text(), _json, max_size=4),
    raw_arguments=st.none() | st.text(),
)
_tool_result = st.builds(
    ToolResultBlock,
    tool_use_id=st.text(min_size=1, max_size=8),
    content=st.lists(_text | _image, max_size=3).map(tuple),
    is_error=st.booleans(),
)
_block = _text | _image | _thinking | _tool_use | _tool_result
_message: st.SearchStrategy[Message] = st.builds(
    UserMessage,
    content=st.lists(_block, min_size=1, max_size=4).map(tuple),
    origin=st.sampled_from(["user", "tool", "fork", "notification", "hook", "system"]),
) | st.builds(AssistantMessage, content=st.lists(_block, min_size=1, max_size=4).map(tuple))


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(_message, max_size=8), system=st.text() | st.just(HEADER.system))
def test_round_trip_is_lossless(
    messages: list[Message], system: str | tuple[TextBlock, ...]
) -> None:
    header = HEADER.model_copy(update={"system": system})
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        with TranscriptWriter(path) as writer:
            writer.header(header)
            for message in messages:
                writer.message(message)
        transcript = read_transcript(path)
        lines = path.read_bytes().split(b"\n")
    assert transcript.header == header
    assert transcript.messages == tuple(messages)
    assert messages_to_json(transcript.messages) == messages_to_json(messages)
    assert not transcript.torn_tail
    assert len(lines) == len(messages) + 2  # one line each, and the final newline
    for line, entry in zip(lines[1:], transcript.entries, strict=False):
        assert line == entry.__pydantic_serializer__.to_json(entry)


@settings(max_examples=80, deadline=None)
@given(agent_id=st.text(min_size=1), label=st.text())
def test_a_header_from_its_familys_template_reads_back_as_the_header_itself(
    agent_id: str, label: str
) -> None:
    """Only the child's id, label and time are filled into the family's serialized line:
    any text (quotes, backslashes, newlines, control characters, any plane) round-trips."""
    template = HeaderTemplate(HEADER)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        with TranscriptWriter(path) as writer:
            writer.header_from(template, agent_id, label)
            written = writer.written_header
        line = path.read_bytes()
        transcript = read_transcript(path)
    assert written is not None
    assert written == HEADER.model_copy(
        update={"agent_id": agent_id, "label": label, "at": written.at}
    )
    assert transcript.header == written
    assert json.loads(line) == json.loads(written.model_dump_json())


@pytest.mark.parametrize("inherited", [0, 2, 4])
def test_a_header_written_with_its_history_writes_what_a_sync_after_it_would(
    tmp_path: Path, inherited: int
) -> None:
    """``header_from(..., history)`` takes the messages after ``inherited`` as following it,
    uncompared: the lines are the same as a ``sync`` after the header would write, and the
    run's history, grown since, is recorded from there."""
    template = HeaderTemplate(HEADER)
    run = History(conversation())
    history = run.snapshot()
    files = tmp_path / "with.jsonl", tmp_path / "then_sync.jsonl"
    with TranscriptWriter(files[0]) as joined, TranscriptWriter(files[1]) as apart:
        joined.header_from(template, "fork-1", "x", history.prefix(inherited), history)
        apart.header_from(template, "fork-1", "x", history.prefix(inherited))
        apart.sync(run)
        run.append(assistant("Done."))
        assert joined.sync(run) == apart.sync(run) == 1
        assert joined.lines == apart.lines == len(conversation()) - inherited + 1

    def without_times(path: Path) -> list[dict[str, object]]:
        lines = [json.loads(line) for line in path.read_bytes().splitlines()]
        return [{key: value for key, value in line.items() if key != "at"} for line in lines]

    assert without_times(files[0]) == without_times(files[1])
    assert [line["type"] for line in without_times(files[0])] == ["header"] + ["message"] * (
        len(conversation()) - inherited + 1
    )


def test_every_line_is_an_object_with_a_type(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, conversation())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["header"] + ["message"] * 4
    assert lines[0]["version"] == FORMAT_VERSION
    assert lines[0]["system"] == [
        {"type": "text", "text": "You are a careful reviewer."},
        {"type": "text", "text": "Env: cwd=/w"},
    ]
    assert [line["index"] for line in lines[1:]] == [0, 1, 2, 3]


async def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


async def test_a_request_rebuilt_from_the_transcript_is_byte_identical(tmp_path: Path) -> None:
    """LESSONS 17: a resumed agent must send the same prefix, so the cache still hits."""
    model = ScriptedModel(
        [assistant(ToolUseBlock(id="t1", name="Read", input={"path": "a"})), "done"],
        name="claude-sonnet-4-6",
    )
    tool = FunctionTool(read_file, name="Read")
    run = AgentRun(
        id="main-0-x",
        model=model,
        system=(TextBlock(text="rendered once: 2026-11-22"),),
        tools=(tool,),
        tool_specs=(tool.spec(),),
        settings=ModelSettings(cache_key="k"),
        cwd=tmp_path,
        budget=Budget(),
        messages=[user("go")],
    )
    path = tmp_path / "main.jsonl"
    with TranscriptWriter(path) as writer:
        writer.header(header_for(run, root_id=run.id))
        run.emit = writer.on_event
        await run_loop(run)
        writer.sync(run.messages)

    transcript = read_transcript(path)
    header = transcript.header
    assert run.last_request is not None
    rebuilt = ModelRequest(
        model=model.name,
        system=header.system,
        tools=header.tools,
        messages=transcript.messages[: len(run.last_request.messages)],
        settings=header.settings,
        shared_prefix_end=header.shared_prefix_end,
    )
    assert rebuilt.canonical_bytes() == run.last_request.canonical_bytes()
    assert header.model == "test:claude-sonnet-4-6"
    assert transcript.usage.requests == 2
    assert transcript.messages == tuple(run.messages)


# -- history changes -----------------------------------------------------------


@pytest.mark.parametrize("kind", [list, History], ids=["list", "History"])
def test_sync_records_appends_replacements_and_truncation(
    tmp_path: Path, kind: Callable[[list[Message]], MutableSequence[Message]]
) -> None:
    """The same lines whether the history is a list or a run's ``History`` (whose appends
    since the writer's last snapshot are found without comparing the two)."""
    path = tmp_path / "t.jsonl"
    history = kind(conversation())
    writer = TranscriptWriter(path)
    writer.header(HEADER)
    assert writer.sync(history) == 4
    assert writer.sync(history) == 0
    # The loop folds a notification into the last user message, replacing it.
    history.append(user(tool_result("toolu_2", "ok"), origin="tool"))
    writer.sync(history)
    history[-1] = UserMessage(
        content=(*history[-1].content, TextBlock(text="<task-notification/>")), origin="tool"
    )
    assert writer.sync(history) == 1
    assert read_transcript(path).messages == tuple(history)
    history.append(assistant("Checking."))
    history[-1] = assistant("Checked.")  # changed before it was recorded: one line
    assert writer.sync(history) == 1
    assert read_transcript(path).messages == tuple(history)
    del history[2:]
    assert writer.sync(history) == 1
    writer.close()
    transcript = read_transcript(path)
    assert transcript.messages == tuple(history)
    assert [type(e).__name__ for e in transcript.entries][-2:] == ["MessageEntry", "TruncateEntry"]


_history_steps = st.lists(
    st.tuples(
        st.sampled_from(["append", "replace", "delete", "snapshot", "read", "sync"]),
        st.integers(min_value=0, max_value=7),
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(steps=_history_steps)
def test_a_run_history_synced_from_its_tail_writes_what_a_list_would(
    steps: list[tuple[str, int]],
) -> None:
    """``sync`` of a run's ``History`` reads what follows the recorded view from its tail,
    without a snapshot; a list is compared message by message. Whatever the run does between
    syncs (appends, replacing or deleting messages, snapshots for its requests, a fork reading
    the writer's history), both write the same lines, and the writer's history is the run's."""
    history: History[Message] = History(conversation()[:1])
    with tempfile.TemporaryDirectory() as folder:
        files = Path(folder, "tail.jsonl"), Path(folder, "list.jsonl")
        with TranscriptWriter(files[0]) as from_tail, TranscriptWriter(files[1]) as from_list:
            for writer in (from_tail, from_list):
                writer.header(HEADER)
            for made, (step, at) in enumerate(steps):
                index = at % (len(history) or 1)
                if step == "append":
                    history.append(user(f"message {made}"))
                elif step == "replace" and history:
                    history[index] = assistant(f"replaced {made}")
                elif step == "delete":
                    del history[index:]
                elif step == "snapshot":
                    history.snapshot()  # the runtime's, for a request
                elif step == "read":
                    assert list(from_tail.history) == list(from_list.history)
                else:
                    assert from_tail.sync(history) == from_list.sync(list(history))
                    assert list(from_tail.history) == list(history)
            assert from_tail.sync(history) == from_list.sync(list(history))
            assert from_tail.lines == from_list.lines
        written = [
            [
                {k: v for k, v in json.loads(line).items() if k != "at"}
                for line in f.read_bytes().splitlines()
            ]
            for f in files
        ]
        assert written[0] == written[1]
        assert read_transcript(files[0]).messages == tuple(history)


def test_a_reply_synced_from_the_tail_leaves_the_run_unfrozen(tmp_path: Path) -> None:
    """Recording a reply freezes nothing (a finished fork would never use that snapshot);
    the writer's history, which a fork's header reads, is still the run's."""
    history: History[Message] = History(conversation()[:3])
    view = history.snapshot()
    with TranscriptWriter(tmp_path / "t.jsonl") as writer:
        writer.header(HEADER)
        writer.sync(history)
        history.append(assistant("Looks fine."))
        assert writer.sync(history) == 1
        assert history.extends(view)  # still unfrozen: the tail was read, not snapshotted
        history.append(user("Not recorded yet."))
        assert list(writer.history) == list(history)[:-1]
    assert read_transcript(tmp_path / "t.jsonl").messages == tuple(history)[:-1]


def test_reopening_continues_without_repeating_messages(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, conversation())
    resumed = list(read_transcript(path).messages)
    with TranscriptWriter(path) as writer:
        assert writer.header_written
        assert writer.sync(resumed) == 0
        resumed.append(user("and now the tests"))
        assert writer.sync(resumed) == 1
        with pytest.raises(TranscriptError, match="already has a header"):
            writer.header(HEADER)
    assert read_transcript(path).messages == tuple(resumed)


def test_writing_before_the_header_is_refused(tmp_path: Path) -> None:
    with (
        TranscriptWriter(tmp_path / "t.jsonl") as writer,
        pytest.raises(TranscriptError, match="header first"),
    ):
        writer.message(user("hi"))


def test_a_closed_writer_refuses_to_write(tmp_path: Path) -> None:
    writer = TranscriptWriter(tmp_path / "t.jsonl")
    writer.header(HEADER)
    writer.close()
    writer.close()
    with pytest.raises(TranscriptError, match="closed"):
        writer.status("completed")


def test_background_writers_lines_are_read_back_whole_and_in_order(tmp_path: Path) -> None:
    """Many writers queue lines for the writer thread; a read in this process waits for them."""
    paths = [tmp_path / f"agent-{n}.jsonl" for n in range(40)]
    writers = [TranscriptWriter(path, background=True) for path in paths]
    for writer in writers:
        writer.header(HEADER)
    history: list[Message] = []
    for turn in range(5):
        history.append(user(f"turn {turn}") if turn % 2 == 0 else assistant(f"turn {turn}"))
        for writer in writers:
            writer.sync(history)
    for writer in writers:
        writer.status("completed", output="done")

    for path in paths:  # before any close: reading flushes what is still queued
        transcript = read_transcript(path)
        assert transcript.messages == tuple(history)
        assert transcript.status is not None
        assert transcript.status.status == "completed"
        assert not transcript.torn_tail
    for writer in writers:
        writer.close()


def test_a_background_writer_closes_with_its_lines_written(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path, background=True)
    writer.header(HEADER)
    writer.message(user("hi"))
    writer.close()
    lines = path.read_bytes().splitlines()  # a plain read, not read_transcript
    assert [json.loads(line)["type"] for line in lines] == ["header", "message"]
    reopened = TranscriptWriter(path, background=True)  # continues the same file
    assert list(reopened.history) == [user("hi")]
    reopened.close()


def test_a_failed_background_append_is_raised_and_other_files_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = tmp_path / "gone"
    lost = TranscriptWriter(gone / "t.jsonl", background=True)
    lost.header(HEADER)
    flush_transcripts()
    (gone / "t.jsonl").unlink()
    gone.rmdir()  # the folder vanished under a running writer
    others = [TranscriptWriter(tmp_path / f"{n}.jsonl", background=True) for n in range(100)]
    for other in others:  # a hundred agents later, its file is no longer held open
        other.header(HEADER)
    lost.message(user("nowhere to go"))  # queued: the failure comes later
    for other in others:
        other.message(user("still recorded"))
    flush_transcripts()
    assert f"could not append to the transcript {gone / 't.jsonl'}" in caplog.text
    assert all(read_transcript(o.path).messages == (user("still recorded"),) for o in others)
    with pytest.raises(TranscriptError, match="a line could not be written"):
        lost.message(user("after the loss"))
    with pytest.raises(TranscriptError, match="closed"):  # nothing is written after a hole
        lost.message(user("later still"))
    for writer in (lost, *others):
        writer.close()


def _forget_open_files(folder: Path) -> None:
    """Write enough other files that the writers' thread no longer holds any earlier one open."""
    others = [TranscriptWriter(folder / f"other-{n}.jsonl", background=True) for n in range(20)]
    for other in others:
        other.header(HEADER)
    flush_transcripts()
    for other in others:
        other.close()


def test_a_background_line_lost_at_the_end_is_raised_by_close(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    writer = TranscriptWriter(folder / "t.jsonl", background=True)
    writer.header(HEADER)
    flush_transcripts()
    _forget_open_files(tmp_path)
    (folder / "t.jsonl").unlink()
    folder.rmdir()
    writer.status("completed", output="done")  # the last line, with no later write to fail
    with pytest.raises(TranscriptError, match="a line could not be written"):
        writer.close()


# -- usage and status ----------------------------------------------------------


@pytest.mark.parametrize(("model", "seconds"), [("unpriced-model", 2), ("", 0.25)])
def test_a_usage_line_is_its_entrys_json_priced_or_not_whatever_the_number_type(
    tmp_path: Path, model: str, seconds: float
) -> None:
    """The usage line is serialized as typed by ``UsageEntry``: no cost for an unknown model
    (the header's model when the response names none), and an int ``seconds`` written as the
    entry writes a float (``2.0``)."""
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path)
    writer.header(HEADER)
    response = ModelResponse(message=assistant("hi"), usage=Usage(input_tokens=5), model=model)
    writer.on_event(ResponseReceived(HEADER.agent_id, 1, response, seconds=seconds))
    writer.close()
    assert_lines_are_their_entries_json(path)


def test_events_become_usage_and_status_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path)
    writer.header(HEADER)
    me = HEADER.agent_id
    priced = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=9000, requests=1)
    writer.on_event(AgentStarted(me, HEADER.parent_id, "fork", "x", background=False))
    writer.on_event(AgentStarted("someone-else", None, "main", "x", background=False))
    writer.on_event(ToolCalled(me, "t1", "Read", {}))
    response = ModelResponse(message=assistant("hi"), usage=priced, response_id="msg_1")
    writer.on_event(ResponseReceived(me, 1, response, seconds=0.5))
    report = CacheReport(
        status="miss",
        prompt_tokens=12_000,
        read_tokens=0,
        write_tokens=11_990,
        expected_tokens=9_000,
        findings=(CacheFinding("system_changed", 'the system prompt\nchanged: "é"'),),
        difference=Difference("system", 0, "system block 0", 12, 'text "a" -> "b"'),
        compared_with="parent main-0-def456's last request",
        provider_diagnosis={"type": "unavailable", "score": 0.25},
    )
    writer.on_event(CacheReported(me, 1, report))
    writer.on_event(AgentMovedToBackground(me))
    details: dict[str, JsonValue] = {"turns": 1, "why": ["a\u2028b", None, 1.5, True]}
    writer.on_event(AgentFinished(me, "failed", "all good", error='bad "x"\n', details=details))
    writer.close()

    assert_lines_are_their_entries_json(path)
    transcript = read_transcript(path)
    assert transcript.cache_entries == (
        CacheEntry(at=transcript.cache_entries[0].at, turn=1, report=report.to_dict()),
    )
    statuses = [e.status for e in transcript.entries if isinstance(e, StatusEntry)]
    assert statuses == ["running", "background", "failed"]
    assert transcript.usage == priced
    assert transcript.cost == pytest.approx((1000 * 3 + 100 * 15 + 9000 * 0.3) / 1e6)
    assert transcript.finished
    assert transcript.status is not None
    assert transcript.status.output == "all good"
    assert transcript.status.error == 'bad "x"\n'
    assert transcript.status.details == details


def test_one_unknown_price_makes_the_total_unknown(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path) as writer:
        writer.header(HEADER)
        writer.usage(Usage(input_tokens=10, requests=1), turn=1)
        writer.usage(Usage(input_tokens=10, requests=1), model="local:mystery-7b", turn=2)
    transcript = read_transcript(path)
    assert transcript.usage.input_tokens == 20
    assert transcript.cost is None
    assert not transcript.finished


# -- crashes and corruption ----------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [b'{"type":"message","index":4,"mess', b'{"type":"status","status":"running"}', b"\0\0\0\n"],
    ids=["half a line", "unterminated", "garbage last line"],
)
def test_a_torn_last_line_is_skipped(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "t.jsonl"
    write(path, conversation())
    with path.open("ab") as file:
        file.write(tail)
    transcript = read_transcript(path)
    assert transcript.torn_tail
    assert transcript.messages == tuple(conversation())


def test_reopening_a_torn_file_drops_the_fragment_then_appends(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, conversation())
    with path.open("ab") as file:
        file.write(b'{"type":"mess')
    with TranscriptWriter(path) as writer:
        writer.status("completed", output="ok")
    transcript = read_transcript(path)
    assert not transcript.torn_tail
    assert transcript.finished
    assert transcript.messages == tuple(conversation())


def test_corruption_before_the_last_line_raises(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, conversation())
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:20]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TranscriptError, match="line 3 is not valid"):
        read_transcript(path)
    with pytest.raises(TranscriptError, match="line 3"):
        TranscriptWriter(path)


def test_a_gap_in_the_history_raises(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write(path, [])
    with path.open("a") as file:
        file.write(MessageEntry(index=2, message=user("x")).model_dump_json() + "\n")
    with pytest.raises(TranscriptError, match="skips past the 0 messages"):
        read_transcript(path)


_HEADER_LINE = HEADER.model_dump_json() + "\n"
_STATUS_LINE = StatusEntry(status="running").model_dump_json() + "\n"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "no header"),
        ('{"type":"header","agent_id":"a","root_', "no header"),
        (_STATUS_LINE * 2, "the first line must be a header"),
        (_HEADER_LINE * 2 + _STATUS_LINE, "line 2: a second header"),
        ('{"type":"header","version":99,"new_field":1}\n', "format version 99 is newer"),
    ],
    ids=["empty", "torn header", "no header first", "two headers", "newer format"],
)
def test_bad_headers_are_explained(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(TranscriptError, match=problem):
        read_transcript(path)


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from forkagent.state.transcript import TranscriptHeader, TranscriptWriter
    from forkagent.messages import assistant, user

    writer = TranscriptWriter(sys.argv[1])
    writer.header(TranscriptHeader(agent_id="a", root_id="a", model="test:m", cwd="."))
    n = 0
    while True:
        text = f"message {n} " + "x" * 20000
        writer.message(user(text) if n % 2 == 0 else assistant(text))
        print(n, flush=True)
        n += 1
    """
)


def test_a_writer_killed_with_sigkill_leaves_every_flushed_message(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    for line in child.stdout:
        if int(line) >= 40:
            acknowledged = int(line) + 1
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()

    transcript = read_transcript(path)
    assert len(transcript.messages) >= acknowledged
    for n, message in enumerate(transcript.messages):
        assert message.text == f"message {n} " + "x" * 20000


# -- following -----------------------------------------------------------------


def test_a_tail_returns_only_new_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tail = TranscriptTail(path)
    assert tail.poll() == []
    writer = TranscriptWriter(path)
    writer.header(HEADER)
    writer.message(user("one"))
    assert [e.type for e in tail.poll()] == ["header", "message"]
    with path.open("ab") as file:
        file.write(b'{"type":"sta')  # as if mid-write: not returned yet
    assert tail.poll() == []
    assert not tail.finished
    path.write_bytes(path.read_bytes()[: -len(b'{"type":"sta')])
    writer.status("failed", error="boom")
    writer.close()
    (entry,) = tail.poll()
    assert isinstance(entry, StatusEntry)
    assert tail.finished


# -- where files go ------------------------------------------------------------


def test_files_go_under_the_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORKAGENT_HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home"
    assert transcript_path("main-0-a", "fork-1-b") == (
        tmp_path / "home" / "transcripts" / "main-0-a" / "fork-1-b.jsonl"
    )
    monkeypatch.delenv("FORKAGENT_HOME")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "forkagent"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert state_dir() == tmp_path / ".local" / "state" / "forkagent"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "a\\b"])
def test_ids_that_are_not_file_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="file name"):
        transcript_path("root", bad, base=Path("/tmp"))


def test_a_state_folder_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(StateDirError, match="set FORKAGENT_HOME to a directory you can write"):
        TranscriptWriter(blocker / "transcripts" / "t.jsonl", background=True)


def test_files_are_private_to_the_user(tmp_path: Path) -> None:
    path = tmp_path / "transcripts" / "root" / "a.jsonl"
    write(path, [])
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_a_writer_whose_file_was_removed_raises_instead_of_starting_a_new_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    writer = TranscriptWriter(path)
    writer.header(HEADER)
    path.unlink()
    with pytest.raises(TranscriptError, match="a line could not be written"):
        writer.message(user("lost"))
    assert not path.exists()
    with pytest.raises(TranscriptError, match="closed"):
        writer.message(user("later"))
