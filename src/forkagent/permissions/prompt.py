"""The CLI's permission handler: ask the person at the terminal.

Only for an interactive terminal. Without one (a pipe, CI), use
``terminal_handler()``, which then gives None: calls that need approval are
denied with a reason instead of waiting for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.prompt import Prompt

from ..errors import ConfigurationError
from .filters import EDIT_TOOLS, SHELL_TOOL
from .modes import PermissionDecision, PermissionRequest

CHOICES = {"y": "yes, this once", "n": "no", "a": "always (for the rest of this session)"}
"""The one-key answers every question takes."""
_MAX_SHOWN = 400


class QuestionHandler(ABC):
    """Asks y / n / a(lways), one question at a time. "Always" covers the same shell
    command, or any call of the same other tool, until the program exits. Subclasses
    put the question to the person (``ask``) and return the key they answered with."""

    def __init__(self) -> None:
        self._always: set[tuple[str, str]] = set()
        self._lock = asyncio.Lock()

    @property
    def always_allowed(self) -> list[str]:
        """What "always" answers allowed so far, e.g. ``Bash: make test`` or ``Write``."""
        return [f"{tool}: {command}" if command else tool for tool, command in self._always]

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        key = _remember_as(request)
        async with self._lock:
            if key in self._always:
                return PermissionDecision.allow("always allowed earlier in this session")
            answer = await self.ask(request)
        if answer == "a":
            self._always.add(key)
        if answer == "n":
            return PermissionDecision.deny()
        return PermissionDecision.allow()

    @abstractmethod
    async def ask(self, request: PermissionRequest) -> str:
        """One of ``CHOICES``' keys."""


class TerminalPrompt(QuestionHandler):
    """Asks at the terminal, in a thread, so other agents keep running while one waits."""

    def __init__(
        self,
        *,
        console: Console | None = None,
        stdin: TextIO | None = None,
        pause: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        super().__init__()
        self._stdin = stdin if stdin is not None else sys.stdin
        if not self._stdin.isatty():
            raise ConfigurationError(
                "TerminalPrompt needs an interactive terminal, and stdin is not a TTY; "
                "pass another handler or use a mode that does not ask"
            )
        self._console = console if console is not None else Console(stderr=True)
        self.pause = pause or contextlib.nullcontext
        """Held while a question is on screen: the CLI stops its live view so it stays readable."""

    async def ask(self, request: PermissionRequest) -> str:
        return await asyncio.to_thread(self._ask, request)

    def _ask(self, request: PermissionRequest) -> str:
        with self.pause():
            return self._question(request)

    def _question(self, request: PermissionRequest) -> str:
        self._console.print(
            f"[bold]{escape(request.agent_id)}[/] wants to use [bold]{escape(request.tool_name)}[/]"
        )
        self._console.print(f"  {escape(request_summary(request))}", highlight=False)
        self._console.print(f"  [dim]{escape(request.reason)}[/]", highlight=False)
        legend = ", ".join(f"{key} = {meaning}" for key, meaning in CHOICES.items())
        self._console.print(f"  [dim]{legend}[/]")
        return Prompt.ask(
            "Allow?",
            choices=list(CHOICES),
            default="n",
            console=self._console,
            stream=self._stdin,
        )


def terminal_handler(
    stdin: TextIO | None = None,
    pause: Callable[[], AbstractContextManager[object]] | None = None,
) -> TerminalPrompt | None:
    """A ``TerminalPrompt`` when stdin is a terminal, else None."""
    stream = stdin if stdin is not None else sys.stdin
    return TerminalPrompt(stdin=stream, pause=pause) if stream.isatty() else None


def _remember_as(request: PermissionRequest) -> tuple[str, str]:
    command = request.args.get("command")
    if request.tool_name == SHELL_TOOL and isinstance(command, str):
        return request.tool_name, command
    return request.tool_name, ""


def request_summary(request: PermissionRequest) -> str:
    """The call in one line: a shell command, the file an edit touches, or the arguments."""
    command = request.args.get("command")
    file_path = request.args.get("file_path")
    if request.tool_name == SHELL_TOOL and isinstance(command, str):
        text = f"$ {command}"
    elif request.tool_name in EDIT_TOOLS and isinstance(file_path, str):
        text = f"file: {file_path}"
    else:
        text = json.dumps(dict(request.args), ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
