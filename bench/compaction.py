"""What a compaction costs: the summary written by a fork, against a fresh agent.

One long conversation on the emulator (a large first message, then short
turns). ``fork``: ``Session.compact()``, whose summary fork reads the
conversation from the cache. ``fresh``: a new agent handed the same
conversation as one prompt, on the same emulator, which pays for all of it.
Both in billed input-token equivalents at the model's prices (output left out:
the summary is as long either way).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from forkagent import RuntimeOptions
from forkagent.emulator import Emulator
from forkagent.pricing import price_for

from ._agents import MODEL, offline_agent

CONTEXT_FACTS = 2_500
"""Facts in the first message: about 20,000 tokens of conversation to summarise."""
TURNS = 6


@dataclass(frozen=True, slots=True)
class Compaction:
    fork: float
    fresh: float
    prompt_tokens: int
    """The summary fork's prompt: the conversation it summarised."""

    @property
    def ratio(self) -> float:
        return self.fork / self.fresh


async def measure() -> Compaction:
    price = price_for(MODEL)
    assert price is not None
    emulator = Emulator()
    with tempfile.TemporaryDirectory() as tmp:
        agent = offline_agent(emulator, Path(tmp), RuntimeOptions())
        async with agent.session() as session:
            await session.send(" ".join(f"fact {n} about the stock" for n in range(CONTEXT_FACTS)))
            for turn in range(TURNS):
                await session.send(f"turn {turn}: look at the next module")
            transcript = "\n\n".join(message.model_dump_json() for message in session.messages)
            done = await session.compact()
            [summary] = [a for a in session.result().agents if a.id == done.summary_agent]
        fresh_agent = offline_agent(emulator, Path(tmp), RuntimeOptions())
        fresh = await fresh_agent.run("Summarise this conversation:\n\n" + transcript)
    return Compaction(
        fork=round(price.input_equivalents(summary.usage), 1),
        fresh=round(price.input_equivalents(fresh.usage), 1),
        prompt_tokens=summary.usage.prompt_tokens,
    )
