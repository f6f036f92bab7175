"""``forkagent resume``: continue a main agent from its transcript."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from ..agent import RunResult, Session


def resume_command(
    agent_id: Annotated[str, typer.Argument(help="The main agent's id (or a unique prefix).")],
    prompt: Annotated[
        str | None, typer.Argument(help="A new message; without it the agent finishes its turn.")
    ] = None,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact", help="First summarise the conversation (through a fork) to free context."
        ),
    ] = False,
) -> None:
    """Continue an agent from its transcript; its cached prefix is re-used as it was."""
    from ..agent import Agent, Session
    from ..errors import ForkagentError
    from ..state.registry import Registry
    from ._outcome import Interrupted, exit_code, resume_hint, run_until_signal

    console = Console()
    try:
        record = Registry().get(agent_id)
        if record.transcript is None:
            raise typer.BadParameter(f"{record.id} was run with skip_transcript; nothing to resume")
        session = Session.resume(Agent(load_user_agents=True), record.transcript)
        result = run_until_signal(lambda: _resume(session, prompt, compact))
    except ForkagentError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    except Interrupted as exc:
        console.print(
            f"interrupted by {exc}; {resume_hint(record.id)}", markup=False, soft_wrap=True
        )
        raise typer.Exit(exc.exit_code) from None
    console.print(result.output, markup=False, highlight=False)
    hit = result.usage.cache_hit_ratio
    console.print(f"status: {result.status}; cache hit {'-' if hit is None else f'{hit:.0%}'}")
    raise typer.Exit(exit_code(result))


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
