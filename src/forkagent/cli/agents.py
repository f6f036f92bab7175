"""``forkagent agents``: which named agents exist, where each comes from, and what failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from ..agents import AgentCatalog, AgentDefinition, LoadError


def agents_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    project: Annotated[
        Path, typer.Option("--project", help="Project directory whose agent files to read.")
    ] = Path("."),
) -> None:
    """List every available agent with its source, model and tools, and files that failed.

    Exits with status 1 when a definition file failed to load.
    """
    from ..agents import load_agents

    catalog = load_agents(project)
    if as_json:
        typer.echo(json.dumps(_as_json(catalog), indent=2))
    else:
        _print(catalog, Console())
    if catalog.errors:
        raise typer.Exit(1)


def _tools(definition: AgentDefinition) -> str:
    listed = "all" if definition.tools is None else ", ".join(definition.tools) or "none"
    removed = ", ".join(definition.disallowed_tools)
    return f"{listed} except {removed}" if removed else listed


def _agent_json(definition: AgentDefinition) -> dict[str, Any]:
    data = definition.model_dump(mode="json", exclude={"system_prompt", "hooks"})
    return data | {"hooks": len(definition.hooks), "can_spawn_agents": definition.can_spawn_agents}


def _error_json(error: LoadError) -> dict[str, Any]:
    return {"path": str(error.path), "field": error.field, "reason": error.reason}


def _as_json(catalog: AgentCatalog) -> dict[str, Any]:
    return {
        "agents": [_agent_json(d) for d in catalog],
        "errors": [_error_json(e) for e in catalog.errors],
        "warnings": [_error_json(e) for e in catalog.warnings],
    }


def _print(catalog: AgentCatalog, console: Console) -> None:
    """A rich table on a terminal; one plain line per agent when piped."""
    if console.is_terminal:
        table = Table("agent", "source", "model", "tools")
        for row in _rows(catalog):
            table.add_row(*row)
        console.print(table)
    else:
        for row in _rows(catalog):
            typer.echo("\t".join(row))
    for line in _problem_lines(catalog):
        typer.echo(line, err=True)


def catalog_lines(catalog: AgentCatalog) -> list[str]:
    """The catalog as plain lines (``chat``'s ``/agents``): one per agent, then its problems."""
    return ["  ".join(row) for row in _rows(catalog)] + _problem_lines(catalog)


def _rows(catalog: AgentCatalog) -> list[tuple[str, str, str, str]]:
    return [(d.name, d.source, d.model, _tools(d)) for d in catalog]


def _problem_lines(catalog: AgentCatalog) -> list[str]:
    return [
        f"{title}: {problem}"
        for title, problems in (("failed to load", catalog.errors), ("ignored", catalog.warnings))
        for problem in problems
    ]
