"""What both benchmarks run: agents on the in-process emulator, with nothing written to disk."""

from __future__ import annotations

from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator
from forkagent.models.emulator import EmulatorModel
from forkagent.telemetry import Listener

MODEL = "claude-sonnet-4-6"
"""Anthropic's cache rules and prices: read 0.1x, 5-minute write 1.25x, 2,048-token minimum."""


def offline_agent(
    emulator: Emulator, cwd: Path, options: RuntimeOptions, *listeners: Listener
) -> Agent:
    """An agent on ``MODEL`` served by ``emulator``.

    No registry, transcripts, agent files or compaction: only the runtime and the emulator
    are measured (a 200k-token parent would otherwise be summarised before it forks).
    """
    return Agent(
        model=EmulatorModel(MODEL, emulator),
        cwd=cwd,
        options=options,
        listeners=listeners,
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
        compact_at=None,
    )
