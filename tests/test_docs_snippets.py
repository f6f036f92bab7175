"""The code in the README and the docs works as written, so they cannot drift from the library.

The convention, for README.md and the docs listed in ``DOCUMENTS``: a code
block whose info string is exactly ``python`` is a complete program, run
here offline on a fresh emulator, in a temporary working directory. A block
that cannot run that way says why after the language, ``python fragment``
(a piece of a larger program) or ``python needs-key`` (it calls a real
provider), and is only compiled. The README's "Command line" block must list
every ``forkagent`` command with exactly its options and arguments.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.core import TyperArgument, TyperGroup, TyperOption

from forkagent.cli import app
from forkagent.emulator import Emulator, use_emulator

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (
    "README.md",
    "docs/agents.md",
    "docs/emulator.md",
    "docs/permissions.md",
    "docs/providers.md",
    "docs/ray.md",
    "docs/telemetry.md",
    "docs/transcripts.md",
)
NOT_RUN = frozenset({"fragment", "needs-key"})
"""Info-string words after ``python`` that mark a block as compiled, not run."""

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    info: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def python_blocks(document: str) -> list[Block]:
    text = (ROOT / document).read_text(encoding="utf-8")
    return [
        Block(document, text.count("\n", 0, m.start()) + 1, m.group(1).strip(), m.group(2))
        for m in _FENCE.finditer(text)
        if m.group(1).split()[:1] == ["python"]
    ]


BLOCKS = [block for document in DOCUMENTS for block in python_blocks(document)]
RUNNABLE = [block for block in BLOCKS if block.info == "python"]


def test_every_document_follows_the_convention() -> None:
    for block in BLOCKS:
        marks = set(block.info.split()[1:])
        assert marks <= NOT_RUN, f"{block.where}: unknown marks {marks - NOT_RUN}"
    readme = [block for block in RUNNABLE if block.document == "README.md"]
    assert len(readme) >= 3, "the README's examples are no longer marked runnable"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.where)
def test_every_python_block_compiles(block: Block) -> None:
    compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.where)
def test_a_runnable_block_runs_offline_as_written(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    with use_emulator(Emulator()):  # emulator: models use it, nothing of another test's
        exec(compile(block.code, block.where, "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), f"{block.where} printed nothing"


# -- the command line -------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    options: frozenset[str]
    arguments: int


def documented_commands() -> dict[str, Usage]:
    """``forkagent ...`` lines of the README's "Command line" block, by command path."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Command line", 1)[1].split("```", 2)[1]
    found: dict[str, Usage] = {}
    for line in block.splitlines():
        if not line.startswith("forkagent "):
            continue
        words = re.sub(r"\[--[^\]]*\]", "", line).split()[1:]
        path = [w for w in words if re.fullmatch(r"[a-z]+", w)]
        arguments = [w for w in words if re.fullmatch(r"\[?[A-Z]+\]?", w)]
        found[" ".join(path)] = Usage(frozenset(re.findall(r"--[a-z-]+", line)), len(arguments))
    return found


def cli_commands() -> dict[str, Usage]:
    """Every runnable ``forkagent`` command, with its long options (hidden ones aside)
    and its arguments."""
    found: dict[str, Usage] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
            return
        options = {
            name
            for param in command.params
            if isinstance(param, TyperOption) and not param.hidden
            for name in param.opts
            if name.startswith("--")
        }
        arguments = sum(isinstance(param, TyperArgument) for param in command.params)
        found[" ".join(path)] = Usage(frozenset(options), arguments)

    walk(typer.main.get_command(app), ())
    return found


def test_the_readme_lists_every_command_with_its_options() -> None:
    assert documented_commands() == cli_commands()
