"""Fixtures for the adapter tests: dummy keys, a loopback emulator, recorded retry waits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from forkagent.emulator import (
    CacheSettings,
    Emulator,
    FaultPlan,
    Latency,
    RunningServer,
    default_policy,
    serve,
)
from forkagent.models import Model, _retry

KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "DASHSCOPE_API_KEY",
    "DEEPSEEK_API_KEY",
    "GEMINI_API_KEY",
)
UNSET = (
    "GOOGLE_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    "GOOGLE_GEMINI_BASE_URL",
    "DASHSCOPE_BASE_URL",
    "DEEPSEEK_BASE_URL",
    "VLLM_BASE_URL",
    "OPENAI_COMPAT_BASE_URL",
)


@pytest.fixture(autouse=True)
def _dummy_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS:
        monkeypatch.setenv(name, "test-key")
    for name in UNSET:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    emulator = Emulator(
        latency=Latency(ttft=0.005, tokens_per_second=1e6),
        settings=CacheSettings(deepseek_build_delay=0.0),
    )
    with serve(emulator) as running:
        yield running


@pytest.fixture
def emulator(server: RunningServer) -> Emulator:
    """The served emulator, fresh: empty caches, no scripts, no faults, the default policy."""
    server.emulator.reset()
    server.emulator.faults = FaultPlan()
    server.emulator.set_policy(default_policy)
    return server.emulator


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Retry waits, recorded instead of slept."""
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    monkeypatch.setattr(_retry, "_sleep", record)
    return waits


@pytest.fixture
async def closing() -> AsyncIterator[list[Model]]:
    """Models appended here are closed after the test (their SDK clients hold sockets)."""
    models: list[Model] = []
    yield models
    for model in models:
        await model.aclose()
