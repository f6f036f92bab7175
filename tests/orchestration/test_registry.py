from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from forkagent import Agent
from forkagent.state import _rows
from forkagent.state import registry as registry_module
from forkagent.state.registry import (
    AgentRecord,
    Registry,
    RegistryError,
    RegistryWriter,
    default_registry_path,
    process_start,
)
from forkagent.testing import FunctionModel
from forkagent.usage import Usage


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "registry.db")


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def record(agent_id: str, **fields: Any) -> AgentRecord:
    return replace(AgentRecord(id=agent_id, root_id="main-0", model="test:m"), **fields)


def test_a_record_round_trips_every_field(registry: Registry, tmp_path: Path) -> None:
    original = AgentRecord(
        id="fork-1-abc",
        root_id="main-0-xyz",
        model="anthropic:claude-sonnet-4-6",
        kind="fork",
        parent_id="main-0-xyz",
        label="review",
        status="running",
        background=True,
        cwd="/work",
        transcript=tmp_path / "t.jsonl",
        started_at=1000.5,
        turns=3,
        input_tokens=10,
        output_tokens=20,
        cache_read_tokens=900,
        cache_write_tokens=90,
        cost=None,
        output_preview="partial",
        stop_requested=False,
    )
    registry.register(original)
    stored = registry.get("fork-1-abc")
    assert stored.updated_at >= original.updated_at
    assert stored == replace(original, updated_at=stored.updated_at)
    assert stored.cache_hit_ratio == pytest.approx(900 / 1000)
    assert stored.total_tokens == 1020


