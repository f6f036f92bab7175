"""``forkagent run``: one prompt, with the agent tree shown live."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast, get_args

import typer
from rich.console import Console

if TYPE_CHECKING:
    from ..agent import RunResult
    from .live import AgentBoard


def run_command(
    prompt: Annotated[str, typer.Argument(help="What the agent should do.")],
    model: Annotated[
        str, typer.Option(help="provider:model, e.g. emulator:claude-sonnet-4-5 or test:echo.")
    ] = "emulator:claude-sonnet-4-5",
    cwd: Annotated[
        Path,
        typer.Option(help="Working directory for the agent's tools.", exists=True, file_okay=False),
    ] = Path(),
    max_turns: Annotated[int | None, typer.Option(help="Turn limit for the main agent.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object at the end.")
    ] = False,
    permission_mode: Annotated[
        str,
        typer.Option(help="default (ask for anything not read-only), accept_edits, plan, bypass."),
    ] = "default",
) -> None:
    """Run an agent on PROMPT and show its tree of sub-agents as it works."""
    from .. import Limits
    from ..agent import Agent
    from ..errors import ForkagentError
    from ..permissions import PermissionMode, PermissionPolicy
    from ..permissions.prompt import terminal_handler
    from .live import AgentBoard, watch

    board = AgentBoard()
    if permission_mode not in get_args(PermissionMode):
        raise typer.BadParameter(f"unknown permission mode {permission_mode!r}")
    policy = PermissionPolicy(
        mode=cast(PermissionMode, permission_mode), handler=terminal_handler()
    )
    agent = Agent(
        model=model,
        cwd=cwd,
        limits=Limits(max_turns=max_turns),
        listeners=[board],
        permissions=policy,
        load_user_agents=True,
    )
    console = Console(stderr=as_json)
    try:
        result = asyncio.run(
            watch(lambda: agent.run(prompt), board, console, live=console.is_terminal)
        )
    except ForkagentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    board.finish_main(result.status)
    if as_json:
        sys.stdout.write(json.dumps(_result_json(result, board), indent=2) + "\n")
        return
    if not console.is_terminal:
        board.plain(console)
    console.print(result.output, markup=False, highlight=False)
    if result.error:
        console.print(f"[yellow]{result.status}:[/yellow] {result.error}")


def _result_json(result: RunResult, board: AgentBoard) -> dict[str, object]:
    return {
        "status": result.status,
        "output": result.output,
        "error": result.error,
        "agents": [{**a.to_dict(), "cache": board.cache_json(a.id)} for a in result.agents],
    }
