"""Appending to many files: kept open a few at a time, and off the event loop in a process.

A transcript writer on an event loop must not wait on the disk: creating a
file took 0.2 to 0.3 ms of kernel time here. A writer *thread* did the system
calls, but each one hands the interpreter back and forth: the thread gives the
GIL up for the call and must win it back from the busy loop afterwards, at
50 to 100 us of the loop's time per hand-over, three or more per new file.
So the appends go to one helper process per Python process, through a pipe:
the loop's share is one ``write`` to the pipe; the helper makes the system
calls on its own interpreter, in the order they were sent.

The helper is ``_append_helper`` run as a script. It drains the pipe to the
end, so lines sent before the sending process dies (even by SIGKILL) still
reach their files. Where no helper can be started, the appends are made on
the caller's thread instead: slower, never lost.
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import logging
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import IO

from . import _append_helper
from ._append_helper import (
    APPEND,
    CREATE,
    FORGET,
    FSYNC,
    READY,
    REPLY,
    REQUEST,
    ROWS,
    ROWS_FAILED,
    SYNC,
    SYNCED,
    OpenFiles,
    read_exactly,
)

logger = logging.getLogger(__name__)
_registry_logger = logging.getLogger(__package__ + ".registry")
"""A batch of rows the helper could not write is the registry's error, not a transcript's."""

_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
"""How ``os.fsencode`` encodes a path (called per request, it cost four calls)."""
_PIPE_SIZE = 1 << 20
_EARLY_WRITE = 32 * 1024
"""Bytes of one turn's requests that go to the pipe before the turn ends. A turn in which
many agents end (a fork family's responses land together) would otherwise hand the helper
all their lines at once, and the session's close would wait while it makes them: sent in
parts, they are made while the loop still works, and a write to a helper already awake
costs the loop little."""
_START_SECONDS = 10.0
"""How long a new helper may take to say it runs (a cold interpreter on a busy machine)."""


OPEN_FILES = OpenFiles(limit=16)
"""This process's own appends (writers that write before they return)."""


class _Outbox:
    """Writes to the helper's pipe without making its caller wait.

    What the pipe cannot take at once (a burst of new agents, while the
    helper creates their files) waits here, in order, and a thread writes it
    as the helper reads. Outside bursts the thread sleeps: nothing per line
    wakes it, so it does not take the interpreter from the event loop.
    """

    def __init__(self, fd: int, on_error: Callable[[OSError], None]) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux: a larger pipe absorbs more of a burst
            with suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        self._on_error = on_error
        self._waiting: list[bytes] = []
        self._draining = False
        self._ready = threading.Lock()

    def put(self, data: bytes) -> None:
        """Send ``data`` after everything put before it; raises ``OSError`` if the pipe broke."""
        with self._ready:
            if not self._draining:
                with suppress(BlockingIOError):
                    data = data[os.write(self.fd, data) :]
                if not data:
                    return
                self._draining = True
                threading.Thread(
                    target=self._drain, name="forkagent-appends-out", daemon=True
                ).start()
            self._waiting.append(data)

    def _drain(self) -> None:
        while True:
            with self._ready:
                if not self._waiting:
                    self._draining = False
                    return
                data, self._waiting = b"".join(self._waiting), []
            try:
                while data:
                    select.select((), (self.fd,), ())
                    with suppress(BlockingIOError):
                        data = data[os.write(self.fd, data) :]
            except OSError as exc:
                with self._ready:
                    self._waiting, self._draining = [], False
                self._on_error(exc)
                return


class BackgroundAppends:
    """Sends appends (and registry rows) to the helper; knows which failed and when all are made.

    ``append`` returns once the append is in the pipe. A failed append is
    reported by the helper and kept by file until ``failure`` reads it; the
    helper drops that file's later appends until then, so the file stays a
    prefix of what was sent instead of having a hole.
    """

    def __init__(self) -> None:
        self._sending = threading.Lock()
        """Held while a request goes into the pipe (never while waiting for the helper)."""
        self._state = threading.Condition()
        self._reset()

    def _reset(self) -> None:
        self._helper: subprocess.Popen[bytes] | None = None
        self._outbox: _Outbox | None = None
        self._started = False
        self._sent = 0
        """Appends sent so far; a sync request carries the count it waits for."""
        self._queued: list[bytes] = []
        """Requests of this turn of the event loop, for the pipe at its end."""
        self._turn: list[tuple[str, int, bytes]] = []
        """Appends (path, flags, lines) not yet framed: the loop's turn's, framed at its end."""
        self._before_push: list[Callable[[], object]] = []
        """Called at the end of the turn, before its push (``at_turn_end``)."""
        self._push_loop: asyncio.AbstractEventLoop | None = None
        """The loop whose turn ends with a push (another loop's appends schedule their own)."""
        self._unsent = 0
        """Bytes of the requests queued on a loop since the last write (``_kept_for_turn``)."""
        self._made = 0
        """The count of the last sync the helper answered: that many appends are made."""
        self._failed: dict[str, OSError] = {}
        self._broken: OSError | None = None
        """Why the helper cannot be reached any more (every later append fails)."""
        self.failing = False
        """Whether ``failure`` may have something to say: a writer asks before every line."""

    @property
    def helper_pid(self) -> int | None:
        """The helper's process id (None before the first append, or where none could start)."""
        return self._helper.pid if self._helper is not None else None

    def append(self, path: str, data: bytes, *, fsync: bool, create: bool) -> None:
        if self._helper is None:
            if not self._started:
                self._start()
            if self._helper is None:
                OPEN_FILES.append(path, data, fsync=fsync, create=create)
                return
        flags = (FSYNC if fsync else 0) | (CREATE if create else 0)
        loop = _running_loop()
        with self._sending:
            if self._broken is not None or self._outbox is None:
                return  # failed: ``failure`` says so
            # On a loop, the turn's appends are framed at its end (``_seal``), one request
            # per run of one file's lines: a fork's reply, usage, cache report and status
            # come one after another. Here an append is only kept, as a tuple.
            self._turn.append((path, flags, data))
            self._sent += 1
            if loop is not None and self._kept_for_turn(loop, len(data)):
                return
        self._write_queued()  # no turn to wait for the end of, or a turn's worth already

    def send_rows(self, database: str, rows: bytes, *, at_once: bool = False) -> bool:
        """Send ``rows`` (``marshal``-ed ``(timeout, [_rows.Change], sweep)``) to be written
        to ``database``; False where there is no helper to send them to. ``at_once``: into
        the pipe now, with what the turn queued before them, not at the turn's end."""
        if not self._started:
            self._start()
        if self._helper is None or self._broken is not None:
            return False
        self._send(ROWS, os.fsencode(database), rows, 0, at_once=at_once)
        return True

    def at_turn_end(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
        """Call ``callback`` at the end of this turn of ``loop``, just before the turn's
        requests go to the pipe: what it sends (a registry's rows) goes in the same write.

        A write of its own wakes the helper a second time in the turn, at 20 to 30 us of
        the loop's time here, and more when the helper then takes the loop's processor.
        """
        with self._sending:
            self._before_push.append(callback)
            self._push_at_turn_end(loop)

    def flush(self) -> None:
        """Wait until every append sent so far is made (or the helper is gone)."""
        with self._sending:
            target = self._sent
        with self._state:
            if self._helper is None or self._made >= target or self._broken is not None:
                return
        self._send(SYNC, b"", target.to_bytes(8, "big"), 0)
        with self._state:
            self._state.wait_for(lambda: self._made >= target or self._broken is not None)

    def failure(self, path: str) -> OSError | None:
        """Why an append to ``path`` failed, if one did; once read, the file can be written again
        (by a new writer: the one that failed stops at its failure)."""
        if self._broken is not None:
            return self._broken
        if not self._failed:
            return None
        with self._state:
            error = self._failed.pop(path, None)
            self.failing = bool(self._failed) or self._broken is not None
        if error is not None:
            self._send(FORGET, os.fsencode(path), b"", 0)
        return error

    def forget_helper(self) -> None:
        """In a child process after ``fork``: the parent's helper belongs to the parent."""
        if self._outbox is not None:
            os.close(self._outbox.fd)
        self._sending = threading.Lock()
        self._state = threading.Condition()
        self._reset()

    def close(self) -> None:
        """At exit: wait for the appends, then let the helper end (it drains the pipe first)."""
        self.flush()
        helper, outbox = self._helper, self._outbox
        if helper is None or outbox is None:
            return
        with self._sending:
            self._helper, self._outbox = None, None
            os.close(outbox.fd)
        try:
            helper.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.error("the transcript helper did not end; its last lines may be lost")

    def _start(self) -> None:
        with self._sending:
            if self._started:
                return
            self._started = True
            try:
                helper = subprocess.Popen(
                    [sys.executable, "-I", "-S", _append_helper.__file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    close_fds=True,
                    start_new_session=True,  # a Ctrl+C at the terminal is not for it
                )
            except OSError as exc:
                logger.warning("no transcript helper (%s): writing on the caller's thread", exc)
                return
            assert helper.stdin is not None
            assert helper.stdout is not None
            if not _says_ready(helper):
                return
            self._outbox = _Outbox(os.dup(helper.stdin.fileno()), self._lose_helper)
            helper.stdin.close()
            self._helper = helper
            threading.Thread(
                target=self._read_replies,
                args=(helper.stdout,),
                name="forkagent-appends",
                daemon=True,
            ).start()

    def _send(
        self, kind: int, path: bytes, data: bytes, flags: int, *, at_once: bool = False
    ) -> None:
        """One request other than an append, after everything sent before it.

        On an event loop, the requests of one turn of the loop go to the pipe together at
        its end: each write wakes the helper, and waking a process on the other processor
        cost the loop 20 to 30 us a time here (six lines per fork).
        """
        loop = _running_loop()
        with self._sending:
            if self._broken is not None or self._outbox is None:
                return
            self._seal()
            self._queued.append(REQUEST.pack(kind, flags, len(path), len(data)) + path + data)
            if kind == ROWS:
                self._sent += 1
                if loop is not None and not at_once and self._kept_for_turn(loop, len(data)):
                    return
        self._write_queued()  # not the turn's callbacks: their caller may hold their locks

    def _kept_for_turn(self, loop: asyncio.AbstractEventLoop, size: int) -> bool:
        """Whether a request of ``size`` bytes just queued on ``loop`` waits for the end of its
        turn (the caller holds ``_sending``): not once the turn's requests not yet in the pipe
        reach ``_EARLY_WRITE``, which then go at once."""
        self._push_at_turn_end(loop)
        self._unsent += size
        return self._unsent < _EARLY_WRITE

    def _push_at_turn_end(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have the end of ``loop``'s current turn push its requests, once per turn (not
        another loop's push, whose loop may have closed before its turn ended)."""
        if self._push_loop is not loop:
            self._push_loop = loop
            loop.call_soon(self._push)

    def _seal(self) -> None:
        """Frame the appends not yet framed into requests, in order: one per run of lines to
        one file, unless a line may make the file (the caller holds ``_sending``)."""
        if not self._turn:
            return
        turn, self._turn = self._turn, []
        runs: list[tuple[str, int, list[bytes]]] = []
        for path, flags, data in turn:
            if runs and runs[-1][0] is path and flags == runs[-1][1] & FSYNC:
                runs[-1][2].append(data)
            else:
                runs.append((path, flags, [data]))
        for path, flags, parts in runs:
            encoded, joined = path.encode(_FS_ENCODING, _FS_ERRORS), b"".join(parts)
            self._queued.append(REQUEST.pack(APPEND, flags, len(encoded), len(joined)) + encoded)
            self._queued.append(joined)

    def _push(self) -> None:
        """The end of a turn of the loop: its callbacks, then its requests into the pipe."""
        with self._sending:
            callbacks, self._before_push = self._before_push, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the other callbacks and the turn's lines still go
                logger.exception("sending at the end of a turn of the loop failed")
        self._write_queued(turn_ended=True)

    def _write_queued(self, *, turn_ended: bool = False) -> None:
        """Put the queued requests into the pipe, in one write; ``turn_ended``: at the end of
        the turn that ``_push_at_turn_end`` pushes (an early write leaves that push to come)."""
        with self._sending:
            if turn_ended:
                self._push_loop = None
            self._seal()
            if not self._queued or self._outbox is None:
                return
            data = b"".join(self._queued)
            self._queued.clear()
            self._unsent = 0
            try:
                self._outbox.put(data)
                return
            except OSError as exc:
                error = exc
        self._lose_helper(error)

    def _read_replies(self, replies: IO[bytes]) -> None:
        while header := read_exactly(replies, REPLY.size):
            kind, number, length = REPLY.unpack(header)
            message = read_exactly(replies, length)
            with self._state:
                if kind == SYNCED:
                    self._made = max(self._made, number)
                elif kind == ROWS_FAILED:
                    database, _, reason = message.decode("utf-8", "replace").partition("\0")
                    _registry_logger.error(
                        "a write to the agent registry %s failed: %s", database, reason
                    )
                else:
                    path, _, reason = message.decode("utf-8", "replace").partition("\0")
                    logger.error("could not append to the transcript %s: %s", path, reason)
                    self._failed[path] = OSError(number, reason)
                    self.failing = True
                self._state.notify_all()
        replies.close()
        if self._helper is not None:
            self._lose_helper(BrokenPipeError(32, "the transcript helper ended"))

    def _lose_helper(self, error: OSError) -> None:
        logger.error("the transcript helper is gone: %s", error)
        with self._state:
            self._broken = self._broken or error
            self.failing = True
            self._state.notify_all()


_running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio.events._get_running_loop
"""The running loop or None, in C: asked per line, where ``get_running_loop`` raises outside a
loop."""


def _says_ready(helper: subprocess.Popen[bytes]) -> bool:
    """Wait for a new helper's first word; without it, end it and write in this process.

    ``sys.executable`` is not always a Python that can run this file (an embedding
    server's own binary): such a helper would end at once, and every line after with it.
    """
    assert helper.stdout is not None
    ready, _, _ = select.select((helper.stdout,), (), (), _START_SECONDS)
    first = read_exactly(helper.stdout, REPLY.size) if ready else b""
    if first and REPLY.unpack(first)[0] == READY:
        return True
    logger.warning(
        "the transcript helper (%s) did not start: writing on the caller's thread",
        sys.executable,
    )
    helper.kill()
    helper.wait()
    for stream in (helper.stdin, helper.stdout):
        if stream is not None:
            stream.close()
    return False


BACKGROUND = BackgroundAppends()
os.register_at_fork(after_in_child=BACKGROUND.forget_helper)
atexit.register(BACKGROUND.close)
