"""``forkagent report`` and the demo's HTML timeline: its data, its figures, and a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from forkagent.cli import app
from forkagent.demo import FAST_LATENCY, DemoReport, run_demo
from forkagent.messages import AssistantMessage, Message, TextBlock, UserMessage
from forkagent.state import TranscriptHeader, TranscriptWriter, read_tree, transcript_path
from forkagent.telemetry.report import render_html, replay_comparison, run_view
from forkagent.usage import Usage

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoReport:
    """One fast demo run, its state kept in a module-wide directory."""
    import asyncio

    home = tmp_path_factory.mktemp("state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FORKAGENT_HOME", str(home))
        report = asyncio.run(run_demo(tmp_path_factory.mktemp("demo"), latency=FAST_LATENCY))
    assert report.html_report is not None
    return report


def page_data(page: str) -> dict[str, Any]:
    found = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_the_demo_report_shows_the_tree_its_requests_and_notifications(demo: DemoReport) -> None:
    assert demo.html_report is not None
    data = page_data(demo.html_report.read_text())
    kinds = sorted(agent["kind"] for agent in data["agents"])
    assert kinds == ["fork", "fork", "fork", "main", "named"]
    assert {agent["id"] for agent in data["agents"]} == {a.id for a in demo.result.agents}
    assert len(data["requests"]) == sum(a.usage.requests for a in demo.result.agents)
    main = next(a["id"] for a in data["agents"] if a["kind"] == "main")
    background = {a.id for a in demo.result.agents if a.background}
    assert len(background) == 2
    assert {(n["child"], n["parent"]) for n in data["notifications"]} == {
        (child, main) for child in background
    }
    # the fork family: the leader sends first and writes; the siblings read what it wrote
    forks = [a["id"] for a in data["agents"] if a["kind"] == "fork"]
    firsts = [
        min((r for r in data["requests"] if r["agent"] == f), key=lambda r: r["start"])
        for f in forks
    ]
    leader, *siblings = sorted(firsts, key=lambda r: r["start"])
    assert all(s["start"] >= leader["start"] for s in siblings)
    assert all(s["cache_read"] > 0 for s in siblings)
    assert all(s["cache"]["status"] == "hit" for s in siblings)
    # every request carries the explain data the page shows on click
    assert all(r["cache"] is not None for r in data["requests"] if not r["prewarm"])
    assert data["comparison"] == demo.comparison.to_dict()
    assert "by model" in data["usage_text"]


def test_the_comparison_replayed_from_transcripts_is_the_one_measured_live(
    demo: DemoReport,
) -> None:
    assert demo.html_report is not None
    replayed = replay_comparison(read_tree(demo.html_report.with_name(f"{_root(demo)}.jsonl")))
    live = demo.comparison
    assert replayed.forks == live.forks == 3
    for figure in ("this_run", "fresh_subagents", "lower_bound"):
        assert getattr(replayed, figure) == pytest.approx(getattr(live, figure))


def test_report_writes_the_whole_run_from_any_of_its_agents(
    demo: DemoReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert demo.html_report is not None
    monkeypatch.setenv("FORKAGENT_HOME", str(demo.html_report.parents[2]))
    fork = next(a.id for a in demo.result.agents if a.kind == "fork")
    target = tmp_path / "run.html"
    result = runner.invoke(app, ["report", fork, "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert "5 agents" in result.output
    data = page_data(target.read_text())
    assert len(data["agents"]) == 5
    assert data["comparison"]["forks"] == 3


def test_report_of_an_unknown_agent_is_a_one_line_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "nobody-0", "-o", str(tmp_path / "x.html")])
    assert result.exit_code == 1
    assert "error:" in result.output
    assert not (tmp_path / "x.html").exists()


def test_the_page_needs_nothing_from_the_network(demo: DemoReport) -> None:
    assert demo.html_report is not None
    page = demo.html_report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<script src" not in page
    assert "<link" not in page


def _root(demo: DemoReport) -> str:
    return next(a.id for a in demo.result.agents if a.kind == "main")


# -- a large run -----------------------------------------------------------------


def write_large_run(base: Path, children: int) -> Path:
    """A root with ``children`` forks, each with one request and a notification back."""
    start = datetime.now(UTC)
    root_id = "main-big"
    root_path = transcript_path(root_id, root_id, base=base)
    notes = []
    for n in range(children):
        child = f"fork-{n}"
        with TranscriptWriter(transcript_path(root_id, child, base=base)) as writer:
            writer.header(
                TranscriptHeader(
                    agent_id=child,
                    parent_id=root_id,
                    root_id=root_id,
                    kind="fork",
                    label=f"part {n}",
                    model="emulator:claude-sonnet-4-6",
                    cwd=".",
                    at=start + timedelta(milliseconds=n),
                )
            )
            writer.usage(
                Usage(cache_read_tokens=5_000, input_tokens=40, output_tokens=30, requests=1),
                turn=1,
                seconds=0.2,
            )
            writer.status("completed", output="done")
        notes.append(f"<task-notification>\ntask: {child}\nstatus: completed\n</task-notification>")
    with TranscriptWriter(root_path) as writer:
        writer.header(
            TranscriptHeader(
                agent_id=root_id,
                root_id=root_id,
                model="emulator:claude-sonnet-4-6",
                cwd=".",
                at=start - timedelta(seconds=1),
            )
        )
        writer.usage(Usage(cache_write_5m_tokens=5_000, output_tokens=10, requests=1), turn=1)
        history: list[Message] = [
            UserMessage(content=(TextBlock(text="split the work"),)),
            AssistantMessage(content=(TextBlock(text="forking"),)),
            UserMessage(content=tuple(TextBlock(text=note) for note in notes)),
        ]
        writer.sync(history)
        writer.status("completed", output="all done")
    return root_path


def test_a_thousand_agent_run_collapses_its_families(tmp_path: Path) -> None:
    root = write_large_run(tmp_path, 1_000)
    view = run_view(read_tree(root))
    assert len(view.agents) == 1_001
    assert len(view.notifications) == 1_000


# -- in a real browser -------------------------------------------------------------


def chromium() -> str:
    """Debian's headless Chromium; CI installs it (.ci/run), elsewhere the tests say why they skip."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have chromium for the browser tests: .ci/run installs it")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    return found


