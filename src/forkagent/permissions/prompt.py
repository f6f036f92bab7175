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
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.prompt import Prompt

from ..errors import ConfigurationError
from .filters import EDIT_TOOLS, SHELL_TOOL
from .modes import PermissionDecision, PermissionRequest

_CHOICES = {"y": "yes, this once", "n": "no", "a": "always (for the rest of this session)"}
_MAX_SHOWN = 400


class TerminalPrompt:
    """Asks y / n / a(lways). "Always" covers the same shell command, or any call of the
    same other tool, until the program exits. Questions are asked one at a time, in a
    thread, so other agents keep running while one waits for an answer."""

    def __init__(
        self,
        *,
        console: Console | None = None,
        stdin: TextIO | None = None,
        pause: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        self._stdin = stdin if stdin is not None else sys.stdin
        if not self._stdin.isatty():
            raise ConfigurationError(
                "TerminalPrompt needs an interactive terminal, and stdin is not a TTY; "
                "pass another handler or use a mode that does not ask"
            )
        self._console = console if console is not None else Console(stderr=True)
        self._always: set[tuple[str, str]] = set()
        self._lock = asyncio.Lock()
        self.pause = pause or contextlib.nullcontext
        """Held while a question is on screen: the CLI stops its live view so it stays readable."""

    async def __call__(self, request: PermissionRequest) -> PermissionDecision:
        key = _remember_as(request)
        async with self._lock:
            if key in self._always:
                return PermissionDecision.allow("always allowed earlier in this session")
            answer = await asyncio.to_thread(self._ask, request)
        if answer == "a":
            self._always.add(key)
        if answer == "n":
            return PermissionDecision.deny()
        return PermissionDecision.allow()

    def _ask(self, request: PermissionRequest) -> str:
        with self.pause():
            return self._question(request)

    def _question(self, request: PermissionRequest) -> str:
        self._console.print(
            f"[bold]{escape(request.agent_id)}[/] wants to use [bold]{escape(request.tool_name)}[/]"
        )
        self._console.print(f"  {escape(_summary(request))}", highlight=False)
        self._console.print(f"  [dim]{escape(request.reason)}[/]", highlight=False)
        legend = ", ".join(f"{key} = {meaning}" for key, meaning in _CHOICES.items())
        self._console.print(f"  [dim]{legend}[/]")
        return Prompt.ask(
            "Allow?",
            choices=list(_CHOICES),
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


def _summary(request: PermissionRequest) -> str:
    command = request.args.get("command")
    file_path = request.args.get("file_path")
    if request.tool_name == SHELL_TOOL and isinstance(command, str):
        text = f"$ {command}"
    elif request.tool_name in EDIT_TOOLS and isinstance(file_path, str):
        text = f"file: {file_path}"
    else:
        text = json.dumps(dict(request.args), ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
