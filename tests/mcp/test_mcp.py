"""MCP servers from .mcp.json: real stdio servers, shared by forks, gated by trust."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forkagent import Agent
from forkagent.cli import app
from forkagent.emulator import Emulator, Reply, ToolCall, use_emulator
from forkagent.events import CacheReported, Event, RequestSent, ToolCalled
from forkagent.mcp import McpServer
from forkagent.messages import ToolResultBlock, UserMessage
from forkagent.requests import ModelRequest

pytest.importorskip("mcp")

SERVER = Path(__file__).with_name("order_book_server.py")
MODEL = "emulator:claude-sonnet-4-6"


def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    config = {
        "mcpServers": {
            "orders": {
                "command": sys.executable,
                "args": [str(SERVER)],
                "env": {"ORDER_BOOK_PIDS": "${ORDER_BOOK_PIDS}"},
            }
        }
    }
    (root / ".mcp.json").write_text(json.dumps(config))
    return root


@pytest.fixture
def pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pids"
    monkeypatch.setenv("ORDER_BOOK_PIDS", str(path))
    return path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def tool_results(requests: list[ModelRequest]) -> dict[str, ToolResultBlock]:
    found: dict[str, ToolResultBlock] = {}
    for request in requests:
        for message in request.messages:
            if isinstance(message, UserMessage):
                found.update((b.tool_use_id, b) for b in message.tool_results)
    return found


async def test_a_fork_shares_the_parents_mcp_tools_connection_and_cache(
    tmp_path: Path, pids: Path
) -> None:
    root = project(tmp_path)
    emulator = Emulator()
    look = ToolCall("mcp__orders__find_order", {"order_id": "A-1"}, id="look")
    fork = ToolCall("Agent", {"prompt": "check order A-2", "fork": True}, id="fork")
    emulator.script(Reply(tool_calls=(look,)), Reply(tool_calls=(fork,)), "done", agent="main")
    child_look = ToolCall("mcp__orders__find_order", {"order_id": "A-2"}, id="child-look")
    emulator.script(Reply(tool_calls=(child_look,)), "Scope: A-2 awaits payment.", agent="fork")
    sent: list[RequestSent] = []
    with use_emulator(emulator):
        agent = Agent(
            model=MODEL,
            cwd=root,
            trust_project=True,
            system_prompt="Shop. " * 600,
            listeners=[lambda e: sent.append(e) if isinstance(e, RequestSent) else None],
        )
        result = await agent.run("look at the orders")
    assert result.status == "completed"
    fork_agent = next(a for a in result.agents if a.kind == "fork")
    assert fork_agent.usage.cache_read_tokens > 0  # the shared prefix, MCP tools included
    arrays = {json.dumps([t.model_dump() for t in e.request.tools], sort_keys=True) for e in sent}
    assert len(arrays) == 1  # one byte-identical tool array for every agent
    assert {e.agent_id for e in sent} >= {fork_agent.id}
    names = [t.name for t in sent[0].request.tools if t.name.startswith("mcp__")]
    assert names == [
        "mcp__orders__big_report",
        "mcp__orders__cancel_order",
        "mcp__orders__find_order",
        "mcp__orders__open_register",
        "mcp__orders__wait_for_the_courier",
    ]
    results = tool_results([e.request for e in sent])
    assert results["look"].text == "2 shelves, paid"
    assert results["child-look"].text == "1 lamp, awaiting payment"
    [pid] = read_pids(pids)  # one server for parent and fork
    assert gone(pid)  # and none left after the run


async def test_results_errors_and_oversized_output(tmp_path: Path, pids: Path) -> None:
    root = project(tmp_path)
    emulator = Emulator()
    calls = (
        ToolCall("mcp__orders__find_order", {"order_id": "A-2"}, id="a"),
        ToolCall("mcp__orders__cancel_order", {"order_id": "A-1"}, id="b"),
        ToolCall("mcp__orders__big_report", {}, id="c"),
    )
    emulator.script(Reply(tool_calls=calls), "noted", agent="main")
    model_requests: list[ModelRequest] = []
    with use_emulator(emulator):
        agent = Agent(model=MODEL, cwd=root, trust_project=True, subagents=False)
        async with agent.session() as session:
            result = await session.send("check")
            model_requests.append(session.root.build_request())
    assert result.status == "completed"
    results = tool_results(model_requests)
    assert results["a"].text == "1 lamp, awaiting payment"
    assert results["b"].is_error
    assert "MCP server 'orders'" in results["b"].text
    assert "cut: the result had 150,000 characters" in results["c"].text


async def test_an_untrusted_projects_servers_do_not_start(
    tmp_path: Path, pids: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = project(tmp_path)
    with use_emulator(Emulator()):
        result = await Agent(model=MODEL, cwd=root).run("hello")
    assert result.status == "completed"
    assert read_pids(pids) == []  # nothing was started
    assert ".mcp.json" in caplog.text


async def test_servers_given_in_code_and_a_crash_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from forkagent import ConfigurationError
    from forkagent.state import read_transcript, transcript_path

    broken = McpServer("broken", command=sys.executable, args=("-c", "raise SystemExit(3)"))
    with use_emulator(Emulator()):
        session = Agent(model=MODEL, cwd=tmp_path, mcp_servers=[broken]).session()
        async with session:
            with pytest.raises(ConfigurationError, match="MCP server 'broken' did not start"):
                await session.send("hi")
    status = read_transcript(transcript_path(session.root.id, session.root.id)).status
    assert status is not None
    assert status.status == "failed"  # the record tells the truth


def test_mcp_list_shows_servers_and_tools(tmp_path: Path, pids: Path) -> None:
    root = project(tmp_path)
    runner = CliRunner()
    untrusted = runner.invoke(app, ["mcp", "list", "--cwd", str(root)])
    assert "not started: directory not trusted" in untrusted.stdout
    trusted = runner.invoke(app, ["mcp", "list", "--cwd", str(root), "--trust", "--json"])
    [server] = json.loads(trusted.stdout)["servers"]
    assert server["state"] == "starts"
    assert "mcp__orders__find_order" in server["tools"]
    assert read_pids(pids)
    assert all(gone(pid) for pid in read_pids(pids))


def test_config_expands_variables_and_rejects_bad_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    from forkagent import ConfigurationError
    from forkagent.mcp import parse_servers

    monkeypatch.setenv("DOCS_TOKEN", "t0k")
    [http] = parse_servers(
        {
            "docs": {
                "type": "http",
                "url": "https://x/mcp",
                "headers": {"A": "Bearer ${DOCS_TOKEN}"},
            }
        },
        source="test",
    )
    assert http.headers == {"A": "Bearer t0k"}
    [stdio] = parse_servers({"s": {"command": "run", "args": ["${MISSING:-dflt}"]}}, source="t")
    assert stdio.args == ("dflt",)
    with pytest.raises(ConfigurationError, match="server 'x': a stdio server needs a command"):
        parse_servers({"x": {"args": []}}, source="t")
    with pytest.raises(ConfigurationError, match=r"\$\{NOPE\} is not set"):
        parse_servers({"x": {"command": "${NOPE}"}}, source="t")
    assert os.environ["DOCS_TOKEN"] == "t0k"


@pytest.fixture
def http_port() -> Iterator[int]:
    """The order book served over streamable HTTP on a free loopback port. The test listens
    first and hands the socket down, so the client's first request waits in its backlog
    until the server is up."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        port: int = listening.getsockname()[1]
        fd = listening.fileno()
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "http", str(fd)],
            pass_fds=[fd],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_a_streamable_http_server(tmp_path: Path, http_port: int) -> None:
    emulator = Emulator()
    look = ToolCall("mcp__book__find_order", {"order_id": "A-1"}, id="look")
    emulator.script(Reply(tool_calls=(look,)), "found it", agent="main")
    server = McpServer("book", url=f"http://127.0.0.1:{http_port}/mcp")
    with use_emulator(emulator):
        agent = Agent(model=MODEL, cwd=tmp_path, mcp_servers=[server], subagents=False)
        async with agent.session() as session:
            result = await session.send("look it up")
            request = session.root.build_request()
    assert result.output == "found it"
    assert tool_results([request])["look"].text == "2 shelves, paid"


