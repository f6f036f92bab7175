"""Suite-wide isolation: no test reads the real home directory or writes outside tmp,
and none depends on the terminal it runs in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

# Output that rich or click wraps must not depend on the width of whoever runs the suite.
os.environ["COLUMNS"] = "100"
os.environ["LINES"] = "40"
os.environ.pop("FORCE_COLOR", None)
os.environ["NO_COLOR"] = "1"
os.environ["LC_ALL"] = os.environ["LANG"] = "C.UTF-8"

# Hypothesis's default 200 ms deadline per example is a wall-clock assertion: beside another
# xdist worker, or on a busy machine, a slow example would fail a correct property.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point every per-user location (agent files, transcripts, registry) at a temp dir."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FORKAGENT_HOME", str(home / "forkagent"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    monkeypatch.setenv("FORKAGENT_CONFIG_DIR", str(home / ".config" / "forkagent"))
    monkeypatch.delenv("FORKAGENT_SUBAGENT_MODEL", raising=False)
    monkeypatch.delenv("FORKAGENT_MODEL", raising=False)
    assert Path(str(home)).is_dir()


SHARED_SET_UP = ("tests/executors/", "tests/cli/test_bench_cli.py", "tests/test_tool_decorator.py")
"""Tests that share a costly session or module fixture (the Ray cluster, one
``forkagent bench --quick``, one user's mypy run), longest first. Under ``-n``, each of these
runs on one worker, so its set-up happens once; they are handed out first, in this order, so
the two longest start at once on two workers instead of one after the other."""


def _set_up_rank(nodeid: str) -> int:
    """Where the test's prefix is in ``SHARED_SET_UP``; after all of them when it has none."""
    ranks = (rank for rank, prefix in enumerate(SHARED_SET_UP) if nodeid.startswith(prefix))
    return next(ranks, len(SHARED_SET_UP))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of ``SHARED_SET_UP`` first, in its order (the rest keep theirs)."""
    items.sort(key=lambda item: _set_up_rank(item.nodeid))


class _SharedSetUpScheduling(LoadScopeScheduling):
    """xdist's ``load`` distribution, test by test, except that the tests under one
    ``SHARED_SET_UP`` prefix go to one worker together.

    ``--dist loadgroup`` with ``xdist_group`` marks would say the same, but it silently stops
    grouping under pytest 9.2 (pytest-dev/pytest-xdist#1386).
    """

    def _split_scope(self, nodeid: str) -> str:
        rank = _set_up_rank(nodeid)
        return SHARED_SET_UP[rank] if rank < len(SHARED_SET_UP) else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    """Under ``-n N`` (scripts/test: ``-n logical``) with no other ``--dist``: the scheduler above,
    handing out work in collection order (not the largest group first)."""
    if config.getvalue("dist") != "load":
        return None
    config.option.loadscopereorder = False
    return _SharedSetUpScheduling(config, log)
