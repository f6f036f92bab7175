"""MCP servers as tools, on the official ``mcp`` SDK (the ``mcp`` extra).

Each server runs once per session in a task of its own, which owns the SDK
client's context (its cancel scopes must open and close in one task) and
ends the server process when the session closes, fails or is cancelled. Its
tools are ``mcp__<server>__<tool>`` with the server's JSON schema passed
through unchanged, sorted by name so that a server listing them in another
order cannot move a cached prefix. A fork shares its parent's tool objects,
and so the connection: no second process per fork.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from .._paths import state_dir
from ..errors import ConfigurationError, ToolError
from ..messages import ImageBlock, JsonValue, TextBlock
from ..tools.base import Tool, ToolContext, ToolOutput
from .config import McpServer, parse_servers

MAX_RESULT_CHARS = 100_000
"""A larger text result is cut, with a note saying so."""


class McpConnection:
    """One running server and the tools it offered when it started."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.tools: list[McpTool] = []
        self._client: Any = None
        self._ready: asyncio.Future[None] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.changed = False
        """The server said its tools changed (``tools/list_changed``); ``refresh`` re-lists."""

    async def start(self) -> list[McpTool]:
        """Start the server, initialize, list its tools; ``ConfigurationError`` if it cannot."""
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._serve(), name=f"mcp:{self.server.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.server.timeout)
        except Exception as exc:
            await self.close()
            log = f" (its stderr: {state_dir() / f'mcp-{self.server.name}.log'})"
            raise ConfigurationError(
                f"MCP server {self.server.name!r} did not start: {_describe(exc)}"
                + (log if self.server.command else "")
            ) from None
        return self.tools

    async def _serve(self) -> None:
        assert self._ready is not None
        log = None
        try:
            from mcp import Client

            log = _server_log(self.server)
            async with Client(_transport(self.server, log)) as client:
                self._client = client
                self.tools = await self._listed(client)
                self._ready.set_result(None)
                listening = asyncio.create_task(self._listen(client))
                try:
                    await self._stop.wait()
                finally:
                    listening.cancel()
                    await asyncio.gather(listening, return_exceptions=True)
        except ImportError as exc:
            _fail(
                self._ready,
                ConfigurationError("MCP needs the mcp package: pip install 'forkagent[mcp]'"),
            )
            del exc
        except BaseException as exc:  # the server died, or never started
            _fail(self._ready, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._client = None
            if log is not None:
                log.close()

    async def refresh(self) -> list[McpTool]:
        """The server's tools again, after it said they changed."""
        self.changed = False
        if self._client is not None:
            self.tools = await self._listed(self._client)
        return self.tools

    async def _listed(self, client: Any) -> list[McpTool]:
        listed = await _all_tools(client)
        return [McpTool(self, tool) for tool in sorted(listed, key=lambda t: t.name)]

    async def _listen(self, client: Any) -> None:
        """Note ``tools/list_changed`` events (servers on the 2026-07-28 protocol send them on
        a ``subscriptions/listen`` stream; older ones send none that this client sees)."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    self.changed = True
        except Exception:
            return  # no change events from this server: its tools stay as listed

    async def call(self, tool: str, arguments: dict[str, JsonValue]) -> Any:
        if self._client is None:
            raise ToolError(
                f"MCP server {self.server.name!r} is not running (it stopped or crashed)"
            )
        return await asyncio.wait_for(self._client.call_tool(tool, arguments), self.server.timeout)

    async def close(self) -> None:
        """End the server (its process too, for a stdio server) and wait until it has."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 10)


class McpTool(Tool):
    """One tool of one server, as the model sees it: ``mcp__<server>__<tool>``."""

    def __init__(self, connection: McpConnection, tool: Any) -> None:
        self.connection = connection
        self.remote_name = str(tool.name)
        self.name = f"mcp__{connection.server.name}__{self.remote_name}"
        self.description = tool.description or self.remote_name
        self._schema: dict[str, JsonValue] = dict(tool.input_schema)
        hint = tool.annotations.read_only_hint if tool.annotations is not None else None
        # A server's own claim counts only when the user trusts the server.
        self.read_only = bool(hint) and connection.server.trusted

    @property
    def input_schema(self) -> dict[str, JsonValue]:
        return self._schema

    async def call(self, args: dict[str, JsonValue], ctx: ToolContext) -> ToolOutput:
        server = self.connection.server.name
        try:
            result = await self.connection.call(self.remote_name, args)
        except ToolError:
            raise
        except TimeoutError:
            raise ToolError(
                f"MCP server {server!r}: {self.remote_name} took longer than "
                f"{self.connection.server.timeout:g}s"
            ) from None
        except Exception as exc:
            raise ToolError(f"MCP server {server!r} failed: {_describe(exc)}") from None
        blocks = _blocks(result)
        if getattr(result, "is_error", False):
            text = "".join(b.text for b in blocks if isinstance(b, TextBlock)) or "no details"
            raise ToolError(f"MCP server {server!r}: {text}")
        return blocks or "(no output)"


class McpPool:
    """A session's servers: each started once, shared by every agent that names it, and
    stopped when the last agent using it lets go (or with the session)."""

    def __init__(self, configured: Sequence[McpServer] = ()) -> None:
        self.configured = {server.name: server for server in configured}
        self._running: dict[tuple[object, ...], McpConnection] = {}
        self._users: dict[tuple[object, ...], int] = {}

    def resolve(self, wanted: Sequence[str] | Mapping[str, object], source: str) -> list[McpServer]:
        """An agent file's ``mcpServers``: configured names, or inline configurations."""
        if isinstance(wanted, Mapping):
            return parse_servers(wanted, source=source)
        unknown = [name for name in wanted if name not in self.configured]
        if unknown:
            known = ", ".join(sorted(self.configured)) or "none"
            raise ConfigurationError(
                f"{source} names MCP servers that are not configured: {', '.join(unknown)} "
                f"(configured: {known})"
            )
        return [self.configured[name] for name in wanted]

    async def acquire(self, servers: Sequence[McpServer]) -> list[McpConnection]:
        taken: list[McpConnection] = []
        try:
            for server in servers:
                connection = self._running.get(server.key)
                if connection is None:
                    connection = McpConnection(server)
                    await connection.start()
                    self._running[server.key] = connection
                self._users[server.key] = self._users.get(server.key, 0) + 1
                taken.append(connection)
        except BaseException:
            await self.release(taken)
            raise
        return taken

    async def release(self, connections: Sequence[McpConnection]) -> None:
        for connection in connections:
            key = connection.server.key
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key], self._running[key]
                await connection.close()

    @property
    def connections(self) -> list[McpConnection]:
        return list(self._running.values())

    async def close(self) -> None:
        running, self._running, self._users = list(self._running.values()), {}, {}
        await asyncio.gather(*(c.close() for c in running))


