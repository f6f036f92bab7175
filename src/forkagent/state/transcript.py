"""Per-agent transcripts: append-only JSON Lines that survive a crash.

Every agent (main, fork or named) gets its own file. The first line, the
header, holds everything needed to send byte-identical requests again: the
rendered system prompt, the exact tool array and the settings (LESSONS 17: a
resumed agent re-uses its rendered prompt instead of rendering a new one).
Later lines record the history, usage and cache report per response, and
status changes.

Each line goes to the file in one ``write`` and is not buffered, so a
process killed with SIGKILL leaves every line it finished; at worst the last
line is torn, and readers skip it. A line that cannot be read anywhere else
is corruption, and reading fails loudly instead of resuming a wrong history.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, TypeAlias, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import SchemaSerializer, core_schema
from typing_extensions import TypedDict

from .._paths import state_dir as state_dir
from ..errors import ForkagentError
from ..events import (
    FINAL_STATUSES,
    AgentFinished,
    AgentKind,
    AgentMovedToBackground,
    AgentStarted,
    CacheReported,
    Compacted,
    Event,
    ResponseReceived,
    TranscriptStatus,
)
from ..history import History, HistoryView, freeze
from ..messages import AssistantMessage, ContentBlock, JsonValue, Message, TextBlock
from ..models._shared import HEAD_MIN, SharedHeads
from ..pricing import cost, price_for
from ..requests import BlockPosition, ModelSettings, ToolSpec
from ..telemetry.cache import CacheReport
from ..usage import Usage
from ._append_helper import OpenFiles
from ._appends import BACKGROUND, OPEN_FILES, BackgroundAppends, _running_loop

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


class TranscriptError(ForkagentError):
    """A transcript cannot be read or written as asked."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class _UnreadableLine(TranscriptError):
    """Not JSON, or not a transcript line: corruption, unless it is the last line."""


# -- where files go ------------------------------------------------------------


class StateDirError(ForkagentError):
    """The state directory cannot be created or written."""


def make_state_dir(folder: Path | str) -> None:
    """Create a private folder of the state directory, or say how to fix what prevents it.

    A folder found usable is trusted for the rest of the process: every agent's
    writer asks, and a system call per fork on the event loop is time the loop
    waits. Known by its name, so that a writer given a string builds no ``Path``
    to ask.
    """
    name = os.fspath(folder)
    if name in _usable_folders or os.access(folder, os.W_OK | os.X_OK):
        _usable_folders.add(name)
        return
    folder = Path(folder)
    try:
        # Each folder it creates is private, not only the last (``mkdir(parents=True)``
        # would leave ``transcripts/`` readable by everyone).
        for missing in reversed([f for f in (folder, *folder.parents) if not f.exists()]):
            missing.mkdir(mode=0o700, exist_ok=True)
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise StateDirError(
            f"cannot use {folder} for forkagent's state ({exc.strerror or exc}): set "
            "FORKAGENT_HOME to a directory you can write, or fix that one's permissions"
        ) from None
    _usable_folders.add(name)


_usable_folders: set[str] = set()


def transcript_path(root_id: str, agent_id: str, *, base: Path | None = None) -> Path:
    """``<state_dir>/transcripts/<root_id>/<agent_id>.jsonl``: one folder per tree."""
    return tree_folder(root_id, base=base) / transcript_name(agent_id)


def tree_folder(root_id: str, *, base: Path | None = None) -> Path:
    """The folder of a tree's transcripts."""
    return (base or state_dir()) / "transcripts" / safe_file_name(root_id)


def transcript_name(agent_id: str) -> str:
    """An agent's transcript's file name in its tree's folder."""
    return f"{safe_file_name(agent_id)}.jsonl"


def safe_file_name(name: str) -> str:
    """An id, checked to be one path component (ids come from other processes too)."""
    if not name or name in {".", ".."} or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"{name!r} cannot be used as a file name")
    return name


# -- lines ---------------------------------------------------------------------


_now: Callable[[], datetime] = functools.partial(datetime.now, UTC)
"""Now, in UTC: a partial, not a function, as every line asks (a Python frame less)."""


class _Line(BaseModel):
    """One JSON line: ``type`` first, then ``at``, when it was written.

    For the header, ``at`` is when the agent was created.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


class HistoryReference(BaseModel):
    """A fork's history starts with its parent's, kept once, in the parent's transcript.

    The first ``messages`` messages of the history that parent ``agent_id``'s
    transcript (in the same folder) held after its first ``lines`` lines (the
    header not counted): the history as it was when the fork was made, whatever
    the parent did after.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: str
    messages: int = Field(ge=0)
    lines: int = Field(ge=0)
    prompt: bool = False
    """The system prompt and tool array are the parent's too: this header leaves them out
    (a fork's are byte for byte its parent's), and reading puts them back."""


class TranscriptHeader(_Line):
    """The first line: who the agent is and the exact bytes its requests start with."""

    type: Literal["header"] = "header"
    at: datetime = Field(default_factory=_now)
    version: int = FORMAT_VERSION
    agent_id: str
    parent_id: str | None = None
    root_id: str
    kind: AgentKind = "main"
    label: str = ""
    model: str
    """The ``provider:model`` spec that resolves back to the model."""
    system: str | tuple[TextBlock, ...] = ""
    """The rendered system prompt, exactly as sent."""
    tools: tuple[ToolSpec, ...] = ()
    settings: ModelSettings = ModelSettings()
    cwd: str
    shared_prefix_end: BlockPosition | None = None
    background: bool = False
    history_from: HistoryReference | None = None
    """Set for a fork whose history starts with its parent's (message lines then go on from
    ``history_from.messages``); None when the whole history is in this file."""
    extra: dict[str, JsonValue] = Field(default_factory=dict)
    """Whatever else the runtime needs to resume (definition name, budget, ...)."""


