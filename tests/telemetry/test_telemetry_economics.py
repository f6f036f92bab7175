"""Fork economics: this run, fresh sub-agents and the lower bound, by hand and on the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkagent import Agent, RuntimeOptions
from forkagent._orchestration.fanout import FanoutMode
from forkagent.emulator import Emulator, tokens
from forkagent.events import AgentStarted, Event, RequestSent, ResponseReceived
from forkagent.messages import TextBlock, UserMessage, assistant
from forkagent.models.base import ModelResponse
from forkagent.models.emulator import EmulatorModel
from forkagent.pricing import price_for
from forkagent.requests import BlockPosition, ModelRequest
from forkagent.telemetry import EconomicsRecorder
from forkagent.usage import Usage

SONNET = "claude-sonnet-4-6"  # read 0.1x, 5-minute write 1.25x


def fork_request(model: str, own_tokens: int) -> ModelRequest:
    """A child's first request whose part after the shared prefix is ``own_tokens`` long."""
    own = tokens.truncate("review this module and report back " * own_tokens, own_tokens)
    assert tokens.count(own) == own_tokens
    return ModelRequest(
        model=model,
        messages=(UserMessage(content=(TextBlock(text="the shared part"), TextBlock(text=own))),),
        shared_prefix_end=BlockPosition(message=0, block=0),
    )


def plain_request(model: str) -> ModelRequest:
    return ModelRequest(model=model, messages=(UserMessage(content=(TextBlock(text="hi"),)),))


def turn(agent_id: str, number: int, request: ModelRequest, usage: Usage) -> list[Event]:
    response = ModelResponse(message=assistant("ok"), usage=usage, model=request.model)
    return [
        RequestSent(agent_id, number - 1, request),
        ResponseReceived(agent_id, number, response, 0.1),
    ]


def fork(agent_id: str) -> AgentStarted:
    return AgentStarted(agent_id, "main", "fork", agent_id, False)


def replay(events: list[Event]) -> EconomicsRecorder:
    recorder = EconomicsRecorder()
    for event in events:
        recorder(event)
    return recorder


def test_a_family_is_priced_as_billed_as_fresh_agents_and_at_the_bound() -> None:
    # Each child's 12,000-token prompt: 9,000 shared and 3,000 its own.
    child = fork_request(SONNET, 3_000)
    recorder = replay(
        [
            AgentStarted("main", None, "main", "main", False),
            *turn("main", 1, plain_request(SONNET), Usage(cache_write_5m_tokens=8_000)),
            fork("fork-a"),
            fork("fork-b"),
            *turn("fork-a", 1, child, Usage(cache_read_tokens=8_000, cache_write_5m_tokens=4_000)),
            *turn("fork-b", 1, child, Usage(cache_read_tokens=9_000, cache_write_5m_tokens=3_000)),
            *turn("fork-a", 2, child, Usage(cache_read_tokens=12_000, input_tokens=500)),
        ]
    )

    result = recorder.comparison()
    # main 10,000; fork-a 800 + 5,000; fork-b 900 + 3,750; fork-a's second turn 1,200 + 500
    assert result.this_run == pytest.approx(22_150)
    # the two first turns replaced by 12,000 full-price tokens each
    assert result.fresh_subagents == pytest.approx(11_700 + 24_000)
    # both read 9,000 and pay 3,000 own; the 1,000 tokens the parent had not cached are written once
    assert result.lower_bound == pytest.approx(11_700 + 2 * (900 + 3_000) + 1.15 * 1_000)
    assert result.forks == 2
    assert result.this_run_ratio == pytest.approx(22_150 / 20_650)
    assert result.fresh_subagents_ratio == pytest.approx(35_700 / 20_650)
    assert result.to_dict()["lower_bound"] == pytest.approx(20_650)
    assert result.unpriced_models == ()


