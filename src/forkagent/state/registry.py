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

A runtime on an event loop writes through a ``RegistryWriter``, whose thread
does the disk I/O so the loop never waits on it, coalescing what is queued
per agent and keeping one connection for its life.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import itertools
import logging
import operator
import os
import queue
import re
import socket
import sqlite3
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeAlias, get_args

from ..errors import ForkagentError
from ..events import FINAL_STATUSES, AgentKind, RecordStatus
from ..messages import JsonValue
from ..usage import Usage
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


_COLUMNS = tuple(f.name for f in fields(AgentRecord))
_UPDATABLE = frozenset(_COLUMNS) - {"id"}
_STATUSES = frozenset(get_args(RecordStatus))
_IDS_PER_QUERY = 500
"""Below SQLite's oldest limit on a statement's parameters (999)."""
_ROWS_PER_STATEMENT = 64
"""The most rows in one statement. A statement's rows are a power of two up to it, so a
connection prepares a handful of statements once and reuses them (``sqlite3`` caches them
by text): preparing a statement of a whole drain's rows, new each time, cost SQLite more
than writing them (11 against 4 us a row for an INSERT of 1,000)."""
_UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
"""Whether SQLite has ``UPDATE ... FROM`` (3.33, 2020), for an UPDATE of many rows."""


@functools.lru_cache(maxsize=64)
def _insert_sql(count: int) -> str:
    """An INSERT (replacing) of ``count`` whole rows, columns in ``_COLUMNS`` order."""
    row = f"({', '.join('?' * len(_COLUMNS))})"
    return (
        f"INSERT OR REPLACE INTO agents ({', '.join(_COLUMNS)}) VALUES {', '.join([row] * count)}"
    )


