"""Helpers for testing agents without a provider: test models and reply builders."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from ._orchestration.fork import FORK_TAG, is_fork_history
from .events import NOTIFICATION_TAG
from .messages import AssistantMessage, JsonValue, TextBlock, ToolUseBlock
from .models.function import FunctionModel, ScriptedModel

_ids = itertools.count(1)


def tool_call(name: str, id: str | None = None, **args: JsonValue) -> ToolUseBlock:
    """A tool-use block as a model would send it."""
    return ToolUseBlock(id=id or f"call_{next(_ids)}", name=name, input=dict(args))


def reply(*parts: str | ToolUseBlock) -> AssistantMessage:
    """An assistant reply from text and tool calls."""
    return AssistantMessage(
        content=tuple(TextBlock(text=p) if isinstance(p, str) else p for p in parts)
    )


def wire(value: Mapping[str, JsonValue]) -> Any:
    """A JSON object (a rendered request body, a tool's schema) for a test to index freely.

    ``JsonValue`` makes every read narrow its type first; a test would rather index
    ``body["messages"][0]["content"]`` and let its assertions check the shape.
    """
    return value


__all__ = [
    "FORK_TAG",
    "NOTIFICATION_TAG",
    "FunctionModel",
    "ScriptedModel",
    "is_fork_history",
    "reply",
    "tool_call",
    "wire",
]
