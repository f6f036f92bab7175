"""Interactive means interactive: ``run`` without a terminal has nobody to answer a fork's
questions, so the fork gate is closed there; ``chat`` (test_chat_session.py) forks."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from forkagent.cli import app
from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator
from forkagent.messages import ToolResultBlock
from forkagent.state import read_transcript, transcript_path


def test_run_without_a_terminal_runs_a_general_purpose_agent_for_a_fork(tmp_path: Path) -> None:
    emulator = Emulator()
    fork = ToolCall("Agent", {"prompt": "check it", "fork": True})
    emulator.script(Reply(tool_calls=(fork,)), "done", agent="main")
    with use_emulator(emulator):
        args = ["run", "go", "--model", "emulator:claude-sonnet-4-6", "--cwd", str(tmp_path)]
        out = CliRunner().invoke(app, [*args, "--json"])  # stdin is not a terminal
    assert out.exit_code == 0, out.output
    main, child = json.loads(out.stdout)["agents"]
    assert (child["kind"], child["label"]) == ("named", "general-purpose")
    transcript = read_transcript(transcript_path(main["id"], main["id"]))
    [agent_tool] = [t for t in transcript.header.tools if t.name == "Agent"]
    properties = agent_tool.input_schema["properties"]
    assert isinstance(properties, dict)
    assert "fork" not in properties  # the model is not offered forking
    results = [
        b.content for m in transcript.messages for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert any("forking is not available in this session" in str(r) for r in results)
