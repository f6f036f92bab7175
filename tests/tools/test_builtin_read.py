from __future__ import annotations

import base64
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from forkagent.errors import ToolError
from forkagent.messages import ImageBlock, TextBlock
from forkagent.tools import ToolContext
from forkagent.tools.builtin import Read
from forkagent.tools.builtin.read import image_type

Run = Callable[..., Awaitable[str]]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(20)


def lines(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


async def test_numbers_lines_like_cat_n(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text("alpha\n\tbeta\r\ngamma")
    assert await run(Read(), file_path="a.txt") == "     1\talpha\n     2\t\tbeta\n     3\tgamma"


async def test_offset_and_limit_select_a_range(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text(lines(10))
    out = await run(Read(), file_path=str(tmp_path / "a.txt"), offset=4, limit=2)
    assert out.splitlines()[:2] == ["     4\tline 4", "     5\tline 5"]
    assert "offset=6" in out
    assert "line 3" not in out
    assert "line 6" not in out


async def test_reading_to_the_end_adds_no_note(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text(lines(3))
    assert "offset=" not in await run(Read(), file_path="a.txt", offset=2, limit=2)


async def test_line_cap_says_how_to_read_on(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text(lines(25))
    out = await run(Read(max_lines=10), file_path="a.txt")
    assert out.count("\tline ") == 10
    assert out.splitlines()[-1] == (
        "[Stopped after line 10 (Read returns at most 10 lines / ~256 KB); "
        "the file goes on. Read more with offset=11.]"
    )


async def test_a_limit_above_the_cap_is_capped(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text(lines(25))
    out = await run(Read(max_lines=10), file_path="a.txt", offset=5, limit=100)
    assert "    14\tline 14" in out
    assert "at most 10 lines" in out
    assert "offset=15" in out


async def test_byte_cap(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text(lines(100, "x" * 40))
    out = await run(Read(max_bytes=1000), file_path="a.txt")
    assert 15 < out.count("\t") < 30
    assert "~1 KB" in out


async def test_long_lines_are_cut(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text("y" * 5000 + "\nshort\n")
    out = await run(Read(max_line_chars=100), file_path="a.txt")
    assert "y" * 100 + "… [4900 more characters]" in out
    assert "     2\tshort" in out


async def test_offset_past_the_end(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.txt").write_text(lines(3))
    with pytest.raises(ToolError, match=r"offset 9 is past the end of a.txt, which has 3 lines"):
        await run(Read(), file_path="a.txt", offset=9)


async def test_empty_file(tmp_path: Path, run: Run) -> None:
    (tmp_path / "empty").write_text("")
    assert await run(Read(), file_path="empty") == "(empty is empty)"


async def test_binary_file_is_described_not_dumped(tmp_path: Path, run: Run) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    with pytest.raises(ToolError, match=r"blob.bin is a binary file \(700 bytes\)"):
        await run(Read(), file_path="blob.bin")


async def test_mostly_undecodable_bytes_count_as_binary(tmp_path: Path, run: Run) -> None:
    (tmp_path / "noise").write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ToolError, match="binary"):
        await run(Read(), file_path="noise")


async def test_latin1_text_is_still_text(tmp_path: Path, run: Run) -> None:
    (tmp_path / "old.txt").write_bytes("café au lait, s'il vous plaît\n".encode("latin-1"))
    assert "caf\ufffd au lait" in await run(Read(), file_path="old.txt")


async def test_image_comes_back_as_image_block(tmp_path: Path, ctx: ToolContext) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    output = await Read().call({"file_path": "shot.png"}, ctx)
    assert not isinstance(output, str)
    text, image = output
    assert isinstance(text, TextBlock)
    assert text.text == f"shot.png: image/png, {len(PNG)} bytes"
    assert isinstance(image, ImageBlock)
    assert image.media_type == "image/png"
    assert base64.b64decode(image.data or "") == PNG


async def test_too_large_image_is_refused(tmp_path: Path, run: Run) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    with pytest.raises(ToolError, match="at most 10 bytes"):
        await run(Read(max_image_bytes=10), file_path="shot.png")


@pytest.mark.parametrize(
    ("head", "media"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "image/jpeg"),
        (b"GIF89a\x01\x00", "image/gif"),
        (b"GIF87a\x01\x00", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", None),
        (b"not an image", None),
    ],
)
def test_image_type_goes_by_content(head: bytes, media: str | None) -> None:
    assert image_type(head) == media


async def test_missing_file(run: Run) -> None:
    with pytest.raises(ToolError, match=r"File not found: nope.txt"):
        await run(Read(), file_path="nope.txt")


async def test_directory(tmp_path: Path, run: Run) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(ToolError, match="src is a directory"):
        await run(Read(), file_path="src")


async def test_special_file(tmp_path: Path, run: Run) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ToolError, match="fifo is not a regular file"):
        await run(Read(), file_path="fifo")


async def test_path_outside_cwd_is_shown_absolute(tmp_path: Path, ctx: ToolContext) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "e.txt").write_text("")
    inner = ToolContext(cwd=tmp_path / "work")
    with pytest.raises(ToolError, match="not found"):
        await Read().call({"file_path": "e.txt"}, inner)
    assert await Read().call({"file_path": str(outside / "e.txt")}, inner) == (
        f"({outside / 'e.txt'} is empty)"
    )
