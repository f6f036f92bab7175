"""What a tool may ask of the runtime that runs it: the Agent tool starts children.

A Protocol here, implemented by the private runtime, so that tools depend on
nothing above them: the layers stay a one-way street.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One Agent tool call, as the runtime routes it."""

    prompt: str
    description: str = ""
    subagent_type: str | None = None
    fork: bool | None = None
    run_in_background: bool | None = None
    model: str | None = None
    isolation: Literal["worktree"] | None = None


class AgentRuntime(Protocol):
    """The runtime as tools see it (``ToolContext.runtime``)."""

    @property
    def runs(self) -> Mapping[str, object]:
        """The tree's agents by id; a tool passes its caller's own back to ``spawn``."""
        ...

    async def spawn(self, parent: Any, request: SpawnRequest) -> str:
        """Start a child for ``parent`` as the request routes it; the text the model reads."""
        ...
