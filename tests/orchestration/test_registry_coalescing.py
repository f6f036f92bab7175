"""The registry writer coalesces what is queued per agent: rows end as if written one by one.

The rows are written by the helper process (``state._appends``) with ``state._rows``:
these tests watch its statements through SQLite triggers, and call ``_rows`` directly
(through ``Registry.apply``, the same code) where they change its limits.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from forkagent.state import _rows
from forkagent.state.registry import (
    _EARLY_ROWS,
    AgentRecord,
    AgentRows,
    Registry,
    RegistryError,
    RegistryWriter,
    RowWrite,
    checked_changes,
)
from forkagent.usage import Usage

Step = Callable[[AgentRows], None]
"""One change to the registry, made the same way on a ``Registry`` or a ``RegistryWriter``."""


class SpyRegistry(Registry):
    """Notes each row SQLite writes, by whichever process, with triggers in the file."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("CREATE TABLE written (n INTEGER PRIMARY KEY, kind TEXT, id TEXT)")
            for kind in ("INSERT", "UPDATE"):
                db.execute(
                    f"CREATE TRIGGER note_{kind} AFTER {kind} ON agents BEGIN "
                    f"INSERT INTO written (kind, id) VALUES ('{kind.lower()}', NEW.id); END"
                )

    @property
    def written(self) -> list[tuple[str, str]]:
        """Each row written, in order: ``("insert", id)`` for a whole row, else ``"update"``."""
        with closing(sqlite3.connect(self.path)) as db:
            return db.execute("SELECT kind, id FROM written ORDER BY n").fetchall()


@pytest.fixture
def registry(tmp_path: Path) -> SpyRegistry:
    return SpyRegistry(tmp_path / "registry.db")


def record(agent_id: str, **fields: Any) -> AgentRecord:
    """A row with fixed times, so that two ways of writing it can be compared."""
    fixed = AgentRecord(id=agent_id, root_id="main-0", model="test:m", kind="fork")
    return replace(fixed, started_at=1000.0, updated_at=1000.0, **fields)


