"""Agents of every process on this machine, in one SQLite file.

Each process that runs agents registers them here and keeps their rows
current; ``forkagent ps``, ``logs`` and ``stop`` read them from any other
process. SQLite in WAL mode lets readers and one writer work at once; every
operation opens its own short-lived connection and every write takes the
write lock up front (``BEGIN IMMEDIATE``), so concurrent writers wait on the
busy timeout instead of failing with "database is locked".

Stopping works by polling: ``request_stop`` only sets a flag, and the process
that owns the agent notices it (``stop_requested`` / ``wait_for_stop``) and
cancels its own task. Nothing signals another process.

A runtime on an event loop writes through a ``RegistryWriter``: the rows go
to the helper process of ``_appends``, which writes them (``_rows``, the same
SQL as ``Registry.apply``) coalesced per agent, on a connection it keeps, so
the loop never waits on the disk nor hands the interpreter to a thread.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import marshal
import operator
import os
import queue
import re
import socket
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeAlias, get_args

from ..errors import ForkagentError
from ..events import FINAL_STATUSES, AgentKind, RecordStatus
from ..messages import JsonValue
from ..usage import Usage
from . import _rows
from ._appends import BACKGROUND, _running_loop
from ._rows import process_start as process_start
from .transcript import (
    TranscriptError,
    UsageEntry,
    make_state_dir,
    read_transcript,
    state_dir,
)

PREVIEW_CHARS = 500
SCHEMA_VERSION = 2

P = ParamSpec("P")
logger = logging.getLogger(__name__)


class RegistryError(ForkagentError):
    """An agent could not be found, or the registry could not be used."""


def default_registry_path() -> Path:
    """``$FORKAGENT_REGISTRY``, else ``<state_dir>/registry.db``."""
    if path := os.environ.get("FORKAGENT_REGISTRY"):
        return Path(path).expanduser()
    return state_dir() / "registry.db"


@functools.lru_cache(maxsize=1)
def _own_host() -> str:
    """This machine's name, asked once: a thousand forks' rows would ask a thousand times."""
    return socket.gethostname()


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """One agent's row. Token counts and cost are totals for the agent alone."""

    id: str
    root_id: str
    model: str
    kind: AgentKind = "main"
    parent_id: str | None = None
    label: str = ""
    status: RecordStatus = "running"
    background: bool = False
    pid: int | None = field(default_factory=os.getpid)
    host: str | None = field(default_factory=_own_host)
    process_start: str | None = None
    """When process ``pid`` started (``process_start(pid)``; ``own_process_start()``
    for this one), so that a later process given the same pid is not taken for it.
    None: unknown, and the pid alone is trusted."""
    cwd: str | None = None
    transcript: Path | None = None
    """None when the agent was started with ``skip_transcript``."""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    updated_at: float = field(default_factory=time.time)
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None
    """USD; None when a price is unknown, never 0 for "don't know"."""
    output_preview: str | None = None
    error: str | None = None
    stop_requested: bool = False

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def cache_hit_ratio(self) -> float | None:
        """Share of prompt tokens read from the cache; None before any prompt."""
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else None

    def to_json(self) -> dict[str, JsonValue]:
        """A JSON object of every field, times in ISO 8601, plus the derived ratios."""
        data: dict[str, JsonValue] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_at") and value is not None:
                value = datetime.fromtimestamp(value, UTC).isoformat()
            elif isinstance(value, Path):
                value = str(value)
            data[f.name] = value
        data["total_tokens"] = self.total_tokens
        data["cache_hit_ratio"] = self.cache_hit_ratio
        return data


