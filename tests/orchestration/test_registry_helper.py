"""Where a ``RegistryWriter``'s rows are written: the helper process, or a thread without one."""

from __future__ import annotations

import logging
import marshal
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from dataclasses import fields, replace
from pathlib import Path

import pytest

from forkagent.state import _rows
from forkagent.state import registry as registry_module
from forkagent.state._appends import BACKGROUND, BackgroundAppends
from forkagent.state.registry import AgentRecord, Registry, RegistryWriter

from ._support import threads_writing_rows


def record(agent_id: str) -> AgentRecord:
    return AgentRecord(id=agent_id, root_id="main-0", model="test:m", kind="fork")


def refuse(registry: Registry, agent_id: str) -> None:
    """Make SQLite refuse this agent's row, as a full disk or a bad value would."""
    with closing(sqlite3.connect(registry.path)) as db, db:
        db.execute(
            f"CREATE TRIGGER refuse BEFORE INSERT ON agents WHEN NEW.id = '{agent_id}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )


def test_the_rows_columns_are_the_records_fields() -> None:
    """``_rows`` cannot import ``AgentRecord`` (the helper loads it alone): they must agree."""
    assert tuple(f.name for f in fields(AgentRecord)) == _rows.COLUMNS


def test_a_row_the_helper_could_not_write_is_a_registry_error_not_a_transcripts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(tmp_path / "registry.db")
    refuse(registry, "a2")
    writer = RegistryWriter(registry)
    for n in range(5):
        writer.register(record(f"a{n}"))
    writer.close()
    assert sorted(r.id for r in registry.list(limit=None)) == ["a0", "a1", "a3", "a4"]
    logged = [r for r in caplog.records if r.name == "forkagent.state.registry"]
    assert len(logged) == 1
    assert logged[0].levelno == logging.ERROR
    assert "agent 'a2': refused by the test" in logged[0].getMessage()
    assert BACKGROUND.failure(str(registry.path)) is None  # no transcript failed


@pytest.fixture
def no_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BackgroundAppends:
    """Appends whose helper cannot start (``sys.executable`` is not a Python), used by the
    registry's writers."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    appends = BackgroundAppends()
    monkeypatch.setattr(registry_module, "BACKGROUND", appends)
    return appends


def test_without_a_helper_a_thread_of_this_process_writes_the_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    no_helper: BackgroundAppends,
) -> None:
    threads = threads_writing_rows(monkeypatch)
    registry = Registry(tmp_path / "registry.db")
    refuse(registry, "a7")
    writer = RegistryWriter(registry)
    for n in range(10):
        writer.register(record(f"a{n}"))
        writer.finish(f"a{n}", "completed", output=f"done {n}")
    writer.close()

    assert no_helper.helper_pid is None
    assert threads
    assert threading.main_thread() not in threads
    rows = {r.id: (r.status, r.output_preview) for r in registry.list(limit=None)}
    assert rows == {f"a{n}": ("completed", f"done {n}") for n in range(10) if n != 7}
    assert "agent 'a7': refused by the test" in caplog.text
    assert not Path(f"{registry.path}-wal").exists()  # its connection closed once idle


def test_a_child_after_fork_writes_its_rows_through_a_helper_of_its_own(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry.db")
    writer = RegistryWriter(registry)
    writer.register(record("parent-before"))
    writer.close()
    parent_helper = BACKGROUND.helper_pid
    assert parent_helper is not None
    told, tell = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            in_child = RegistryWriter(registry)
            for n in range(20):
                in_child.register(record(f"child{n}"))
                in_child.finish(f"child{n}", "completed")
            in_child.close()
            os.write(tell, str(BACKGROUND.helper_pid).encode())
        finally:
            os._exit(0)
    os.close(tell)
    writer.register(record("parent-after"))
    writer.finish("parent-after", "completed")
    writer.close()
    os.waitpid(child, 0)
    with os.fdopen(told) as report:
        child_helper = int(report.read())

    assert child_helper not in (parent_helper, child, os.getpid())
    assert BACKGROUND.helper_pid == parent_helper  # the parent's helper served the parent on
    rows = {r.id: r.status for r in registry.list(limit=None)}
    assert rows == {
        "parent-before": "running",
        "parent-after": "completed",
        **{f"child{n}": "completed" for n in range(20)},
    }


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "no-helper"])
def test_mark_lost_sweeps_the_rows_sent_before_it_not_those_after(
    tmp_path: Path, request: pytest.FixtureRequest, helper: bool
) -> None:
    """A session's first act: its crashed predecessors' rows become ``lost``, in order."""
    if not helper:
        request.getfixturevalue("no_helper")
    gone = dead_pid()
    registry = Registry(tmp_path / "registry.db")
    writer = RegistryWriter(registry)
    writer.register(replace(record("crashed"), pid=gone))
    writer.mark_lost()
    writer.register(replace(record("later"), pid=gone))  # not yet there when it swept
    writer.close()
    rows = {r.id: r for r in registry.list(limit=None)}
    assert (rows["crashed"].status, rows["later"].status) == ("lost", "running")
    assert (
        rows["crashed"].error == f"process {gone} on {rows['crashed'].host} ended without reporting"
    )


def test_a_fault_in_the_helpers_row_code_loses_that_batch_not_the_helper(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows that slipped past the checks (no such column) are the registry's loss alone."""
    registry = Registry(tmp_path / "registry.db")
    bad_row = (record("bad").id, [None] * len(_rows.COLUMNS), {"colour": "red"})
    assert BACKGROUND.send_rows(str(registry.path), marshal.dumps((30.0, [bad_row], False)))
    BACKGROUND.flush()  # that batch is over: the rows read with it would be lost with it
    transcript = tmp_path / "t.jsonl"
    BACKGROUND.append(str(transcript), b"still written\n", fsync=False, create=True)
    writer = RegistryWriter(registry)
    writer.register(record("after"))
    writer.close()
    assert "the registry helper failed: KeyError('colour')" in caplog.text
    assert [r.id for r in registry.list()] == ["after"]
    assert transcript.read_bytes() == b"still written\n"
    assert BACKGROUND.failure(str(transcript)) is None
