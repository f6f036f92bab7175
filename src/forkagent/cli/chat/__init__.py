"""``forkagent chat``: talk to the agent in the terminal, watch its children, steer them.

``app`` is the screen (prompt_toolkit), ``view`` what it shows, ``commands`` the slash
commands, ``ask`` the one-key permission questions, ``start`` how a session begins.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input import Input
from prompt_toolkit.output import Output

from ...errors import ForkagentError
from ..errors import fail
from ..run import (
    CwdOption,
    MaxCostOption,
    MaxTokensOption,
    MaxTurnsOption,
    ModelOption,
    given_limits,
    say_what_answers,
)
from ..trust import decide_trust
from .app import ChatApp
from .ask import InlineQuestions
from .start import ChatStart, history_path, open_session
from .view import ChatView


def chat_command(
    model: ModelOption = None,
    cwd: CwdOption = Path(),
    max_turns: MaxTurnsOption = None,
    max_tokens: MaxTokensOption = None,
    max_cost: MaxCostOption = None,
    permission_mode: Annotated[
        str | None,
        typer.Option(
            help="default, accept_edits (acceptEdits), plan, bypass [default: your config "
            "file, else default; a resumed session: as recorded, only tighter]",
            show_default=False,
        ),
    ] = None,
    continue_last: Annotated[
        bool, typer.Option("--continue", help="Resume the last session in this directory.")
    ] = False,
    resume: Annotated[
        str | None, typer.Option("--resume", metavar="ID", help="Resume this main agent.")
    ] = None,
    trust_flag: Annotated[
        bool, typer.Option("--trust", help="Trust this repository: its own hooks may run.")
    ] = False,
) -> None:
    """Talk to the agent: its answer streams in, its children show in a panel under the
    prompt, Ctrl+B sends the child it waits for to the background; /help lists the rest.
    A resumed session (--continue, --resume) keeps its model and its recorded mode."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        fail("forkagent chat needs a terminal; without one use: forkagent run PROMPT", exit_code=2)
    if continue_last and resume:
        fail("give --continue or --resume ID, not both", exit_code=2)
    start = ChatStart(
        cwd=cwd.resolve(),
        model=model,
        permission_mode=permission_mode,
        continue_last=continue_last,
        resume=resume,
        trusted=decide_trust(cwd, flag=trust_flag, interactive=True),
        limits=given_limits(max_turns=max_turns, max_tokens=max_tokens, max_cost=max_cost),
    )
    try:
        asyncio.run(chat(start))
    except ForkagentError as exc:
        fail(str(exc), kind=type(exc).__name__)


async def chat(start: ChatStart) -> None:
    """The whole chat; leaving it stops the children still running."""
    app = open_chat(start)
    say_what_answers(app.session.result().agents[0].model)
    async with app.session:
        await app.run()


def open_chat(
    start: ChatStart, *, input: Input | None = None, output: Output | None = None
) -> ChatApp:
    """The app on a new or resumed session (tests pass a pipe input and a dummy output);
    what the user types is kept across sessions in the state directory."""
    view, questions = ChatView(), InlineQuestions()
    session = open_session(start, questions, [view])
    history = FileHistory(str(history_path()))
    app = ChatApp(
        session, view, questions, cwd=start.cwd, history=history, input=input, output=output
    )
    if start.resume or start.continue_last:
        view.say(
            f"resumed {session.id}: {len(session.messages)} messages; the first request "
            "reads them from the prompt cache"
        )
    return app
