"""``forkagent mcp list``: the configured MCP servers, whether they start, and their tools."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigurationError
from ..mcp import McpPool, McpServer, load_project_servers
from ..mcp.config import PROJECT_FILE
from ..permissions.trust import is_trusted

app = typer.Typer(help="MCP tool servers: what is configured and what it offers.")


@app.command("list")
def list_command(
    cwd: Annotated[Path, typer.Option(help="The project whose .mcp.json to read.")] = Path(),
    trust_flag: Annotated[
        bool, typer.Option("--trust", help="Start the project's servers even if untrusted.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Start each server in the project's .mcp.json once, list its tools, and stop it."""
    trusted = trust_flag or is_trusted(cwd)
    configured = (cwd / PROJECT_FILE).is_file()
    try:
        servers = load_project_servers(cwd, trusted=True) if configured else []
    except ConfigurationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    report = [asyncio.run(_probe(server)) if trusted else _untrusted(server) for server in servers]
    if as_json:
        typer.echo(json.dumps({"servers": report}, indent=2))
        return
    if not servers:
        typer.echo(
            f"No MCP servers: {cwd / PROJECT_FILE} {'is empty' if configured else 'does not exist'}."
        )
    for entry in report:
        typer.echo(f"{entry['name']}: {entry['state']}")
        for name in entry["tools"]:
            typer.echo(f"  {name}")


Probe = dict[str, "str | list[str]"]


async def _probe(server: McpServer) -> Probe:
    pool = McpPool()
    try:
        [connection] = await pool.acquire([server])
    except ConfigurationError as exc:
        return {"name": server.name, "state": f"does not start: {exc}", "tools": []}
    try:
        return {"name": server.name, "state": "starts", "tools": [t.name for t in connection.tools]}
    finally:
        await pool.close()


def _untrusted(server: McpServer) -> Probe:
    return {
        "name": server.name,
        "state": "not started: directory not trusted (forkagent trust, or --trust)",
        "tools": [],
    }
