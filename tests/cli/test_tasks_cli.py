from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from forkagent.cli.tasks import register
from forkagent.messages import (
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    tool_result,
    user,
)
from forkagent.state.registry import AgentRecord, Registry
from forkagent.state.transcript import TranscriptHeader, TranscriptWriter
from forkagent.usage import Usage

runner = CliRunner()


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    monkeypatch.setenv("FORKAGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FORKAGENT_REGISTRY", str(tmp_path / "registry.db"))
    return Registry()


def record(agent_id: str, **fields: Any) -> AgentRecord:
    return replace(AgentRecord(id=agent_id, root_id="main-0-aa", model="test:m"), **fields)


def transcript(path: Path, *, finished: bool = True) -> Path:
    header = TranscriptHeader(
        agent_id="fork-1-bb",
        parent_id="main-0-aa",
        root_id="main-0-aa",
        kind="fork",
        label="check the schema",
        model="anthropic:claude-sonnet-4-6",
        system="You review schemas.",
        cwd="/work",
    )
    with TranscriptWriter(path) as writer:
        writer.header(header)
        writer.message(user("Check schema.sql ✓"))
        writer.message(
            assistant(
                ThinkingBlock(thinking="Read it first.", signature="sig"),
                ToolUseBlock(id="toolu_1", name="Read", input={"path": "schema.sql" + "x" * 400}),
            )
        )
        writer.usage(
            Usage(input_tokens=100, cache_read_tokens=900, output_tokens=30, requests=1), turn=1
        )
        writer.message(
            user(
                ToolResultBlock(
                    tool_use_id="toolu_1",
                    content=(TextBlock(text="CREATE TABLE t;"), ImageBlock(url="https://x/a.png")),
                ),
                tool_result("toolu_2", "no such file", is_error=True),
                origin="tool",
            )
        )
        writer.message(assistant("The schema is fine."))
        if finished:
            writer.status("completed", output="The schema is fine.")
    return path


# -- ps ----------------------------------------------------------------------------


