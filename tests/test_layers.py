"""The architecture is a contract: layers, no cycles, public names for users and the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    """``[tool.importlinter]`` in pyproject.toml: the layer order, no cycles, a CLI on public names."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "bench").glob("*.py")),
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_users_never_need_the_private_package(path: Path) -> None:
    """What a user copies from the docs, and the benchmarks, import public names only."""
    imports = re.findall(r"^\s*(?:from|import) forkagent\._\w+.*$", path.read_text(), re.MULTILINE)
    assert imports == []


async def test_a_session_keeps_its_runtime_private() -> None:
    from forkagent import Agent

    async with Agent(model="test:echo", subagents=False).session() as session:
        assert not hasattr(session, "runtime")
        await session.send("hello")