async def test_a_named_agent_starts_its_own_servers_and_stops_them(
    tmp_path: Path, pids: Path
) -> None:
    root = tmp_path / "shop"
    agents = root / ".forkagent" / "agents"
    agents.mkdir(parents=True)
    env = {"ORDER_BOOK_PIDS": str(pids)}
    server = {"orders": {"command": sys.executable, "args": [str(SERVER)], "env": env}}
    (agents / "clerk.md").write_text(
        "---\nname: clerk\ndescription: knows the orders\n"
        f"mcpServers: {json.dumps(server)}\n---\nYou look orders up.\n"
    )
    emulator = Emulator()
    ask = ToolCall("Agent", {"prompt": "find A-2", "subagent_type": "clerk"}, id="ask")
    emulator.script(Reply(tool_calls=(ask,)), "thanks", agent="main")
    look = ToolCall("mcp__orders__find_order", {"order_id": "A-2"}, id="look")
    emulator.script(Reply(tool_calls=(look,)), "A-2 awaits payment", agent="clerk")
    sent: list[Event] = []
    with use_emulator(emulator):
        agent = Agent(model=MODEL, cwd=root, trust_project=True, listeners=[sent.append])
        async with agent.session() as session:
            result = await session.send("who owes us?")
            [pid] = read_pids(pids)
            assert gone(pid)  # stopped when the clerk ended, before the session did
    assert result.output == "thanks"
    requests = [e for e in sent if isinstance(e, RequestSent)]
    main_tools = {t.name for t in requests[0].request.tools}
    clerk_tools = {
        t.name for e in requests if e.agent_id.startswith("clerk") for t in e.request.tools
    }
    assert "mcp__orders__find_order" not in main_tools
    assert "mcp__orders__find_order" in clerk_tools
    assert tool_results([e.request for e in requests])["look"].text == "1 lamp, awaiting payment"