@functools.lru_cache(maxsize=256)
def _update_sql(columns: tuple[str, ...], count: int) -> str:
    """An UPDATE of ``columns`` in ``count`` rows, each given as its id then the values.

    It starts with UPDATE, not WITH: Python's ``rowcount`` counts only statements that do.
    """
    if count == 1:
        assignments = ", ".join(f"{name} = ?{n}" for n, name in enumerate(columns, start=2))
        return f"UPDATE agents SET {assignments} WHERE id = ?1"
    row = f"({', '.join('?' * (len(columns) + 1))})"
    assignments = ", ".join(f"{name} = v.column{n}" for n, name in enumerate(columns, start=2))
    return (
        f"UPDATE agents SET {assignments} FROM (VALUES {', '.join([row] * count)}) AS v "
        "WHERE agents.id = v.column1"
    )


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
        self.update(
            agent_id,
            turns=turns,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost=cost,
        )

    def finish(
        self, agent_id: str, status: RecordStatus, *, output: str = "", error: str | None = None
    ) -> None:
        """Store how an agent ended, with the start of its output."""
        self.update(agent_id, status=status, output_preview=output[:PREVIEW_CHARS], error=error)


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
        """Per thread: ``db``, the open batch's connection; ``keep`` and ``kept``, see
        ``keeping_connection``."""
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
        per set of columns: each statement is a round trip of the GIL, which a
        writer thread beside a busy event loop waits for. A row that cannot be
        written does not keep the others out: they are written, then
        ``RegistryError`` names it.
        """
        inserts: list[tuple[str, list[object]]] = []
        updates: dict[tuple[str, ...], list[tuple[str, list[object]]]] = {}
        for agent_id, row in rows.items():
            if row.record is None:
                values = [agent_id, *row.changes.values()]
                updates.setdefault(tuple(row.changes), []).append((agent_id, values))
            else:
                inserts.append((agent_id, _row_values(row.record, row.changes)))
        with self._in_transaction() as db:
            failures = self._write_many(db, _insert_sql, inserts, many=True, must_exist=False)
            for columns, group in updates.items():
                sql = functools.partial(_update_sql, columns)
                failures += self._write_many(db, sql, group, many=_UPDATE_FROM, must_exist=True)
        if failures:
            raise RegistryError("; ".join(failures))

    def _write_many(
        self,
        db: sqlite3.Connection,
        sql: Callable[[int], str],
        rows: Sequence[tuple[str, Sequence[object]]],
        *,
        many: bool,
        must_exist: bool,
    ) -> list[str]:
        """Write ``rows`` with statements ``sql(n)`` of n rows; what went wrong, per agent.

        ``many``: whether ``sql`` takes more than one row (a power of two up to
        ``_ROWS_PER_STATEMENT`` and SQLite's limit on a statement's parameters).

        When a statement fails (SQLite undoes it whole) or misses a row, the rows are
        written again one at a time to find which: every statement sets absolute
        values, so writing a row twice changes nothing.
        """
        if not rows:
            return []
        limit = db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(rows[0][1])
        most = max(1, min(limit, _ROWS_PER_STATEMENT)) if many else 1
        written = start = 0
        try:
            while start < len(rows):
                count = 1 << (min(most, len(rows) - start).bit_length() - 1)
                chunk = rows[start : start + count]
                flat = list(itertools.chain.from_iterable(values for _, values in chunk))
                written += db.execute(sql(count), flat).rowcount
                start += count
            if not must_exist or written == len(rows):
                return []
        except sqlite3.Error:
            pass
        failures: list[str] = []
        for agent_id, values in rows:
            try:
                if db.execute(sql(1), values).rowcount == 0 and must_exist:
                    failures.append(f"no agent with id {agent_id!r} in {self.path}")
            except sqlite3.Error as exc:
                failures.append(f"the agent registry {self.path}, agent {agent_id!r}: {exc}")
        return failures

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
        if why := _gone_reason(record):
            self._mark_lost(record, why)
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
            rows = db.execute(
                "SELECT * FROM agents WHERE status = 'running' AND host = ?",
                (socket.gethostname(),),
            ).fetchall()
        gone = [(r, why) for r in map(_from_row, rows) if (why := _gone_reason(r))]
        for record, why in gone:
            self._mark_lost(record, why)
        return tuple(self.get(r.id) for r, _ in gone)

    def _mark_lost(self, record: AgentRecord, why: str) -> None:
        now = time.time()
        with self._writing() as db:
            db.execute(
                "UPDATE agents SET status = 'lost', ended_at = ?, updated_at = ?, error = ? "
                "WHERE id = ? AND status = 'running'",
                (now, now, why, record.id),
            )

    # -- connections -----------------------------------------------------------

    def _create(self) -> None:
        with self._connection() as db:
            _use_wal(db, self.timeout)
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
        local = self._local
        try:
            if not getattr(local, "keep", False):
                with closing(self._connect()) as db:
                    yield db
                return
            if local.kept is None:
                local.kept = self._connect()
            kept: sqlite3.Connection = local.kept
            try:
                yield kept
            except sqlite3.Error:
                if local.kept is kept:  # the next operation opens a new one: the file may be new
                    local.kept = None
                kept.close()
                raise
        except sqlite3.Error as exc:
            raise RegistryError(f"the agent registry {self.path}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    @contextmanager
    def keeping_connection(self) -> Iterator[None]:
        """Make this thread's operations in the block share one connection, not one each.

        For a thread that writes all the time (``RegistryWriter``): opening a connection
        costs more than a batch of rows, and closing the file's last one checkpoints
        the WAL into the file and deletes it, for the next batch to create again. After
        an error from SQLite the connection is replaced (a damaged file may have been
        rebuilt by another process).
        """
        local = self._local
        if getattr(local, "keep", False):
            yield
            return
        local.keep, local.kept = True, None
        try:
            yield
        finally:
            if local.kept is not None:
                local.kept.close()
            local.keep, local.kept = False, None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Make this thread's writes inside the block one transaction: one lock, one commit.

        A write that fails is undone alone (a savepoint; for a single statement, SQLite's
        own undo of a failed statement) and raises as usual.
        Reads inside the block see its writes only under ``keeping_connection``.
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
                _transaction(db, "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"),
            ):
                yield db
        else:
            with _transaction(
                batch, "SAVEPOINT write", "RELEASE write", "ROLLBACK TO write", "RELEASE write"
            ):
                yield batch


@contextmanager
def _transaction(db: sqlite3.Connection, begin: str, end: str, *undo: str) -> Iterator[None]:
    """``begin``; then ``end`` if the block succeeds, else ``undo`` and re-raise."""
    db.execute(begin)
    try:
        yield
    except BaseException:
        for statement in undo:
            db.execute(statement)
        raise
    db.execute(end)


def _use_wal(db: sqlite3.Connection, timeout: float) -> None:
    """Put a new registry in WAL mode, once (the mode is kept in the file).

    The switch needs the file to itself for a moment, and SQLite does not wait
    for that through the busy timeout: a second process opening a new registry
    at the same instant gets "database is locked" at once. So retry until the
    timeout, as every other registry operation waits.
    """
    deadline = time.monotonic() + timeout
    while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


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
_POSITION = {name: n for n, name in enumerate(_COLUMNS)}
_TRANSCRIPT = _POSITION["transcript"]


def _row_values(record: AgentRecord, changes: Mapping[str, object]) -> list[object]:
    """The values of ``record`` changed by ``changes``, in ``_COLUMNS`` order, for SQLite."""
    values: list[object] = list(_RECORD_VALUES(record))
    for name, value in changes.items():
        values[_POSITION[name]] = value
    values[_TRANSCRIPT] = _sql(values[_TRANSCRIPT])  # the one field that holds a Path
    return values


def _from_row(row: sqlite3.Row) -> AgentRecord:
    data = dict(zip(row.keys(), row, strict=True))
    data["background"] = bool(data["background"])
    data["stop_requested"] = bool(data["stop_requested"])
    data["transcript"] = Path(data["transcript"]) if data["transcript"] else None
    return AgentRecord(**data)


def _gone_reason(record: AgentRecord) -> str | None:
    """Why the agent's process has surely ended, or None when it may still run.

    Only a pid on this host can be checked: it no longer exists, or it now
    belongs to a process that started at another time (the pid was reused).
    """
    if record.pid is None or record.pid <= 0 or record.host != socket.gethostname():
        return None
    ended = f"process {record.pid} on {record.host} ended without reporting"
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return ended
    except PermissionError:
        pass  # it exists, under another user
    if record.process_start is None:
        return None  # recorded without a start time: the pid is all there is to go on
    now = process_start(record.pid)
    if now is None or now == record.process_start:
        return None
    return f"{ended} (its pid now belongs to another process)"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as an opaque string; None if it cannot be told.

    Linux: the boot id and the start time in clock ticks since boot, from
    ``/proc``; elsewhere ``ps -o lstart=`` (to the second). Two processes that
    held the same pid give different strings.
    """
    if _PROC_STAT.exists():
        return _proc_start(pid)
    return _ps_start(pid)


