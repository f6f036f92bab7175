"""Cache-related choices shared by adapters: where breakpoints go, which response came before.

Anthropic and DashScope both take explicit markers on content blocks (at most
four per request). Both get them at the same places: the end of the static
prefix (tools/system), the end of the prefix shared with sibling forks
(``request.shared_prefix_end``) and the last block, so that the next turn reads
what this one wrote. Markers never change the content itself, so moving them
does not disturb what earlier requests cached.
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
    request: ModelRequest, markable: Callable[[ContentBlock], bool]
) -> frozenset[Position]:
    """Blocks in the history that get a cache marker (at most two; the static prefix takes one).

    A wanted block that cannot carry a marker (a thinking block, say) hands its
    marker to the nearest earlier block that can: that caches a little less,
    never something different.
    """
    wanted: list[Position] = []
    end = request.shared_prefix_end
    if end is not None and end.message < len(request.messages):
        wanted.append((end.message, min(end.block, len(request.messages[end.message].content) - 1)))
    if request.messages:
        last = len(request.messages) - 1
        wanted.append((last, len(request.messages[last].content) - 1))
    found = {p for w in wanted if (p := _markable_at_or_before(request, w, markable)) is not None}
    assert len(found) < MAX_BREAKPOINTS
    return frozenset(found)


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
