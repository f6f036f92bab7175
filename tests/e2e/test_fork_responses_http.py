"""Forks of an ``openai:`` model on the Responses API, over HTTP through the official SDK.

Both ways of sending a history keep the fork guarantee. With the full input,
a child's request starts with its parent's last request byte for byte. With
``chain=True`` a child sends only its own message after the parent's last
response id (``previous_response_id``); the server rebuilds the same prompt,
so the cache serves the same prefix. Either way each child reads its parent's
whole prompt from the cache (``input_tokens_details.cached_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkagent import Agent
from forkagent.emulator import EmulatedRequest, Emulator, Latency, Reply, default_policy, serve
from forkagent.emulator.server import RunningServer
from forkagent.models.openai_responses import OpenAIResponsesModel
from forkagent.requests import ModelSettings
from forkagent.usage import Usage

MODEL = "gpt-5"
DIRECTIVES = [f"Review part {n} of the module and report." for n in range(1, 4)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, RunningServer]]:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    emulator = Emulator(latency=Latency(ttft=0.02, tokens_per_second=5000))
    with serve(emulator) as running:
        yield emulator, running


def _history_text() -> str:
    lines = [f"def function_{i}(value):\n    return value * {i} + {i % 7}\n" for i in range(600)]
    return "Here is the module to review:\n\n" + "".join(lines)


def _recording(emulator: Emulator) -> list[dict[str, Any]]:
    """Request bodies as the emulator receives them; the default policy still answers."""
    bodies: list[dict[str, Any]] = []

    def record(request: EmulatedRequest) -> Reply:
        bodies.append(dict(request.body))
        return default_policy(request)

    emulator.set_policy(record)
    return bodies


async def _fork(
    running: RunningServer, tmp_path: Path, *, chain: bool
) -> tuple[Usage, list[Usage], str]:
    """The parent's usage, each child's, and the parent's last response id."""
    model = OpenAIResponsesModel(MODEL, base_url=running.url + "/v1", chain=chain)
    agent = Agent(
        model=model,
        cwd=tmp_path,
        load_agent_files=False,
        builtin_tools=False,
        settings=ModelSettings(max_tokens=256, cache_key="review"),
    )
    try:
        async with agent.session() as session:
            await session.send(_history_text())
            parent = session.root.last_usage
            assert parent is not None
            tasks = await session.fork(DIRECTIVES)
            assert [task.status for task in tasks] == ["completed"] * len(DIRECTIVES)
            children = [task.run.last_usage for task in tasks]
            last_id = running.emulator.log[0].message_id
    finally:
        await model.aclose()
    assert all(child is not None for child in children)
    assert last_id is not None
    return parent, [c for c in children if c is not None], last_id


def _settings(body: dict[str, Any]) -> dict[str, Any]:
    """Everything but the input and whether the reply streams (which the prompt is not)."""
    return {k: v for k, v in body.items() if k not in ("input", "stream")}


def _reads_the_parents_prompt(parent: Usage, children: list[Usage]) -> None:
    for child in children:
        assert child.cache_read_tokens >= parent.prompt_tokens - 128
        assert child.prompt_tokens > parent.prompt_tokens


async def test_full_input_children_start_with_the_parents_request_and_read_it_from_the_cache(
    server: tuple[Emulator, RunningServer], tmp_path: Path
) -> None:
    emulator, running = server
    bodies = _recording(emulator)
    parent, children, _ = await _fork(running, tmp_path, chain=False)

    first, *forks = bodies
    assert len(forks) == len(DIRECTIVES)
    for body in forks:
        assert "previous_response_id" not in body
        assert body["store"] is False
        assert _settings(body) == _settings(first)
        assert body["input"][: len(first["input"])] == first["input"]
    _reads_the_parents_prompt(parent, children)


async def test_chained_children_send_only_their_message_after_the_parents_response(
    server: tuple[Emulator, RunningServer], tmp_path: Path
) -> None:
    emulator, running = server
    bodies = _recording(emulator)
    parent, children, parent_response = await _fork(running, tmp_path, chain=True)

    first, *forks = bodies
    assert first["store"] is True
    assert "previous_response_id" not in first
    said: list[str] = []
    for body in forks:
        assert body["previous_response_id"] == parent_response
        [item] = body["input"]  # the child's own message: fork rules and directive
        assert item["role"] == "user"
        said.append(item["content"][-1]["text"])
    assert sorted(said) == [f"Directive:\n{d}" for d in DIRECTIVES]  # children run concurrently
    _reads_the_parents_prompt(parent, children)
    # the server rebuilt the whole context: the child is billed for all of it
    assert all(
        child.prompt_tokens > parent.prompt_tokens + parent.output_tokens for child in children
    )
