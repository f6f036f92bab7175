from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from forkagent.agents import load_agents
from forkagent.cli import app
from forkagent.cli.agents import _print


def project_with(tmp_path: Path, **files: str) -> Path:
    agents_dir = tmp_path / "proj" / ".claude" / "agents"
    agents_dir.mkdir(parents=True)
    for name, text in files.items():
        (agents_dir / f"{name}.md").write_text(text)
    return tmp_path / "proj"


REVIEWER = (
    "---\nname: reviewer\ndescription: Reviews\ntools: Read, Grep\nmodel: haiku\n---\nReview.\n"
)


def test_json_lists_agents_with_source_model_and_tools(tmp_path: Path) -> None:
    project = project_with(tmp_path, reviewer=REVIEWER)
    result = CliRunner().invoke(app, ["agents", "--json", "--project", str(project)])

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_name = {a["name"]: a for a in data["agents"]}
    assert list(by_name) == ["general-purpose", "Explore", "Plan", "reviewer"]
    reviewer = by_name["reviewer"]
    assert reviewer["source"] == str(project / ".claude" / "agents" / "reviewer.md")
    assert (reviewer["model"], reviewer["tools"]) == ("haiku", ["Read", "Grep"])
    assert reviewer["can_spawn_agents"] is False
    assert by_name["general-purpose"]["tools"] is None
    assert data["errors"] == []


def test_failed_files_are_listed_and_set_the_exit_status(tmp_path: Path) -> None:
    project = project_with(tmp_path, reviewer=REVIEWER, broken="---\nname: broken\n---\n")
    runner = CliRunner()

    as_json = runner.invoke(app, ["agents", "--json", "--project", str(project)])
    plain = runner.invoke(app, ["agents", "--project", str(project)])

    assert as_json.exit_code == plain.exit_code == 1
    [error] = json.loads(as_json.stdout)["errors"]
    assert error["path"].endswith("broken.md")
    assert error["field"] == "description"
    lines = plain.stdout.splitlines()
    assert (
        "reviewer\t" + str(project / ".claude" / "agents" / "reviewer.md") + "\thaiku\tRead, Grep"
        in lines
    )
    assert "general-purpose\tbuilt-in\tinherit\tall" in lines
    assert "failed to load:" in plain.stderr
    assert "broken.md (description): Field required" in plain.stderr


def test_a_terminal_gets_a_table(tmp_path: Path) -> None:
    out = StringIO()
    _print(
        load_agents(project_with(tmp_path, reviewer=REVIEWER)),
        Console(file=out, force_terminal=True, width=160),
    )
    text = out.getvalue()
    for cell in ("agent", "source", "model", "tools", "reviewer", "Read, Grep", "built-in"):
        assert cell in text
    assert "\x1b[" in text, "a terminal gets styled output"