async def test_an_interrupted_run_leaves_no_server_behind(tmp_path: Path, pids: Path) -> None:
    import asyncio

    root = project(tmp_path)
    emulator = Emulator()
    wait = ToolCall("mcp__orders__wait_for_the_courier", {}, id="wait")
    emulator.script(Reply(tool_calls=(wait,)), "done", agent="main")
    called = asyncio.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, ToolCalled) and event.name.startswith("mcp__"):
            called.set()

    with use_emulator(emulator):
        agent = Agent(model=MODEL, cwd=root, trust_project=True, listeners=[on_event])
        run = asyncio.create_task(agent.run("wait"))
        await asyncio.wait_for(called.wait(), 30)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    [pid] = read_pids(pids)
    assert gone(pid)


async def test_a_changed_tool_list_reaches_the_parent_at_its_next_turn(
    tmp_path: Path, pids: Path
) -> None:
    root = project(tmp_path)
    emulator = Emulator()
    open_it = ToolCall("mcp__orders__open_register", {}, id="open")
    sell = ToolCall("mcp__orders__register_sale", {"sku": "jam-02"}, id="sell")
    emulator.script(Reply(tool_calls=(open_it,)), Reply(tool_calls=(sell,)), "sold", agent="main")
    sent: list[Event] = []
    with use_emulator(emulator):
        agent = Agent(
            model=MODEL, cwd=root, trust_project=True, subagents=False, listeners=[sent.append]
        )
        result = await agent.run("open the till and sell a jam")
    assert result.output == "sold"
    requests = [e.request for e in sent if isinstance(e, RequestSent)]
    before = {t.name for t in requests[0].tools}
    after = {t.name for t in requests[1].tools}
    assert "mcp__orders__register_sale" not in before
    assert "mcp__orders__register_sale" in after
    assert tool_results(requests)["sell"].text == "sold jam-02"
    reports = [e.report for e in sent if isinstance(e, CacheReported) and e.turn == 2]
    assert any("tools_changed" in r.reasons for r in reports)
