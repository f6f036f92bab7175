"""The helper process that makes the background transcript appends (``state._appends``)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkagent.state._append_helper import APPEND, CREATE, read_batches
from forkagent.state._appends import _EARLY_WRITE, BackgroundAppends


def _wait_for(path: Path, content: bytes, seconds: float = 20.0) -> bytes:
    """The file's content once it is ``content`` (or whatever it is when time runs out)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes() == content:
            break
        time.sleep(0.01)
    return path.read_bytes() if path.exists() else b""


@pytest.fixture
def appends() -> Iterator[BackgroundAppends]:
    made = BackgroundAppends()
    yield made
    made.close()


_SEND_500 = "    BACKGROUND.append(sys.argv[1], b'line %d\\n' % n, fsync=False, create=n == 0)\n"


@pytest.mark.parametrize(
    "script",
    [
        "for n in range(500):\n" + _SEND_500 + "os.kill(os.getpid(), signal.SIGKILL)\n",
        # on a loop: a turn's lines to one file, sent as one request once the turn ends
        "async def main():\n"
        "    for n in range(500):\n"
        "    " + _SEND_500 + "    await asyncio.sleep(0)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "asyncio.run(main())\n",
    ],
    ids=["no loop", "one turn of a loop"],
)
def test_lines_sent_before_the_process_is_killed_still_reach_their_file(
    tmp_path: Path, script: str
) -> None:
    """SIGKILL takes the sender, not the lines it sent: the helper drains the pipe first."""
    path = tmp_path / "t.jsonl"
    script = (
        "import asyncio, os, signal, sys\n"
        "from forkagent.state._appends import BACKGROUND\n" + script
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], check=False)
    assert done.returncode == -signal.SIGKILL
    expected = b"".join(b"line %d\n" % n for n in range(500))
    assert _wait_for(path, expected) == expected


def test_a_burst_larger_than_the_pipe_is_written_whole_and_in_order(
    tmp_path: Path, appends: BackgroundAppends
) -> None:
    """Megabytes at once: the caller does not wait for the helper, and nothing is reordered."""
    paths = [str(tmp_path / f"{n}.jsonl") for n in range(50)]
    chunk = b"x" * 20_000 + b"\n"
    for turn in range(4):
        for path in paths:
            appends.append(path, b"%d:" % turn + chunk, fsync=False, create=turn == 0)
    appends.flush()
    expected = b"".join(b"%d:" % turn + chunk for turn in range(4))
    assert all(Path(path).read_bytes() == expected for path in paths)


async def test_lines_sent_on_an_event_loop_reach_the_file_without_a_flush(
    tmp_path: Path, appends: BackgroundAppends
) -> None:
    """One turn of the loop's lines go out together at its end, not at some later flush."""
    path = tmp_path / "t.jsonl"
    for n in range(3):
        appends.append(str(path), b"%d\n" % n, fsync=False, create=n == 0)
    await asyncio.sleep(0)
    assert await asyncio.to_thread(_wait_for, path, b"0\n1\n2\n") == b"0\n1\n2\n"


@pytest.mark.parametrize(
    ("executable", "says"),
    [
        (None, "no transcript helper"),  # no such file
        ("#!/bin/sh\nexit 3\n", "did not start"),  # an embedding server's own binary
    ],
)
def test_without_a_helper_the_appends_are_made_before_append_returns(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    executable: str | None,
    says: str,
) -> None:
    fake = tmp_path / "python"
    if executable is not None:
        fake.write_text(executable)
        fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    appends = BackgroundAppends()
    path = tmp_path / "t.jsonl"
    with caplog.at_level(logging.WARNING):
        appends.append(str(path), b"kept\n", fsync=True, create=True)
    assert appends.helper_pid is None
    assert path.read_bytes() == b"kept\n"
    assert says in caplog.text
    appends.close()


def test_a_helper_that_dies_fails_every_later_append_instead_of_hanging(
    tmp_path: Path, appends: BackgroundAppends
) -> None:
    path = str(tmp_path / "t.jsonl")
    appends.append(path, b"before\n", fsync=False, create=True)
    appends.flush()
    pid = appends.helper_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    appends.append(path, b"after\n", fsync=False, create=False)
    appends.flush()  # returns: the helper is gone
    assert isinstance(appends.failure(path), OSError)
    assert Path(path).read_bytes() == b"before\n"


