"""The helper process that makes transcript appends and registry rows, and its protocol.

``python -I -S`` runs this file (``_appends`` starts it): standard library only, no
asyncio, so that it is up in a few milliseconds, and nothing from the working directory
or the environment. It reads requests from its standard input until the pipe ends,
making each append in the order sent, and answers on its standard output: once when
it runs, once per sync request, and for each append or batch of rows that failed.

Rows (``ROWS``: a database path and ``marshal``-ed ``(timeout, [_rows.Change], sweep)``)
go to their database with ``_rows``, loaded beside this file when the first arrive: all
the rows of one read of the pipe, coalesced per agent, in one transaction. ``sweep``:
then mark lost the agents of this host whose process has ended (``Registry.mark_lost``).
"""

from __future__ import annotations

import marshal
import os
import signal
import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from ._rows import Change, Databases

APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC

REQUEST = struct.Struct("!BBII")
"""To the helper: kind, flags, path length, data length; then the path and the data."""
REPLY = struct.Struct("!BQI")
"""From the helper: kind, number, message length; then the message."""
APPEND, SYNC, FORGET, ROWS = 0, 1, 2, 3
FSYNC, CREATE = 1, 2
SYNCED, FAILED, READY, ROWS_FAILED = 0, 1, 2, 3
_READ_SIZE = 1 << 20


class OpenFiles:
    """The files written last, kept open (at most ``limit``), the oldest closed first.

    An agent writes a few lines in a row (its header, history and status as it
    starts; usage, cache report and reply as a response lands): opening the
    file once for them is most of the cost of a line. The limit keeps a tree of
    thousands of agents far below any open-file limit.
    """

    failing = False
    """Whether an append may have failed after it returned: never, each fails as it is made
    (``BackgroundAppends.failing``'s counterpart, which a writer asks before every line)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def append(self, path: str, data: bytes, *, fsync: bool, create: bool) -> None:
        """Write ``data`` at the end of ``path`` (whole, retrying short writes).

        ``create``: make the file if it is not there (a writer's first line). Otherwise a
        file removed since is an error, not a new file without the lines before.
        """
        with self._lock:
            fd = self._open.pop(path, None)
            if fd is not None and os.fstat(fd).st_nlink == 0:  # removed while held open
                os.close(fd)
                fd = None
            if fd is None:
                fd = os.open(path, APPEND_FLAGS | (os.O_CREAT if create else 0), 0o600)
            self._open[path] = fd
            while len(self._open) > self._limit:
                os.close(self._open.popitem(last=False)[1])
            write_all(fd, data)
            if fsync:
                os.fsync(fd)

    def release(self, path: str) -> None:
        """Close ``path`` if it is open."""
        with self._lock:
            fd = self._open.pop(path, None)
            if fd is not None:
                os.close(fd)


def read_exactly(stream: IO[bytes], size: int) -> bytes:
    """``size`` bytes from ``stream``, or b"" at its end."""
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def serve(requests: int, replies: int) -> None:
    """The helper's loop: make each append in order; write rows; answer syncs; report failures."""
    files = OpenFiles(limit=16)
    failed: set[str] = set()
    rows = _PendingRows(replies)
    _reply(replies, READY, 0, b"")
    for batch in read_batches(requests):
        for kind, flags, path, data in batch:
            if kind == ROWS:
                rows.add(path, data)
            elif kind == SYNC:
                rows.write()  # a sync answers for everything sent before it
                _reply(replies, SYNCED, int.from_bytes(data, "big"), b"")
            elif kind == FORGET:
                failed.discard(path)
            elif path not in failed:
                try:
                    files.append(path, data, fsync=bool(flags & FSYNC), create=bool(flags & CREATE))
                except OSError as exc:
                    failed.add(path)
                    reason = os.fsencode(path) + b"\0" + str(exc.strerror or exc).encode()
                    _reply(replies, FAILED, exc.errno or 0, reason)
        rows.write()
    rows.close()


Request = tuple[int, int, str, bytes]
"""Kind, flags, path, data."""


def read_batches(fd: int) -> Iterator[list[Request]]:
    """The whole requests of each read of the pipe (at least one each), until it ends."""
    data = b""
    while chunk := os.read(fd, _READ_SIZE):
        data += chunk
        batch: list[Request] = []
        at = 0
        while len(data) - at >= REQUEST.size:
            kind, flags, path_length, length = REQUEST.unpack_from(data, at)
            end = at + REQUEST.size + path_length + length
            if end > len(data):
                break
            path_end = at + REQUEST.size + path_length
            path = os.fsdecode(data[at + REQUEST.size : path_end])
            batch.append((kind, flags, path, data[path_end:end]))
            at = end
        data = data[at:]
        if batch:
            yield batch


class _PendingRows:
    """The rows read and not yet written, per database; written together, failures answered."""

    def __init__(self, replies: int) -> None:
        self._replies = replies
        self._pending: dict[tuple[str, float], list[Change]] = {}
        self._databases: Databases | None = None

    def add(self, path: str, data: bytes) -> None:
        timeout, changes, sweep = marshal.loads(data)
        self._pending.setdefault((path, timeout), []).extend(changes)
        if sweep:  # after the rows sent before it, before those sent after
            self.write()
            self._run(path, timeout, None)

    def write(self) -> None:
        for (path, timeout), changes in self._pending.items():
            self._run(path, timeout, changes)
        self._pending.clear()

    def close(self) -> None:
        if self._databases is not None:
            self._databases.close()

    def _run(self, path: str, timeout: float, changes: list[Change] | None) -> None:
        """Write ``changes`` to ``path`` (None: mark lost there); answer what failed. A fault
        in ``_rows`` loses the batch, not the helper: the transcripts' appends go on."""
        try:
            if self._databases is None:
                self._databases = _load_rows().Databases()
            if changes is None:
                failure = self._databases.mark_lost(path, timeout)
            else:
                failure = self._databases.write(path, timeout, changes)
        except Exception as exc:
            failure = f"the registry helper failed: {exc!r}"
        if failure is not None:
            reason = os.fsencode(path) + b"\0" + failure.encode(errors="replace")
            _reply(self._replies, ROWS_FAILED, 0, reason)


class _RowsModule(Protocol):
    Databases: type[Databases]


def _load_rows() -> _RowsModule:
    """``_rows``, from beside this file: ``-I`` keeps the package off ``sys.path``.

    Imported here, when the first rows arrive: a helper for transcripts alone starts faster.
    """
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rows.py")
    spec = importlib.util.spec_from_file_location("_forkagent_rows", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(_RowsModule, module)


def _reply(replies: int, kind: int, number: int, message: bytes) -> None:
    write_all(replies, REPLY.pack(kind, number, len(message)) + message)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # it ends when the pipe does, drained
    serve(sys.stdin.fileno(), sys.stdout.fileno())
