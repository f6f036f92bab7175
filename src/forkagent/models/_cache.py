"""Cache-related choices shared by adapters: where breakpoints go, which response came before.

Anthropic and DashScope both take explicit markers on content blocks (at most
four per request). Both get them at the same places: the end of the static
prefix (tools/system), the end of the agent's previous request, the end of the
prefix shared with sibling forks (``request.shared_prefix_end``) and the last
block, so that the next turn reads what this one wrote.

A read looks for an entry only within 20 blocks before a breakpoint. A reply
with N tool calls puts 2N blocks (the calls and their results) between the
previous request's end and the next turn's last block, and a fork child's rules
block sits 2N + 1 blocks on: from N = 10 on, neither would find the entry the
previous request wrote without the marker on that request's end. Markers never
change the content itself, so adding or moving them does not disturb what
earlier requests cached, and a marker on an entry that exists costs nothing.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..messages import AssistantMessage, ContentBlock, JsonValue, UserMessage, messages_to_json
from ..requests import CacheTTL, ModelRequest
from .base import ModelResponse

MAX_BREAKPOINTS = 4
Position = tuple[int, int]
"""(message index, block index) in ``request.messages``."""


def message_breakpoints(
    request: ModelRequest, markable: Callable[[ContentBlock], bool], *, last_block: bool = True
) -> frozenset[Position]:
    """Blocks in the history that get a cache marker (at most three; the static prefix takes one).

    A wanted block that cannot carry a marker (a thinking block, say) hands its
    marker to the nearest earlier block that can: that caches a little less,
    never something different. ``last_block=False`` leaves the last block to
    a marker placed elsewhere (Anthropic's top-level automatic caching).
    """
    wanted: list[Position] = []
    previous = _previous_request_end(request)
    if previous is not None:
        wanted.append(previous)
    end = request.shared_prefix_end
    if end is not None and end.message < len(request.messages):
        wanted.append((end.message, min(end.block, len(request.messages[end.message].content) - 1)))
    if request.messages and last_block:
        last = len(request.messages) - 1
        wanted.append((last, len(request.messages[last].content) - 1))
    found = {p for w in wanted if (p := _markable_at_or_before(request, w, markable)) is not None}
    assert len(found) < MAX_BREAKPOINTS
    return frozenset(found)


def _previous_request_end(request: ModelRequest) -> Position | None:
    """Where the agent's previous request ended: the last block before the last assistant message.

    A next turn, or a fork child's first request, is the previous request (the
    parent's last one, for a fork) plus the reply and what came after it.
    """
    messages = request.messages
    for index in range(len(messages) - 1, 0, -1):
        if messages[index].role == "assistant":
            return index - 1, len(messages[index - 1].content) - 1
    return None


def _markable_at_or_before(
    request: ModelRequest, position: Position, markable: Callable[[ContentBlock], bool]
) -> Position | None:
    message, block = position
    while message >= 0:
        content = request.messages[message].content
        for index in range(min(block, len(content) - 1), -1, -1):
            if markable(content[index]):
                return message, index
        message -= 1
        block = len(request.messages[message].content) - 1 if message >= 0 else -1
    return None


def ephemeral(ttl: CacheTTL) -> dict[str, JsonValue]:
    """The ``cache_control`` value; 5 minutes is the default and needs no ``ttl`` field."""
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


class ResponseIds:
    """Which response produced the assistant message a history was built on.

    Anthropic's cache diagnostics compare a request with the request of a
    previous message. For a fork child or the next turn, that is the response
    whose message is the last assistant message in the new history; looking it
    up by the history itself stays right when many agents share one model.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._ids: OrderedDict[str, str] = OrderedDict()
        self._capacity = capacity

    def remember(self, request: ModelRequest, response: ModelResponse) -> None:
        if response.response_id is None:
            return
        key = _history_key((*request.messages, response.message))
        self._ids[key] = response.response_id
        self._ids.move_to_end(key)
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)

    def previous(self, request: ModelRequest) -> str | None:
        for index in range(len(request.messages) - 1, -1, -1):
            if request.messages[index].role == "assistant":
                return self._ids.get(_history_key(request.messages[: index + 1]))
        return None


def _history_key(messages: Sequence[UserMessage | AssistantMessage]) -> str:
    return hashlib.sha256(messages_to_json(messages)).hexdigest()