def browse(page: Path, profile: Path, screenshot: Path) -> dict[str, Any]:
    """Open ``page`` from file://, let its script run, save a screenshot; the rendered DOM's facts."""
    flags = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ]
    url = page.resolve().as_uri()
    subprocess.run([*flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=120)
    dom = subprocess.run(
        [*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body is not None, dom[:500]
    return {
        name: json.loads(value.replace("&quot;", '"'))
        for name, value in re.findall(r'data-(\w+)="([^"]*)"', body.group(1))
    }


def test_the_demo_report_renders_in_a_browser(demo: DemoReport, tmp_path: Path) -> None:
    assert demo.html_report is not None
    shot = tmp_path / "report.png"
    facts = browse(demo.html_report, tmp_path / "profile", shot)
    assert facts["errors"] == []
    data = page_data(demo.html_report.read_text())
    assert facts["rendered"] == {
        "lanes": 5,
        "collapsed_rows": 0,
        "bars": len(data["requests"]),
        "arrows": 2,
    }
    assert shot.stat().st_size > 10_000


def test_a_thousand_agent_report_renders_collapsed(tmp_path: Path) -> None:
    root = write_large_run(tmp_path / "state", 1_000)
    page = tmp_path / "big.html"
    page.write_text(render_html(run_view(read_tree(root))))
    facts = browse(page, tmp_path / "profile", tmp_path / "big.png")
    assert facts["errors"] == []
    assert facts["rendered"]["lanes"] == 1
    assert facts["rendered"]["collapsed_rows"] == 1
    assert facts["rendered"]["bars"] == 1
    assert facts["rendered"]["arrows"] == 1  # one arrow, counted, for the collapsed family