_PROC_STAT = Path("/proc/self/stat")


def _proc_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # Field 2, the command name, may hold spaces and parentheses: count from its end.
    after_name = stat.rpartition(")")[2].split()
    return f"{boot}:{after_name[19]}"  # field 22, starttime


def _ps_start(pid: int) -> str | None:
    try:
        ps = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return ps.stdout.strip() or None


def own_process_start() -> str | None:
    """``process_start`` of this process (read once)."""
    return _start_of(os.getpid())


@functools.lru_cache(maxsize=1)
def _start_of(pid: int) -> str | None:
    return process_start(pid)


_Change: TypeAlias = tuple[str, AgentRecord | None, dict[str, Any]]
"""An agent id; the record it is registered with, or None; checked changes."""
_Queue: TypeAlias = "queue.SimpleQueue[_Change | Callable[[], object] | None]"


_CLOSING: set[threading.Thread] = set()
"""Writer threads not yet ended: ``close`` does not wait for one to close its connection."""


@atexit.register
def _join_closing() -> None:
    """At exit, let the writer threads finish closing (registered first, so it runs last)."""
    for thread in list(_CLOSING):  # a copy: each thread leaves the set as it ends
        thread.join()


class RegistryWriter(AgentRows):
    """Runs a registry's writes on one background thread, in the order they were given.

    A write is milliseconds of disk I/O; done on the event loop it would stall
    every agent of the tree. One thread keeps the order (an agent's row is
    registered before it is updated). ``close`` waits for every queued write,
    so a session that closes normally loses nothing; at interpreter exit an
    unclosed writer is flushed too. A write that fails is logged, never raised.

    Row writes (``register``, ``update``, ``record_usage``, ``finish``) are checked
    and stamped with the time when given, and written coalesced: what is queued
    for one agent when the thread gets to it becomes one row write (a register
    and the updates after it, one INSERT of the final row), and the rows of one
    drain go in with one statement per kind of write (``Registry.apply``). The
    thread is starved of the GIL while the event loop is busy, so its backlog
    grows; coalesced, a backlog costs about one row per agent, not one per write.
    The thread keeps one connection (``Registry.keeping_connection``).
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        """Written through ``apply``; each drain of the queue runs in one ``batch``."""
        self._queue: _Queue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ending: list[threading.Event] = []
        """Set when a thread told to end has written everything (``close(wait=False)``)."""
        self._written = threading.Event()
        """The running thread's: set once it has written its last rows."""

    def register(self, record: AgentRecord) -> None:
        self._put((record.id, record, {}))

    def update(self, agent_id: str, /, **changes: Any) -> None:
        """As ``Registry.update``; also refuses None for a column that needs a value.

        SQLite would refuse it on the thread, and with it the agent's whole
        coalesced row: a ``ValueError`` here instead.
        """
        values = checked_changes(changes)
        if None in values.values() and (
            missing := sorted(
                name for name in _NOT_NULL.intersection(values) if values[name] is None
            )
        ):
            raise ValueError(f"an agent's {', '.join(missing)} cannot be None")
        self._put((agent_id, None, values))

    def write(self, operation: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue ``operation(*args, **kwargs)``, e.g. ``write(registry.mark_lost)``.

        It runs after every write queued before it and before every write queued after it.
        """
        self._put(functools.partial(operation, *args, **kwargs))

    def _put(self, item: _Change | Callable[[], object]) -> None:
        if self._thread is None:
            self._queue = queue.SimpleQueue()  # each thread drains its own queue to the end
            before, self._ending = self._ending, []  # the new thread waits for them first
            self._written = threading.Event()
            self._thread = threading.Thread(
                target=self._work,
                args=(self._queue, before, self._written),
                name="forkagent-registry",
                daemon=True,
            )
            _CLOSING.add(self._thread)
            self._thread.start()
            atexit.register(self.close)
        self._queue.put(item)

    def close(self, *, wait: bool = True) -> None:
        """Let the thread write everything queued and end (a later write starts a new one).

        ``wait``: until it has. ``close(wait=False)`` lets the caller close other
        things meanwhile; a later ``close()``, or the interpreter's exit, waits.
        Neither waits for the thread to close its connection, which checkpoints the
        WAL into the file (two ``fsync``, milliseconds): every row is committed before.
        """
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            self._ending.append(self._written)
        if wait:
            while self._ending:
                self._ending.pop().wait()
            atexit.unregister(self.close)

    def _work(
        self, pending: _Queue, before: list[threading.Event], written: threading.Event
    ) -> None:
        """Write what is queued, everything waiting at once in one transaction, until None.

        First wait for ``before``, threads still ending after ``close(wait=False)``:
        their writes were queued first. Set ``written`` once the last rows are.
        """
        try:
            for ended in before:
                ended.wait()
            with self.registry.keeping_connection():
                self._drain(pending, written)
        finally:
            written.set()
            _CLOSING.discard(threading.current_thread())

    def _drain(self, pending: _Queue, written: threading.Event) -> None:
        """Each time, everything queued in one transaction; set ``written`` after the last."""
        while True:
            # No waiting for more: a row must reach the disk before a kill -9 can take it.
            # Writes queued while the last transaction ran still share the next one.
            items = [pending.get()]
            while not pending.empty():
                items.append(pending.get())
            try:
                with self.registry.batch():
                    self._write(items)
            except Exception:
                logger.exception("could not write to the agent registry %s", self.registry.path)
            if None in items:
                written.set()
                return

    def _write(self, items: Iterable[_Change | Callable[[], object] | None]) -> None:
        """Coalesce the row writes per agent; an operation first writes the rows before it."""
        rows: dict[str, RowWrite] = {}
        for item in items:
            if item is None:
                break
            if isinstance(item, tuple):
                agent_id, record, changes = item
                row = rows.get(agent_id)
                if row is None or record is not None:  # a register replaces the whole row
                    row = rows[agent_id] = RowWrite(record)
                row.changes.update(changes)
            else:
                self._flush(rows)
                rows = {}
                self._run(item)
        self._flush(rows)

    def _flush(self, rows: dict[str, RowWrite]) -> None:
        if rows:
            self._run(functools.partial(self.registry.apply, rows))

    def _run(self, operation: Callable[[], object]) -> None:
        try:
            operation()
        except Exception:
            logger.exception("a write to the agent registry %s failed", self.registry.path)
