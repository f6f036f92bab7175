"""What the benchmarks run: agents on the in-process emulator, recording only what they ask for."""

from __future__ import annotations

from pathlib import Path

from forkagent import Agent, RuntimeOptions
from forkagent.emulator import Emulator
from forkagent.models.emulator import EmulatorModel
from forkagent.requests import ModelSettings
from forkagent.state.registry import Registry
from forkagent.telemetry import Listener

MODEL = "claude-sonnet-4-6"
"""Anthropic's cache rules and prices: read 0.1x, 5-minute write 1.25x, 2,048-token minimum."""


def offline_agent(
    emulator: Emulator,
    cwd: Path,
    options: RuntimeOptions,
    *listeners: Listener,
    registry: Registry | None = None,
    transcripts: bool = False,
    settings: ModelSettings | None = None,
) -> Agent:
    """An agent on ``MODEL`` served by ``emulator``.

    By default no registry, transcripts, agent files or compaction: only the runtime and
    the emulator are measured (a 200k-token parent would otherwise be summarised before
    it forks). ``registry`` and ``transcripts`` turn those records on.
    """
    return Agent(
        model=EmulatorModel(MODEL, emulator),
        cwd=cwd,
        options=options,
        listeners=listeners,
        registry=registry if registry is not None else False,
        skip_transcript=not transcripts,
        load_agent_files=False,
        compact_at=None,
        settings=settings if settings is not None else ModelSettings(),
    )
