"""The request log: every request with what the cache did, and why.

Each cache breakpoint of a request (for automatic prefix caches, the one
implicit breakpoint at the end of the prompt) gets an outcome saying how many
of its prefix tokens were read, how many written, and the reason for any miss.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias, overload

from ..usage import Usage

MissReason: TypeAlias = Literal[
    "cold",
    "below_minimum",
    "not_yet_visible",
    "expired",
    "beyond_lookback",
    "prefix_changed",
    "not_written",
]
"""Why a breakpoint did not read its whole prefix.

``cold``: nothing of this model was ever cached; ``below_minimum``: the prefix
is shorter than the model's minimum; ``not_yet_visible``: the entry is being
written by a request whose response has not begun (or ended, or settled);
``expired``: its TTL ran out; ``beyond_lookback``: an entry exists but further
back than the lookback window; ``prefix_changed``: an earlier request shared
only part of the prefix (``changed_at`` says where it stops);
``not_written``: the same prefix was sent before without a breakpoint there.
"""


@dataclass(frozen=True, slots=True)
class BreakpointOutcome:
    position: int
    """Block index of the breakpoint (prefix caches: the prompt length in tokens)."""
    label: str
    layer: str | None
    ttl: str | None
    prefix_tokens: int
    read_tokens: int
    written_tokens: int
    reason: MissReason | None = None
    changed_at: str | None = None
    """For ``prefix_changed``: the first block (``tools[1]``, ``messages[3].content[0]``) that differs."""

    @property
    def status(self) -> Literal["read", "written", "missed"]:
        if self.prefix_tokens and self.read_tokens >= self.prefix_tokens:
            return "read"
        return "written" if self.written_tokens else "missed"


@dataclass(frozen=True, slots=True)
class LogEntry:
    number: int
    route: str
    profile: str
    """Cache rules applied: ``anthropic``, ``openai``, ``dashscope``, ``deepseek``, ``gemini``."""
    model: str
    started_at: float
    status: int
    stream: bool = False
    message_id: str | None = None
    usage: Usage | None = None
    breakpoints: tuple[BreakpointOutcome, ...] = ()
    fault: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["usage"] = self.usage.model_dump() if self.usage else None
        data["breakpoints"] = [{**asdict(b), "status": b.status} for b in self.breakpoints]
        return data


class RequestLog(Sequence[LogEntry]):
    """Append-only, thread-safe list of entries."""

    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._lock = threading.Lock()

    def append(self, entry: LogEntry) -> None:
        with self._lock:
            self._entries.append(entry)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @property
    def last(self) -> LogEntry:
        with self._lock:
            return self._entries[-1]

    def to_json(self) -> list[dict[str, Any]]:
        return [entry.to_json() for entry in self]

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> LogEntry: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[LogEntry]: ...

    def __getitem__(self, index: int | slice) -> LogEntry | Sequence[LogEntry]:
        with self._lock:
            return self._entries[index]

    def __iter__(self) -> Iterator[LogEntry]:
        with self._lock:
            return iter(list(self._entries))
