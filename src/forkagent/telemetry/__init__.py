"""Telemetry: the usage tree, cache-miss explanations and OpenTelemetry export.

Each piece is an event listener (``listener(event)``) for the runtime's
event stream; ``combine`` joins several into one. Each module is imported when
one of its names is first used (the runtime needs only the cache monitor;
the usage tree's rendering brings in rich).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..events import CacheReported, Event

if TYPE_CHECKING:
    from .cache import CacheFinding, CacheReason, CacheReport, CacheStatus, explain
    from .economics import Comparison, EconomicsRecorder
    from .monitor import CacheMonitor
    from .otel import otel_listener
    from .usage_tree import AgentUsage, ModelCost, UsageNode, UsageRecorder, build_usage_tree

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".cache": ("CacheFinding", "CacheReason", "CacheReport", "CacheStatus", "explain"),
        ".economics": ("Comparison", "EconomicsRecorder"),
        ".monitor": ("CacheMonitor",),
        ".otel": ("otel_listener",),
        ".usage_tree": (
            "AgentUsage",
            "ModelCost",
            "UsageNode",
            "UsageRecorder",
            "build_usage_tree",
        ),
    },
)

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
