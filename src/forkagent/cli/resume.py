"""``forkagent resume``: continue a main agent from its transcript."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

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

    console = Console()
    try:
        record = Registry().get(agent_id)
        if record.transcript is None:
            raise typer.BadParameter(f"{record.id} was run with skip_transcript; nothing to resume")
        result = asyncio.run(
            _resume(
                Session.resume(Agent(load_user_agents=True), record.transcript), prompt, compact
            )
        )
    except ForkagentError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    console.print(result.output, markup=False, highlight=False)
    hit = result.usage.cache_hit_ratio
    console.print(f"status: {result.status}; cache hit {'-' if hit is None else f'{hit:.0%}'}")


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