def test_a_prewarm_is_billed_in_this_run_only_as_part_of_its_forks_first_turn() -> None:
    child = fork_request(SONNET, 3_000)
    warmed = ModelResponse(
        message=assistant(),
        stop_reason="max_tokens",
        usage=Usage(cache_read_tokens=8_000, cache_write_5m_tokens=4_000),
        model=SONNET,
    )
    recorder = replay(
        [
            *turn("main", 1, plain_request(SONNET), Usage(cache_write_5m_tokens=8_000)),
            fork("fork-a"),
            RequestSent("fork-a", 0, child, prewarm=True),
            ResponseReceived("fork-a", 1, warmed, 0.1, prewarm=True),
            *turn("fork-a", 1, child, Usage(cache_read_tokens=12_000)),
        ]
    )

    result = recorder.comparison()
    # main 10,000; the pre-warm 800 + 5,000; fork-a's turn reads all 12,000
    assert result.this_run == pytest.approx(10_000 + 5_800 + 1_200)
    assert result.forks == 1
    assert result.fresh_subagents == pytest.approx(10_000 + 12_000)
    assert result.lower_bound == pytest.approx(10_000 + 900 + 3_000 + 1.15 * 1_000)


def test_forks_after_another_parent_response_are_a_new_family_against_the_new_cache() -> None:
    child = fork_request(SONNET, 3_000)
    recorder = replay(
        [
            *turn("main", 1, plain_request(SONNET), Usage(cache_write_5m_tokens=8_000)),
            fork("fork-a"),
            *turn("fork-a", 1, child, Usage(cache_read_tokens=8_000, cache_write_5m_tokens=4_000)),
            *turn(
                "main",
                2,
                plain_request(SONNET),
                Usage(cache_read_tokens=8_000, cache_write_5m_tokens=500),
            ),
            fork("fork-b"),
            *turn("fork-b", 1, child, Usage(cache_read_tokens=8_000, cache_write_5m_tokens=4_000)),
        ]
    )

    result = recorder.comparison()
    others = 10_000 + 800 + 625  # the parent's two turns
    # each family writes its own 1,000 new shared tokens: the second parent turn cached 8,500
    one_child = 900 + 3_000
    assert result.lower_bound == pytest.approx(others + 2 * one_child + 1.15 * (1_000 + 500))


def test_a_model_without_a_price_counts_its_tokens_at_one_and_is_named() -> None:
    child = fork_request("local-llama", 400)
    recorder = replay(
        [
            *turn("main", 1, plain_request("local-llama"), Usage(input_tokens=2_000)),
            fork("fork-a"),
            *turn("fork-a", 1, child, Usage(input_tokens=2_400)),
        ]
    )

    result = recorder.comparison()
    assert result.unpriced_models == ("local-llama",)
    assert result.this_run == result.fresh_subagents == result.lower_bound == 4_400
    assert result.to_dict()["unpriced_models"] == ["local-llama"]


def test_nothing_billed_has_no_ratio() -> None:
    result = EconomicsRecorder().comparison()
    assert (result.this_run, result.lower_bound, result.this_run_ratio) == (0, 0, None)


async def _fork_three(tmp_path: Path, fanout: FanoutMode) -> tuple[EconomicsRecorder, float]:
    """The recorder after a three-child family, and what the emulator billed in all."""
    emulator = Emulator()
    model = EmulatorModel(SONNET, emulator)
    economics = EconomicsRecorder()
    agent = Agent(
        model=model,
        cwd=tmp_path,
        listeners=[economics],
        registry=False,
        skip_transcript=True,
        load_agent_files=False,
        options=RuntimeOptions(fanout=fanout),
    )
    async with agent.session() as session:
        await session.send("Read the code and plan the review. " * 300)
        await session.fork(["review module A", "review module B", "review module C"])
    price = price_for(SONNET)
    assert price is not None
    served = sum(price.input_equivalents(e.usage) for e in emulator.log if e.usage is not None)
    return economics, served


async def test_on_the_emulator_warmed_forks_reach_the_bound_and_fresh_agents_cost_more(
    tmp_path: Path,
) -> None:
    economics, served = await _fork_three(tmp_path, "auto")

    result = economics.comparison()
    assert result.this_run == pytest.approx(served)
    assert result.forks == 3
    assert result.lower_bound <= result.this_run <= 1.01 * result.lower_bound
    assert result.fresh_subagents > 1.5 * result.this_run


async def test_on_the_emulator_forks_launched_together_each_write_the_new_shared_part(
    tmp_path: Path,
) -> None:
    warmed = (await _fork_three(tmp_path, "auto"))[0].comparison()
    together = (await _fork_three(tmp_path, "off"))[0].comparison()

    assert together.lower_bound == pytest.approx(warmed.lower_bound, rel=0.01)
    assert together.this_run > warmed.this_run
