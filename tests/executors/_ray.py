"""Helpers of the executor tests (not a test module)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_ray() -> None:
    """Skip (the whole module, when called at import) without the ray extra; under CI fail,
    since CI installs every extra and a skip there would hide a broken install."""
    if importlib.util.find_spec("ray") is not None:
        return
    if os.environ.get("CI"):
        pytest.fail("CI must have the ray extra for the executor tests: uv sync --all-extras")
    pytest.skip(
        "the ray extra is not installed (pip install 'forkagent[ray]')", allow_module_level=True
    )
