"""``forkagent resume``: continue a main agent from its transcript."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ..agent import Agent, RunResult, Session
    from ..permissions import PermissionMode


def resume_command(
    agent_id: Annotated[
        str, typer.Argument(metavar="ID", help="The main agent's id (or a unique prefix).")
    ],
    prompt: Annotated[
        str | None,
        typer.Argument(
            metavar="PROMPT", help="A new message; without it the agent finishes its turn."
        ),
    ] = None,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact", help="First summarise the conversation (through a fork) to free context."
        ),
    ] = False,
    permission_mode: Annotated[
        str | None,
        typer.Option(
            help="Tighten the mode the agent ran in (looser needs --loosen) [default: as recorded]",
            show_default=False,
        ),
    ] = None,
    loosen: Annotated[
        bool,
        typer.Option(help="Allow a looser mode, more directories or secrets than recorded."),
    ] = False,
    trust_flag: Annotated[
        bool, typer.Option("--trust", help="Trust the repository for this run.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Continue an agent from its transcript; its cached prefix is re-used as it was."""
    from ..agent import Session
    from ..errors import ForkagentError
    from ..state.registry import Registry
    from ._outcome import Interrupted, exit_code, resume_hint, run_until_signal

    console = Console()
    try:
        record = Registry().get(agent_id)
        if record.transcript is None:
            raise typer.BadParameter(f"{record.id} was run with skip_transcript; nothing to resume")
        session = Session.resume(
            _agent(record.transcript, permission_mode, trust_flag), record.transcript, loosen=loosen
        )
        result = run_until_signal(lambda: _resume(session, prompt, compact))
    except ForkagentError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except Interrupted as exc:
        console.print(
            f"interrupted by {exc}; {resume_hint(record.id)}", markup=False, soft_wrap=True
        )
        raise typer.Exit(exc.exit_code) from None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "status": result.status,
                    "output": result.output,
                    "error": result.error,
                    "agents": [a.to_dict() for a in result.agents],
                },
                indent=2,
            )
        )
        raise typer.Exit(exit_code(result))
    console.print(result.output, markup=False, highlight=False)
    hit = result.usage.cache_hit_ratio
    console.print(f"status: {result.status}; cache hit {'-' if hit is None else f'{hit:.0%}'}")
    raise typer.Exit(exit_code(result))


def _agent(transcript: Path, permission_mode: str | None, trust_flag: bool) -> Agent:
    """Asks on a terminal, refuses without one, as ``run`` does, in the recorded mode unless
    told otherwise; ``Session.resume`` keeps the recorded filters, directories and trust."""
    from ..agent import Agent
    from ..permissions import PermissionPolicy
    from ..permissions.prompt import terminal_handler

    return Agent(
        load_user_agents=True,
        permissions=PermissionPolicy(
            mode=resumed_mode(transcript, permission_mode), handler=terminal_handler()
        ),
        trust_project=True if trust_flag else None,
    )


def resumed_mode(transcript: Path, given: str | None) -> PermissionMode:
    """The mode ``given`` on the command line, else the one the agent ran in
    (``Session.resume`` then refuses a looser one unless told to loosen)."""
    from ..state.transcript import read_transcript
    from .run import permission_mode_named

    record = read_transcript(transcript).header.extra.get("permissions")
    recorded = record.get("mode") if isinstance(record, dict) else None
    return permission_mode_named(given or str(recorded or "default"), as_json=False)


async def _resume(session: Session, prompt: str | None, compact: bool) -> RunResult:
    async with session:
        if compact:
            done = await session.compact()
            sys.stderr.write(
                f"compacted {done.messages_before} messages (~{done.tokens_before:,} tokens) "
                f"into {done.messages_after}; summary by {done.summary_agent}\n"
            )
        if prompt:
            return await session.send(prompt, wait_for_background=True)
        return await session.proceed()
