"""``forkagent run``: one prompt, with the agent tree shown live."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast, get_args

import typer
from rich.console import Console
from rich.markup import escape

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
    max_turns: Annotated[
        int | None, typer.Option(min=0, help="Turn limit for the main agent.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object at the end.")
    ] = False,
    permission_mode: Annotated[
        str,
        typer.Option(help="default (ask for anything not read-only), accept_edits, plan, bypass."),
    ] = "default",
) -> None:
    """Run an agent on PROMPT and show its tree of sub-agents as it works.

    Exit status: 0 completed, 1 failed, 3 budget exceeded, 4 turn limit, 5 timed out,
    6 reply cut at max_tokens, 7 stopped (forkagent stop), 128+N ended by signal N
    (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
    """
    from .. import Limits
    from ..agent import Agent
    from ..errors import ForkagentError
    from ..permissions import PermissionMode, PermissionPolicy
    from ..permissions.prompt import terminal_handler
    from ._outcome import Interrupted, exit_code, run_until_signal
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
    )
    console = Console(stderr=as_json)
    try:
        result = run_until_signal(
            lambda: watch(lambda: agent.run(prompt), board, console, live=console.is_terminal)
        )
    except ForkagentError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        _hint(console, board.main_id)
        raise typer.Exit(1) from None
    except Interrupted as exc:
        console.print(f"[yellow]interrupted[/yellow] by {exc}")
        _hint(console, board.main_id)
        raise typer.Exit(exc.exit_code) from None
    board.finish_main(result.status)
    code = exit_code(result)
    if as_json:
        sys.stdout.write(json.dumps(_result_json(result, board), indent=2) + "\n")
        raise typer.Exit(code)
    if not console.is_terminal:
        board.plain(console)
    console.print(result.output, markup=False, highlight=False)
    if result.error:
        console.print(
            f"[yellow]{result.status}:[/yellow] {escape(result.error)}",
            highlight=False,
            soft_wrap=True,
        )
    if code:
        _hint(console, board.main_id)
    raise typer.Exit(code)


def _hint(console: Console, main_id: str | None) -> None:
    from ._outcome import resume_hint

    if main_id:
        console.print(resume_hint(main_id), markup=False, highlight=False, soft_wrap=True)


def _result_json(result: RunResult, board: AgentBoard) -> dict[str, object]:
    return {
        "status": result.status,
        "output": result.output,
        "error": result.error,
        "agents": [{**a.to_dict(), "cache": board.cache_json(a.id)} for a in result.agents],
    }
