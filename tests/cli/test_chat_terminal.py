"""``forkagent chat`` in a real terminal: tmux runs it, sends the keys and reads the screen."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def tmux() -> str:
    """tmux; CI installs it (.ci/run), elsewhere the test says why it skips."""
    found = shutil.which("tmux")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have tmux for the terminal test: .ci/run installs it")
        pytest.skip("no tmux on this machine (apt-get install tmux)")
    return found


class Terminal:
    """One tmux server of its own (its socket in a temp dir), one 100x30 window."""

    def __init__(self, socket: Path) -> None:
        self.base = [tmux(), "-S", str(socket), "-f", os.devnull]

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, check=True, timeout=30
        )
        return done.stdout

    def start(self, command: str) -> None:
        self.tmux("new-session", "-d", "-x", "100", "-y", "30", command)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait_for(self, text: str) -> str:
        for _ in range(600):
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared on the screen:\n{self.screen()}")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path / "tmux.sock")
    try:
        yield term
    finally:
        subprocess.run([*term.base, "kill-server"], capture_output=True, check=False)


def test_a_prompt_typed_in_a_terminal_is_answered_on_the_screen(
    tmp_path: Path, terminal: Terminal
) -> None:
    forkagent = Path(sys.executable).parent / "forkagent"
    work = tmp_path / "work"
    work.mkdir()
    chat = f"{shlex.quote(str(forkagent))} chat --cwd {shlex.quote(str(work))}"
    terminal.start(f"{chat}; echo chat exited with $?; sleep 60")
    terminal.wait_for("/help")  # the panel's key hints: the prompt is up

    terminal.keys("How are you today?", "Enter")
    screen = terminal.wait_for("Understood: How are you today?")
    assert "› How are you today?" in screen
    assert "main idle · hit" in terminal.wait_for("main idle")

    terminal.keys("C-d")
    screen = terminal.wait_for("chat exited with 0")
    assert "continue later with: forkagent chat --continue" in screen
