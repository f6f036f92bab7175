"""One local Ray instance for every test of this folder: starting one takes seconds.

Without the ``ray`` extra the tests skip, saying so; under CI they fail instead,
since CI installs every extra.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ._ray import require_ray


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    require_ray()
    import ray

    # A local, private instance: no token file in the home directory, small resources
    # (the machine is shared), nothing streamed from the workers' logs.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(
        num_cpus=2,
        object_store_memory=200 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    try:
        yield
    finally:
        ray.shutdown()
