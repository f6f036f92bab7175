"""The terminal prompt handler, driven through fake terminal streams."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from forkagent.errors import ConfigurationError
from forkagent.permissions import PermissionRequest
from forkagent.permissions.prompt import TerminalPrompt, terminal_handler


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def request(command: str = "make install") -> PermissionRequest:
    return PermissionRequest("main", "Bash", {"command": command}, "the command is not read-only")


def prompt(answers: str) -> tuple[TerminalPrompt, io.StringIO]:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=False, width=100)
    return TerminalPrompt(console=console, stdin=FakeTerminal(answers)), screen


def test_refuses_to_run_without_a_terminal() -> None:
    with pytest.raises(ConfigurationError, match="not a TTY"):
        TerminalPrompt(stdin=io.StringIO("y\n"))
    assert terminal_handler(io.StringIO()) is None
    assert isinstance(terminal_handler(FakeTerminal()), TerminalPrompt)


async def test_yes_and_no() -> None:
    handler, screen = prompt("y\nn\n")
    assert (await handler(request())).allowed
    assert not (await handler(request())).allowed
    shown = screen.getvalue()
    assert "$ make install" in shown
    assert "not read-only" in shown


async def test_always_remembers_the_same_command_only() -> None:
    handler, _ = prompt("a\n")
    assert (await handler(request())).allowed
    assert (await handler(request())).allowed
    assert not (await handler(request("make clean"))).allowed


async def test_end_of_input_means_no() -> None:
    handler, _ = prompt("")
    assert not (await handler(request())).allowed


async def test_other_tools_show_their_file() -> None:
    handler, screen = prompt("y\n")
    edit = PermissionRequest("w1", "Write", {"file_path": "/a/b.py", "content": "x"}, "can change")
    assert (await handler(edit)).allowed
    assert "file: /a/b.py" in screen.getvalue()