def _transport(server: McpServer, log: TextIO | None) -> Any:
    if server.command is not None:
        from mcp.client.stdio import stdio_client

        from mcp import StdioServerParameters

        parameters = StdioServerParameters(
            command=server.command, args=list(server.args), env=dict(server.env) or None
        )
        return stdio_client(parameters, errlog=log or sys.stderr)
    assert server.url is not None
    if not server.headers:
        return server.url
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    client = httpx2.AsyncClient(headers=dict(server.headers))
    return streamable_http_client(server.url, http_client=client)


def _server_log(server: McpServer) -> TextIO | None:
    """Where a stdio server's stderr goes: ``<state dir>/mcp-<name>.log``, not our output."""
    if server.command is None:
        return None
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(folder / f"mcp-{server.name}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")


async def _all_tools(client: Any) -> list[Any]:
    """Every page of ``tools/list``."""
    tools: list[Any] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _blocks(result: Any) -> list[TextBlock | ImageBlock]:
    blocks: list[TextBlock | ImageBlock] = []
    for item in result.content:
        kind = getattr(item, "type", None)
        if kind == "text":
            blocks.append(TextBlock(text=_cut(item.text)))
        elif kind == "image":
            blocks.append(ImageBlock(media_type=item.mime_type, data=item.data))
        else:
            blocks.append(TextBlock(text=_cut(item.model_dump_json(exclude_none=True))))
    if not blocks and result.structured_content is not None:
        blocks.append(TextBlock(text=_cut(json.dumps(result.structured_content, sort_keys=True))))
    return blocks


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return (
        text[:MAX_RESULT_CHARS] + f"\n[... cut: the result had {len(text):,} characters; the first "
        f"{MAX_RESULT_CHARS:,} are shown]"
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _fail(ready: asyncio.Future[None], exc: BaseException) -> None:
    if not ready.done():
        ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
