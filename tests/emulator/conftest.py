"""Fixtures of the emulator suite: one loopback server for the session, reset for every test.

The emulator runs on a virtual clock, so TTL tests advance time instead of sleeping.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

from forkagent.emulator import (
    Emulator,
    FaultPlan,
    Latency,
    RunningServer,
    VirtualClock,
    default_policy,
    serve,
)

FAST = Latency(ttft=0.02, tokens_per_second=20000)


@pytest.fixture(scope="session")
def clock() -> VirtualClock:
    return VirtualClock(1000.0)


@pytest.fixture(scope="session")
def _shared(clock: VirtualClock) -> Iterator[tuple[Emulator, RunningServer]]:
    emulator = Emulator(clock=clock, latency=FAST)
    with serve(emulator) as running:
        yield emulator, running


@pytest.fixture
def emu(_shared: tuple[Emulator, RunningServer]) -> Emulator:
    emulator = _shared[0]
    emulator.reset()
    emulator.set_policy(default_policy)
    emulator.latency = FAST
    emulator.faults = FaultPlan()
    return emulator


@pytest.fixture
def server(emu: Emulator, _shared: tuple[Emulator, RunningServer]) -> RunningServer:
    return _shared[1]


@pytest.fixture
def claude(server: RunningServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="test-key", max_retries=0) as client:
        yield client


@pytest.fixture
def oai(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0) as client:
        yield client


@pytest.fixture
def gemini(server: RunningServer) -> Iterator[genai.Client]:
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=server.url))
    yield client
    client.close()
