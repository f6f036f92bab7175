from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from forkagent.errors import ToolError
from forkagent.tools import ToolContext
from forkagent.tools.builtin import Glob
from forkagent.tools.builtin._walk import GlobFilter, glob_regex, split_fixed

Run = Callable[..., Awaitable[str]]


def make(root: Path, *names: str) -> None:
    """Create files, each one second newer than the one before."""
    for age, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        os.utime(path, (1_000_000 - age, 1_000_000 - age))


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "src/deep/a.py", True),
        ("src/**", "src/x/y", True),
        ("src/**/test_*.py", "src/test_a.py", True),
        ("src/**/test_*.py", "src/a/b/test_a.py", True),
        ("src/**/test_*.py", "lib/test_a.py", False),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        ("[!ab].txt", "c.txt", True),
        ("[[]x].txt", "[x].txt", True),
        ("*.{ts,tsx}", "app.tsx", True),
        ("*.{ts,tsx}", "app.js", False),
        ("{src,lib/{a,b}}/*.c", "lib/b/x.c", True),
        ("\\*.md", "*.md", True),
        ("\\*.md", "a.md", False),
        ("a+b(1).txt", "a+b(1).txt", True),
        ("{unclosed", "{unclosed", True),
    ],
)
def test_glob_regex(pattern: str, path: str, matches: bool) -> None:
    assert (glob_regex(pattern).fullmatch(path) is not None) is matches


def test_glob_filter_without_slash_matches_the_file_name() -> None:
    assert GlobFilter("*.py").matches("src/deep/a.py")
    assert GlobFilter("tests").matches("pkg/tests")
    assert not GlobFilter("src/*.py").matches("lib/src/a.py")
    assert GlobFilter("/src/*.py").matches("src/a.py")
    assert GlobFilter("tests/").matches("pkg/tests")
    assert GlobFilter("/tests").matches("tests")
    assert not GlobFilter("/tests").matches("pkg/tests")


@pytest.mark.parametrize(
    ("pattern", "fixed", "rest"),
    [
        ("**/*.py", ".", "**/*.py"),
        ("src/**/*.py", "src", "**/*.py"),
        ("src/a/*.py", "src/a", "*.py"),
        ("README.md", "README.md", ""),
        ("**/README.md", ".", "**/README.md"),
        ("src/*/a.txt", "src", "*/a.txt"),
        ("/etc/*.conf", "/etc", "*.conf"),
        ("/*", "/", "*"),
    ],
)
def test_split_fixed(pattern: str, fixed: str, rest: str) -> None:
    assert split_fixed(pattern) == (fixed, rest)


async def test_recursive_glob_newest_first(tmp_path: Path, run: Run) -> None:
    make(tmp_path, "src/new.py", "top.py", "src/pkg/mid.py", "notes.txt", "old.py")
    assert (await run(Glob(), pattern="**/*.py")).splitlines() == [
        "src/new.py",
        "top.py",
        "src/pkg/mid.py",
        "old.py",
    ]


async def test_double_star_before_a_literal_name(tmp_path: Path, run: Run) -> None:
    make(tmp_path, "docs/README.md", "README.md", "docs/other.md")
    assert (await run(Glob(), pattern="**/README.md")).splitlines() == [
        "docs/README.md",
        "README.md",
    ]


async def test_single_star_stays_at_the_top(tmp_path: Path, run: Run) -> None:
    make(tmp_path, "top.py", "src/a.py")
    assert await run(Glob(), pattern="*.py") == "top.py"


async def test_path_and_braces(tmp_path: Path, run: Run) -> None:
    make(tmp_path, "src/a.ts", "src/b.tsx", "src/c.js", "other/d.ts")
    out = await run(Glob(), pattern="*.{ts,tsx}", path="src")
    assert out.splitlines() == ["src/a.ts", "src/b.tsx"]


async def test_skips_noise_dirs_unless_named(tmp_path: Path, run: Run) -> None:
    make(tmp_path, "node_modules/x/i.js", ".git/hooks/h.js", "app.js")
    assert await run(Glob(), pattern="**/*.js") == "app.js"
    assert await run(Glob(), pattern="node_modules/**/*.js") == "node_modules/x/i.js"
    assert await run(Glob(), pattern="**/*.js", path=".git") == ".git/hooks/h.js"


async def test_literal_pattern(tmp_path: Path, run: Run) -> None:
    make(tmp_path, "src/a.py")
    assert await run(Glob(), pattern="src/a.py") == "src/a.py"
    assert await run(Glob(), pattern="src") == "No files under . match 'src'."


async def test_results_are_capped(tmp_path: Path, run: Run) -> None:
    make(tmp_path, *(f"f{i}.txt" for i in range(5)))
    out = (await run(Glob(max_results=2), pattern="*.txt")).splitlines()
    assert out[:2] == ["f0.txt", "f1.txt"]
    assert out[2].startswith("[2 of 5 matches shown, newest first")


async def test_paths_outside_the_cwd_stay_usable(tmp_path: Path) -> None:
    make(tmp_path, "a/x.py")
    inner = tmp_path / "b"
    inner.mkdir()
    out = await Glob().call({"pattern": "../a/*.py"}, ToolContext(cwd=inner))
    assert out == "../a/x.py"


async def test_no_match_and_bad_path(tmp_path: Path, run: Run) -> None:
    assert await run(Glob(), pattern="**/*.rs") == "No files under . match '**/*.rs'."
    (tmp_path / "f").write_text("")
    with pytest.raises(ToolError, match="f is not a directory"):
        await run(Glob(), pattern="*", path="f")
