"""The built-in tools, with Claude Code's names and arguments: Read, Glob, Grep, Edit, Write, Bash."""

from __future__ import annotations

from ..base import Tool
from ..environment import DEFAULT_POLICY, EnvironmentPolicy
from .bash import Bash
from .edit import Edit
from .glob import Glob
from .grep import Grep
from .read import Read
from .write import Write


def builtin_tools(env_policy: EnvironmentPolicy = DEFAULT_POLICY) -> list[Tool]:
    """Fresh instances with default limits, always in the same order (the tool array is cached)."""
    return [Read(), Glob(), Grep(), Edit(), Write(), Bash(env_policy=env_policy)]


__all__ = ["Bash", "Edit", "Glob", "Grep", "Read", "Write", "builtin_tools"]