_COLUMNS = _rows.COLUMNS
_UPDATABLE = frozenset(_COLUMNS) - {"id"}
_STATUSES = frozenset(get_args(RecordStatus))
_IDS_PER_QUERY = 500
"""Below SQLite's oldest limit on a statement's parameters (999)."""


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS agents (
    id TEXT PRIMARY KEY,
    root_id TEXT NOT NULL,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    parent_id TEXT,
    label TEXT NOT NULL,
    status TEXT NOT NULL,
    background INTEGER NOT NULL,
    pid INTEGER,
    host TEXT,
    process_start TEXT,
    cwd TEXT,
    transcript TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    updated_at REAL NOT NULL,
    turns INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost REAL,
    output_preview TEXT,
    error TEXT,
    stop_requested INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS agents_by_status ON agents (status, started_at)",
    "CREATE INDEX IF NOT EXISTS agents_by_root ON agents (root_id)",
)
_NOT_NULL = frozenset(re.findall(r"^\s*(\w+) \w+ NOT NULL", _SCHEMA[0], re.MULTILINE))
_UPGRADES: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE agents ADD COLUMN process_start TEXT",),
}
"""Statements that bring a registry of schema version N to N + 1."""


def _upgrades_from(version: int) -> list[str]:
    return [statement for step in range(version, SCHEMA_VERSION) for statement in _UPGRADES[step]]


@dataclass(slots=True)
class RowWrite:
    """What to write to one agent's row: a whole new row, and/or columns set in order.

    ``record`` replaces the row (a register; ``changes`` then apply on top of it);
    without it, ``changes`` are columns of an existing row. ``changes`` hold what
    ``checked_changes`` returns: the times were taken when the change happened.
    """

    record: AgentRecord | None = None
    changes: dict[str, Any] = field(default_factory=dict)