@contextmanager
def one_batch(writer: RegistryWriter) -> Iterator[None]:
    """Hold the writer, so that everything given in the block goes out at once, as one batch."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(30)

    writer.write(hold)
    assert entered.wait(30)
    try:
        yield
    finally:
        release.set()


def comparable(registry: Registry) -> dict[str, dict[str, object]]:
    """Every row, with its times of writing reduced to whether it has ended."""
    rows: dict[str, dict[str, object]] = {}
    for row in registry.list(limit=None):
        data: dict[str, object] = dict(row.to_json())
        data["ended_at"] = data["ended_at"] is not None
        del data["updated_at"]
        rows[row.id] = data
    return rows


def finished(agent_id: str, output: str) -> AgentRecord:
    return record(agent_id, status="completed", output_preview=output)


# -- one agent, one batch ----------------------------------------------------------------


def test_an_agent_that_starts_and_finishes_in_one_batch_is_one_insert_of_its_final_row(
    registry: SpyRegistry, tmp_path: Path
) -> None:
    usage = Usage(input_tokens=10, output_tokens=20, cache_read_tokens=900)
    steps: list[Step] = [
        lambda rows: rows.register(record("fork-1", transcript=tmp_path / "fork-1.jsonl")),
        lambda rows: rows.record_usage("fork-1", usage, turns=1, cost=0.002),
        lambda rows: rows.update("fork-1", background=True),
        lambda rows: rows.record_usage("fork-1", usage + usage, turns=2, cost=0.004),
        lambda rows: rows.finish("fork-1", "completed", output="x" * 600),
    ]
    one_by_one = Registry(tmp_path / "one-by-one.db")
    for step in steps:
        step(one_by_one)
    writer = RegistryWriter(registry)
    with one_batch(writer):
        for step in steps:
            step(writer)
    writer.close()

    assert registry.written == [("insert", "fork-1")]  # one INSERT, of the final row
    assert comparable(registry) == comparable(one_by_one)
    row = registry.get("fork-1")
    assert (row.status, row.turns, row.input_tokens, row.background) == ("completed", 2, 20, True)
    assert row.output_preview == "x" * 500
    assert row.ended_at is not None
    assert row.started_at <= row.ended_at == row.updated_at  # stamped when it finished


# -- many agents, any order, any batches -------------------------------------------------


def step(name: str, *args: Any, **kwargs: Any) -> Step:
    """``rows.<name>(*args, **kwargs)`` on whichever rows it is given."""
    return lambda rows: getattr(rows, name)(*args, **kwargs)


def random_steps(rng: random.Random, agents: int, count: int) -> list[Step]:
    """Registers, usage, background moves, labels, endings, restarts and re-registers."""
    ids = [f"fork-{n}" for n in range(agents)]
    steps = [step("register", record(agent_id)) for agent_id in ids]
    for n in range(count):
        agent, kind = rng.choice(ids), rng.randrange(6)
        if kind == 0:
            usage = Usage(input_tokens=rng.randrange(100), output_tokens=rng.randrange(100))
            cost = rng.choice([None, rng.random()])
            steps.append(step("record_usage", agent, usage, turns=n, cost=cost))
        elif kind == 1:
            steps.append(step("update", agent, background=True))
        elif kind == 2:
            steps.append(step("update", agent, label=f"step {n}"))
        elif kind == 3:
            status = rng.choice(["completed", "failed", "cancelled", "lost"])
            error = None if status == "completed" else f"{status} at {n}"
            steps.append(step("finish", agent, status, output=f"out {n}", error=error))
        elif kind == 4:
            steps.append(step("update", agent, status="running"))
        else:
            steps.append(step("register", record(agent, label=f"resumed {n}")))
    return steps


@pytest.mark.parametrize("seed", range(12))
def test_coalesced_rows_end_as_the_same_writes_made_one_by_one(
    registry: SpyRegistry, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    steps = random_steps(rng, agents=6, count=80)
    one_by_one = Registry(tmp_path / "one-by-one.db")
    for step in steps:
        step(one_by_one)
    writer = RegistryWriter(registry)
    cuts = sorted(rng.sample(range(1, len(steps)), 3))  # four batches, cut anywhere
    for start, end in zip([0, *cuts], [*cuts, len(steps)], strict=True):
        with one_batch(writer):
            for step in steps[start:end]:
                step(writer)
    writer.close()

    assert comparable(registry) == comparable(one_by_one)
    assert len(registry.written) <= 4 * 6 < len(steps)  # at most one row per agent and batch


@pytest.mark.parametrize("seed", range(6))
async def test_a_turns_changes_merged_on_the_loop_end_as_the_same_writes_made_one_by_one(
    registry: SpyRegistry, tmp_path: Path, seed: int
) -> None:
    """On a loop, a change right after another of the same agent is merged into it before
    the turn's rows are marshalled (a fork's usage and finish): the rows are still those of
    the writes made one by one."""
    rng = random.Random(seed)
    steps = random_steps(rng, agents=3, count=80)  # three agents: many changes in a row
    one_by_one = Registry(tmp_path / "one-by-one.db")
    for step in steps:
        step(one_by_one)
    writer = RegistryWriter(registry)
    for step in steps:
        step(writer)
        if rng.random() < 0.1:
            await asyncio.sleep(0)  # the turn ends: its rows go to the helper
    writer.close()

    assert comparable(registry) == comparable(one_by_one)


def test_a_status_is_never_taken_back_by_a_later_write_of_other_fields(
    registry: SpyRegistry,
) -> None:
    writer = RegistryWriter(registry)
    with one_batch(writer):
        writer.register(record("a"))
        writer.finish("a", "failed", error="boom")
        writer.record_usage("a", Usage(input_tokens=5), turns=1, cost=None)  # a late report
    with one_batch(writer):
        writer.update("a", label="after the end")
    writer.close()
    row = registry.get("a")
    assert (row.status, row.error, row.turns, row.label) == ("failed", "boom", 1, "after the end")
    assert row.ended_at is not None


def test_an_operation_sees_every_row_queued_before_it(registry: SpyRegistry) -> None:
    writer = RegistryWriter(registry)
    seen: list[str] = []
    with one_batch(writer):
        writer.register(record("a"))
        writer.write(lambda: seen.append(registry.get("a").status))
        writer.finish("a", "completed")
    writer.close()
    assert seen == ["running"]
    assert registry.get("a").status == "completed"
    assert registry.written == [("insert", "a"), ("update", "a")]


# -- failures ----------------------------------------------------------------------------


def refuse_label(registry: Registry, label: str, when: str) -> None:
    """Make SQLite refuse a row with this label, as a full disk or a bad value would."""
    with closing(sqlite3.connect(registry.path)) as db, db:
        db.execute(
            f"CREATE TRIGGER refuse_{when} BEFORE {when} ON agents WHEN NEW.label = '{label}' "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )


def test_a_new_row_sqlite_refuses_does_not_keep_the_others_out(
    registry: SpyRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    refuse_label(registry, "bad", "INSERT")
    writer = RegistryWriter(registry)
    with one_batch(writer):
        for n in range(5):
            writer.register(record(f"a{n}", label="bad" if n == 2 else ""))
            writer.finish(f"a{n}", "completed", output=f"done {n}")
        writer.update("nobody", turns=1)
    writer.close()
    rows = {r.id: r for r in registry.list(limit=None)}
    assert sorted(rows) == ["a0", "a1", "a3", "a4"]
    assert {(r.status, r.output_preview) for r in rows.values()} == {
        ("completed", f"done {n}") for n in (0, 1, 3, 4)
    }
    assert "agent 'a2': refused by the test" in caplog.text
    assert "no agent with id 'nobody'" in caplog.text


def test_a_change_sqlite_refuses_leaves_that_row_as_it_was_and_writes_the_others(
    registry: SpyRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RegistryWriter(registry)
    for n in range(5):
        writer.register(record(f"a{n}"))
    writer.close()
    refuse_label(registry, "bad", "UPDATE")
    with one_batch(writer):
        for n in range(5):
            writer.update(f"a{n}", label="bad" if n == 2 else f"label {n}")
            writer.finish(f"a{n}", "completed")
    writer.close()
    rows = {r.id: (r.status, r.label) for r in registry.list(limit=None)}
    assert rows == {
        **{f"a{n}": ("completed", f"label {n}") for n in (0, 1, 3, 4)},
        "a2": ("running", ""),
    }
    assert "agent 'a2': refused by the test" in caplog.text


@pytest.mark.parametrize("update_from", [True, False], ids=["update-from", "old-sqlite"])
def test_rows_beyond_one_statement_and_a_refused_one_among_them(
    registry: SpyRegistry, monkeypatch: pytest.MonkeyPatch, update_from: bool
) -> None:
    """``Registry.apply`` runs the helper's code (``_rows``) here, where its limits can change."""
    monkeypatch.setattr(_rows, "ROWS_PER_STATEMENT", 3)
    monkeypatch.setattr(_rows, "UPDATE_FROM", update_from)
    refuse_label(registry, "bad", "UPDATE")
    registry.apply({f"a{n}": RowWrite(record(f"a{n}")) for n in range(10)})
    changes = {
        f"a{n}": RowWrite(changes=checked_changes({"turns": n, "label": "bad" if n == 7 else ""}))
        for n in range(10)
    }
    with pytest.raises(RegistryError, match="agent 'a7': refused by the test"):
        registry.apply(changes)
    turns = {r.id: r.turns for r in registry.list(limit=None)}
    assert turns == {f"a{n}": 0 if n == 7 else n for n in range(10)}


