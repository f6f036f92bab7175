"""The usage tree: sums per agent, per child, per model; unknown cost stays unknown."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from forkagent.events import AgentStarted, RequestSent, ResponseReceived
from forkagent.messages import assistant, user
from forkagent.models.base import ModelResponse
from forkagent.pricing import cost
from forkagent.requests import ModelRequest
from forkagent.telemetry import AgentUsage, UsageRecorder, build_usage_tree
from forkagent.usage import Usage

SONNET, HAIKU, LOCAL = "claude-sonnet-4-6", "claude-haiku-4-5", "local-llama"
MAIN = Usage(
    input_tokens=1000,
    output_tokens=200,
    cache_write_5m_tokens=8000,
    cache_write_1h_tokens=500,
    requests=2,
)
FORK = Usage(input_tokens=300, output_tokens=100, cache_read_tokens=8000, requests=1)
EXPLORE = Usage(input_tokens=2000, output_tokens=400, cache_write_5m_tokens=1000, requests=3)
GRANDCHILD = Usage(input_tokens=50, output_tokens=20, requests=1)
RECORDS = [
    AgentUsage("main", None, "main", "main", SONNET, MAIN),
    AgentUsage("fork-1", "main", "fork", "schema", SONNET, FORK),
    AgentUsage("explore-1", "main", "named", "Explore", HAIKU, EXPLORE),
    AgentUsage("local-1", "explore-1", "named", "helper", LOCAL, GRANDCHILD),
]


def test_totals_sum_every_agent_and_keep_reads_and_writes_apart() -> None:
    root = build_usage_tree(RECORDS)

    total = root.total
    assert total == MAIN + FORK + EXPLORE + GRANDCHILD
    assert total.cache_read_tokens == 8000
    assert total.cache_write_5m_tokens == 9000
    assert total.cache_write_1h_tokens == 500
    assert root.usage == MAIN  # the root's own line excludes its children
    assert [n.agent_id for n in root.walk()] == ["main", "fork-1", "explore-1", "local-1"]


def test_a_child_on_another_model_keeps_its_own_line() -> None:
    root = build_usage_tree(RECORDS)

    assert root.by_model == {SONNET: MAIN + FORK, HAIKU: EXPLORE, LOCAL: GRANDCHILD}
    explore = root.children[1]
    assert explore.model == HAIKU
    assert explore.by_model == {HAIKU: EXPLORE, LOCAL: GRANDCHILD}


def test_a_known_price_gives_a_complete_cost() -> None:
    fork = build_usage_tree(RECORDS).children[0]

    assert fork.cost == cost(SONNET, FORK)
    assert fork.cost_complete
    assert fork.cost_known == pytest.approx(cost(SONNET, FORK))


def test_an_unknown_price_stays_unknown_and_the_known_part_is_kept() -> None:
    root = build_usage_tree(RECORDS)
    local = root.children[1].children[0]
    known = cost(SONNET, MAIN + FORK)
    assert known is not None
    haiku = cost(HAIKU, EXPLORE)
    assert haiku is not None

    assert local.cost is None
    assert not root.cost_complete
    assert root.unpriced_models == (LOCAL,)
    assert root.cost_known == pytest.approx(known + haiku)
    assert "+ unknown (no price for local-llama)" in root.to_text()


def test_an_agent_without_tokens_costs_nothing_even_unpriced() -> None:
    root = build_usage_tree([AgentUsage("main", None, "main", "main", LOCAL)])

    assert root.cost == 0.0
    assert root.cost_complete


def test_to_dict_is_json_with_the_usage_keys() -> None:
    data = json.loads(json.dumps(build_usage_tree(RECORDS).to_dict()))

    assert data["usage"] == {
        "input": 1000,
        "output": 200,
        "cache_read": 0,
        "cache_write": 8500,
        "cache_write_5m": 8000,
        "cache_write_1h": 500,
        "requests": 2,
    }
    assert data["cost_complete"] is False
    assert data["by_model"][LOCAL]["cost"] is None
    assert [c["agent_id"] for c in data["children"]] == ["fork-1", "explore-1"]
    assert data["children"][1]["children"][0]["cost"] is None


def test_text_and_rich_renderings_show_every_agent_and_model() -> None:
    root = build_usage_tree(RECORDS)
    console = Console(width=200, record=True, color_system=None)
    console.print(root.to_rich())

    for rendered in (root.to_text(), console.export_text()):
        assert "schema [fork] claude-sonnet-4-6" in rendered
        assert "helper [named] local-llama" in rendered
        assert "cache write 8,000 5m + 500 1h" in rendered
        assert "by model" in rendered
        assert "cost unknown" in rendered
    assert root.to_text().splitlines()[0] == "main [main] claude-sonnet-4-6"


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([AgentUsage("a", "missing", "fork", "a", SONNET)], "names parent 'missing'"),
        ([], "exactly one root"),
        (
            [
                AgentUsage("a", None, "main", "a", SONNET),
                AgentUsage("b", None, "main", "b", SONNET),
            ],
            "exactly one root",
        ),
        (
            [
                AgentUsage("root", None, "main", "r", SONNET),
                AgentUsage("a", "b", "fork", "a", SONNET),
                AgentUsage("b", "a", "fork", "b", SONNET),
            ],
            "cycle",
        ),
    ],
)
def test_records_that_are_not_one_tree_are_refused(records: list[AgentUsage], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_usage_tree(records)


def test_the_recorder_builds_the_tree_from_events() -> None:
    recorder = UsageRecorder()
    request = ModelRequest(model=SONNET, messages=(user("hi"),))

    def respond(agent_id: str, spent: Usage, model: str = SONNET) -> None:
        recorder(RequestSent(agent_id, 0, request.model_copy(update={"model": model})))
        recorder(
            ResponseReceived(agent_id, 1, ModelResponse(message=assistant("ok"), usage=spent), 0.1)
        )

    recorder(AgentStarted("main", None, "main", "main", False))
    respond("main", MAIN)
    recorder(AgentStarted("fork-1", "main", "fork", "schema", True))
    respond("fork-1", FORK)
    respond("main", FORK)
    recorder(AgentStarted("explore-1", "main", "named", "Explore", False))
    recorder(RequestSent("explore-1", 0, request.model_copy(update={"model": HAIKU})))

    root = recorder.tree()

    assert root.usage == MAIN + FORK
    assert root.children[0].usage == FORK
    assert root.children[1].model == HAIKU  # started, no answer yet
    assert root.children[1].usage == Usage()
    assert root.total == MAIN + FORK + FORK
