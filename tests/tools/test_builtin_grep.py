from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from forkagent.errors import ToolError
from forkagent.tools.builtin import Grep

Run = Callable[..., Awaitable[str]]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {
        "src/app.py": "import os\n\ndef main():\n    print('Hello')\n    return 0\n",
        "src/util.py": "def helper():\n    return 'hello world'\n",
        "tests/test_app.py": "from app import main\n\ndef test_main():\n    assert main() == 0\n",
        "README.md": "# Hello project\n",
        "node_modules/lib/index.js": "hello from a dependency\n",
        ".git/config": "hello = git\n",
    }
    for age, (name, text) in enumerate(files.items()):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    (tmp_path / "src/logo.bin").write_bytes(b"hello\x00\x01\x02")
    return tmp_path


async def test_files_with_matches_newest_first(repo: Path, run: Run) -> None:
    out = await run(Grep(), pattern="hello", **{"-i": True})
    assert out == "Found 3 files\nsrc/app.py\nsrc/util.py\nREADME.md"


async def test_case_sensitive_by_default(repo: Path, run: Run) -> None:
    assert await run(Grep(), pattern="hello") == "Found 1 file\nsrc/util.py"


async def test_content_mode_with_line_numbers(repo: Path, run: Run) -> None:
    out = await run(Grep(), pattern=r"def \w+", output_mode="content", path="src")
    assert out == "src/app.py:3:def main():\nsrc/util.py:1:def helper():"


async def test_content_mode_without_line_numbers(repo: Path, run: Run) -> None:
    out = await run(Grep(), pattern="return", output_mode="content", **{"-n": False})
    assert out.splitlines() == ["src/app.py:    return 0", "src/util.py:    return 'hello world'"]


async def test_count_mode(repo: Path, run: Run) -> None:
    out = await run(Grep(), pattern="main", output_mode="count")
    assert out == "src/app.py:1\ntests/test_app.py:3\nFound 4 matching lines in 2 files"


async def test_context_lines(repo: Path, run: Run) -> None:
    out = await run(Grep(), pattern="print|assert", output_mode="content", **{"-C": 1})
    assert out.splitlines() == [
        "src/app.py-3-def main():",
        "src/app.py:4:    print('Hello')",
        "src/app.py-5-    return 0",
        "--",
        "tests/test_app.py-3-def test_main():",
        "tests/test_app.py:4:    assert main() == 0",
    ]


async def test_before_and_after_and_gaps(tmp_path: Path, run: Run) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(1, 11)))
    out = await run(Grep(), pattern="^(2|8)$", output_mode="content", **{"-A": 1, "-B": 0})
    assert out.splitlines() == ["f.txt:2:2", "f.txt-3-3", "--", "f.txt:8:8", "f.txt-9-9"]
    out = await run(Grep(), pattern="^(4|6)$", output_mode="content", context=1, before=0)
    assert out.splitlines() == ["f.txt:4:4", "f.txt-5-5", "f.txt:6:6", "f.txt-7-7"]


async def test_include_and_exclude_globs(repo: Path, run: Run) -> None:
    assert await run(Grep(), pattern="main", glob="test_*.py") == "Found 1 file\ntests/test_app.py"
    assert await run(Grep(), pattern="main", glob="src/**/*.py") == "Found 1 file\nsrc/app.py"
    assert await run(Grep(), pattern="main", exclude="tests") == "Found 1 file\nsrc/app.py"
    out = await run(Grep(), pattern="(?i)hello", glob="*.{py,md}", exclude="*.md")
    assert out == "Found 2 files\nsrc/app.py\nsrc/util.py"


async def test_skips_binary_and_noise_unless_pointed_at(repo: Path, run: Run) -> None:
    assert "logo.bin" not in await run(Grep(), pattern="hello")
    out = await run(Grep(), pattern="hello", path="node_modules")
    assert out == "Found 1 file\nnode_modules/lib/index.js"


async def test_skips_pipes_instead_of_blocking_on_them(tmp_path: Path, run: Run) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "f.txt").write_text("x\n")
    assert await run(Grep(), pattern="x") == "Found 1 file\nf.txt"


async def test_path_may_be_a_file(repo: Path, run: Run) -> None:
    out = await run(Grep(), pattern="o", path="README.md", output_mode="count")
    assert out.splitlines()[0] == "README.md:1"


async def test_multiline(tmp_path: Path, run: Run) -> None:
    (tmp_path / "f.py").write_text("a = call(\n    x,\n)\nb = 1\n")
    assert await run(Grep(), pattern=r"call\(.*?\)", output_mode="count") == ("No matches found.")
    out = await run(Grep(), pattern=r"call\(.*?\)", output_mode="content", multiline=True)
    assert out.splitlines() == ["f.py:1:a = call(", "f.py:2:    x,", "f.py:3:)"]
    out = await run(Grep(), pattern=r"^b", multiline=True, output_mode="content")
    assert out == "f.py:4:b = 1"


async def test_head_limit_and_cap(tmp_path: Path, run: Run) -> None:
    (tmp_path / "f.txt").write_text("x\n" * 20)
    out = (await run(Grep(), pattern="x", output_mode="content", head_limit=3)).splitlines()
    assert out[:3] == ["f.txt:1:x", "f.txt:2:x", "f.txt:3:x"]
    assert out[3].startswith("[Showing the first 3 of 20 entries;")
    out = (await run(Grep(max_entries=5), pattern="x", output_mode="content")).splitlines()
    assert len(out) == 6


async def test_long_lines_are_cut(tmp_path: Path, run: Run) -> None:
    (tmp_path / "min.js").write_text("x" * 1000 + "needle" + "\n")
    out = await run(Grep(max_line_chars=10), pattern="needle", output_mode="content")
    assert out == "min.js:1:xxxxxxxxxx… [996 more characters]"


async def test_large_files_are_skipped_and_reported(tmp_path: Path, run: Run) -> None:
    (tmp_path / "big.log").write_text("needle\n" * 100)
    (tmp_path / "small.txt").write_text("needle\n")
    out = await run(Grep(max_file_bytes=100), pattern="needle")
    assert out == "Found 1 file\nsmall.txt\n[Skipped 1 file over 100 bytes.]"


async def test_invalid_regex(repo: Path, run: Run) -> None:
    with pytest.raises(ToolError, match=r"Invalid regular expression '\(unclosed'"):
        await run(Grep(), pattern="(unclosed")


async def test_missing_path(repo: Path, run: Run) -> None:
    with pytest.raises(ToolError, match="Path not found: nowhere"):
        await run(Grep(), pattern="x", path="nowhere")


async def test_bad_output_mode(repo: Path, run: Run) -> None:
    with pytest.raises(ToolError, match="output_mode: Input should be 'files_with_matches'"):
        await run(Grep(), pattern="x", output_mode="lines")
