"""The helper process that makes transcript appends, and the protocol it speaks.

``python -I -S`` runs this file (``_appends`` starts it): standard library only, no
asyncio, so that it is up in a few milliseconds, and nothing from the working directory
or the environment. It reads requests from its standard input until the pipe ends,
making each append in the order sent, and answers on its standard output: once when
it runs, once per sync request, and for each append that failed.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import threading
from collections import OrderedDict
from typing import IO

APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC

REQUEST = struct.Struct("!BBII")
"""To the helper: kind, flags, path length, data length; then the path and the data."""
REPLY = struct.Struct("!BQI")
"""From the helper: kind, number, message length; then the message."""
APPEND, SYNC, FORGET = 0, 1, 2
FSYNC, CREATE = 1, 2
SYNCED, FAILED, READY = 0, 1, 2


class OpenFiles:
    """The files written last, kept open (at most ``limit``), the oldest closed first.

    An agent writes a few lines in a row (its header, history and status as it
    starts; usage, cache report and reply as a response lands): opening the
    file once for them is most of the cost of a line. The limit keeps a tree of
    thousands of agents far below any open-file limit.
    """

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


def serve(requests: IO[bytes], replies: int) -> None:
    """The helper's loop: make each append in order; answer syncs; report failures."""
    files = OpenFiles(limit=16)
    failed: set[str] = set()
    _reply(replies, READY, 0, b"")
    while header := read_exactly(requests, REQUEST.size):
        kind, flags, path_length, length = REQUEST.unpack(header)
        path = os.fsdecode(read_exactly(requests, path_length)) if path_length else ""
        data = read_exactly(requests, length) if length else b""
        if kind == SYNC:
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


def _reply(replies: int, kind: int, number: int, message: bytes) -> None:
    write_all(replies, REPLY.pack(kind, number, len(message)) + message)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # it ends when the pipe does, drained
    serve(sys.stdin.buffer, sys.stdout.fileno())
