"""Thousands of agents under the default open-file limit: transcripts hold no descriptor each."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PROGRAM = textwrap.dedent(
    """
    import asyncio, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from forkagent import Agent, RuntimeOptions
    from forkagent.testing import FunctionModel

    async def main():
        agent = Agent(
            model=FunctionModel(lambda r: "done"),
            builtin_tools=False,
            options=RuntimeOptions(max_agents=400, resume_on_notification=False),
        )
        async with agent.session() as session:
            await session.send("split the work")
            children = await session.fork([f"part {n}" for n in range(300)], background=True)
            results = [await child.wait() for child in children]
            print(sum(r.status == "completed" for r in results))

    asyncio.run(main())
    """
)


def test_three_hundred_forks_run_under_an_open_file_limit_of_256(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "300"
