"""One local Ray instance for every test of this folder: starting one takes seconds.

Without the ``ray`` extra the tests skip, saying so; under CI they fail instead,
since CI installs every extra.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from ._ray import require_ray


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    require_ray()
    import ray

    # A local, private instance: no token file in the home directory, small resources
    # (the machine is shared), nothing streamed from the workers' logs.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Ray's Unix sockets live under its temp folder, and a socket's path may be at most
    # 107 bytes: under pytest's numbered folders it passed that once a machine had run
    # the suite a thousand times (``pytest-1043``). A short private folder under /tmp.
    folder = tempfile.mkdtemp(prefix="fa-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    ray.init(
        num_cpus=2,
        object_store_memory=200 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=folder,
    )
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
