"""What importing forkagent loads: the public names are all there, the heavy libraries are not."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

import forkagent
import forkagent.agents
import forkagent.emulator
import forkagent.permissions
import forkagent.telemetry

HEAVY = (
    "anthropic",
    "openai",
    "google.genai",
    "httpx",
    "httpx2",
    "bpe_openai",
    "tree_sitter",
    "tree_sitter_bash",
    "yaml",
    "starlette",
    "uvicorn",
    "rich",
    "typer",
)

_PROBE = textwrap.dedent(
    """
    import json, sys
    import forkagent
    after_package = sorted(sys.modules)
    from forkagent import Agent
    after_agent = sorted(sys.modules)
    from forkagent.models import resolve_model
    resolve_model("emulator:claude-sonnet-4-6")
    print(json.dumps({"package": after_package, "agent": after_agent, "emulator": sorted(sys.modules)}))
    """
)


def test_importing_forkagent_loads_only_what_is_used() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(probe.stdout)
    package = set(loaded["package"])
    assert "pydantic" not in package
    assert {m for m in package if m.startswith("forkagent")} == {"forkagent", "forkagent._lazy"}
    agent = set(loaded["agent"])
    assert "forkagent.agent" in agent
    assert [m for m in HEAVY if m in agent] == []
    emulator = set(loaded["emulator"])
    assert "forkagent.emulator.core" in emulator
    assert [m for m in HEAVY if m in emulator] == []  # in process: no HTTP server, no SDK


@pytest.mark.parametrize(
    "package",
    [forkagent, forkagent.agents, forkagent.emulator, forkagent.permissions, forkagent.telemetry],
)
def test_every_public_name_resolves(package: ModuleType) -> None:
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        _ = package.Nothing


def test_the_lazy_names_are_the_real_objects() -> None:
    from forkagent.agents.loader import load_agents
    from forkagent.emulator.server import serve
    from forkagent.permissions.shell import is_read_only_command

    assert forkagent.agents.load_agents is load_agents
    assert forkagent.emulator.serve is serve
    assert forkagent.permissions.is_read_only_command is is_read_only_command
    assert forkagent.permissions.is_read_only_command("ls -la")