def test_the_registry_file_uses_wal(registry: Registry) -> None:
    db = sqlite3.connect(registry.path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


def test_registering_an_id_again_replaces_the_row(registry: Registry) -> None:
    registry.register(record("a", status="lost"))
    registry.update("a", stop_requested=True)
    registry.register(record("a", pid=os.getpid()))
    again = registry.get("a")
    assert again.status == "running"
    assert not again.stop_requested


# -- lookup ----------------------------------------------------------------------


def test_lookup_by_unique_prefix(registry: Registry) -> None:
    registry.register(record("fork-1-abc"))
    registry.register(record("fork-2-def"))
    registry.register(record("fork-2"))
    assert registry.get("fork-1").id == "fork-1-abc"
    assert registry.get("fork-2").id == "fork-2"  # an exact id beats being a prefix
    assert registry.get("fork-2-").id == "fork-2-def"


def test_ambiguous_and_unknown_ids_are_explained(registry: Registry) -> None:
    registry.register(record("fork-1-abc"))
    registry.register(record("fork-1-abd"))
    with pytest.raises(RegistryError, match=r"'fork-1-ab' is the start of several .*fork-1-ab"):
        registry.get("fork-1-ab")
    with pytest.raises(RegistryError, match="no agent id starts with 'FORK'"):
        registry.get("FORK")  # prefixes are case-sensitive
    with pytest.raises(RegistryError, match="give an agent id"):
        registry.get("")
    assert registry.get("fork-1-abd").id == "fork-1-abd"


# -- updates -----------------------------------------------------------------------


def test_updates_and_finishing(registry: Registry) -> None:
    registry.register(record("a"))
    usage = Usage(
        input_tokens=100, output_tokens=50, cache_read_tokens=300, cache_write_5m_tokens=100
    )
    registry.record_usage("a", usage, turns=2, cost=0.01)
    running = registry.get("a")
    assert (running.turns, running.prompt_tokens, running.cost) == (2, 500, 0.01)
    assert running.ended_at is None
    registry.finish("a", "completed", output="x" * 2000)
    done = registry.get("a")
    assert done.finished
    assert done.ended_at is not None
    assert done.output_preview == "x" * 500


def test_bad_updates_are_refused(registry: Registry) -> None:
    registry.register(record("a"))
    with pytest.raises(TypeError, match="no updatable field colour"):
        registry.update("a", colour="red")
    with pytest.raises(TypeError, match="id"):
        registry.update("a", id="b")
    with pytest.raises(RegistryError, match="no agent with id 'b'"):
        registry.update("b", turns=1)
    with pytest.raises(ValueError, match="'done' is not an agent status"):
        registry.update("a", status="done")


def test_listing_puts_running_agents_first_then_the_latest(registry: Registry) -> None:
    registry.register(record("old-running", started_at=1.0))
    registry.register(record("old-done", status="completed", started_at=2.0))
    registry.register(record("new-done", status="failed", started_at=3.0))
    registry.register(record("new-running", started_at=4.0))
    assert [r.id for r in registry.list()] == ["new-running", "old-running", "new-done", "old-done"]
    assert [r.id for r in registry.list(include_finished=False)] == ["new-running", "old-running"]
    assert [r.id for r in registry.list(limit=3)] == ["new-running", "old-running", "new-done"]


def test_default_path_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FORKAGENT_REGISTRY", raising=False)
    monkeypatch.setenv("FORKAGENT_HOME", str(tmp_path / "home"))
    assert default_registry_path() == tmp_path / "home" / "registry.db"
    monkeypatch.setenv("FORKAGENT_REGISTRY", str(tmp_path / "elsewhere.db"))
    assert Registry().path == tmp_path / "elsewhere.db"
    assert (tmp_path / "elsewhere.db").exists()


# -- stopping and lost agents ----------------------------------------------------------


def test_stop_sets_the_flag_the_owner_polls(registry: Registry) -> None:
    registry.register(record("a"))  # owned by this (live) process
    assert not registry.stop_requested("a")
    result = registry.request_stop("a")
    assert result.outcome == "requested"
    assert result.record.stop_requested
    assert registry.stop_requested("a")
    assert not registry.stop_requested("unknown")


def test_stopping_a_finished_agent_changes_nothing(registry: Registry) -> None:
    registry.register(record("a", status="completed"))
    result = registry.request_stop("a")
    assert result.outcome == "already_finished"
    assert not registry.get("a").stop_requested


def test_stopping_an_agent_whose_process_is_gone_marks_it_lost(registry: Registry) -> None:
    registry.register(record("a", pid=dead_pid()))
    result = registry.request_stop("a")
    assert result.outcome == "lost"
    assert result.record.status == "lost"
    assert result.record.error is not None
    assert "ended without reporting" in result.record.error


async def test_wait_for_stop_returns_once_asked(registry: Registry) -> None:
    registry.register(record("a"))
    waiter = asyncio.create_task(registry.wait_for_stop("a", interval=0.01))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await asyncio.to_thread(registry.request_stop, "a")
    await asyncio.wait_for(waiter, timeout=5)


def test_mark_lost_only_touches_dead_processes_on_this_host(registry: Registry) -> None:
    gone = dead_pid()
    registry.register(record("dead", pid=gone))
    registry.register(record("alive", pid=os.getpid()))
    registry.register(record("elsewhere", pid=gone, host="another-host"))
    registry.register(record("finished", pid=gone, status="completed"))
    lost = registry.mark_lost()
    assert [r.id for r in lost] == ["dead"]
    statuses = {r.id: r.status for r in registry.list()}
    assert statuses == {
        "dead": "lost",
        "alive": "running",
        "elsewhere": "running",
        "finished": "completed",
    }
    assert registry.mark_lost() == ()


# -- concurrency -------------------------------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import sys
    from forkagent.state.registry import AgentRecord, Registry

    registry = Registry(sys.argv[1])
    name = sys.argv[2]
    for i in range(80):
        agent = f"{name}-{i}"
        registry.register(AgentRecord(id=agent, root_id=name, model="test:m"))
        registry.update(agent, turns=i, input_tokens=i * 10)
        registry.get(agent)
        registry.list(limit=10)
        registry.finish(agent, "completed", output="ok")
    """
)


def test_two_processes_write_at_once_without_locking_errors(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), name],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("left", "right")
    ]
    errors = [worker.communicate(timeout=60)[1] for worker in workers]
    assert errors == ["", ""]
    assert [w.returncode for w in workers] == [0, 0]
    rows = Registry(path).list(limit=None)
    assert len(rows) == 160
    assert all(r.status == "completed" for r in rows)


def test_threads_share_one_registry(registry: Registry) -> None:
    failures: list[BaseException] = []

    def work(name: str) -> None:
        try:
            for i in range(40):
                registry.register(record(f"{name}-{i}"))
                registry.update(f"{name}-{i}", turns=i)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(registry.list(limit=None)) == 160


def test_a_failed_write_in_a_batch_is_undone_alone(registry: Registry) -> None:
    registry.register(record("a"))
    with registry.batch():
        registry.update("a", turns=1)
        with pytest.raises(RegistryError, match="no agent with id 'b'"):
            registry.update("b", turns=1)
        registry.update("a", label="still here")
    row = registry.get("a")
    assert (row.turns, row.label) == (1, "still here")


def test_a_statement_sqlite_refuses_in_a_batch_changes_nothing_and_the_batch_goes_on(
    registry: Registry,
) -> None:
    """Single-statement writes take no savepoint: SQLite itself undoes the failed one."""
    registry.register(record("a"))
    with registry.batch():
        registry.update("a", turns=1)
        with pytest.raises(RegistryError, match="NOT NULL"):
            registry.update("a", turns=2, label=None)  # label is NOT NULL
        registry.register(record("b"))
    assert (registry.get("a").turns, registry.get("a").label) == (1, record("a").label)
    assert registry.get("b").id == "b"


def test_batches_nest(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry.db", timeout=0.2)
    with registry.batch():
        registry.register(record("a"))
        with registry.batch():
            registry.update("a", turns=1)
        registry.update("a", turns=2)  # still the outer transaction, not a second writer
    assert registry.get("a").turns == 2


# -- the background writer ---------------------------------------------------------------


def test_the_writer_keeps_the_order_and_close_waits_for_every_write(registry: Registry) -> None:
    writer = RegistryWriter(registry)
    for i in range(30):
        writer.write(registry.register, record(f"a{i}"))
        for turn in range(1, 4):
            writer.write(registry.update, f"a{i}", turns=turn)
        writer.write(registry.finish, f"a{i}", "completed", output=f"done {i}")
    writer.close()
    rows = registry.list(limit=None)
    assert len(rows) == 30
    assert {(r.status, r.turns) for r in rows} == {("completed", 3)}
    writer.write(registry.update, "a0", label="after close")  # starts the thread again
    writer.close()
    assert registry.get("a0").label == "after close"


def test_the_writer_logs_a_failed_write_and_goes_on(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RegistryWriter(registry)
    writer.write(registry.register, record("a"))
    writer.write(registry.update, "nobody", turns=1)
    writer.write(registry.update, "a", turns=2)
    writer.close()
    assert "no agent with id 'nobody'" in caplog.text
    assert registry.get("a").turns == 2


_UNCLOSED = textwrap.dedent(
    """
    import sys
    from forkagent.state.registry import AgentRecord, Registry, RegistryWriter

    registry = Registry(sys.argv[1])
    writer = RegistryWriter(registry)
    for i in range(50):
        writer.write(registry.register, AgentRecord(id=f"a{i}", root_id="r", model="test:m"))
    """
)


def test_an_unclosed_writer_is_flushed_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    subprocess.run([sys.executable, "-c", _UNCLOSED, str(path)], check=True, timeout=60)
    assert len(Registry(path).list(limit=None)) == 50


# -- process start times -------------------------------------------------------------------


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


@pytest.mark.parametrize("source", ["proc", "ps"])
def test_process_start_tells_processes_apart(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    if source == "ps":  # the fallback for systems without /proc
        monkeypatch.setattr(_rows, "PROC_STAT", "/no/such/proc/self/stat")
    own, child = process_start(os.getpid()), process_start(sleeper.pid)
    assert own is not None
    assert child is not None
    assert child == process_start(sleeper.pid)
    if source == "proc":  # ps counts whole seconds: the two may have started in the same one
        assert child != own
    assert process_start(dead_pid()) is None


async def test_the_runtime_records_when_its_process_started(registry: Registry) -> None:
    model = FunctionModel(lambda request: "done")
    await Agent(model=model, load_agent_files=False, registry=registry).run("hi")
    [row] = registry.list()
    assert (row.pid, row.process_start) == (os.getpid(), process_start(os.getpid()))
    assert row.process_start is not None


def test_mark_lost_sees_a_reused_pid(registry: Registry, sleeper: subprocess.Popen[bytes]) -> None:
    started = process_start(sleeper.pid)
    registry.register(record("reused", pid=sleeper.pid, process_start="another boot:1"))
    registry.register(record("same", pid=sleeper.pid, process_start=started))
    registry.register(record("unknown", pid=sleeper.pid, process_start=None))
    [lost] = registry.mark_lost()
    assert lost.id == "reused"
    assert lost.error is not None
    assert "pid now belongs to another process" in lost.error
    assert {r.id: r.status for r in registry.list()} == {
        "reused": "lost",
        "same": "running",
        "unknown": "running",
    }


def test_stopping_an_agent_whose_pid_was_reused_marks_it_lost(
    registry: Registry, sleeper: subprocess.Popen[bytes]
) -> None:
    registry.register(record("a", pid=sleeper.pid, process_start="another boot:1"))
    assert registry.request_stop("a").outcome == "lost"


# -- schema versions -------------------------------------------------------------------------


def test_a_version_1_registry_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    create_table = registry_module._SCHEMA[0].replace("    process_start TEXT,\n", "")
    db.execute(create_table)
    db.execute(
        "INSERT INTO agents (id, root_id, model, kind, label, status, background, pid, "
        "started_at, updated_at, turns, input_tokens, output_tokens, cache_read_tokens, "
        "cache_write_tokens, stop_requested) "
        "VALUES ('old', 'old', 'test:m', 'main', '', 'running', 0, 1, 1.0, 1.0, 0, 0, 0, 0, 0, 0)"
    )
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    registry = Registry(path)
    assert registry.get("old").process_start is None
    registry.register(record("new", process_start="boot:1"))
    assert registry.get("new").process_start == "boot:1"
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == registry_module.SCHEMA_VERSION
    finally:
        db.close()


def test_a_registry_from_a_newer_forkagent_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(RegistryError, match=r"schema version 99, newer .* upgrade forkagent"):
        Registry(path)


def test_one_query_finds_every_agent_asked_to_stop(registry: Registry) -> None:
    """More ids than one SQL statement takes, and only the asked ones come back."""
    ids = [f"a{n}" for n in range(1_200)]
    for agent_id in ids:
        registry.register(record(agent_id))
    for agent_id in ("a3", "a700", "a1199"):
        registry.request_stop(agent_id)
    assert registry.stops_requested([*ids, "unknown"]) == {"a3", "a700", "a1199"}
    assert registry.stops_requested(["a4", "unknown"]) == set()