def test_a_file_that_failed_is_written_again_once_its_failure_was_read(
    tmp_path: Path, appends: BackgroundAppends
) -> None:
    """Later lines of a failed file are dropped (no hole) until its writer learned of it."""
    folder = tmp_path / "gone"
    path = str(folder / "t.jsonl")
    appends.append(path, b"", fsync=False, create=True)  # no folder: the append fails
    appends.append(path, b"dropped\n", fsync=False, create=False)
    appends.flush()
    assert isinstance(appends.failure(path), FileNotFoundError)
    assert appends.failure(path) is None  # read once
    folder.mkdir()
    appends.append(path, b"a new writer\n", fsync=False, create=True)
    appends.flush()
    assert Path(path).read_bytes() == b"a new writer\n"


def test_a_ctrl_c_at_the_terminal_does_not_reach_the_helper(
    tmp_path: Path, appends: BackgroundAppends
) -> None:
    """The terminal signals its foreground process group; the helper has its own."""
    appends.append(str(tmp_path / "t.jsonl"), b"x\n", fsync=False, create=True)
    pid = appends.helper_pid
    assert pid is not None
    assert os.getpgid(pid) != os.getpgid(0)


@pytest.mark.parametrize("held_open", [True, False])
def test_a_file_removed_under_its_writer_is_a_loss_not_a_new_file(
    tmp_path: Path, appends: BackgroundAppends, held_open: bool
) -> None:
    """Only a writer's first line makes its file: a later one never starts a headless file."""
    path = str(tmp_path / "t.jsonl")
    appends.append(path, b"header\n", fsync=False, create=True)
    appends.flush()
    if not held_open:  # the helper keeps the 16 files written last open
        for n in range(20):
            appends.append(str(tmp_path / f"other-{n}"), b"x\n", fsync=False, create=True)
    Path(path).unlink()
    appends.append(path, b"line\n", fsync=False, create=False)
    appends.flush()
    assert isinstance(appends.failure(path), FileNotFoundError)
    assert not Path(path).exists()


def test_lines_left_by_a_loop_that_closed_go_out_with_the_next_loops(
    tmp_path: Path, appends: BackgroundAppends
) -> None:
    """A loop closed before its turn's push ran does not keep later loops' lines back."""
    path = tmp_path / "t.jsonl"

    async def write(line: bytes) -> None:
        appends.append(str(path), line, fsync=False, create=False)

    def stop_then_write() -> None:
        first.stop()  # this turn is its last: the push it schedules never runs
        appends.append(str(path), b"first\n", fsync=False, create=True)

    first = asyncio.new_event_loop()
    first.call_soon(stop_then_write)
    first.run_forever()
    first.close()
    asyncio.run(write(b"second\n"))
    assert _wait_for(path, b"first\nsecond\n") == b"first\nsecond\n"


