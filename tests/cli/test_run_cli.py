from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from forkagent.cli import app

runner = CliRunner()


def test_run_refuses_a_working_directory_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    result = runner.invoke(app, ["run", "Say hello", "--model", "test:echo", "--cwd", str(missing)])
    assert result.exit_code == 2
    # The error is drawn in a box as wide as the terminal: read its words, not its lines.
    words = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert "does not exist" in words