def test_a_large_drain_reuses_a_few_statements_of_a_power_of_two_rows(
    registry: SpyRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preparing a statement costs SQLite more than its rows: sizes repeat, so they are reused."""
    sizes: list[int] = []
    insert_sql = _rows.insert_sql

    def spy(count: int) -> str:
        sizes.append(count)
        return insert_sql(count)

    monkeypatch.setattr(_rows, "insert_sql", spy)
    for first, count in ((0, 1000), (1000, 777)):  # two drains of different sizes
        registry.apply({f"a{n}": RowWrite(record(f"a{n}")) for n in range(first, first + count)})

    assert len(registry.list(limit=None)) == 1777
    assert sum(sizes) == 1777
    assert set(sizes) <= {1, 2, 4, 8, 16, 32, 64}
    assert sizes.count(64) == 1000 // 64 + 777 // 64
    assert len(sizes) <= 1777 // 64 + 2 * 6  # plus at most one of each smaller size per drain


def test_a_large_batch_through_the_helper_is_one_row_write_per_agent(
    registry: SpyRegistry,
) -> None:
    writer = RegistryWriter(registry)
    with one_batch(writer):
        for n in range(1000):
            writer.register(record(f"a{n}"))
            writer.finish(f"a{n}", "completed", output=f"done {n}")
    writer.close()
    assert len(registry.written) == 1000
    assert {r.status for r in registry.list(limit=None)} == {"completed"}


def test_the_writer_refuses_a_bad_change_on_the_callers_thread(registry: SpyRegistry) -> None:
    writer = RegistryWriter(registry)
    with pytest.raises(TypeError, match="no updatable field colour"):
        writer.update("a", colour="red")
    with pytest.raises(ValueError, match="'done' is not an agent status"):
        writer.update("a", status="done")
    with pytest.raises(ValueError, match="label, model cannot be None"):
        writer.update("a", label=None, model=None, error=None)
    with pytest.raises(TypeError, match="agent 'a': a row cannot hold a value of type PosixPath"):
        writer.update("a", cwd=Path("/somewhere"))
    with pytest.raises(TypeError, match="agent 'b': a row cannot hold a value of type list"):
        writer.register(record("b", label=["not", "text"]))  # a record typed wrong
    writer.close()
    assert registry.written == []  # nothing was sent


_KILLED = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from forkagent.state._appends import BACKGROUND
    from forkagent.state.registry import AgentRecord, Registry, RegistryWriter

    registry = Registry(sys.argv[1])
    writer = RegistryWriter(registry)
    for n in range(20):
        writer.register(AgentRecord(id=f"written{n}", root_id="r", model="test:m"))
        writer.finish(f"written{n}", "completed", output=f"done {n}")
    writer.close()  # on disk
    for n in range(300):  # off an event loop: each row goes to the helper at once
        writer.register(AgentRecord(id=f"sent{n}", root_id="r", model="test:m"))
        writer.finish(f"sent{n}", "completed", output=f"done {n}")

    async def on_a_loop():
        for n in range(300):
            writer.register(AgentRecord(id=f"turn{n}", root_id="r", model="test:m"))
            writer.finish(f"turn{n}", "completed", output=f"done {n}")
        for _ in range(3):
            await asyncio.sleep(0)  # that turn ended: its rows went to the helper
        for n in range(300):  # a turn's worth at a time goes ahead; the rest waits for its end
            writer.register(AgentRecord(id=f"unsent{n}", root_id="r", model="test:m"))
        print(BACKGROUND.helper_pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # before this turn ends

    asyncio.run(on_a_loop())
    """
)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` (not a child of this one) has ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_kill_9_loses_only_the_rows_of_the_turn_it_interrupts(tmp_path: Path) -> None:
    """Rows sent to the helper are written after their sender died; only those the interrupted
    turn still kept are lost, fewer than a turn's worth (``_EARLY_ROWS``), the last ones."""
    path = tmp_path / "registry.db"
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED, str(path)],
        timeout=60,
        check=False,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL
    helper = int(killed.stdout)
    for _ in range(3000):  # the helper drains the pipe, writes, and ends with it
        if _ended(helper):
            break
        time.sleep(0.01)
    assert _ended(helper)
    registry = Registry(path)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = {r.id: (r.status, r.output_preview) for r in registry.list(limit=None)}
    for prefix, count in (("written", 20), ("sent", 300), ("turn", 300)):
        assert {rows[f"{prefix}{n}"] for n in range(count)} == {
            ("completed", f"done {n}") for n in range(count)
        }
    kept = sorted(int(agent_id[6:]) for agent_id in rows if agent_id.startswith("unsent"))
    assert kept == list(range(len(kept)))  # in order: what went ahead, none after a gap
    assert 0 < 300 - len(kept) < _EARLY_ROWS


def test_a_drain_that_fails_is_logged_and_the_next_one_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The write lock never comes: that drain is lost and logged, the writer goes on."""
    registry = Registry(tmp_path / "registry.db", timeout=0.05)
    writer = RegistryWriter(registry)
    with closing(sqlite3.connect(registry.path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        writer.register(record("lost"))
        writer.close()
        other.execute("ROLLBACK")
    writer.register(record("written"))
    writer.close()
    assert [r.id for r in registry.list()] == ["written"]
    assert "could not write to the agent registry" in caplog.text
    assert "database is locked" in caplog.text


# -- closing -----------------------------------------------------------------------------


def test_rows_after_an_operation_wait_for_it_and_a_close_that_did_not_wait_keeps_them(
    registry: SpyRegistry,
) -> None:
    writer = RegistryWriter(registry)
    go = threading.Event()
    seen: list[int] = []
    for n in range(50):
        writer.register(record(f"a{n}"))

    def count_rows() -> None:
        go.wait(30)
        seen.append(len(registry.list(limit=None)))

    writer.write(count_rows)
    for n in range(50):
        writer.finish(f"a{n}", "completed")  # held here until the operation has run
    writer.close(wait=False)
    assert {r.status for r in registry.list(limit=None)} <= {"running"}
    go.set()
    writer.close()
    assert seen == [50]  # the rows before it were written when it ran
    assert {r.status for r in registry.list(limit=None)} == {"completed"}
    assert registry.written == [("insert", f"a{n}") for n in range(50)] + [
        ("update", f"a{n}") for n in range(50)
    ]


_NOT_WAITED = textwrap.dedent(
    """
    import sys
    from forkagent.state.registry import AgentRecord, Registry, RegistryWriter

    registry = Registry(sys.argv[1])
    writer = RegistryWriter(registry)
    for n in range(200):
        writer.register(AgentRecord(id=f"a{n}", root_id="r", model="test:m"))
    writer.close(wait=False)
    """
)


def test_the_interpreters_exit_waits_for_a_close_that_did_not(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    subprocess.run([sys.executable, "-c", _NOT_WAITED, str(path)], check=True, timeout=60)
    assert not Path(f"{path}-wal").exists()  # the helper's connection was closed: checkpointed
    assert len(Registry(path).list(limit=None)) == 200


async def test_a_turns_rows_past_a_turns_worth_reach_the_database_before_the_turn_ends(
    tmp_path: Path,
) -> None:
    """A turn that registers many agents (a fork family starting, or ending) sends its rows to
    the helper as they pile up: the helper writes them while the loop works on, instead of
    leaving them all for the session's close to wait for."""
    registry = Registry(tmp_path / "registry.db")
    writer = RegistryWriter(registry)
    ids = [f"fork-{n}" for n in range(_EARLY_ROWS)]
    try:
        for agent_id in ids:
            writer.register_started(
                agent_id,
                root_id="root",
                model="emulator:model",
                kind="fork",
                parent_id="root",
                label=agent_id,
                background=True,
                cwd=str(tmp_path),
                transcript=None,
            )
        # Still in the turn that registered them (no await since): polled from this thread.
        deadline = time.monotonic() + 20
        while len(registry.list(limit=None)) < len(ids) and time.monotonic() < deadline:
            time.sleep(0.01)  # noqa: ASYNC251 - the turn must not end while this waits
        assert sorted(record.id for record in registry.list(limit=None)) == sorted(ids)
    finally:
        writer.close()
