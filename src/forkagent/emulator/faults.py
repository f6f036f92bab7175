"""Injected failures: what real providers do to clients on a bad day.

A ``FaultPlan`` decides per generation request, by a fixed schedule (request
numbers counted from 1), a queue of one-off faults, or seeded probabilities,
so that every run of a test sees the same failures.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from .errors import ApiError

FaultKind: TypeAlias = Literal[
    "rate_limit", "overloaded", "server_error", "delay", "cut_stream", "drop"
]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "rate_limit",
    "overloaded",
    "server_error",
    "delay",
    "cut_stream",
    "drop",
)


@dataclass(frozen=True, slots=True)
class Fault:
    """One failure.

    ``rate_limit`` answers 429 with ``retry-after``; ``overloaded`` answers 529
    (Anthropic) or 503; ``server_error`` answers 500; ``delay`` holds the request
    ``seconds`` before serving it normally; ``cut_stream`` closes the connection
    after ``after_events`` stream events (or mid-body when not streaming);
    ``drop`` closes it before the response begins.
    """

    kind: FaultKind
    retry_after: float = 1.0
    seconds: float = 0.5
    after_events: int = 3

    def error(self) -> ApiError | None:
        """The HTTP error this fault answers with, if it is one."""
        if self.kind == "rate_limit":
            return ApiError(
                "rate_limit", "Emulated rate limit: retry later.", retry_after=self.retry_after
            )
        if self.kind == "overloaded":
            return ApiError("overloaded", "Emulated overload: the model is busy.")
        if self.kind == "server_error":
            return ApiError("server", "Emulated internal server error.")
        return None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Fault:
        kind = data.get("kind")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {', '.join(FAULT_KINDS)}")
        return cls(
            kind=kind,
            retry_after=_number(data, "retry_after", 1.0),
            seconds=_number(data, "seconds", 0.5),
            after_events=int(_number(data, "after_events", 3)),
        )


def _number(data: Mapping[str, object], key: str, default: float) -> float:
    value = data.get(key, default)
    if not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return float(value)


@dataclass
class FaultPlan:
    """Which requests fail and how.

    ``schedule`` maps a request number (1-based, generation requests only) to
    a fault; ``probabilities`` maps a kind to the chance that any request gets
    it (checked in a fixed order with an RNG seeded by ``seed``); ``inject``
    queues faults for the very next requests and wins over both.
    """

    probabilities: Mapping[FaultKind, float] = field(default_factory=dict)
    schedule: Mapping[int, Fault] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        for kind, p in self.probabilities.items():
            if kind not in FAULT_KINDS or not 0 <= p <= 1:
                raise ValueError(f"bad fault probability {kind}={p}")
        self._rng = random.Random(self.seed)
        self._queued: deque[Fault] = deque()
        self._lock = threading.Lock()

    def inject(self, fault: Fault, times: int = 1) -> None:
        with self._lock:
            self._queued.extend([fault] * times)

    def draw(self, request_number: int) -> Fault | None:
        """The fault for this request, if any; consumes one RNG draw per kind."""
        with self._lock:
            if self._queued:
                return self._queued.popleft()
            if request_number in self.schedule:
                return self.schedule[request_number]
            for kind in FAULT_KINDS:
                p = self.probabilities.get(kind, 0.0)
                if p and self._rng.random() < p:
                    return Fault(kind)
        return None
