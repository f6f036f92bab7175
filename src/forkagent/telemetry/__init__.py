"""Telemetry: the usage tree, cache-miss explanations and OpenTelemetry export.

Each piece is an event listener (``listener(event)``) for the runtime's
event stream; ``combine`` joins several into one.
"""

from __future__ import annotations

from collections.abc import Callable

from ..events import CacheReported, Event
from .cache import CacheFinding, CacheReason, CacheReport, CacheStatus, explain
from .economics import Comparison, EconomicsRecorder
from .monitor import CacheMonitor
from .otel import otel_listener
from .usage_tree import AgentUsage, ModelCost, UsageNode, UsageRecorder, build_usage_tree

Listener = Callable[[Event], None]


def combine(*listeners: Listener | None) -> Listener:
    """One listener that calls each given one in order; None entries (e.g. no OTel) are skipped."""
    active = [listener for listener in listeners if listener is not None]

    def listener(event: Event) -> None:
        for each in active:
            each(event)

    return listener


__all__ = [
    "AgentUsage",
    "CacheFinding",
    "CacheMonitor",
    "CacheReason",
    "CacheReport",
    "CacheReported",
    "CacheStatus",
    "Comparison",
    "EconomicsRecorder",
    "Listener",
    "ModelCost",
    "UsageNode",
    "UsageRecorder",
    "build_usage_tree",
    "combine",
    "explain",
    "otel_listener",
]
