"""pydantic-ai's default OpenAI model (``openai:gpt-5``, the Responses API) on the emulator."""

from __future__ import annotations

from ._support import ANSWER, INSTRUCTIONS, QUESTION, LookupPolicy, need

need("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402


def _agent(calls: list[str]) -> Agent[None, str]:
    agent = Agent("openai:gpt-5", instructions=INSTRUCTIONS)

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a ticket up by its key."""
        calls.append(key)
        return f"{key}: open, owner Kim"

    return agent


async def test_a_tool_call_round_trips_and_the_second_run_reads_the_cache(
    model: LookupPolicy,
) -> None:
    calls: list[str] = []
    async with _agent(calls) as agent:  # closes the HTTP client the provider made
        first = await agent.run(QUESTION)
        second = await agent.run(QUESTION)

    assert first.output == second.output == ANSWER
    assert calls == ["A", "A"]
    assert model.tool_outputs() == ["A: open, owner Kim"] * 2
    # with encrypted content: pydantic-ai asks for it and sends it back verbatim
    assert [bool(r.get("encrypted_content")) for r in model.reasoning_sent_back()] == [True] * 2
    assert first.usage.cache_read_tokens < second.usage.cache_read_tokens
    assert second.usage.cache_read_tokens >= 1024
