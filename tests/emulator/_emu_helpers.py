"""Shared helpers of the emulator tests: prompts of a known size."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from forkagent.emulator import RunningServer, tokens

OPUS_41 = "claude-opus-4-1"
"""Minimum cacheable prefix 1024 tokens (and not deprecated in the SDK)."""
HAIKU_45 = "claude-haiku-4-5"
"""Minimum 4096."""


text = tokens.filler
"""Exactly ``n`` tokens of plain words; ``tag`` makes texts differ from the start."""


def ephemeral(ttl: str | None = None) -> dict[str, str]:
    return {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}


def system_block(n: int, tag: str = "", ttl: str | None = "5m") -> list[dict[str, Any]]:
    block: dict[str, Any] = {"type": "text", "text": text(n, tag)}
    if ttl:
        block["cache_control"] = ephemeral(ttl)
    return [block]


def user(content: str, *, mark: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": content}
    if mark:
        block["cache_control"] = ephemeral()
    return {"role": "user", "content": [block]}


def turns(count: int, *, mark_last: bool = False) -> list[dict[str, Any]]:
    """``count`` alternating messages of one short block each, ending with a user turn."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        role = "user" if (count - i) % 2 == 1 else "assistant"
        out.append({"role": role, "content": [{"type": "text", "text": f"turn {i}"}]})
    if mark_last:
        out[-1]["content"][-1]["cache_control"] = ephemeral()
    return out


TOOL: dict[str, Any] = {
    "name": "lookup",
    "description": "Look a ticket up.",
    "input_schema": {"type": "object", "properties": {"ticket": {"type": "string"}}},
}


def http(
    server: RunningServer,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        server.url + path,
        data=data,
        method=method,
        headers={"content-type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), json.loads(error.read())