_OWN_FIELDS = {"type", "at", "agent_id", "label"}
"""What tells one agent's header from its siblings' (``HeaderTemplate``)."""
_JSON_ANY = SchemaSerializer(core_schema.any_schema())
"""Plain values as a line's serializer writes them (the same escapes, the same time format)."""


class HeaderTemplate:
    """A header that a family of agents shares but for each one's id, label and time.

    The N forks of one ``fork`` call differ only there (system prompt, tools, settings,
    cwd, history reference and permissions are the family's), so the shared fields are
    serialized once and each child's line puts its own three in front of them (building,
    validating and serializing a header per child took about 18 of a fork's 140 us of
    transcript work on the event loop).
    Read back, the line is the header ``TranscriptHeader(...)`` would have written; only
    the order of its keys differs (the agent's own first).
    """

    __slots__ = ("_shared", "header")

    def __init__(self, header: TranscriptHeader) -> None:
        self.header = header
        """The family's header; each child's is a copy with its own fields."""
        shared = header.__pydantic_serializer__.to_json(header, exclude=_OWN_FIELDS)
        self._shared = b"," + shared[1:] + b"\n"

    def fill(self, agent_id: str, label: str) -> tuple[FilledHeader, bytes]:
        """One agent's header, made now, and its line."""
        header = FilledHeader(self, agent_id, label, _now())
        own = {"type": "header", "at": header.at, "agent_id": agent_id, "label": label}
        return header, _JSON_ANY.to_json(own)[:-1] + self._shared  # its "}" gives way to theirs


@dataclass(slots=True)
class FilledHeader:
    """One agent's header from its family's template, made a ``TranscriptHeader`` only when
    asked for: its writer needs only the id and the model (a copy of the family's header
    per child cost about 2 us)."""

    template: HeaderTemplate
    agent_id: str
    label: str
    at: datetime

    @property
    def model(self) -> str:
        return self.template.header.model

    def header(self) -> TranscriptHeader:
        own = {"at": self.at, "agent_id": self.agent_id, "label": self.label}
        return self.template.header.model_copy(update=own)


class MessageEntry(_Line):
    """History entry ``index`` is ``message``; anything after it is dropped.

    Normally ``index`` is the history's length (an append). A smaller one
    records a replaced message, e.g. a notification merged into the last
    user message, in the same single line.
    """

    type: Literal["message"] = "message"
    at: datetime = Field(default_factory=_now)
    index: int = Field(ge=0)
    message: Message


class BlocksReference(BaseModel):
    """A message's first ``blocks`` blocks are the first blocks of the message that agent
    ``agent_id``'s transcript (same folder) records at line ``line`` (the header not counted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: str
    line: int = Field(ge=1)
    blocks: int = Field(ge=1)


class SharedMessageEntry(_Line):
    """A ``message`` line whose message starts with blocks another line already holds.

    The N children of one reply with N tool calls each end with a message of the family's
    N placeholder results and the rules, then the child's directive: the first child's line
    holds them all, each sibling's only its directive and this reference (O(1) bytes instead
    of O(N)). Readers put the blocks back: ``Transcript.entries`` holds the ``MessageEntry``.
    """

    type: Literal["shared_message"] = "shared_message"
    at: datetime = Field(default_factory=_now)
    index: int = Field(ge=0)
    head: BlocksReference
    message: Message
    """The message without its first ``head.blocks`` blocks."""


class TruncateEntry(_Line):
    """The history was cut back to ``length`` messages with nothing added."""

    type: Literal["truncate"] = "truncate"
    at: datetime = Field(default_factory=_now)
    length: int = Field(ge=0)


class UsageEntry(_Line):
    """One model response's usage; ``cost`` is None when the price is unknown."""

    type: Literal["usage"] = "usage"
    at: datetime = Field(default_factory=_now)
    turn: int | None = None
    model: str
    response_id: str | None = None
    usage: Usage
    cost: float | None = None
    prewarm: bool = False
    """A ``max_tokens: 0`` pre-warm: billed, but not a turn of its own."""
    seconds: float | None = None
    """How long the request took, from sending it to its last byte (so it began at ``at - seconds``)."""


class CacheEntry(_Line):
    """How response ``turn`` used the prompt cache: ``CacheReport.to_dict()``.

    Kept as plain JSON so that a reason added later cannot make the whole
    transcript unreadable; only ``cache_report`` needs to understand it.
    """

    type: Literal["cache"] = "cache"
    at: datetime = Field(default_factory=_now)
    turn: int
    report: dict[str, JsonValue]

    def cache_report(self) -> CacheReport | None:
        """The report, or None if this forkagent cannot read it (a newer one wrote it)."""
        try:
            return CacheReport.from_dict(self.report)
        except ValueError:
            return None


class CompactionEntry(_Line):
    """The history was summarised: the message lines that follow start the new one."""

    type: Literal["compaction"] = "compaction"
    at: datetime = Field(default_factory=_now)
    summary_agent: str
    messages_before: int
    messages_after: int
    tokens_before: int


class StatusEntry(_Line):
    """The agent's state changed; a final one carries its output or error."""

    type: Literal["status"] = "status"
    at: datetime = Field(default_factory=_now)
    status: TranscriptStatus
    output: str | None = None
    error: str | None = None
    details: dict[str, JsonValue] = Field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES


Entry: TypeAlias = Annotated[
    TranscriptHeader
    | MessageEntry
    | TruncateEntry
    | UsageEntry
    | CacheEntry
    | CompactionEntry
    | StatusEntry,
    Field(discriminator="type"),
]
"""A transcript line as readers see it (a ``shared_message`` line is read as its ``MessageEntry``)."""
_ENTRY: TypeAdapter[Entry] = TypeAdapter(Entry)
_LINE: TypeAdapter[Entry | SharedMessageEntry] = TypeAdapter(
    Annotated[Entry | SharedMessageEntry, Field(discriminator="type")]
)
"""Any line as written."""


# -- reading -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transcript:
    """A transcript as read: the header, every later line, and what they add up to."""

    path: Path
    header: TranscriptHeader
    entries: tuple[Entry, ...]
    """Every line after the header, in file order."""
    messages: tuple[Message, ...]
    """The history at the end of the file, ready to continue from."""
    usage: Usage
    cost: float | None
    """Total cost; None as soon as one response's price is unknown."""
    status: StatusEntry | None
    """The last status line."""
    torn_tail: bool
    """The last line was incomplete (the writer died mid-write) and was skipped."""
    inherited: tuple[Message, ...] = ()
    """The messages read from the parent's transcript (``header.history_from``)."""

    @property
    def finished(self) -> bool:
        return self.status is not None and self.status.final

    @property
    def cache_entries(self) -> tuple[CacheEntry, ...]:
        """The cache report of each response, in order (none in transcripts written before them)."""
        return tuple(e for e in self.entries if isinstance(e, CacheEntry))

    def last_answered(self) -> Answered | None:
        """The history the last answered request sent, and when its answer was recorded.

        Replayed from the lines before that answer, so messages replaced or cut
        after it do not change what it sent. None if the agent never had an answer.
        """
        for position in reversed(range(len(self.entries))):
            answer = self.entries[position]
            if isinstance(answer, MessageEntry) and isinstance(answer.message, AssistantMessage):
                sent = _replay(self.entries[:position], self.inherited)[: answer.index]
                return Answered(tuple(sent), answer.at)
        return None


@dataclass(frozen=True, slots=True)
class Answered:
    """A request as the transcript knows it: the history it sent, and when it was answered."""

    messages: tuple[Message, ...]
    at: datetime


def _replay(entries: Sequence[Entry], inherited: Sequence[Message] = ()) -> list[Message]:
    """The history that lines already checked by ``_Fold`` add up to."""
    history: list[Message] = list(inherited)
    for entry in entries:
        if isinstance(entry, MessageEntry):
            del history[entry.index :]
            history.append(entry.message)
        elif isinstance(entry, TruncateEntry):
            del history[entry.length :]
    return history


