"""Requests per second of the emulator for 10k-token prompts, in process and over HTTP.

Latency simulation is off (``NO_LATENCY``) so the figures are the emulator's
own overhead: tokenizing, hashing, cache bookkeeping, rendering and, over
HTTP, uvicorn plus JSON. Each request shares a 10k-token cached prefix and
differs in its last user message, so every request reads the cache.

    python bench/emulator_rps.py [--quick] [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx2

from forkagent.emulator import Emulator, serve, tokens
from forkagent.emulator.timing import NO_LATENCY

PROMPT_TOKENS = 10_000
BLOCKS = 200
"""``anthropic_blocks``: the same tokens as 200 content blocks, as a long conversation has them."""


def _bodies(prompt: str) -> dict[str, Callable[[int], tuple[str, dict[str, Any]]]]:
    def anthropic(i: int) -> tuple[str, dict[str, Any]]:
        system = [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}]
        body = {
            "model": "claude-opus-4-6",
            "max_tokens": 64,
            "system": system,
            "messages": [{"role": "user", "content": f"question {i}"}],
        }
        return "/v1/messages", body

    parts = [tokens.filler(PROMPT_TOKENS // BLOCKS) for _ in range(BLOCKS)]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": part} for part in parts]
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}

    def anthropic_blocks(i: int) -> tuple[str, dict[str, Any]]:
        content = [*blocks, {"type": "text", "text": f"question {i}"}]
        body = {
            "model": "claude-opus-4-6",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": content}],
        }
        return "/v1/messages", body

    def openai(i: int) -> tuple[str, dict[str, Any]]:
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": f"q {i}"}]
        return "/v1/chat/completions", {"model": "gpt-4.1", "messages": messages}

    return {"anthropic": anthropic, "anthropic_blocks": anthropic_blocks, "openai": openai}


async def _rate(send: Callable[[int], Awaitable[None]], requests: int, concurrency: int) -> float:
    await send(-1)  # warm: tokenizer, cache entry
    queue = iter(range(requests))

    async def worker() -> None:
        for i in queue:
            await send(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return requests / (time.perf_counter() - started)


async def _measure(requests: int, concurrency: int) -> list[tuple[str, float, float]]:
    prompt = tokens.filler(PROMPT_TOKENS)
    rows = []
    for name, build in _bodies(prompt).items():
        emulator = Emulator(latency=NO_LATENCY)

        async def in_process(i: int, emulator: Emulator = emulator, build: Any = build) -> None:
            path, body = build(i)
            reply = await emulator.dispatch("POST", path, body)
            assert reply.status == 200, reply.body

        local = await _rate(in_process, requests, concurrency)
        with serve(Emulator(latency=NO_LATENCY)) as server:
            limits = httpx2.Limits(max_connections=concurrency)
            async with httpx2.AsyncClient(base_url=server.url, limits=limits) as client:

                async def over_http(i: int, client: Any = client, build: Any = build) -> None:
                    path, body = build(i)
                    response = await client.post(path, json=body)
                    assert response.status_code == 200, response.text

                remote = await _rate(over_http, requests, concurrency)
        rows.append((name, local, remote))
    return rows


def main(argv: Sequence[str] | None = None) -> list[tuple[str, float, float]]:
    """Run the benchmark, print a table, return ``(route, in-process rps, HTTP rps)`` rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few requests, for a smoke run")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    requests = 50 if args.quick else args.requests
    rows = asyncio.run(_measure(requests, args.concurrency))
    print(f"{PROMPT_TOKENS}-token prompts, {requests} requests, concurrency {args.concurrency}")
    print(f"{'route':<16} {'in-process rps':>15} {'HTTP rps':>10} {'ratio':>7}")
    for name, local, remote in rows:
        print(f"{name:<16} {local:>15.0f} {remote:>10.0f} {local / remote:>6.1f}x")
    return rows


if __name__ == "__main__":
    main()
