"""Cache economics of fork families: N children of a parent whose conversation is P tokens.

For each N and P a real parent agent runs on the in-process emulator under
Anthropic's cache rules (``claude-sonnet-4-6``). Its conversation is padded
to P tokens (system prompt and tools included); in its first turn it calls
the Agent tool N times with ``fork: true`` (one reply, N parallel sync
forks), each child reports in one turn, and the parent closes with a final
answer. The run is repeated per fan-out mode and priced by
``EconomicsRecorder`` in billed input-token equivalents:

- ``forks_all_at_once``: ``fanout="off"``, every child's first request leaves at once;
- ``forks_with_warmup``: ``fanout="auto"``, the first child goes alone and the
  others leave once its response has begun;
- ``forks_with_prewarm``: ``fanout="prewarm"``, a ``max_tokens: 0`` request
  writes the first child's prompt first (billed to that child), for a family
  of two or more;
- ``auto``: the runtime's defaults (``RuntimeOptions()``), what a user gets;
- ``fresh`` and ``lower_bound``: the warm-up run's ``Comparison``.

``ratio_to_bound`` divides each by the lower bound.

    python -m bench.economics [--quick]      (from the checkout's root)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from forkagent import FanoutMode, RuntimeOptions
from forkagent.emulator import EmulatedRequest, Emulator, Policy, Reply, ToolCall, tokens
from forkagent.telemetry import Comparison, EconomicsRecorder

from ._agents import offline_agent

CHILDREN = (1, 2, 4, 8, 16)
PREFIXES = (5_000, 20_000, 50_000, 200_000)
QUICK_CHILDREN = (2, 16)
QUICK_PREFIXES = (5_000,)
FANOUTS: dict[str, FanoutMode | None] = {
    "forks_all_at_once": "off",
    "forks_with_warmup": "auto",
    "forks_with_prewarm": "prewarm",
    "auto": None,
}
"""Fan-out per strategy; ``auto`` is whatever ``RuntimeOptions()`` does by default."""
STRATEGIES = ("fresh", *FANOUTS, "lower_bound")
DIRECTIVE = "Directive:\n"
"""How a fork child's last user message starts its own part (the emulator's policy keys on it)."""


@dataclass(frozen=True, slots=True)
class Row:
    children: int
    prefix_tokens: int
    strategy: str
    billed: float
    ratio_to_bound: float


def _module(tokens_wanted: int) -> str:
    """Python-looking filler of exactly ``tokens_wanted`` tokens."""
    lines: list[str] = []
    size = 0
    while size < tokens_wanted * 5:
        line = f"def function_{len(lines)}(value):\n    return value * {len(lines) % 97} + 1\n"
        lines.append(line)
        size += len(line)
    text = tokens.truncate("Here is the module to review:\n\n" + "".join(lines), tokens_wanted)
    assert tokens.count(text) == tokens_wanted
    return text


def _policy(children: int) -> Policy:
    """The parent forks ``children`` times in its first reply; children report; the parent ends."""

    def reply(request: EmulatedRequest) -> Reply:
        if request.message_count == 1:
            calls = tuple(
                ToolCall(
                    "Agent",
                    {
                        "prompt": f"Review part {n} of the module and report.",
                        "description": f"part {n}",
                        "fork": True,
                    },
                )
                for n in range(1, children + 1)
            )
            return Reply(tool_calls=calls)
        if DIRECTIVE in request.last_user_text:
            return Reply(text="Scope: one part. Result: no issues. Files changed: none.")
        return Reply(text="All parts reviewed: no issues.")

    return reply


async def _overhead_tokens(cwd: Path) -> int:
    """Tokens of the parent's prompt besides its history: system prompt and tools."""
    async with offline_agent(Emulator(), cwd, RuntimeOptions()).session() as session:
        await session.send("x")
        usage = session.root.last_usage
    assert usage is not None
    return usage.prompt_tokens - tokens.count("x")


async def _run(history: str, children: int, fanout: FanoutMode | None, cwd: Path) -> Comparison:
    emulator = Emulator(policy=_policy(children))
    recorder = EconomicsRecorder()
    options = RuntimeOptions() if fanout is None else RuntimeOptions(fanout=fanout)
    agent = offline_agent(emulator, cwd, options, recorder)
    async with agent.session() as session:
        result = await session.send(history)
    if result.status != "completed" or len(result.agents) != children + 1:
        raise RuntimeError(f"the {fanout} run ended {result.status}: {result.error}")
    return recorder.comparison()


async def _case(history: str, children: int, prefix: int, cwd: Path) -> list[Row]:
    runs = {name: await _run(history, children, fanout, cwd) for name, fanout in FANOUTS.items()}
    warm = runs["forks_with_warmup"]
    billed = {
        "fresh": warm.fresh_subagents,
        **{name: run.this_run for name, run in runs.items()},
        "lower_bound": warm.lower_bound,
    }
    return [
        Row(children, prefix, name, round(billed[name], 1), billed[name] / warm.lower_bound)
        for name in STRATEGIES
    ]


async def measure(quick: bool = False) -> list[Row]:
    """Every row, by prefix then number of children then strategy."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        overhead = await _overhead_tokens(cwd)
        rows: list[Row] = []
        for prefix in QUICK_PREFIXES if quick else PREFIXES:
            history = _module(prefix - overhead)
            for children in QUICK_CHILDREN if quick else CHILDREN:
                rows += await _case(history, children, prefix, cwd)
    return rows


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run, print one line per row, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset, for a smoke run")
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(args.quick))
    print(f"{'children':>8} {'prefix':>8} {'strategy':<19} {'billed':>12} {'ratio':>7}")
    for row in rows:
        print(
            f"{row.children:>8} {row.prefix_tokens:>8} {row.strategy:<19} "
            f"{row.billed:>12,.0f} {row.ratio_to_bound:>7.3f}"
        )
    return rows


if __name__ == "__main__":
    main()
