"""Shared helpers of the emulator tests: prompts of a known size."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from typing import Any, Literal

from anthropic.types import CacheControlEphemeralParam, MessageParam, TextBlockParam, ToolParam

from forkagent.emulator import RunningServer, tokens

OPUS_41 = "claude-opus-4-1"
"""Minimum cacheable prefix 1024 tokens (and not deprecated in the SDK)."""
HAIKU_45 = "claude-haiku-4-5"
"""Minimum 4096."""


text = tokens.filler
"""Exactly ``n`` tokens of plain words; ``tag`` makes texts differ from the start."""


Ttl = Literal["5m", "1h"]


def ephemeral(ttl: Ttl | None = None) -> CacheControlEphemeralParam:
    mark: CacheControlEphemeralParam = {"type": "ephemeral"}
    if ttl:
        mark["ttl"] = ttl
    return mark


def text_block(content: str, *, mark: Ttl | bool = False) -> TextBlockParam:
    """A text block, with a cache breakpoint when ``mark`` is set (a TTL, or True: the default)."""
    block: TextBlockParam = {"type": "text", "text": content}
    if mark:
        block["cache_control"] = ephemeral(None if mark is True else mark)
    return block


def system_block(n: int, tag: str = "", ttl: Ttl | None = "5m") -> list[TextBlockParam]:
    return [text_block(text(n, tag), mark=ttl or False)]


def user(content: str, *, mark: bool = False) -> MessageParam:
    return {"role": "user", "content": [text_block(content, mark=mark)]}


def turns(count: int, *, mark: Literal["none", "last", "all"] = "none") -> list[MessageParam]:
    """``count`` alternating messages of one short block each, ending with a user turn.

    ``mark`` puts a cache breakpoint on the last message's block, or on every one.
    """
    out: list[MessageParam] = []
    for i in range(count):
        marked = mark == "all" or (mark == "last" and i == count - 1)
        content = [text_block(f"turn {i}", mark=marked)]
        if (count - i) % 2 == 1:
            out.append({"role": "user", "content": content})
        else:
            out.append({"role": "assistant", "content": content})
    return out


CLOSE: dict[str, Any] = {
    "name": "close",
    "description": "Close a ticket.",
    "input_schema": {
        "type": "object",
        "properties": {
            "ticket": {"type": "string", "minLength": 3},
            "reason": {"enum": ["done", "duplicate"]},
            "notify": {"type": "array", "items": {"type": "string", "format": "email"}},
        },
        "required": ["ticket", "reason"],
        "additionalProperties": False,
    },
}
TOOL: ToolParam = {
    "name": "lookup",
    "description": "Look a ticket up.",
    "input_schema": {"type": "object", "properties": {"ticket": {"type": "string"}}},
}


def error_body(error: Exception) -> dict[str, Any]:
    """The JSON body an SDK's status error carries (an object on every wire)."""
    body = getattr(error, "body", None)
    assert isinstance(body, dict), body
    return body


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


def changed(base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``base`` with top-level fields replaced (``None`` removes one)."""
    body = copy.deepcopy(base)
    for key, value in fields.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body
