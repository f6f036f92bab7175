# Tests read and write their small fixture files directly; blocking there is harmless.
# ruff: noqa: ASYNC240
from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from forkagent.errors import ToolError
from forkagent.tools.builtin import Edit, Write

Run = Callable[..., Awaitable[str]]


async def test_write_creates_parent_directories(tmp_path: Path, run: Run) -> None:
    out = await run(Write(), file_path="a/b/c.txt", content="hi\r\nthere\n")
    assert out == "Wrote 10 bytes to a/b/c.txt (new file)."
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"hi\r\nthere\n"


async def test_write_overwrites_and_counts_utf8_bytes(tmp_path: Path, run: Run) -> None:
    (tmp_path / "x.txt").write_text("old content that is longer")
    assert await run(Write(), file_path="x.txt", content="é☕") == (
        "Wrote 5 bytes to x.txt (replaced)."
    )
    assert (tmp_path / "x.txt").read_text(encoding="utf-8") == "é☕"


async def test_write_to_a_directory_fails(tmp_path: Path, run: Run) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(ToolError, match="d is a directory"):
        await run(Write(), file_path="d", content="x")


async def test_write_below_a_file_fails_clearly(tmp_path: Path, run: Run) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ToolError, match=r"Cannot write f/g.txt: "):
        await run(Write(), file_path="f/g.txt", content="x")


@pytest.fixture
def code(tmp_path: Path) -> Path:
    path = tmp_path / "code.py"
    path.write_text("def f():\n    return 1\n\ndef g():\n    return 1\n")
    return path


async def test_edit_replaces_a_unique_string(code: Path, run: Run) -> None:
    out = await run(Edit(), file_path="code.py", old_string="def g():", new_string="def h():")
    assert out == "Replaced 1 occurrence in code.py."
    assert code.read_text() == "def f():\n    return 1\n\ndef h():\n    return 1\n"


async def test_edit_fails_when_missing_and_leaves_the_file(code: Path, run: Run) -> None:
    before = code.read_text()
    with pytest.raises(ToolError, match=r"old_string was not found in code.py"):
        await run(Edit(), file_path="code.py", old_string="return 2", new_string="return 3")
    assert code.read_text() == before


async def test_edit_fails_when_not_unique(code: Path, run: Run) -> None:
    before = code.read_text()
    with pytest.raises(ToolError, match=r"occurs 2 times in code.py.*replace_all"):
        await run(Edit(), file_path="code.py", old_string="return 1", new_string="return 2")
    assert code.read_text() == before


async def test_edit_replace_all(code: Path, run: Run) -> None:
    out = await run(
        Edit(), file_path="code.py", old_string="return 1", new_string="pass", replace_all=True
    )
    assert out == "Replaced 2 occurrences in code.py."
    assert code.read_text().count("pass") == 2


async def test_edit_same_strings_is_an_error(code: Path, run: Run) -> None:
    with pytest.raises(ToolError, match="the same"):
        await run(Edit(), file_path="code.py", old_string="f", new_string="f")


async def test_edit_unicode(tmp_path: Path, run: Run) -> None:
    path = tmp_path / "u.md"
    path.write_text("naïve café ☕ — 日本語\n", encoding="utf-8")
    await run(Edit(), file_path="u.md", old_string="café ☕", new_string="thé 🍵")
    assert path.read_text(encoding="utf-8") == "naïve thé 🍵 — 日本語\n"


async def test_edit_can_delete(code: Path, run: Run) -> None:
    await run(Edit(), file_path="code.py", old_string="\ndef g():\n    return 1\n", new_string="")
    assert code.read_text() == "def f():\n    return 1\n"


async def test_edit_keeps_crlf_line_endings(tmp_path: Path, run: Run) -> None:
    path = tmp_path / "win.txt"
    path.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await run(Edit(), file_path="win.txt", old_string="one\ntwo", new_string="1\n2")
    assert path.read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_missing_file(run: Run) -> None:
    with pytest.raises(ToolError, match=r"File not found: gone.py"):
        await run(Edit(), file_path="gone.py", old_string="a", new_string="b")


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"\x00\x01binary", "binary"), (b"caf\xe9 au lait, s'il vous pla\xeet\n", "not UTF-8")],
)
async def test_edit_refuses_what_it_cannot_decode(
    tmp_path: Path, run: Run, data: bytes, reason: str
) -> None:
    (tmp_path / "f").write_bytes(data)
    with pytest.raises(ToolError, match=reason):
        await run(Edit(), file_path="f", old_string="a", new_string="b")
    assert (tmp_path / "f").read_bytes() == data
