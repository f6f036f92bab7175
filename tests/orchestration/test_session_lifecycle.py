"""How a session records its main agent's end, and what ``Agent(options=...)`` replaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent import Agent, ConfigurationError, ForkGate, Limits, RuntimeOptions, Session
from forkagent.state.registry import Registry
from forkagent.state.transcript import read_transcript


def echo_agent(cwd: Path) -> Agent:
    return Agent(model="test:echo", cwd=cwd, load_agent_files=False)


async def test_resuming_an_agent_whose_turn_had_ended_records_it_as_completed(
    tmp_path: Path,
) -> None:
    first = await echo_agent(tmp_path).run("Say hello")
    record = Registry().get(first.agents[0].id)
    assert record.transcript is not None

    async with Session.resume(echo_agent(tmp_path), record.transcript) as session:
        result = await session.proceed()

    assert result.status == "completed"
    assert result.output == first.output
    again = Registry().get(record.id)
    assert again.status == "completed"  # not "running", which `ps` would later call lost
    assert again.ended_at is not None
    assert read_transcript(record.transcript).finished


async def test_a_session_closed_before_any_prompt_is_not_left_running(tmp_path: Path) -> None:
    async with echo_agent(tmp_path).session() as session:
        root = session.root.id

    assert Registry().get(root).status == "completed"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("child_limits", Limits(max_turns=2)),
        ("forking", False),
        ("coordinator", True),
        ("interactive", False),
        ("implicit_fork", True),
    ],
)
def test_options_refuses_the_agent_fields_it_would_silently_replace(
    field: str, value: object
) -> None:
    with pytest.raises(ConfigurationError, match=rf"replaces {field}, so setting them here"):
        Agent(options=RuntimeOptions(max_agents=3), **{field: value})  # type: ignore[arg-type]


def test_options_carry_what_the_agent_fields_would_have_set() -> None:
    options = RuntimeOptions(
        gate=ForkGate(enabled=False), child_limits=Limits(max_turns=2), implicit_fork=True
    )
    assert Agent(options=options, limits=Limits(max_turns=5)).runtime_options() is options
