"""A reply with many tool calls must not cost the agent its cache (the 20-block lookback).

Anthropic and DashScope look for a cache entry at most 20 blocks before a
breakpoint. A reply with N tool calls puts 2N blocks (calls and results)
between the parent's last request and its next turn, and 2N + 1 before a fork
child's rules block; the adapters mark the previous request's end so that
both still find what the previous request wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent import Agent
from forkagent.emulator import EmulatedRequest, Emulator, Policy, Reply, ToolCall
from forkagent.emulator.timing import NO_LATENCY
from forkagent.events import RequestSent, ResponseReceived
from forkagent.models.emulator import EmulatorModel
from forkagent.usage import Usage

from ._support import Events

CONTEXT = "def handler(event):\n    return event.payload * 2\n" * 300
"""About 6,000 tokens of conversation for the children to inherit."""


def _fork_policy(children: int) -> Policy:
    """The parent's first reply forks ``children`` times; children report; the parent ends."""
    calls = [
        ToolCall("Agent", {"prompt": f"Check part {n}.", "description": f"part {n}", "fork": True})
        for n in range(children)
    ]

    def reply(request: EmulatedRequest) -> Reply:
        if "Directive:" in request.last_user_text:
            return Reply(text="Scope: one part. Result: fine.")
        if calls:
            forks = tuple(calls)
            calls.clear()
            return Reply(tool_calls=forks)
        return Reply(text="Every part is fine.")

    return reply


def _first_usage(events: Events, agent_id: str) -> Usage:
    usage: Usage = next(
        e.response.usage for e in events.of(ResponseReceived) if e.agent_id == agent_id
    )
    return usage


@pytest.mark.parametrize(("model", "children"), [("claude-sonnet-4-6", 16), ("qwen-plus", 22)])
async def test_forks_of_a_reply_with_many_tool_calls_read_the_parents_cache(
    tmp_path: Path, model: str, children: int
) -> None:
    emulator = Emulator(latency=NO_LATENCY, policy=_fork_policy(children))
    events = Events()
    agent = Agent(
        model=EmulatorModel(model, emulator),
        cwd=tmp_path,
        listeners=[events],
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
    )
    async with agent.session() as session:
        result = await session.send(CONTEXT)
    assert result.status == "completed"

    parent = session.root.id
    parent_turns = [e.response.usage for e in events.of(ResponseReceived) if e.agent_id == parent]
    # the parent's prompt up to its last breakpoint (Anthropic's request framing follows it)
    parent_prompt = parent_turns[0].prompt_tokens - parent_turns[0].input_tokens
    forks = list(dict.fromkeys(e.agent_id for e in events.of(RequestSent) if e.agent_id != parent))
    assert len(forks) == children
    leader, *siblings = forks
    # The first child reads the parent's whole prompt and writes only the N calls, results and rules.
    assert _first_usage(events, leader).cache_read_tokens >= parent_prompt
    for sibling in siblings:
        usage = _first_usage(events, sibling)
        assert usage.cache_read_tokens >= 0.95 * usage.prompt_tokens
    # The parent's next turn, N tool results later, reads its own previous prompt.
    assert parent_turns[1].cache_read_tokens >= parent_prompt
    reasons = {b.reason for entry in emulator.log for b in entry.breakpoints}
    assert "beyond_lookback" not in reasons