def test_ps_json_lists_running_then_recent(app: typer.Typer, registry: Registry) -> None:
    registry.register(record("main-0-aa", started_at=1.0, cost=0.25))
    registry.register(
        record(
            "fork-1-bb",
            kind="fork",
            parent_id="main-0-aa",
            status="completed",
            started_at=2.0,
            input_tokens=100,
            cache_read_tokens=300,
            output_tokens=5,
        )
    )
    result = runner.invoke(app, ["ps", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == ["main-0-aa", "fork-1-bb"]
    child = rows[1]
    assert child["parent_id"] == "main-0-aa"
    assert child["cost"] is None
    assert child["cache_hit_ratio"] == 0.75
    assert child["total_tokens"] == 405
    assert child["started_at"] == "1970-01-01T00:00:02+00:00"
    assert {"status", "turns", "kind", "pid", "transcript", "stop_requested"} <= child.keys()


def test_ps_table_says_unknown_for_an_unknown_cost(app: typer.Typer, registry: Registry) -> None:
    registry.register(record("main-0-aa", cost=0.0123, cache_read_tokens=50, input_tokens=50))
    registry.register(record("named-2-cc", kind="named", background=True, turns=4))
    result = runner.invoke(app, ["ps"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "STARTED", "PARENT", "KIND", "STATUS", "TURNS", "TOKENS", "CACHE", "COST", "TIME", "LABEL"
    ]  # fmt: skip
    by_id = {line.split()[0]: line for line in lines[1:]}
    assert "unknown" in by_id["named-2-cc"]
    assert "running (bg)" in by_id["named-2-cc"]
    assert "$0.0123" in by_id["main-0-aa"]
    assert "50%" in by_id["main-0-aa"]


def test_ps_marks_agents_of_dead_processes_lost(app: typer.Typer, registry: Registry) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    registry.register(record("main-0-aa", pid=child.pid))
    rows = json.loads(runner.invoke(app, ["ps", "--json"]).stdout)
    assert rows[0]["status"] == "lost"


def test_ps_with_an_explicit_registry_path(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    Registry(path).register(record("x-1"))
    result = runner.invoke(app, ["ps", "--json", "--registry", str(path)])
    assert [r["id"] for r in json.loads(result.stdout)] == ["x-1"]
    assert "No agents" in runner.invoke(app, ["ps", "--registry", str(tmp_path / "new.db")]).stdout


# -- logs --------------------------------------------------------------------------


def test_logs_prints_the_transcript_readably(
    app: typer.Typer, registry: Registry, tmp_path: Path
) -> None:
    path = transcript(tmp_path / "fork.jsonl")
    registry.register(record("fork-1-bb", transcript=path, status="completed"))
    result = runner.invoke(app, ["logs", "fork-1"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "fork agent fork-1-bb 'check the schema' (parent main-0-aa, root main-0-aa)" in out
    assert "model anthropic:claude-sonnet-4-6" in out
    assert "── #0 user" in out
    assert "Check schema.sql ✓" in out
    assert "[thinking: 14 chars, signed]" in out
    assert '→ Read({"path": "schema.sqlxxx' in out
    assert "… (+" in out  # the long argument is abbreviated
    assert "── #2 user (tool)" in out
    assert "← result [toolu_1]: CREATE TABLE t; [image image/png, https://x/a.png]" in out
    assert "← error [toolu_2]: no such file" in out
    assert "in 100 · out 30 · cache read 900 · cache write 0 (90% cached) · $0.0010" in out
    assert "■ completed" in out


def test_logs_json_prints_one_object_per_line(app: typer.Typer, tmp_path: Path) -> None:
    path = transcript(tmp_path / "fork.jsonl")
    result = runner.invoke(app, ["logs", str(path), "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["type"] for line in lines] == [
        "header", "message", "message", "usage", "message", "message", "status"
    ]  # fmt: skip
    assert lines[0]["system"] == "You review schemas."


def test_logs_notes_a_torn_last_line(app: typer.Typer, tmp_path: Path) -> None:
    path = transcript(tmp_path / "fork.jsonl", finished=False)
    with path.open("ab") as file:
        file.write(b'{"type":"mes')
    result = runner.invoke(app, ["logs", str(path)])
    assert result.exit_code == 0, result.output
    assert "the last line was incomplete" in result.stdout


def test_logs_follow_prints_lines_until_the_agent_ends(app: typer.Typer, tmp_path: Path) -> None:
    path = transcript(tmp_path / "fork.jsonl", finished=False)

    def finish_later() -> None:
        time.sleep(0.2)
        with TranscriptWriter(path) as writer:
            writer.message(user("one more thing"))
            writer.status("cancelled", error="stopped by the user")

    writer = threading.Thread(target=finish_later)
    writer.start()
    result = runner.invoke(app, ["logs", str(path), "--follow", "--interval", "0.02"])
    writer.join()
    assert result.exit_code == 0, result.output
    assert "The schema is fine." in result.stdout
    assert "one more thing" in result.stdout
    assert result.stdout.rstrip().endswith("error: stopped by the user")


def test_logs_follow_stops_when_the_registry_says_the_agent_ended(
    app: typer.Typer, registry: Registry, tmp_path: Path
) -> None:
    path = transcript(tmp_path / "fork.jsonl", finished=False)
    registry.register(record("fork-1-bb", transcript=path, status="lost"))
    result = runner.invoke(app, ["logs", "fork-1-bb", "-f", "--interval", "0.02"])
    assert result.exit_code == 0, result.output
    assert "The schema is fine." in result.stdout


def test_logs_explains_a_missing_transcript(app: typer.Typer, registry: Registry) -> None:
    registry.register(record("main-0-aa"))
    result = runner.invoke(app, ["logs", "main"])
    assert result.exit_code == 1
    assert "keeps no transcript (started with skip_transcript)" in result.stderr
    result = runner.invoke(app, ["logs", "nobody"])
    assert result.exit_code == 1
    assert "no agent id starts with 'nobody'" in result.stderr


# -- stop --------------------------------------------------------------------------


def test_stop_asks_the_owning_process(app: typer.Typer, registry: Registry) -> None:
    registry.register(record("main-0-aa", pid=os.getpid()))
    result = runner.invoke(app, ["stop", "main-0"])
    assert result.exit_code == 0, result.output
    assert f"Asked process {os.getpid()}" in result.stdout
    assert registry.stop_requested("main-0-aa")


def test_stop_reports_finished_and_lost_agents(app: typer.Typer, registry: Registry) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    registry.register(record("done-1", status="completed"))
    registry.register(record("gone-1", pid=child.pid))
    assert "already ended (completed)" in runner.invoke(app, ["stop", "done"]).stdout
    assert "Marked it lost" in runner.invoke(app, ["stop", "gone"]).stdout
    assert registry.get("gone-1").status == "lost"
    result = runner.invoke(app, ["stop", "nobody"])
    assert result.exit_code == 1
    assert "error: no agent id starts with 'nobody'" in result.stderr
