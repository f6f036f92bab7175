"""The lock file a session holds while it runs an agent (``state.lease``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkagent.state.lease import AgentBusyError, Lease


def test_a_lease_holds_its_pid_alone_over_a_longer_one_left_before(tmp_path: Path) -> None:
    """The pid is written over the old one and the file cut to it: no old bytes after it."""
    first = Lease("agent-1", base=tmp_path)
    first.release()
    first.path.write_text("4194303999\nleft by a process that died\n")

    lease = Lease("agent-1", base=tmp_path)
    try:
        assert lease.path.read_text() == f"{os.getpid()}\n"
    finally:
        lease.release()


def test_a_held_lease_refuses_a_second_and_names_its_holder(tmp_path: Path) -> None:
    lease = Lease("agent-1", base=tmp_path)
    try:
        with pytest.raises(AgentBusyError, match=f"still running \\(process {os.getpid()}\\)"):
            Lease("agent-1", base=tmp_path)
    finally:
        lease.release()
    Lease("agent-1", base=tmp_path).release()  # free once released
