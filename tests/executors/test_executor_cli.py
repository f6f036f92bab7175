"""``--executor`` and ``--ray-address`` on ``forkagent run`` and ``forkagent demo``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent.cli import app

from ._ray import require_ray

runner = CliRunner()


@pytest.mark.parametrize("command", ["run", "demo"])
def test_an_unknown_executor_is_a_usage_error(command: str) -> None:
    args = [command, *(["hello", "--model", "test:echo"] if command == "run" else [])]
    result = runner.invoke(app, [*args, "--executor", "dask", "--json"])
    assert result.exit_code == 2
    assert "give in-process or ray" in json.loads(result.stdout)["error"]["message"]


def test_a_ray_address_needs_the_ray_executor() -> None:
    result = runner.invoke(app, ["run", "hello", "--model", "test:echo", "--ray-address", "auto"])
    assert result.exit_code == 2
    assert "--ray-address needs --executor ray" in result.stderr


@pytest.mark.usefixtures("ray_cluster")
def test_the_demo_on_ray_says_where_each_agent_ran(tmp_path: Path) -> None:
    args = ["demo", "--fast", "--json", "--workdir", str(tmp_path), "--executor", "ray"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    main, *children = report["agents"]
    assert (main["executor"], main["worker_pid"]) == ("in-process", os.getpid())
    assert [c["kind"] for c in children] == ["fork", "fork", "fork", "named"]
    for child in children:
        assert child["status"] == "completed"
        assert child["executor"] == "ray"
        assert child["worker_pid"] != os.getpid()
    assert report["notifications_delivered"] == 2
    # The edits the children's tools made on the workers are in the driver's copy.
    assert report["changed_files"] == ["shelf/store.py", "tests/test_report.py"]


def test_a_pool_needs_a_worker() -> None:
    require_ray()
    from forkagent.errors import ConfigurationError
    from forkagent.executors.ray import RayExecutor

    with pytest.raises(ConfigurationError, match="workers=0"):
        RayExecutor(workers=0)
