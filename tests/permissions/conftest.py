from __future__ import annotations

from pathlib import Path

import pytest

from forkagent.tools.base import ToolContext


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    work = tmp_path / "work"
    work.mkdir()
    return ToolContext(cwd=work, agent_id="child-1")
