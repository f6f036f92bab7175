"""The transcript's usage line takes ``ResponseReceived.cost`` (priced at the requests' model)
where the response's model name has the same price, instead of pricing the usage again; where
the name prices otherwise (or the event carries no cost) the line is priced as it always was,
at the response's name. Either way the bytes are those of the general path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkagent import Agent
from forkagent.events import ResponseReceived
from forkagent.messages import assistant
from forkagent.models.base import ModelResponse
from forkagent.models.function import ScriptedModel
from forkagent.pricing import cost
from forkagent.state import transcript as transcript_module
from forkagent.state.transcript import (
    TranscriptHeader,
    TranscriptWriter,
    UsageEntry,
    read_transcript,
    transcript_path,
)
from forkagent.usage import Usage

REQUESTED = "claude-sonnet-4-6"
USAGE = Usage(
    input_tokens=1_234, output_tokens=321, cache_read_tokens=45_678, cache_write_5m_tokens=901
)
ALIKE = [REQUESTED, f"{REQUESTED}-20261001"]
"""An echo of the requested name, and a dated alias of the same price."""
OTHER = ["claude-haiku-4-5", "gpt-4.1", "local:mystery-7b"]
"""Names priced otherwise, or not at all."""


def _header(model: str) -> TranscriptHeader:
    return TranscriptHeader(
        agent_id="main-0-abc123",
        root_id="main-0-abc123",
        kind="main",
        label="x",
        model=model,
        cwd="/work",
    )


def _pricings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the transcript module prices usage at, from now on."""
    names: list[str] = []

    def counted(model: str, usage: Usage) -> float | None:
        names.append(model)
        return cost(model, usage)

    monkeypatch.setattr(transcript_module, "cost", counted)
    return names


def _line(path: Path, write: Callable[[TranscriptWriter], None], model: str) -> dict[str, object]:
    """The one usage line ``write`` makes, without its time."""
    with TranscriptWriter(path) as writer:
        writer.header(_header(model))
        write(writer)
    line: dict[str, object] = json.loads(path.read_bytes().splitlines()[1])
    del line["at"]
    return line


def _both_paths(
    tmp_path: Path, header_model: str, event: ResponseReceived
) -> tuple[dict[str, object], dict[str, object]]:
    """The line ``on_event`` writes, and the one the general path (``usage``, which prices
    the usage at the line's model) writes for the same response."""
    response = event.response
    fast = _line(tmp_path / "fast.jsonl", lambda w: w.on_event(event), header_model)

    def general(writer: TranscriptWriter) -> None:
        writer.usage(
            response.usage,
            model=response.model or None,
            response_id=response.response_id,
            turn=event.turn,
            prewarm=event.prewarm,
            seconds=event.seconds,
        )

    return fast, _line(tmp_path / "general.jsonl", general, header_model)


def _received(model: str, *, priced_at: str | None = REQUESTED) -> ResponseReceived:
    """A response as the runtime reports it: its cost priced at the request's model."""
    response = ModelResponse(message=assistant("ok"), usage=USAGE, model=model, response_id="m1")
    price = None if priced_at is None else cost(priced_at, USAGE)
    return ResponseReceived("main-0-abc123", 1, response, 0.5, cost=price)


@pytest.mark.parametrize(
    ("model", "priced_again"), [*((m, False) for m in ALIKE), *((m, True) for m in OTHER)]
)
def test_the_line_prices_the_usage_again_only_where_the_names_price_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, priced_again: bool
) -> None:
    event = _received(model)
    pricings = _pricings(monkeypatch)
    fast, general = _both_paths(tmp_path, f"anthropic:{REQUESTED}", event)

    # The general path prices once; the event's line only where the names price otherwise.
    assert pricings == [model] * (1 + priced_again)
    assert fast == general
    assert (fast["model"], fast["cost"]) == (model, cost(model, USAGE))
    assert (fast["cost"] == event.cost) is not priced_again


@pytest.mark.parametrize(
    ("event", "priced_at"),
    [
        (_received(REQUESTED, priced_at=None), REQUESTED),  # an event built without its cost
        (_received(""), f"anthropic:{REQUESTED}"),  # no name: the header's, priced as before
    ],
    ids=["no cost", "no name"],
)
def test_without_a_cost_or_a_name_the_line_is_priced_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, event: ResponseReceived, priced_at: str
) -> None:
    pricings = _pricings(monkeypatch)
    fast, general = _both_paths(tmp_path, f"anthropic:{REQUESTED}", event)

    assert pricings[0] == priced_at
    assert fast == general
    assert fast["cost"] == cost(REQUESTED, USAGE)


@given(
    requested=st.sampled_from(["claude-sonnet-4-6", "gpt-4.1", "gemini-2.5-flash", "mystery"]),
    answered=st.sampled_from(
        ["", *ALIKE, *OTHER, "claude-opus-4-6", "gemini-2.5-flash", "mystery"]
    ),
    tokens=st.tuples(*[st.integers(0, 10**7)] * 5),
)
def test_the_line_is_the_general_paths_for_any_pair_of_names(
    tmp_path_factory: pytest.TempPathFactory,
    requested: str,
    answered: str,
    tokens: tuple[int, int, int, int, int],
) -> None:
    """Whatever model the requests name (the header's) and the response names, and whatever
    the counts, the line's bytes are those of pricing the response's name (or the header's)."""
    usage = Usage(
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        cache_read_tokens=tokens[2],
        cache_write_5m_tokens=tokens[3],
        cache_write_1h_tokens=tokens[4],
    )
    response = ModelResponse(message=assistant("ok"), usage=usage, model=answered)
    event = ResponseReceived("main-0-abc123", 1, response, 0.5, cost=cost(requested, usage))
    fast, general = _both_paths(tmp_path_factory.mktemp("pair"), f"test:{requested}", event)
    assert fast == general


@pytest.mark.parametrize("answered", [*ALIKE, *OTHER])
async def test_a_run_records_each_response_at_its_own_names_price(
    tmp_path: Path, answered: str
) -> None:
    """Through the runtime, which prices each response at the request's model: the line
    names the response's model and its cost is that name's price."""
    reply = ModelResponse(message=assistant("done"), usage=USAGE, model=answered)
    model = ScriptedModel([reply], name=REQUESTED)
    agent = Agent(model=model, cwd=tmp_path, registry=False, load_agent_files=False)
    async with agent.session() as session:
        await session.send("Go.")
        root = session.root.id

    (line,) = [
        e for e in read_transcript(transcript_path(root, root)).entries if isinstance(e, UsageEntry)
    ]
    assert (line.model, line.usage, line.cost) == (answered, USAGE, cost(answered, USAGE))
