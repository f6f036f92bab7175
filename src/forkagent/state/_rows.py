"""Writing agents' rows to a registry database: the one copy of that SQL.

``Registry.apply`` runs it in this process; the helper process of ``_appends``
runs it for a ``RegistryWriter``, loading this file by its path (it runs with
``python -I -S`` and cannot import ``forkagent``), as does the writer's thread
where no helper could start. So: standard library only, and nothing slow to import.

A row travels as plain values that ``marshal`` can carry: a ``Change`` is an
agent id, the whole row's values in ``COLUMNS`` order (a register) or None, and
the changed columns (``registry.checked_changes``: stamped and checked already).
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeAlias

COLUMNS = (
    "id",
    "root_id",
    "model",
    "kind",
    "parent_id",
    "label",
    "status",
    "background",
    "pid",
    "host",
    "process_start",
    "cwd",
    "transcript",
    "started_at",
    "ended_at",
    "updated_at",
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost",
    "output_preview",
    "error",
    "stop_requested",
)
"""The agents table's columns, in ``AgentRecord``'s field order (a test keeps them equal)."""
POSITION = {name: n for n, name in enumerate(COLUMNS)}

ROWS_PER_STATEMENT = 64
"""The most rows in one statement. A statement's rows are a power of two up to it, so a
connection prepares a handful of statements once and reuses them (``sqlite3`` caches them
by text): preparing a statement of a whole drain's rows, new each time, cost SQLite more
than writing them (11 against 4 us a row for an INSERT of 1,000)."""
UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
"""Whether SQLite has ``UPDATE ... FROM`` (3.33, 2020), for an UPDATE of many rows."""
OPEN_DATABASES = 4
"""Connections ``Databases`` keeps open: one registry per process is the rule."""

Change: TypeAlias = tuple[str, "list[object] | None", dict[str, object]]
"""An agent id; its whole new row (``COLUMNS`` order) or None; the columns changed."""
Row: TypeAlias = tuple["list[object] | None", dict[str, object]]
"""One agent's coalesced write: a whole new row or None, and the changes on top of it."""


def coalesce(changes: Iterable[Change]) -> dict[str, Row]:
    """One write per agent that ends its row as the changes made one by one would.

    A register replaces the whole row, and so drops the changes before it.
    """
    rows: dict[str, Row] = {}
    for agent_id, values, changed in changes:
        row = rows.get(agent_id)
        if row is None or values is not None:
            row = rows[agent_id] = (values, {})
        row[1].update(changed)
    return rows


def write_rows(db: sqlite3.Connection, rows: Mapping[str, Row], where: str) -> list[str]:
    """Write several agents' rows in a few statements; what went wrong, per agent.

    New rows go in with one multi-row INSERT, changes with one multi-row UPDATE per
    set of columns. A row that cannot be written does not keep the others out.
    ``where`` names the database in the failures. The caller holds the transaction.
    """
    inserts: list[tuple[str, Sequence[object]]] = []
    updates: dict[tuple[str, ...], list[tuple[str, Sequence[object]]]] = {}
    for agent_id, (values, changes) in rows.items():
        if values is None:
            group = updates.setdefault(tuple(changes), [])
            group.append((agent_id, [agent_id, *changes.values()]))
        else:
            inserts.append((agent_id, whole_row(values, changes)))
    failures = _write_many(db, insert_sql, inserts, where, many=True, must_exist=False)
    for columns, group in updates.items():
        sql = functools.partial(update_sql, columns)
        failures += _write_many(db, sql, group, where, many=UPDATE_FROM, must_exist=True)
    return failures


def whole_row(values: Sequence[object], changes: Mapping[str, object]) -> list[object]:
    """``values`` (``COLUMNS`` order) with ``changes`` applied."""
    row = list(values)
    for name, value in changes.items():
        row[POSITION[name]] = value
    return row


def _write_many(
    db: sqlite3.Connection,
    sql: Callable[[int], str],
    rows: Sequence[tuple[str, Sequence[object]]],
    where: str,
    *,
    many: bool,
    must_exist: bool,
) -> list[str]:
    """Write ``rows`` with statements ``sql(n)`` of n rows; what went wrong, per agent.

    ``many``: whether ``sql`` takes more than one row (a power of two up to
    ``ROWS_PER_STATEMENT`` and SQLite's limit on a statement's parameters).

    When a statement fails (SQLite undoes it whole) or misses a row, the rows are
    written again one at a time to find which: every statement sets absolute
    values, so writing a row twice changes nothing.
    """
    if not rows:
        return []
    limit = db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(rows[0][1])
    most = max(1, min(limit, ROWS_PER_STATEMENT)) if many else 1
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
                failures.append(f"no agent with id {agent_id!r} in {where}")
        except sqlite3.Error as exc:
            failures.append(f"the agent registry {where}, agent {agent_id!r}: {exc}")
    return failures


@functools.lru_cache(maxsize=64)
def insert_sql(count: int) -> str:
    """An INSERT (replacing) of ``count`` whole rows, columns in ``COLUMNS`` order."""
    row = f"({', '.join('?' * len(COLUMNS))})"
    return f"INSERT OR REPLACE INTO agents ({', '.join(COLUMNS)}) VALUES {', '.join([row] * count)}"


