"""The ``forkagent`` command line. Each command group lives in its own module."""

from __future__ import annotations

from typing import Annotated

import typer

from .agents import agents_command
from .bench import bench_command
from .chat import chat_command
from .demo import demo_command
from .explain import explain_command
from .models import models_command
from .report import report_command
from .resume import resume_command
from .run import run_command
from .trust import trust_command

app = typer.Typer(
    name="forkagent",
    help="Agents whose sub-agents fork the parent's context and share its prompt cache.",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version(show: bool) -> None:
    if show:
        from .. import __version__

        typer.echo(f"forkagent {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Agents whose sub-agents fork the parent's context and share its prompt cache."""


app.command("demo")(demo_command)
app.command("agents")(agents_command)
app.command("run")(run_command)
app.command("resume")(resume_command)
app.command("chat")(chat_command)
app.command("explain")(explain_command)
app.command("report")(report_command)
app.command("models")(models_command)
app.command("trust")(trust_command)
app.command("bench")(bench_command)

from .tasks import register as _register_tasks  # noqa: E402

_register_tasks(app)

from .emulator import app as _emulator_app  # noqa: E402

app.add_typer(_emulator_app, name="emulator")

from .mcp import app as _mcp_app  # noqa: E402

app.add_typer(_mcp_app, name="mcp")


def main() -> None:
    app()