class _Fold:
    """Applies lines in order, checking each against what came before."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        """Bytes of complete, valid lines applied so far."""
        self.lines = 0
        self.header: TranscriptHeader | None = None
        self.entries: list[Entry] = []
        self.inherited: tuple[Message, ...] = ()
        self.messages: list[Message] = []
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.status: StatusEntry | None = None

    def feed(self, data: bytes, *, at_end: bool) -> list[Entry]:
        """Apply the complete lines of ``data``, the file's bytes from ``offset`` on.

        ``at_end``: no more lines will follow, so an unreadable last line is a
        torn write rather than corruption.
        """
        lines = data.split(b"\n")[:-1]  # what follows the last newline is unfinished
        applied: list[Entry] = []
        for position, raw in enumerate(lines):
            try:
                entry = self._parse(raw)
            except _UnreadableLine:
                if at_end and position == len(lines) - 1:
                    break
                raise
            self._apply(entry)
            self.offset += len(raw) + 1
            self.lines += 1
            applied.append(entry)
        return applied

    def _parse(self, raw: bytes) -> Entry:
        number = self.lines + 1
        if number == 1:
            self._check_version(raw)
        try:
            entry = _LINE.validate_json(raw)
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]["msg"]
            raise _UnreadableLine(self.path, f"line {number} is not valid: {problem}") from None
        return _whole(self.path, entry) if isinstance(entry, SharedMessageEntry) else entry

    def _check_version(self, raw: bytes) -> None:
        """A newer format gets its own message, not a list of unknown fields."""
        try:
            version = json.loads(raw).get("version")
        except (ValueError, AttributeError):
            return
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise TranscriptError(
                self.path,
                f"format version {version} is newer than this forkagent reads "
                f"({FORMAT_VERSION}); upgrade forkagent",
            )

    def _apply(self, entry: Entry) -> None:
        number = self.lines + 1
        if isinstance(entry, TranscriptHeader) != (number == 1):
            where = "the first line must be a header" if number == 1 else "a second header"
            raise TranscriptError(self.path, f"line {number}: {where}")
        if isinstance(entry, TranscriptHeader):
            self.header = entry
            if (reference := entry.history_from) is not None:
                parent, self.inherited = inherited(self.path, reference)
                self.messages = list(self.inherited)
                if reference.prompt:
                    self.header = entry.model_copy(
                        update={"system": parent.system, "tools": parent.tools}
                    )
            return
        self.entries.append(entry)
        if isinstance(entry, MessageEntry):
            self._cut(entry.index, "message index")
            self.messages.append(entry.message)
        elif isinstance(entry, TruncateEntry):
            self._cut(entry.length, "truncate length")
        elif isinstance(entry, UsageEntry):
            self.usage = self.usage + entry.usage
            self.cost = None if self.cost is None or entry.cost is None else self.cost + entry.cost
        elif isinstance(entry, StatusEntry):
            self.status = entry

    def _cut(self, length: int, what: str) -> None:
        if length > len(self.messages):
            raise TranscriptError(
                self.path,
                f"line {self.lines + 1}: {what} {length} skips past the "
                f"{len(self.messages)} messages before it",
            )
        del self.messages[length:]


def read_transcript(path: Path | str) -> Transcript:
    """Read a whole transcript, skipping a torn last line.

    Raises ``TranscriptError`` for a missing header, a corrupt line before
    the last, or a history that does not add up.
    """
    path = Path(path)
    flush_transcripts()  # every file, so that a tree read after it (its folder listed) is whole
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TranscriptError(
            path,
            "no such transcript: it was moved or deleted, so this agent cannot be shown or "
            "resumed (its registry row remains; give a .jsonl path if the file moved)",
        ) from None
    fold = _Fold(path)
    fold.feed(data, at_end=True)
    if fold.header is None:
        raise TranscriptError(path, "no header (the agent ended before writing one)")
    return Transcript(
        path=path,
        header=fold.header,
        entries=tuple(fold.entries),
        messages=tuple(fold.messages),
        usage=fold.usage,
        cost=fold.cost,
        status=fold.status,
        torn_tail=fold.offset < len(data),
        inherited=fold.inherited,
    )


def inherited(
    path: Path, reference: HistoryReference
) -> tuple[TranscriptHeader, tuple[Message, ...]]:
    """The parent's header, and the messages a fork's transcript at ``path`` takes from it."""
    parent = path.with_name(f"{safe_file_name(reference.agent_id)}.jsonl")
    flush_transcripts()
    if not parent.is_file():
        raise TranscriptError(
            path,
            f"this fork's history starts with the first {reference.messages} messages of its "
            f"parent's transcript {parent}, which is missing: it was moved or deleted, so the "
            "fork's history cannot be read (keep a tree's transcripts together in one folder)",
        )
    source = _parents.read(parent)
    if reference.lines > len(source.entries):
        raise TranscriptError(
            path,
            f"its history starts at line {reference.lines + 1} of {parent}, "
            f"which has {len(source.entries) + 1} lines",
        )
    history = _replay(source.entries[: reference.lines], source.inherited)
    if reference.messages > len(history):
        raise TranscriptError(
            path,
            f"its history starts with {reference.messages} messages of {parent}, "
            f"which held {len(history)} at that point",
        )
    return source.header, tuple(history[: reference.messages])


def _whole(path: Path, entry: SharedMessageEntry) -> MessageEntry:
    """The ``MessageEntry`` a shared line stands for, its first blocks read from their line."""
    head = _SHARED_BLOCKS.read(path, entry.head)
    message = entry.message.model_copy(update={"content": head + entry.message.content})
    return MessageEntry.model_construct(at=entry.at, index=entry.index, message=message)


class _SharedBlocks:
    """Blocks a shared line refers to, by file and line; a line never changes once written.

    Only the referenced line is parsed, and it is always a whole ``message`` line (only
    those are referred to), so resolving never follows a chain of references.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._read: OrderedDict[tuple[Path, int], tuple[ContentBlock, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, path: Path, reference: BlocksReference) -> tuple[ContentBlock, ...]:
        source = path.with_name(f"{safe_file_name(reference.agent_id)}.jsonl")
        with self._lock:
            blocks = self._read.get((source, reference.line))
        if blocks is None or not source.is_file():  # a file moved away is missing, read or not
            blocks = self._parse(path, source, reference.line)
            with self._lock:
                self._read[(source, reference.line)] = blocks
                while len(self._read) > self._limit:
                    self._read.popitem(last=False)
        if len(blocks) < reference.blocks:
            raise TranscriptError(
                path,
                f"a message starts with {reference.blocks} blocks of line {reference.line} of "
                f"{source}, whose message has {len(blocks)}",
            )
        return blocks[: reference.blocks]

    @staticmethod
    def _parse(path: Path, source: Path, line: int) -> tuple[ContentBlock, ...]:
        flush_transcripts()
        try:
            lines = source.read_bytes().split(b"\n")
        except FileNotFoundError:
            raise TranscriptError(
                path,
                f"a message starts with blocks recorded in {source}, which is missing: it was "
                "moved or deleted, so this history cannot be read (keep a tree's transcripts "
                "together in one folder)",
            ) from None
        try:
            entry = _ENTRY.validate_json(lines[line]) if line + 1 < len(lines) else None
        except ValidationError:
            entry = None
        if not isinstance(entry, MessageEntry):
            raise TranscriptError(
                path,
                f"a message starts with the blocks of line {line} of {source}, "
                "which is not a whole message line",
            )
        return entry.message.content


_SHARED_BLOCKS = _SharedBlocks(limit=64)


class _RecentParents:
    """Parent transcripts read last, reused while the file is unchanged.

    Reading a tree (``read_tree``, a resume looking for its children) reads
    each fork's parent again for every fork: once is enough.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._read: OrderedDict[Path, tuple[tuple[int, int], Transcript]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, path: Path) -> Transcript:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return read_transcript(path)  # raises the usual error
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            known = self._read.get(path)
        if known is not None and known[0] == version:
            return known[1]
        transcript = read_transcript(path)
        with self._lock:
            self._read[path] = (version, transcript)
            while len(self._read) > self._limit:
                self._read.popitem(last=False)
        return transcript


_parents = _RecentParents(limit=8)


class TranscriptTail:
    """Follows a transcript that may still be written, line by line."""

    def __init__(self, path: Path | str) -> None:
        self.path = path if isinstance(path, Path) else Path(path)
        self._fold = _Fold(self.path)

    def poll(self) -> list[Entry]:
        """Lines completed since the last poll (the header included); [] if no file yet."""
        try:
            with self.path.open("rb") as file:
                file.seek(self._fold.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        return self._fold.feed(data, at_end=False)

    @property
    def finished(self) -> bool:
        return self._fold.status is not None and self._fold.status.final


def read_tree(path: Path | str) -> list[Transcript]:
    """The agent's transcript, then its descendants' depth first, in start order.

    A tree keeps all its transcripts in one folder, so that folder is the tree.
    """
    start = read_transcript(path)
    others = [
        read_transcript(p) for p in sorted(start.path.parent.glob("*.jsonl")) if p != start.path
    ]
    by_start = sorted(others, key=lambda t: t.header.at)
    out: list[Transcript] = []

    def visit(transcript: Transcript) -> None:
        out.append(transcript)
        for child in by_start:
            if child.header.parent_id == transcript.header.agent_id:
                visit(child)

    visit(start)
    return out


# -- writing -------------------------------------------------------------------


_NO_HISTORY: HistoryView[Message] = HistoryView()
"""A new writer's recorded history: one empty view for all (views never change)."""


class TranscriptWriter:
    """Appends one agent's transcript; each call writes whole lines, unbuffered.

    Opening an existing transcript (to resume) continues it: the history read
    from it is what the next ``sync`` compares against, and a torn last line
    left by a crash is cut off first, the only bytes ever removed, so the
    next line does not glue onto it. One writer per file.

    ``background``: each call sends its lines to a helper process
    (``_appends``) instead of writing them before it returns, so an event
    loop never waits on the disk (creating a file took 0.2 to 0.3 ms here).
    Lines still go out whole and in order, as soon as the helper gets to
    them; the helper drains what was sent even if this process is killed.
    ``close``, ``flush_transcripts`` and every read in this process wait for
    the lines sent.

    ``new``: the caller knows no file is at ``path`` (the recorder of a tree,
    for an agent id it has just made), so none is looked for; the first line
    makes it. ``folder``: ``path``'s folder, which the caller made with
    ``make_state_dir`` (a tree's recorder, whose agents share one): not asked
    again per writer.
    """

    __slots__ = (
        "_appends",
        "_closed",
        "_create",
        "_file",
        "_folder",
        "_fsync",
        "_gathered",
        "_gathered_lines",
        "_header",
        "_history",
        "_lines",
        "_lock",
        "_source",
        "_unfrozen",
    )
    """A tree of thousands of agents has a writer in flight for each: no ``__dict__``."""

    def __init__(
        self,
        path: Path | str,
        *,
        fsync: bool = False,
        background: bool = False,
        new: bool = False,
        folder: str | None = None,
    ) -> None:
        self._file = os.fspath(path)
        self._fsync = fsync
        self._appends: BackgroundAppends | OpenFiles = BACKGROUND if background else OPEN_FILES
        self._lock = threading.Lock()
        if folder is None:
            self._folder = os.path.dirname(self._file)
            make_state_dir(self._folder or ".")
        else:
            self._folder = folder
        self._header: TranscriptHeader | FilledHeader | None = None
        self._history: HistoryView[Message] = _NO_HISTORY
        self._unfrozen: tuple[Message, ...] = ()
        """Messages recorded after ``_history`` from a run's tail, not frozen (``sync``)."""
        self._source: History[Message] | None = None
        """The run's history whose tail ``_unfrozen`` is."""
        self._lines = 0
        """Lines after the header: where a fork's ``HistoryReference`` points."""
        self._gathered: list[bytes] | None = None
        """The lines of a ``together`` block so far, and how many follow the header."""
        self._gathered_lines = 0
        self._closed = False
        self._create = True
        """Only a writer's first append may make its file: a file removed later is a loss."""
        if not new:
            existing = self._recover()
            self._header, self._lines = existing.header, max(existing.lines - 1, 0)
            self._history = freeze(existing.messages)
            # Created now (private); a new file is made by its first line. Not held open
            # for the writer's life: a tree of thousands of agents must not need a file
            # descriptor each; ``OpenFiles`` keeps the few written last open.
            try:
                self._appends.append(self._file, b"", fsync=fsync, create=True)
            except OSError as exc:
                raise self._lost(exc) from exc
            self._create = False

    def _recover(self) -> _Fold:
        fold = _Fold(self.path)
        flush_transcripts()  # its last writer may have lines still queued
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return fold
        fold.feed(data, at_end=True)
        if fold.offset < len(data):
            os.truncate(self.path, fold.offset)
        return fold

    @property
    def path(self) -> Path:
        return Path(self._file)

    @property
    def header_written(self) -> bool:
        return self._header is not None

    def header(self, header: TranscriptHeader, inherited: Sequence[Message] = ()) -> None:
        """Write the header; once per file, before anything else.

        ``inherited``: the messages ``header.history_from`` refers to, already recorded
        in the parent's transcript; the next ``sync`` writes only what follows them.
        """
        self._start(header, _json_line(header), inherited)

    def header_from(
        self,
        template: HeaderTemplate,
        agent_id: str,
        label: str,
        inherited: Sequence[Message] = (),
        history: HistoryView[Message] | None = None,
        *,
        status: TranscriptStatus | None = None,
    ) -> None:
        """``header`` with the template's header for this agent: its family's line, filled in.

        ``history``: the agent's history, which starts with ``inherited``: its messages
        after those are written next, as ``sync(history)`` would (known to follow
        ``inherited``, they need no comparison). ``status``: a status line after them
        (a starting agent's ``"running"``). All of it goes in one append.
        """
        header, line = template.fill(agent_id, label)
        self._start(header, line, inherited, history, status)

    def _start(
        self,
        header: TranscriptHeader | FilledHeader,
        line: bytes,
        inherited: Sequence[Message],
        history: HistoryView[Message] | None = None,
        status: TranscriptStatus | None = None,
    ) -> None:
        """The header's line, ``history``'s messages after ``inherited`` and the ``status``
        line, in one append (a fork's start: one call, not one per line)."""
        if self._header is not None:
            raise TranscriptError(self.path, "already has a header")
        self._header, self._history = header, freeze(inherited)  # a long message names it
        lines = [line]
        if history is not None:
            lines += self._message_lines(history, len(self._history))
        if status is not None:
            lines.append(_status_line(status))
        try:
            self._put(b"".join(lines), len(lines) - 1)
        except TranscriptError:
            self._header, self._history = None, _NO_HISTORY  # no header was written
            raise
        if history is not None:
            self._history = history

    @property
    def lines(self) -> int:
        """Lines written after the header."""
        return self._lines

    @property
    def written_header(self) -> TranscriptHeader | None:
        """The header line as written (None before it is)."""
        if isinstance(self._header, FilledHeader):
            self._header = self._header.header()
        return self._header

    @property
    def history(self) -> Sequence[Message]:
        """The history as recorded so far."""
        return self._recorded()

    def _recorded(self) -> HistoryView[Message]:
        """The recorded history as one view, a tail recorded by ``sync`` folded in."""
        if self._unfrozen:
            self._history, self._unfrozen, self._source = self._fold(), (), None
        return self._history

    def _fold(self) -> HistoryView[Message]:
        """The recorded view and tail as one view: a prefix of the run's own snapshot when it
        starts with them, so that the views of the run's forks share its chunks (compared in
        O(log n), where a view of its own would be compared item by item), else a new view."""
        recorded, tail = self._history, self._unfrozen
        if self._source is not None:
            view, length = self._source.snapshot(), len(recorded) + len(tail)
            if (
                recorded.common_length(view) == len(recorded)
                and view[len(recorded) : length] == tail
            ):
                return view.prefix(length)
        return recorded.extended(tail)

    def message(self, message: Message) -> None:
        """Record a message just appended to the history."""
        recorded = self._recorded()
        self._write_line(self._message_line(len(recorded), message, self._next_line()))
        self._history = recorded.extended((message,))

    def sync(self, messages: Sequence[Message]) -> int:
        """Record whatever changed since the last call; returns the lines written.

        Call after every change to the history. Appends cost one line each;
        a replaced message (the loop merges notifications into the last user
        message) is recorded with its index. Unchanged messages are found by
        identity, so each call is cheap; a run's ``History`` whose frozen part is
        the one recorded is read from its tail, without a snapshot (``History.since``).
        """
        if isinstance(messages, History):  # a run's: ``freeze`` would first ask for a view
            if (tail := messages.since(self._history)) is not None:
                return self._record_tail(messages, tail)
            view = messages.snapshot()
        else:
            view = freeze(messages)  # kept as the next call's reference
        return self._record(view, shared_length(self._recorded(), view))

    def _record_tail(self, source: History[Message], tail: tuple[Message, ...]) -> int:
        """Record ``source``, the recorded view followed by ``tail``: the lines of what ``tail``
        changed in the tail recorded before (usually: appended to it)."""
        base, recorded = len(self._history), self._unfrozen
        keep = len(recorded) if tail[: len(recorded)] == recorded else shared_length(recorded, tail)
        lines = self._message_lines(tail, keep, base)
        if not lines and keep < len(recorded):  # the length only when nothing is new
            lines.append(_json_line(TruncateEntry(length=base + keep)))
        self._write_lines(lines)
        self._unfrozen, self._source = tail, source
        return len(lines)

    def _record(self, messages: HistoryView[Message], keep: int) -> int:
        """Record ``messages``, whose first ``keep`` are the recorded history's first."""
        lines = self._message_lines(messages, keep)
        if not lines and keep < len(self._history):  # the length only when nothing is new
            lines.append(_json_line(TruncateEntry(length=keep)))
        self._write_lines(lines)
        self._history = messages
        return len(lines)

    def _message_lines(self, messages: Sequence[Message], keep: int, base: int = 0) -> list[bytes]:
        """The lines of ``messages`` after the first ``keep``, numbered from the next line;
        ``messages`` start at index ``base`` of the history."""
        first, start = self._next_line(), base + keep
        return [
            self._message_line(start + offset, m, first + offset)
            for offset, m in enumerate(messages[keep:])
        ]

    def _next_line(self) -> int:
        """The number the next line after the header gets, counting lines still gathered."""
        return self._lines + self._gathered_lines + 1

    def _message_line(self, index: int, message: Message, line: int) -> bytes:
        """Line ``line``: the message (a ``MessageEntry``), or only its last block when
        another line of the tree holds the rest (a ``SharedMessageEntry``)."""
        blocks = message.content
        if len(blocks) > HEAD_MIN:  # no head is kept for short ones: no calls for most messages
            agent = (self._header or self._required_header()).agent_id
            written = _WRITTEN_HEADS.find(blocks)
            folder = self._folder
            if written is not None and written[0] == folder and written[1] != agent:
                shared = SharedMessageEntry(
                    index=index,
                    head=BlocksReference(
                        agent_id=written[1], line=written[2], blocks=len(blocks) - 1
                    ),
                    message=message.model_copy(update={"content": blocks[-1:]}),
                )
                return _json_line(shared)
            _WRITTEN_HEADS.keep(blocks, (folder, agent, line))
        # The entry's fields, already valid, serialized as they are by the serializer entries
        # use (a test holds each kind of line equal to its entry's JSON): building the entry
        # first was half a line's cost.
        fields = {"type": "message", "at": _now(), "index": index, "message": message}
        return _JSON_ANY.to_json(fields) + b"\n"

    def usage(
        self,
        usage: Usage,
        *,
        model: str | None = None,
        response_id: str | None = None,
        turn: int | None = None,
        prewarm: bool = False,
        seconds: float | None = None,
    ) -> None:
        """Record one response's usage, priced by ``model`` (default: the header's)."""
        fields = self._usage_fields(usage, model, response_id, turn, prewarm, seconds)
        self._write(UsageEntry.model_validate(fields))

    def _usage_fields(
        self,
        usage: Usage,
        model: str | None,
        response_id: str | None,
        turn: int | None,
        prewarm: bool,
        seconds: float | None,
        priced: float | None = None,
    ) -> dict[str, object]:
        """A ``UsageEntry``'s fields, in order: ``usage`` validates them, ``on_event`` writes
        them as they are. ``priced``: the cost at ``model``'s price if known (None: price it)."""
        name = model or (self._header or self._required_header()).model
        return {
            "type": "usage",
            "at": _now(),
            "turn": turn,
            "model": name,
            "response_id": response_id,
            "usage": usage,
            "cost": cost(name, usage) if priced is None else priced,
            "prewarm": prewarm,
            "seconds": seconds,
        }

    def status(
        self,
        status: TranscriptStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        details: dict[str, JsonValue] | None = None,
    ) -> None:
        self._write(StatusEntry.model_validate(_status_fields(status, output, error, details)))

    RECORDED_EVENTS = (
        ResponseReceived,
        CacheReported,
        AgentStarted,
        AgentFinished,
        AgentMovedToBackground,
        Compacted,
    )
    """The events ``on_event`` writes a line for (others it ignores)."""

    def on_event(self, event: Event) -> None:
        """Record this agent's usage, cache reports and status from the runtime's events.

        Messages are not in the events: call ``sync`` for them. The events' values are
        the runtime's, already valid: their lines are written without building an entry.
        """
        header = self._header or self._required_header()  # the call only to raise
        if event.agent_id != header.agent_id:
            return
        if isinstance(event, ResponseReceived):
            response = event.response
            fields = self._usage_fields(
                response.usage,
                response.model or header.model,
                response.response_id,
                event.turn,
                event.prewarm,
                event.seconds,
                # The event's cost is priced at the header's model, which its requests name:
                # where the response's name has that price (an echo, a dated alias), so has the line.
                event.cost
                if response.model and _priced_alike(response.model, header.model)
                else None,
            )
            serializer = _USAGE_LINE
        elif isinstance(event, CacheReported):
            fields = {"type": "cache", "at": _now(), "turn": event.turn, "report": event.report}
            serializer = _CACHE_LINE
        elif isinstance(event, AgentFinished):
            fields = _status_fields(event.status, event.output, event.error, event.details)
            serializer = _JSON_ANY
        elif isinstance(event, AgentStarted):
            self._put(_status_line("running"), 1)
            return
        elif isinstance(event, AgentMovedToBackground):
            self._put(_status_line("background"), 1)
            return
        elif isinstance(event, Compacted):
            self._write(
                CompactionEntry(
                    summary_agent=event.summary_agent,
                    messages_before=event.messages_before,
                    messages_after=event.messages_after,
                    tokens_before=event.tokens_before,
                )
            )
            return
        else:
            return
        self._put(serializer.to_json(fields) + b"\n", 1)

    def end(self) -> str:
        """No more lines, without waiting for those queued; returns the file's name, for
        ``check_written`` once they are (``flush_transcripts``). Nothing of the writer need
        be kept: a tree of thousands of finished agents holds a string each."""
        with self._lock:
            self._closed = True
        return self._file

    def close(self) -> None:
        """Stop writing; the lines written or queued are in the file when this returns.

        Raises ``TranscriptError`` if a queued line could not be written (a
        background writer's failure surfaces here or at its next write).
        """
        with self._lock:
            self._closed = True
            flush_transcripts()
            OPEN_FILES.release(self._file)
            if self._appends.failing:
                self._raise_failed_append()

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _required_header(self) -> TranscriptHeader | FilledHeader:
        if self._header is None:
            raise TranscriptError(self.path, "write the header first")
        return self._header

    def together(self) -> _Together:
        """The lines of the block go to the file in one write at its end (one open, one call)."""
        return _Together(self)

    def hold(self) -> bool:
        """Hold the lines from now on for one append at ``release``, unless a ``together``
        block or an earlier ``hold`` already does; whether this call does."""
        if self._gathered is not None:
            return False
        self._gathered, self._gathered_lines = [], 0
        return True

    def release(self) -> None:
        """Write the lines held since ``hold``, in one append (raises as a line would)."""
        gathered, lines = self._gathered, self._gathered_lines
        self._gathered, self._gathered_lines = None, 0
        if gathered:
            self._put(b"".join(gathered), lines)

    def _write(self, *entries: _Line) -> None:
        self._write_lines([_json_line(e) for e in entries])

    def _write_lines(self, lines: list[bytes]) -> None:
        """All lines in one write call, so a crash tears at most the last one."""
        if not lines:
            return
        if self._header is None:
            self._required_header()  # raises
        self._put(b"".join(lines), len(lines))

    def _write_line(self, line: bytes) -> None:
        self._required_header()
        self._put(line, 1)

    def _put(self, data: bytes, lines: int) -> None:
        """Whole serialized lines (``lines`` of them after the header) in one append, or with
        the rest of a ``together`` block."""
        if self._gathered is not None:
            self._gathered.append(data)
            self._gathered_lines += lines
            return
        with self._lock:
            if self._closed:
                raise TranscriptError(self.path, "the writer is closed")
            if self._appends.failing:  # an attribute: asked per line, it costs no call
                self._raise_failed_append()
            try:
                self._appends.append(self._file, data, fsync=self._fsync, create=self._create)
            except OSError as exc:
                raise self._lost(exc) from exc
            self._create = False
            self._lines += lines

    def _lost(self, error: OSError) -> TranscriptError:
        """An append failed on this thread (no background, or no helper): the writer stops."""
        self._closed = True
        return TranscriptError(
            self.path, f"a line could not be written ({error.strerror or error})"
        )

    def _raise_failed_append(self) -> None:
        """A line queued earlier never reached the file: say so instead of writing on."""
        try:
            check_written(self._file)
        except TranscriptError:
            self._closed = True  # the file ends where the failure left it
            raise


class _Together:
    """``TranscriptWriter.together``'s block: a class, as a generator's context manager cost
    more per fork than the append it saves."""

    __slots__ = ("_outermost", "_writer")

    def __init__(self, writer: TranscriptWriter) -> None:
        self._writer = writer
        self._outermost = False

    def __enter__(self) -> None:
        self._outermost = self._writer.hold()

    def __exit__(self, *exc_info: object) -> None:
        if self._outermost:
            self._writer.release()


def _json_line(entry: _Line) -> bytes:
    return entry.__pydantic_serializer__.to_json(entry) + b"\n"


def _typed_line(entry: type[_Line], **instead: object) -> SchemaSerializer:
    """A serializer of ``entry``'s fields given as a dict, typed as the entry's (``instead``:
    a field given as a type whose JSON is the entry's), for lines with a model or dataclass
    value: ``_JSON_ANY`` infers their types field by field (the cache line took twice as long)."""
    fields = {
        name: instead.get(name, field.annotation) for name, field in entry.model_fields.items()
    }
    return TypeAdapter(_typed_dict(f"_{entry.__name__}Line", fields)).serializer


_typed_dict = cast("Callable[[str, dict[str, object]], type]", TypedDict)
"""``TypedDict`` called with fields found at run time, which type checkers do not take."""


@lru_cache(maxsize=256)
def _priced_alike(first: str, second: str) -> bool:
    """Whether two model names have one known price (kept: asked for every usage line)."""
    price = price_for(first)
    return price is not None and price == price_for(second)


_USAGE_LINE = _typed_line(UsageEntry)
_CACHE_LINE = _typed_line(CacheEntry, report=CacheReport)  # ``CacheReport.to_dict``'s JSON


def _status_fields(
    status: TranscriptStatus,
    output: str | None = None,
    error: str | None = None,
    details: dict[str, JsonValue] | None = None,
) -> dict[str, object]:
    """A ``StatusEntry``'s fields, in order."""
    return {
        "type": "status",
        "at": _now(),
        "status": status,
        "output": output,
        "error": error,
        "details": details or {},
    }


def _status_line(status: TranscriptStatus) -> bytes:
    """``_status_fields(status)``'s line, of which only the time is serialized: the rest of
    a line without output, error or details is the same for every agent (one per fork)."""
    return _STATUS_HEAD + _JSON_ANY.to_json(_now()) + _STATUS_TAILS[status]


_STATUS_HEAD = b'{"type":"status","at":'
_STATUS_TAILS = {
    status: b',"status":%s,"output":null,"error":null,"details":{}}\n' % _JSON_ANY.to_json(status)
    for status in get_args(TranscriptStatus)
}
"""What follows the time in ``_status_line``, by status, as ``_JSON_ANY`` writes it."""


def check_written(file: str) -> None:
    """Raise ``TranscriptError`` if a background line to ``file`` could not be written.

    Once: the error is forgotten when raised. Every line sent before the last
    ``flush_transcripts`` has been tried.
    """
    if exc := BACKGROUND.failure(file):
        raise TranscriptError(
            Path(file), f"a line could not be written ({exc}); nothing after it was"
        ) from exc


_WRITTEN_HEADS: SharedHeads[ContentBlock, tuple[str, str, int]] = SharedHeads()
"""Where a long message was written whole (folder, agent, line), by its blocks but the last:
a sibling's message that starts with the same blocks refers to that line."""


running_loop = _running_loop
"""The running loop or None (in C, without raising off a loop): a writer of lines held until
the turn's end (``at_turn_end``) asks it per line."""


def at_turn_end(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    """Call ``callback`` at the end of this turn of ``loop``, before the lines the turn
    gave background writers go to the transcripts' helper: what it writes goes with them."""
    BACKGROUND.at_turn_end(loop, callback)


def flush_transcripts() -> None:
    """Wait until the lines background writers queued are in their files (one helper makes
    every file's appends in the order they were queued)."""
    BACKGROUND.flush()


def shared_length(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many leading messages the two histories have in common."""
    if isinstance(old, HistoryView) and isinstance(new, HistoryView):
        return old.common_length(new)
    if len(old) <= len(new) and list(old) == list(new[: len(old)]):
        return len(old)  # the common case, compared in C (identical messages at once)
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a is not b and a != b:
            return index
    return min(len(old), len(new))