@functools.lru_cache(maxsize=256)
def update_sql(columns: tuple[str, ...], count: int) -> str:
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


@contextmanager
def transaction(db: sqlite3.Connection, begin: str, end: str, *undo: str) -> Iterator[None]:
    """``begin``; then ``end`` if the block succeeds, else ``undo`` and re-raise."""
    db.execute(begin)
    try:
        yield
    except BaseException:
        for statement in undo:
            db.execute(statement)
        raise
    db.execute(end)


def connect(path: str, timeout: float) -> sqlite3.Connection:
    """A registry connection: autocommit (transactions are explicit), waits ``timeout``."""
    db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    db.execute("PRAGMA synchronous = NORMAL")
    return db


def use_wal(db: sqlite3.Connection, timeout: float) -> None:
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


def find_lost(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """The running agents of this host whose process has surely ended, and why."""
    host = socket.gethostname()
    rows = db.execute(
        "SELECT id, pid, process_start FROM agents WHERE status = 'running' AND host = ?",
        (host,),
    ).fetchall()
    return [(agent_id, why) for agent_id, pid, start in rows if (why := gone(pid, host, start))]


def set_lost(db: sqlite3.Connection, lost: Iterable[tuple[str, str]]) -> None:
    """Mark these agents ``lost`` (with why, as their error) if they still say running."""
    now = time.time()
    db.executemany(
        "UPDATE agents SET status = 'lost', ended_at = ?, updated_at = ?, error = ? "
        "WHERE id = ? AND status = 'running'",
        [(now, now, why, agent_id) for agent_id, why in lost],
    )


def gone(pid: int | None, host: str | None, start: str | None) -> str | None:
    """Why an agent's process has surely ended, or None when it may still run.

    Only a pid on this host can be checked: it no longer exists, or it now belongs
    to a process that started at another time than ``start`` (the pid was reused).
    """
    if pid is None or pid <= 0 or host != socket.gethostname():
        return None
    ended = f"process {pid} on {host} ended without reporting"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ended
    except PermissionError:
        pass  # it exists, under another user
    if start is None:
        return None  # recorded without a start time: the pid is all there is to go on
    now = process_start(pid)
    if now is None or now == start:
        return None
    return f"{ended} (its pid now belongs to another process)"


PROC_STAT = "/proc/self/stat"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as an opaque string; None if it cannot be told.

    Linux: the boot id and the start time in clock ticks since boot, from
    ``/proc``; elsewhere ``ps -o lstart=`` (to the second). Two processes that
    held the same pid give different strings.
    """
    if os.path.exists(PROC_STAT):
        return _proc_start(pid)
    return _ps_start(pid)


def _proc_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat, open("/proc/sys/kernel/random/boot_id") as boot:
            fields, boot_id = stat.read(), boot.read().strip()
    except OSError:
        return None
    # Field 2, the command name, may hold spaces and parentheses: count from its end.
    after_name = fields.rpartition(")")[2].split()
    return f"{boot_id}:{after_name[19]}"  # field 22, starttime


def _ps_start(pid: int) -> str | None:
    import subprocess  # only where there is no /proc: the helper starts faster

    try:
        ps = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return ps.stdout.strip() or None


class Databases:
    """Writes coalesced changes to registries, keeping the last few connections open.

    Opening a connection costs more than a batch of rows, and closing a file's last
    one checkpoints the WAL into the file and deletes it, for the next batch to
    create again. After an error from SQLite a connection is replaced (a damaged
    file may have been rebuilt by another process).
    """

    def __init__(self) -> None:
        self._open: OrderedDict[tuple[str, float], sqlite3.Connection] = OrderedDict()

    def write(self, path: str, timeout: float, changes: Iterable[Change]) -> str | None:
        """Write ``changes`` to ``path`` in one transaction; what went wrong, if anything."""
        return self._in_transaction(
            path, timeout, lambda db: write_rows(db, coalesce(changes), path)
        )

    def mark_lost(self, path: str, timeout: float) -> str | None:
        """``Registry.mark_lost`` on ``path``; what went wrong, if anything."""
        return self._in_transaction(path, timeout, _mark_lost)

    def _in_transaction(
        self, path: str, timeout: float, work: Callable[[sqlite3.Connection], list[str]]
    ) -> str | None:
        key = (path, timeout)
        try:
            db = self._open.pop(key, None) or self._connect(path, timeout)
            self._open[key] = db
            while len(self._open) > OPEN_DATABASES:
                self._open.popitem(last=False)[1].close()
            with transaction(db, "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"):
                failures = work(db)
        except sqlite3.Error as exc:
            if (failed := self._open.pop(key, None)) is not None:
                failed.close()
            return f"could not write to the agent registry {path}: {exc}"
        return "; ".join(failures) or None

    def close(self) -> None:
        """Close every connection (each checkpoints its WAL if it is the file's last)."""
        while self._open:
            self._open.popitem()[1].close()

    @staticmethod
    def _connect(path: str, timeout: float) -> sqlite3.Connection:
        db = connect(path, timeout)
        use_wal(db, timeout)
        return db


def _mark_lost(db: sqlite3.Connection) -> list[str]:
    set_lost(db, find_lost(db))
    return []