def checked_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` to a row, refused if not ``AgentRecord`` fields, stamped with the time.

    Sets ``updated_at``, and ``ended_at`` for a final status unless given; values
    as SQLite stores them.
    """
    if not _UPDATABLE.issuperset(changes):  # every row write passes here: no set made
        unknown = ", ".join(sorted(changes.keys() - _UPDATABLE))
        raise TypeError(f"AgentRecord has no updatable field {unknown}")
    now = time.time()
    values = dict(changes, updated_at=now)
    if "status" in changes:
        if changes["status"] not in _STATUSES:
            raise ValueError(f"{changes['status']!r} is not an agent status")
        if changes["status"] in FINAL_STATUSES:
            values.setdefault("ended_at", now)
    if "transcript" in values:  # the one field that holds a Path: stored as text
        values["transcript"] = _sql(values["transcript"])
    return values


class AgentRows(ABC):
    """The ways to change an agent's row, all through ``register`` and ``update``.

    Shared by ``Registry`` (writes now) and ``RegistryWriter`` (writes on its thread).
    """

    @abstractmethod
    def register(self, record: AgentRecord) -> None:
        """Add an agent; an existing row with its id is replaced (a resumed agent)."""

    @abstractmethod
    def update(self, agent_id: str, /, **changes: Any) -> None:
        """Change fields of an agent's row (names as in ``AgentRecord``).

        Moving to a final status also sets ``ended_at`` unless given.
        """

    def record_usage(self, agent_id: str, usage: Usage, *, turns: int, cost: float | None) -> None:
        """Store an agent's running totals (call after each response)."""
        self.update(agent_id, **_usage_changes(usage, turns, cost))

    def finish(
        self, agent_id: str, status: RecordStatus, *, output: str = "", error: str | None = None
    ) -> None:
        """Store how an agent ended, with the start of its output."""
        self.update(agent_id, **_finish_changes(status, output, error))


def _finish_changes(status: RecordStatus, output: str, error: str | None) -> dict[str, str | None]:
    """The columns ``finish`` sets, in order (the one list of them)."""
    return {"status": status, "output_preview": output[:PREVIEW_CHARS], "error": error}


def _usage_changes(usage: Usage, turns: int, cost: float | None) -> dict[str, int | float | None]:
    """The columns ``record_usage`` sets, in order (the one list of them)."""
    return {
        "turns": turns,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost": cost,
    }


StopOutcome: TypeAlias = Literal["requested", "already_finished", "lost"]


@dataclass(frozen=True, slots=True)
class StopResult:
    """What ``request_stop`` did, and the agent's row afterwards."""

    outcome: StopOutcome
    record: AgentRecord


class Registry(AgentRows):
    """The agents table. Cheap to create; safe to share between threads and processes."""

    def __init__(self, path: Path | str | None = None, *, timeout: float = 30.0) -> None:
        self.path = Path(path) if path is not None else default_registry_path()
        self.timeout = timeout
        """Seconds a write waits for another process's write before giving up."""
        make_state_dir(self.path.parent)
        self.path.touch(mode=0o600)  # SQLite gives its -wal and -shm files the same mode
        self._local = threading.local()
        """Per thread: ``db``, the open batch's connection."""
        self.recovered: str | None = None
        """Set when the file was damaged: what was moved aside and rebuilt (also logged)."""
        try:
            self._create()
        except RegistryError as exc:
            if not _damaged(exc):
                raise
            self._recover(exc)

    def _recover(self, problem: RegistryError) -> None:
        """Move a damaged file aside and rebuild the rows from the transcripts.

        The transcripts are the record of what happened; the registry only
        indexes them, so nothing is lost but the pids of agents still running.
        """
        aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self.path.touch(mode=0o600)
        self._create()
        records = [r for p in _transcript_files() if (r := _record_from(p)) is not None]
        self.apply({record.id: RowWrite(record) for record in records})
        self.recovered = (
            f"the agent registry {self.path} was damaged ({problem.__cause__}); moved it to "
            f"{aside} and rebuilt {len(records)} rows from the transcripts"
        )
        logger.warning("%s", self.recovered)

    # -- writing -------------------------------------------------------------

    def register(self, record: AgentRecord) -> None:
        self.apply({record.id: RowWrite(record, {"updated_at": time.time()})})

    def update(self, agent_id: str, /, **changes: Any) -> None:
        self.apply({agent_id: RowWrite(changes=checked_changes(changes))})

    def apply(self, rows: Mapping[str, RowWrite]) -> None:
        """Write several agents' rows in one transaction, in a few statements.

        New rows go in with one multi-row INSERT, changes with one multi-row UPDATE
        per set of columns (``_rows.write_rows``, which a ``RegistryWriter``'s rows
        go through too). A row that cannot be written does not keep the others out:
        they are written, then ``RegistryError`` names it.
        """
        plain = {
            agent_id: (None if row.record is None else _record_values(row.record), row.changes)
            for agent_id, row in rows.items()
        }
        with self._in_transaction() as db:
            failures = _rows.write_rows(db, plain, str(self.path))
        if failures:
            raise RegistryError("; ".join(failures))

    # -- reading -------------------------------------------------------------

    def get(self, agent_id: str) -> AgentRecord:
        """The agent with this id, or with the only id that starts with it."""
        if not agent_id:
            raise RegistryError("give an agent id (or the start of one)")
        with self._connection() as db:
            rows = db.execute("SELECT * FROM agents WHERE id = ?", (agent_id,)).fetchall()
            if not rows:
                rows = db.execute(
                    "SELECT * FROM agents WHERE substr(id, 1, ?) = ? "
                    "ORDER BY started_at DESC LIMIT 6",
                    (len(agent_id), agent_id),
                ).fetchall()
        if not rows:
            raise RegistryError(f"no agent id starts with {agent_id!r} in {self.path}")
        if len(rows) > 1:
            shown = ", ".join(row["id"] for row in rows[:5])
            raise RegistryError(
                f"{agent_id!r} is the start of several agent ids ({shown}"
                f"{', ...' if len(rows) > 5 else ''}); give more of it"
            )
        return _from_row(rows[0])

    def list(
        self, *, include_finished: bool = True, limit: int | None = 50
    ) -> tuple[AgentRecord, ...]:
        """Running agents first, then the most recently started."""
        where = "" if include_finished else "WHERE status = 'running'"
        with self._connection() as db:
            rows = db.execute(
                f"SELECT * FROM agents {where} "
                "ORDER BY status = 'running' DESC, started_at DESC LIMIT ?",
                (-1 if limit is None else limit,),
            ).fetchall()
        return tuple(_from_row(row) for row in rows)

    # -- stopping ------------------------------------------------------------

    def request_stop(self, agent_id: str) -> StopResult:
        """Ask the process that runs an agent to stop it.

        An agent whose process is gone (on this host) is marked ``lost``
        instead, since nobody is left to see the flag.
        """
        record = self.get(agent_id)
        if record.finished:
            return StopResult("already_finished", record)
        if why := _rows.gone(record.pid, record.host, record.process_start):
            with self._writing() as db:
                _rows.set_lost(db, [(record.id, why)])
            return StopResult("lost", self.get(record.id))
        with self._writing() as db:
            db.execute(
                "UPDATE agents SET stop_requested = 1, updated_at = ? "
                "WHERE id = ? AND status = 'running'",
                (time.time(), record.id),
            )
        record = self.get(record.id)
        return StopResult("already_finished" if record.finished else "requested", record)

    def stop_requested(self, agent_id: str) -> bool:
        """Whether someone asked this agent (exact id) to stop; False for an unknown id."""
        with self._connection() as db:
            row = db.execute(
                "SELECT stop_requested FROM agents WHERE id = ?", (agent_id,)
            ).fetchone()
        return bool(row and row[0])

    def stops_requested(self, agent_ids: Iterable[str]) -> set[str]:
        """Which of ``agent_ids`` someone asked to stop: a whole tree in one connection."""
        ids = list(agent_ids)
        asked: set[str] = set()
        with self._connection() as db:
            for start in range(0, len(ids), _IDS_PER_QUERY):
                chunk = ids[start : start + _IDS_PER_QUERY]
                marks = ", ".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT id FROM agents WHERE stop_requested = 1 AND id IN ({marks})", chunk
                )
                asked.update(row[0] for row in rows)
        return asked

    async def wait_for_stop(self, agent_id: str, *, interval: float = 0.5) -> None:
        """Return once a stop is requested; the owner then cancels the agent.

        Run it as a task beside the agent and cancel it when the agent ends.
        """
        while True:
            if await asyncio.to_thread(self.stop_requested, agent_id):
                return
            await asyncio.sleep(interval)

    def forget_finished(self, older_than_days: float) -> int:
        """Delete the rows of agents that ended more than ``older_than_days`` ago.

        Their transcripts stay; ``logs`` and ``explain`` still read them by path.
        """
        cutoff = time.time() - older_than_days * 86_400
        with self._connection() as db:
            deleted = db.execute(
                "DELETE FROM agents WHERE status != 'running' AND ended_at IS NOT NULL "
                "AND ended_at < ?",
                (cutoff,),
            ).rowcount
        return int(deleted)

    def mark_lost(self) -> tuple[AgentRecord, ...]:
        """Mark ``lost`` the running agents whose process on this host has ended."""
        with self._connection() as db:
            lost = _rows.find_lost(db)
        if lost:
            with self._writing() as db:
                _rows.set_lost(db, lost)
        return tuple(self.get(agent_id) for agent_id, _ in lost)

    # -- connections -----------------------------------------------------------

    def _create(self) -> None:
        with self._connection() as db:
            _rows.use_wal(db, self.timeout)
            if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
        with self._writing() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RegistryError(
                    f"{self.path} has schema version {version}, newer than this forkagent "
                    f"reads ({SCHEMA_VERSION}): upgrade forkagent"
                )
            statements = _SCHEMA if version == 0 else _upgrades_from(version)
            for statement in statements:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation; SQLite's errors become ``RegistryError``."""
        try:
            with closing(_rows.connect(str(self.path), self.timeout)) as db:
                db.row_factory = sqlite3.Row
                yield db
        except sqlite3.Error as exc:
            raise RegistryError(f"the agent registry {self.path}: {exc}") from exc

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Make this thread's writes inside the block one transaction: one lock, one commit.

        A write that fails is undone alone (a savepoint; for a single statement, SQLite's
        own undo of a failed statement) and raises as usual.
        Reads inside the block do not see its writes: each opens its own connection.
        """
        outer = getattr(self._local, "db", None)
        with self._writing() as db:
            self._local.db = db
            try:
                yield
            finally:
                self._local.db = outer

    @contextmanager
    def _in_transaction(self) -> Iterator[sqlite3.Connection]:
        """This thread's batch, else a transaction of its own.

        In a batch, no savepoint: ``apply`` undoes nothing itself (SQLite undoes
        a failed statement whole and keeps the transaction), so one would
        protect nothing, for two more statements per write.
        """
        batch: sqlite3.Connection | None = getattr(self._local, "db", None)
        if batch is not None:
            yield batch
        else:
            with self._writing() as db:
                yield db

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds the lock from the start; in a batch, a savepoint."""
        batch: sqlite3.Connection | None = getattr(self._local, "db", None)
        if batch is None:
            with (
                self._connection() as db,
                _rows.transaction(db, "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"),
            ):
                yield db
        else:
            with _rows.transaction(
                batch, "SAVEPOINT write", "RELEASE write", "ROLLBACK TO write", "RELEASE write"
            ):
                yield batch


def _damaged(error: RegistryError) -> bool:
    """The file is not a database, or a corrupt one (not a lock or I/O problem)."""
    cause = error.__cause__
    return isinstance(cause, sqlite3.DatabaseError) and not isinstance(
        cause, sqlite3.OperationalError
    )


def _transcript_files() -> list[Path]:
    return sorted((state_dir() / "transcripts").glob("*/*.jsonl"))


def _record_from(path: Path) -> AgentRecord | None:
    """A transcript's agent as a row; an unfinished one is ``lost`` (its process is unknown)."""
    try:
        transcript = read_transcript(path)
    except TranscriptError:
        return None
    header, usage = transcript.header, transcript.usage
    final = transcript.status if transcript.finished else None
    return AgentRecord(
        id=header.agent_id,
        root_id=header.root_id,
        model=header.model,
        kind=header.kind,
        parent_id=header.parent_id,
        label=header.label,
        status="lost" if final is None or final.status == "background" else final.status,
        background=header.background,
        pid=None,
        host=None,
        cwd=header.cwd,
        transcript=path,
        started_at=header.at.timestamp(),
        ended_at=final.at.timestamp() if final else None,
        turns=sum(1 for e in transcript.entries if isinstance(e, UsageEntry) and not e.prewarm),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost=transcript.cost,
        output_preview=(final.output or "")[:PREVIEW_CHARS] if final else None,
        error=final.error if final else "rebuilt from its transcript: it had not finished",
    )


def _sql(value: object) -> object:
    return str(value) if isinstance(value, Path) else value


_RECORD_VALUES = operator.attrgetter(*_COLUMNS)
_TRANSCRIPT = _rows.POSITION["transcript"]


def _record_values(record: AgentRecord) -> list[object]:
    """The values of ``record`` in ``_COLUMNS`` order, as SQLite stores them."""
    values: list[object] = list(_RECORD_VALUES(record))
    values[_TRANSCRIPT] = _sql(values[_TRANSCRIPT])  # the one field that holds a Path
    return values


def _from_row(row: sqlite3.Row) -> AgentRecord:
    data = dict(zip(row.keys(), row, strict=True))
    data["background"] = bool(data["background"])
    data["stop_requested"] = bool(data["stop_requested"])
    data["transcript"] = Path(data["transcript"]) if data["transcript"] else None
    return AgentRecord(**data)


def own_process_start() -> str | None:
    """``process_start`` of this process (read once)."""
    return _start_of(os.getpid())


@functools.lru_cache(maxsize=1)
def _start_of(pid: int) -> str | None:
    return process_start(pid)


@functools.lru_cache(maxsize=1)
def _own_process() -> tuple[int, str, str | None]:
    """This process's pid, host and ``process_start``, for its agents' rows: asked once, not
    per fork (``os.getpid`` is a system call); a child made by ``os.fork`` asks again."""
    return os.getpid(), _own_host(), own_process_start()


os.register_at_fork(after_in_child=_own_process.cache_clear)
_UNUSED = tuple(_record_values(AgentRecord(id="", root_id="", model=""))[_rows.POSITION["turns"] :])
"""A new row's columns from ``turns`` on, as ``AgentRecord``'s defaults have them."""
_Held: TypeAlias = "list[_rows.Change | Callable[[], object]]"
_EARLY_ROWS = 64
"""Rows of one turn of the event loop that go to the helper before the turn ends (with the
transcripts' lines, which go in parts too: ``_appends._EARLY_WRITE``): a turn in which a fork
family's responses land would otherwise leave all their rows for the helper to write while the
session's close waits."""
_STORABLE: frozenset[type] = frozenset({str, int, float, bool, bytes, type(None)})
"""The types of a value that can go into a row (and through ``marshal`` to the helper)."""


def _unstorable(agent_id: str, values: Collection[object]) -> TypeError:
    """The error for a row with a value of a type ``_STORABLE`` does not hold."""
    bad = sorted({type(value).__name__ for value in values} - {t.__name__ for t in _STORABLE})
    return TypeError(f"agent {agent_id!r}: a row cannot hold a value of type {', '.join(bad)}")


class RegistryWriter(AgentRows):
    """Writes a registry's rows off the event loop, in the order they were given.

    The rows go to the helper process of ``state._appends``, which writes them with
    ``sqlite3`` in its own interpreter (``_rows``): a writer thread here would take
    the interpreter from the busy event loop for every statement. The loop's share
    is turning a change into plain values; the rows of one turn of the loop go to the
    pipe in one write, with the transcripts' lines. The helper writes all the rows of
    one read of the pipe in one transaction, coalesced per agent (a register and the
    updates after it: one INSERT of the final row), and keeps its connection.

    Row writes (``register``, ``update``, ``record_usage``, ``finish``) are checked
    and stamped with the time on the caller's thread, and return at once. A row that
    fails is logged, never raised. ``close`` waits until every row is written, so a
    session that closes normally loses nothing; at interpreter exit an unclosed
    writer is flushed too. Rows already sent survive a kill -9 of this process.

    Where no helper could start, a thread of this process writes the rows with the
    same ``_rows`` code: slower, never lost.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        """The database written (``Registry.path`` and ``timeout``); ``write`` runs its
        operations."""
        self._database = str(registry.path)
        self._lock = threading.Lock()
        self._sending: list[_rows.Change] = []
        """Rows of this turn of the event loop, sent at its end."""
        self._push_loop: asyncio.AbstractEventLoop | None = None
        """The loop whose turn ends with a push of ``_sending``."""
        self._held: _Held | None = None
        """While an operation of ``write`` waits or runs: it, and everything given after it."""
        self._operations: threading.Thread | None = None
        self._at_exit = False

    def register(self, record: AgentRecord) -> None:
        self._put(record.id, _record_values(record), {})

    def register_started(
        self,
        agent_id: str,
        *,
        root_id: str,
        model: str,
        kind: AgentKind,
        parent_id: str | None,
        label: str,
        background: bool,
        cwd: str,
        transcript: str | None,
    ) -> None:
        """``register`` of an agent this process starts now: running, nothing used yet.

        The row is ``AgentRecord(...)``'s with these fields (a test holds them equal), built
        in ``_COLUMNS`` order without the record: 25 frozen fields set one by one were most
        of a fork's registry work on the event loop.
        """
        now = time.time()
        pid, host, process_started = _own_process()
        values: list[object] = [
            agent_id,
            root_id,
            model,
            kind,
            parent_id,
            label,
            "running",
            background,
            pid,
            host,
            process_started,
            cwd,
            transcript,
            now,
            None,
            now,
            *_UNUSED,
        ]
        self._put(agent_id, values, {})

    def record_usage(self, agent_id: str, usage: Usage, *, turns: int, cost: float | None) -> None:
        """``update`` of ``_usage_changes``, whose columns are known updatable, nullable only
        for ``cost`` and never a status, so none of its checks but the types' can fail (a test
        holds the rows equal): it ran once per response on the event loop."""
        values: dict[str, object] = dict(_usage_changes(usage, turns, cost), updated_at=time.time())
        self._put(agent_id, None, values)

    def finish(
        self, agent_id: str, status: RecordStatus, *, output: str = "", error: str | None = None
    ) -> None:
        """``update`` of ``_finish_changes``, whose only column that needs a value is the
        status, which ``checked_changes`` checks (a test holds the rows equal): once per
        agent on the event loop."""
        self._put(agent_id, None, checked_changes(_finish_changes(status, output, error)))

    def update(self, agent_id: str, /, **changes: Any) -> None:
        """As ``Registry.update``; also refuses None for a column that needs a value,
        and a value no column can hold, with a ``ValueError`` or ``TypeError`` here
        rather than a failed row later."""
        values = checked_changes(changes)
        if None in values.values() and (
            missing := [
                name for name, value in values.items() if value is None and name in _NOT_NULL
            ]
        ):  # a finish without an error: the common None, in a column that may hold it
            raise ValueError(f"an agent's {', '.join(sorted(missing))} cannot be None")
        self._put(agent_id, None, values)

    def mark_lost(self) -> None:
        """``Registry.mark_lost``, in order with the rows, by the helper process.

        A session starts with it (a crashed run's agents): on a thread of this process
        its queries took the interpreter from the event loop for the session's first
        tens of milliseconds. Without a helper, ``write(registry.mark_lost)``.
        """
        with self._lock:
            self._exit_waits()
            if self._held is None and self._push_locked(mark_lost=True):
                return
        self.write(self.registry.mark_lost)

    def write(self, operation: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """Run ``operation(*args, **kwargs)`` on a thread, e.g. ``write(registry.mark_lost)``.

        It runs once every row given before it is written, and the rows given after it
        wait (here, in memory) until it has run.
        """
        call = functools.partial(operation, *args, **kwargs)
        with self._lock:
            self._exit_waits()
            if self._held is not None:
                self._held.append(call)
                return
            self._push_locked()
            self._held = [call]
            self._operations = threading.Thread(
                target=self._run_operations, name="forkagent-registry", daemon=True
            )
            self._operations.start()

    def close(self, *, wait: bool = True) -> None:
        """Send every row given so far; ``wait``: until they are written.

        ``close(wait=False)`` lets the caller close other things meanwhile; a later
        ``close()``, or the interpreter's exit, waits. The writer can be used again.
        """
        with self._lock:
            self._push_locked()
            operations = self._operations
        if not wait:
            return
        if operations is not None:
            operations.join()
        _flush_rows()
        with self._lock:
            if self._at_exit and self._held is None and not self._sending:
                atexit.unregister(self.close)
                self._at_exit = False

    def _put(self, agent_id: str, row: list[object] | None, changes: dict[str, object]) -> None:
        """Send a new ``row`` or ``changes`` to one, refused here if a value cannot be stored:
        at the end of this turn of the event loop, or now off a loop."""
        values = changes.values() if row is None else row
        if not _STORABLE.issuperset(map(type, values)):  # checked inline: once per row
            raise _unstorable(agent_id, values)
        with self._lock:
            if not self._at_exit:  # asked per row: the call only the first time
                self._exit_waits()
            if self._held is not None:
                self._held.append((agent_id, row, changes))
                return
            sending = self._sending
            if row is None and sending and sending[-1][0] == agent_id:
                # The same agent's change just before it (a fork's usage and finish in one
                # turn): one change to marshal, as the helper would coalesce them.
                sending[-1][2].update(changes)
            else:
                sending.append((agent_id, row, changes))
            if (loop := _running_loop()) is None:  # in C, without raising outside a loop
                self._push_locked()  # no turn to wait for the end of
                return
            if len(sending) >= _EARLY_ROWS:  # a turn's worth: written while the loop works on
                self._push_locked(at_once=True)
                return
            if self._push_loop is not loop:  # not another loop's, which may have closed
                self._push_loop = loop
                BACKGROUND.at_turn_end(loop, self._push)  # with the turn's transcript lines

    def _exit_waits(self) -> None:
        if not self._at_exit:
            self._at_exit = True
            atexit.register(self.close)

    def _push(self) -> None:
        with self._lock:
            self._push_loop = None
            self._push_locked()

    def _push_locked(self, *, mark_lost: bool = False, at_once: bool = False) -> bool:
        """Send the rows of ``_sending`` (then ``mark_lost``) to the helper, ``at_once`` into
        its pipe or with the turn's other requests; without a helper, the rows to this
        process's thread. Whether the helper took them."""
        if not self._sending and not mark_lost:
            return True
        changes, self._sending = self._sending, []
        timeout = self.registry.timeout
        payload = marshal.dumps((timeout, changes, mark_lost))
        if BACKGROUND.send_rows(self._database, payload, at_once=at_once):
            return True
        if changes:
            _IN_PROCESS.put(self._database, timeout, changes)
        return False

    def _run_operations(self) -> None:
        """Run the held operations in order, each after the rows before it are written."""
        while True:
            with self._lock:
                assert self._held
                operation = self._held.pop(0)
                assert callable(operation)
            _flush_rows()
            try:
                operation()
            except Exception:
                logger.exception("a write to the agent registry %s failed", self.registry.path)
            with self._lock:
                assert self._held is not None
                while self._held and not callable(change := self._held[0]):
                    self._sending.append(change)
                    del self._held[0]
                self._push_locked()
                if not self._held:
                    self._held = self._operations = None
                    return


class _InProcessRows:
    """Where no helper process could start: a thread of this process writes the rows."""

    def __init__(self) -> None:
        self.forget_thread()

    def forget_thread(self) -> None:
        """Start afresh (in a child process after ``fork``, where the thread does not run)."""
        self._queue: queue.SimpleQueue[tuple[str, float, list[_rows.Change]] | threading.Event]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def put(self, database: str, timeout: float, changes: list[_rows.Change]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="forkagent-registry-rows", daemon=True
                )
                self._thread.start()
        self._queue.put((database, timeout, changes))

    def flush(self) -> None:
        """Wait until every row put so far is written (and the connections closed)."""
        if self._thread is not None:
            written = threading.Event()
            self._queue.put(written)
            written.wait()

    def _work(self) -> None:
        """Write what is queued, per database in one transaction; close them when idle."""
        databases = _rows.Databases()
        while True:
            items = [self._queue.get()]
            while not self._queue.empty():
                items.append(self._queue.get())
            pending: dict[tuple[str, float], list[_rows.Change]] = {}
            for item in items:
                if not isinstance(item, threading.Event):
                    database, timeout, changes = item
                    pending.setdefault((database, timeout), []).extend(changes)
            for (database, timeout), changes in pending.items():
                try:
                    failure = databases.write(database, timeout, changes)
                except Exception as exc:  # a fault in _rows: the flush below must still come
                    failure = repr(exc)
                if failure is not None:
                    logger.error("a write to the agent registry %s failed: %s", database, failure)
            if self._queue.empty():
                databases.close()  # checkpoints the WAL: a flush leaves no -wal file behind
            for item in items:
                if isinstance(item, threading.Event):
                    item.set()


def _flush_rows() -> None:
    """Wait until every row sent so far is written, wherever it went."""
    BACKGROUND.flush()
    _IN_PROCESS.flush()


_IN_PROCESS = _InProcessRows()
os.register_at_fork(after_in_child=_IN_PROCESS.forget_thread)
