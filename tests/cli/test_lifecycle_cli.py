"""Exit codes, damaged state and left-behind worktrees on the command line (issue 15)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent import Agent
from forkagent.cli import app
from forkagent.emulator import Emulator, Reply, ToolCall, default_emulator
from forkagent.state.registry import AgentRecord, Registry

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """The in-process emulator ``forkagent run`` talks to, cleared before and after."""
    emulator = default_emulator()
    emulator.reset()
    yield emulator
    emulator.reset()


def test_a_run_stopped_by_its_turn_limit_exits_4_and_says_how_to_resume(
    emulator: Emulator,
) -> None:
    emulator.script(Reply(text="Looking.", tool_calls=(ToolCall("Glob", {"pattern": "*"}),)))

    code, output = _run("run", "List the files", "--max-turns", "1")

    (main,) = Registry().list()
    assert code == 4
    assert main.status == "budget_exceeded"
    assert f"forkagent resume {main.id}" in output


def test_a_negative_turn_limit_is_refused() -> None:
    code, output = _run("run", "Say hello", "--model", "test:echo", "--max-turns", "-1")

    assert code == 2
    assert "--max-turns" in output


def test_an_unusable_state_directory_is_one_line_that_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    monkeypatch.setenv("FORKAGENT_HOME", str(not_a_dir))

    code, output = _run("run", "Say hello", "--model", "test:echo")

    assert code == 1
    assert output.strip().count("\n") == 0
    assert "set FORKAGENT_HOME" in output


def test_logs_of_an_agent_whose_transcript_was_deleted_says_so(tmp_path: Path) -> None:
    result = Agent(model="test:echo", cwd=tmp_path, load_agent_files=False).run_sync("hi")
    record = Registry().get(result.agents[0].id)
    assert record.transcript is not None
    record.transcript.unlink()

    code, output = _run("logs", record.id)

    assert code == 1
    assert "moved or deleted" in output
    assert "Traceback" not in output


def test_a_damaged_registry_is_moved_aside_and_rebuilt_from_the_transcripts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    result = Agent(model="test:echo", cwd=tmp_path, load_agent_files=False).run_sync("hi")
    path = Registry().path
    path.write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    with caplog.at_level(logging.WARNING):
        code, output = _run("ps", "--json")

    assert code == 0
    assert result.agents[0].id in output
    assert '"status": "completed"' in output
    assert any("rebuilt 1 rows from the transcripts" in r.message for r in caplog.records)
    assert list(path.parent.glob("registry.db.damaged-*"))


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


MAKE_WORKTREE = """
import asyncio, sys
from collections.abc import Iterator
from pathlib import Path
from forkagent.state.worktrees import create_worktree
print(asyncio.run(create_worktree(Path(sys.argv[1]), "fork-7-dead00")).path)
"""


def test_ps_lists_worktrees_of_lost_agents_and_prune_removes_the_clean_ones(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "0",
    )
    made = subprocess.run(  # made by a process that then ended, as a killed run leaves it
        [sys.executable, "-c", MAKE_WORKTREE, str(repo)], capture_output=True, text=True, check=True
    )
    worktree = Path(made.stdout.strip())
    Registry().register(
        AgentRecord(
            id="fork-7-dead00",
            root_id="main-0-dead00",
            model="test:echo",
            kind="fork",
            status="lost",
            cwd=str(worktree),
        )
    )

    code, listing = _run("ps")
    assert code == 0
    assert str(worktree) in listing
    assert "forkagent prune" in listing

    code, pruned = _run("prune")

    assert code == 0
    assert f"removed {worktree}" in pruned
    assert not worktree.exists()
    assert "forkagent/" not in _git(repo, "branch", "--list")