async def test_a_turns_lines_to_one_file_go_to_the_helper_as_one_request(
    tmp_path: Path, appends: BackgroundAppends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines to one file one after another in a turn: one append; another file's line, a
    sync or a new file in between splits them; every file gets its lines in order."""
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    sent = _writes_to_the_pipe(appends, a, monkeypatch)
    for path, line, create in [
        (a, b"a1\n", False),
        (a, b"a2\n", False),
        (b, b"b0\n", True),
        (b, b"b1\n", False),
        (a, b"a3\n", False),
        (a, b"a4\n", True),  # made again if removed: not joined to the line before
    ]:
        appends.append(path, line, fsync=False, create=create)
    await asyncio.sleep(0)
    requests = _requests(b"".join(sent))
    assert [(kind, flags, path, data) for kind, flags, path, data in requests] == [
        (APPEND, 0, a, b"a1\na2\n"),
        (APPEND, CREATE, b, b"b0\nb1\n"),
        (APPEND, 0, a, b"a3\n"),
        (APPEND, CREATE, a, b"a4\n"),
    ]
    assert await asyncio.to_thread(_wait_for, Path(a), b"a0\na1\na2\na3\na4\n") == (
        b"a0\na1\na2\na3\na4\n"
    )
    assert await asyncio.to_thread(_wait_for, Path(b), b"b0\nb1\n") == b"b0\nb1\n"


def _writes_to_the_pipe(
    appends: BackgroundAppends, first: str, monkeypatch: pytest.MonkeyPatch
) -> list[bytes]:
    """Start the helper with a line ``a0`` to ``first``; the list fills with each write to its
    pipe from then on."""
    appends.append(first, b"a0\n", fsync=False, create=True)
    appends.flush()
    outbox = appends._outbox
    assert outbox is not None
    writes: list[bytes] = []
    real_put = outbox.put

    def put(data: bytes) -> None:
        writes.append(data)
        real_put(data)

    monkeypatch.setattr(outbox, "put", put)
    return writes


async def test_an_append_off_the_loop_goes_out_at_once_after_the_turns_appends(
    tmp_path: Path, appends: BackgroundAppends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's append does not wait for the loop's turn to end, and does not pass the
    lines the turn has kept: both go out in one write, the turn's first."""
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    writes = _writes_to_the_pipe(appends, a, monkeypatch)
    appends.append(a, b"a1\n", fsync=False, create=False)  # kept for the turn's end
    assert writes == []
    other = threading.Thread(
        target=appends.append, args=(b, b"b0\n"), kwargs={"fsync": False, "create": True}
    )
    other.start()
    other.join()  # the turn has not ended
    assert [(kind, path, data) for kind, _, path, data in _requests(b"".join(writes))] == [
        (APPEND, a, b"a1\n"),
        (APPEND, b, b"b0\n"),
    ]
    await asyncio.sleep(0)
    assert len(writes) == 1  # the turn's end had nothing left to send
    appends.flush()
    assert await asyncio.to_thread(Path(a).read_bytes) == b"a0\na1\n"
    assert await asyncio.to_thread(Path(b).read_bytes) == b"b0\n"


def _requests(data: bytes) -> list[tuple[int, int, str, bytes]]:
    """The requests in bytes sent to the helper, as its reader sees them."""
    found: list[tuple[int, int, str, bytes]] = []
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    for batch in read_batches(read):
        found += batch
    os.close(read)
    return found


async def test_what_a_turns_end_sends_goes_in_the_same_pipe_write_as_the_turns_lines(
    tmp_path: Path, appends: BackgroundAppends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry's rows are sent at the end of the turn, before its lines go: one write,
    one wake-up of the helper. A sync sent meanwhile goes at once, without waiting for the
    turn's callbacks, which may need a lock its sender holds."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    writes = _writes_to_the_pipe(appends, str(a), monkeypatch)
    held = threading.Lock()

    def at_the_end() -> None:
        with held:
            appends.append(str(b), b"b0\n", fsync=False, create=True)

    loop = asyncio.get_running_loop()
    appends.append(str(a), b"a1\n", fsync=False, create=False)
    appends.at_turn_end(loop, at_the_end)
    await asyncio.sleep(0)
    assert len(writes) == 1
    assert [(kind, path, data) for kind, _, path, data in _requests(writes[0])] == [
        (APPEND, str(a), b"a1\n"),
        (APPEND, str(b), b"b0\n"),
    ]
    appends.at_turn_end(loop, at_the_end)
    appends.append(str(a), b"a2\n", fsync=False, create=False)
    with held:
        appends.flush()  # would wait forever on ``held`` if it ran the turn's callbacks
    await asyncio.sleep(0)
    assert await asyncio.to_thread(_wait_for, b, b"b0\nb0\n") == b"b0\nb0\n"
    assert await asyncio.to_thread(_wait_for, a, b"a0\na1\na2\n") == b"a0\na1\na2\n"


async def test_a_turn_end_callback_that_fails_keeps_back_neither_the_others_nor_the_lines(
    tmp_path: Path, appends: BackgroundAppends, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.jsonl"
    ran: list[str] = []

    def fails() -> None:
        raise RuntimeError("boom")

    loop = asyncio.get_running_loop()
    appends.append(str(path), b"0\n", fsync=False, create=True)
    appends.at_turn_end(loop, fails)
    appends.at_turn_end(loop, lambda: ran.append("second"))
    with caplog.at_level(logging.ERROR):
        await asyncio.sleep(0)
    assert ran == ["second"]
    assert "boom" in caplog.text
    assert await asyncio.to_thread(_wait_for, path, b"0\n") == b"0\n"


async def test_a_turn_with_many_lines_sends_them_in_parts_before_it_ends(
    tmp_path: Path, appends: BackgroundAppends, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn in which many agents write (a fork family's responses landing together) hands
    its lines over in parts as they pile up, so the helper makes them while the loop works on,
    instead of all at the turn's end while the session's close waits; nothing is reordered."""
    a = str(tmp_path / "a.jsonl")
    writes = _writes_to_the_pipe(appends, a, monkeypatch)
    others = [str(tmp_path / f"{n}.jsonl") for n in range(3)]
    line = b"x" * (_EARLY_WRITE // 2) + b"\n"
    for n, path in enumerate(others):
        appends.append(path, b"%d" % n + line, fsync=False, create=True)
    # The first two lines reached the early-write size together: out before the turn ends.
    assert [path for _, _, path, _ in _requests(b"".join(writes))] == others[:2]
    sent = len(writes)
    await asyncio.sleep(0)
    assert len(writes) == sent + 1  # the third line, at the end of the turn
    assert [path for _, _, path, _ in _requests(b"".join(writes))] == others
    appends.flush()
    for n, path in enumerate(others):
        assert await asyncio.to_thread(Path(path).read_bytes) == b"%d" % n + line
