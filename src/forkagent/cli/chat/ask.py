"""Permission questions inside ``forkagent chat``: shown above the prompt, answered
with one key (y, n or a) while the rest of the tree keeps running."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ...permissions.modes import PermissionRequest
from ...permissions.prompt import CHOICES, QuestionHandler, request_summary


class InlineQuestions(QuestionHandler):
    """The chat's permission handler; the app's key bindings call ``answer``."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: tuple[PermissionRequest, asyncio.Future[str]] | None = None
        self.changed: Callable[[], None] = lambda: None
        """Called when a question appears or goes, so the screen redraws."""
        self.answered: Callable[[PermissionRequest, str], None] = lambda request, key: None

    async def ask(self, request: PermissionRequest) -> str:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.pending = (request, future)
        self.changed()
        try:
            key = await future
        finally:
            self.pending = None
            self.changed()
        self.answered(request, key)
        return key

    def answer(self, key: str) -> None:
        if key in CHOICES and self.pending is not None and not self.pending[1].done():
            self.pending[1].set_result(key)

    def text(self) -> str:
        """The question on screen, or empty."""
        if self.pending is None:
            return ""
        request = self.pending[0]
        keys = "  ".join(f"[{key}] {meaning}" for key, meaning in CHOICES.items())
        return (
            f"{request.agent_id} wants to use {request.tool_name}: {request_summary(request)}\n"
            f"  {request.reason}\n  {keys}\n"
        )


def answer_line(request: PermissionRequest, key: str) -> str:
    """What stays on screen after the answer."""
    return f"? {request.tool_name} {request_summary(request)} → {CHOICES[key]}"
