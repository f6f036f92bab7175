"""Git repositories for the executor tests (not a test module)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout


def init_repo(root: Path, files: dict[str, bytes]) -> Path:
    """A repository at ``root`` whose one commit holds ``files``."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test")
    git(root, "config", "user.email", "test@example.com")
    git(root, "config", "commit.gpgsign", "false")
    for name, data in files.items():
        (root / name).write_bytes(data)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    return root
