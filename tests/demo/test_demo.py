"""The offline demo, run the way a user runs it: ``forkagent demo``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from forkagent.cli import app
from forkagent.demo import DemoBrain
from forkagent.emulator import EmulatedRequest

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One fast run of ``forkagent demo --json``, shared by the tests that only read it."""
    home = tmp_path_factory.mktemp("demo-home")
    workdir = tmp_path_factory.mktemp("demo-work")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("FORKAGENT_HOME", str(home / "forkagent"))
        result = runner.invoke(app, ["demo", "--fast", "--json", "--workdir", str(workdir)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), workdir / "shelf-repo"


def by_kind(data: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [agent for agent in data["agents"] if agent["kind"] == kind]


def test_the_json_has_the_documented_keys(demo: tuple[dict[str, Any], Path]) -> None:
    data, _ = demo
    assert {"agents", "notifications_delivered", "comparison"} <= data.keys()
    for agent in data["agents"]:
        assert {"id", "parent", "kind", "status", "background", "usage"} <= agent.keys()
        assert {"input", "output", "cache_read", "cache_write"} <= agent["usage"].keys()
    assert {"this_run", "fresh_subagents", "lower_bound"} <= data["comparison"].keys()


def test_the_tree_has_a_main_agent_forks_some_in_the_background_and_an_explore_agent(
    demo: tuple[dict[str, Any], Path],
) -> None:
    data, _ = demo
    (main,) = by_kind(data, "main")
    forks, named = by_kind(data, "fork"), by_kind(data, "named")
    assert len(forks) == 3
    assert sum(f["background"] for f in forks) == 2
    assert [n["label"] for n in named] == ["find open notes"]
    assert all(a["parent"] == main["id"] for a in forks + named)
    assert all(a["status"] == "completed" for a in data["agents"])
    assert data["status"] == "completed"


def test_every_background_child_reported_back_once(demo: tuple[dict[str, Any], Path]) -> None:
    data, _ = demo
    assert data["notifications_delivered"] == 2
    assert "(background)" in data["report"]


def test_forks_read_the_parents_prefix_from_the_cache(demo: tuple[dict[str, Any], Path]) -> None:
    data, _ = demo
    for fork in by_kind(data, "fork"):
        usage = fork["usage"]
        assert usage["cache_read"] > 10 * (usage["input"] + usage["cache_write"]), fork


def test_forking_costs_less_than_fresh_agents_and_no_less_than_the_bound(
    demo: tuple[dict[str, Any], Path],
) -> None:
    comparison = demo[0]["comparison"]
    assert comparison["lower_bound"] <= comparison["this_run"] < comparison["fresh_subagents"]


def test_the_report_states_what_the_agents_found_in_the_files(
    demo: tuple[dict[str, Any], Path],
) -> None:
    report = demo[0]["report"]
    assert "shelf/store.py:36" in report
    assert "3 open notes" in report
    assert "shelf/pricing.py:33" in report


def test_the_fixes_and_tests_the_children_wrote_work(demo: tuple[dict[str, Any], Path]) -> None:
    data, repo = demo
    assert data["changed_files"] == ["shelf/store.py", "tests/test_report.py"]
    check = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    overdraw = (
        "from decimal import Decimal\nfrom shelf import Item, OutOfStock, Store\n"
        "s = Store(); s.add(Item('a', 'A', Decimal(1)), 2)\n"
        "try:\n    s.remove('a', 3)\nexcept OutOfStock:\n    print('refused', s.quantity('a'))\n"
    )
    refused = subprocess.run(
        [sys.executable, "-c", overdraw], cwd=repo, capture_output=True, text=True, timeout=60
    )
    assert refused.stdout.strip() == "refused 2", refused.stderr


def test_without_a_terminal_the_demo_prints_the_tree_report_and_cost_table(
    tmp_path: Path,
) -> None:
    result = runner.invoke(app, ["demo", "--fast", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("fork", "find open notes", "Review of shelf", "this run", "fresh sub-agents"):
        assert text in out
    assert "lower bound" in out
    assert "notifications delivered: 2" in out


def test_the_brain_says_so_when_a_directive_is_not_in_its_script() -> None:
    from forkagent._orchestration.fork import FORK_RULES

    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": FORK_RULES},
                    {"type": "text", "text": "Directive:\nPaint the shed"},
                ],
            },
        ]
    }
    request = EmulatedRequest("anthropic", "claude-sonnet-4-6", "", "", (), 3, "c", body)
    assert "no plan for this directive: Paint the shed" in DemoBrain()(request).text


def test_the_main_agent_and_its_stock_fork_use_the_order_books_mcp_tools(
    demo: tuple[dict[str, Any], Path],
) -> None:
    from forkagent.messages import AssistantMessage, ToolResultBlock, UserMessage
    from forkagent.state import read_transcript

    data, _ = demo
    folder = Path(data["html_report"]).parent  # the run's transcripts are beside its report
    main = next(a for a in data["agents"] if a["kind"] == "main")
    stock = next(a for a in data["agents"] if a["label"] == "fix negative stock")
    main_t = read_transcript(folder / f"{main['id']}.jsonl")
    fork_t = read_transcript(folder / f"{stock['id']}.jsonl")
    assert fork_t.header.tools == main_t.header.tools  # MCP tools included, byte for byte
    assert any(t.name == "mcp__orders__find_order" for t in fork_t.header.tools)
    calls = {
        b.name
        for t in (main_t, fork_t)
        for m in t.messages
        if isinstance(m, AssistantMessage)
        for b in m.tool_uses
    }
    assert {"mcp__orders__recent_orders", "mcp__orders__find_order"} <= calls
    answers = [
        b.text
        for m in fork_t.messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert any('"sku": "tea-07"' in text for text in answers)
