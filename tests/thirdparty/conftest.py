"""Fixtures of the third-party tests: one loopback emulator, and the environment pointing
OpenAI clients at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from forkagent.emulator import Emulator, Latency, RunningServer, serve

from ._support import LookupPolicy


@pytest.fixture(scope="module")
def _server() -> Iterator[RunningServer]:
    with serve(Emulator(latency=Latency(ttft=0.005, tokens_per_second=1e5))) as running:
        yield running


@pytest.fixture
def emulator(_server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Emulator:
    """The served emulator, fresh, with the environment pointing OpenAI clients at it."""
    monkeypatch.setenv("OPENAI_BASE_URL", _server.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "emulator")
    _server.emulator.reset()
    return _server.emulator


@pytest.fixture
def model(emulator: Emulator) -> LookupPolicy:
    policy = LookupPolicy()
    emulator.set_policy(policy)
    return policy
