"""The OpenAI Agents SDK's default model (a ``gpt-5`` string: the Responses API) on the emulator."""

from __future__ import annotations

import pytest

from ._support import ANSWER, INSTRUCTIONS, QUESTION, LookupPolicy, need

need("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK would send its traces to OpenAI's servers: nothing may leave loopback."""
    set_tracing_disabled(True)


def _agent(calls: list[str]) -> Agent[None]:
    @function_tool
    def lookup(key: str) -> str:
        """Look a ticket up by its key."""
        calls.append(key)
        return f"{key}: open, owner Kim"

    return Agent(name="support", instructions=INSTRUCTIONS, model="gpt-5", tools=[lookup])


async def test_a_tool_call_round_trips_and_the_second_run_reads_the_cache(
    model: LookupPolicy,
) -> None:
    calls: list[str] = []
    agent = _agent(calls)
    first = await Runner.run(agent, QUESTION)
    second = await Runner.run(agent, QUESTION)

    assert first.final_output == second.final_output == ANSWER
    assert calls == ["A", "A"]
    assert model.tool_outputs() == ["A: open, owner Kim"] * 2
    # by id: the SDK stores responses by default, and the emulator looks the item up
    assert [r["id"].startswith("rs_") for r in model.reasoning_sent_back()] == [True] * 2
    cached = [r.context_wrapper.usage.input_tokens_details.cached_tokens for r in (first, second)]
    assert cached[0] < cached[1]
    assert cached[1] >= 1024
