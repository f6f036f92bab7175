"""``forkagent trust``: let a repository's own hooks and servers run, or stop them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..permissions.trust import (
    is_trusted,
    project_executables,
    revoke,
    trust,
    trusted_directories,
    untrusted_reason,
)


def trust_command(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="The repository to trust (default: here).")
    ] = Path(),
    revoke_it: Annotated[
        bool, typer.Option("--revoke", help="Forget the decision for DIR instead.")
    ] = False,
    list_them: Annotated[
        bool, typer.Option("--list", help="List the trusted directories.")
    ] = False,
) -> None:
    """Trust DIR: its settings hooks, agent-file hooks and .mcp.json servers may run."""
    if list_them:
        for path, when in trusted_directories():
            typer.echo(f"{path}  (since {when})")
        return
    if revoke_it:
        found = revoke(directory)
        typer.echo(f"{directory.resolve()} is {'no longer' if found else 'not'} trusted")
        return
    if not directory.is_dir():
        typer.echo(f"error: {directory} is not a directory", err=True)
        raise typer.Exit(2)
    path = trust(directory)
    shipped = project_executables(path)
    typer.echo(f"trusted {path}" + (f": its {', '.join(shipped)} may run" if shipped else ""))


def decide_trust(cwd: Path, *, flag: bool, interactive: bool) -> bool | None:
    """For ``run``/``resume``: ``--trust`` trusts for this run; on a terminal, an untrusted
    repository that ships executables is asked about once (a yes is recorded); otherwise
    None leaves the decision to the trust store (untrusted: a warning says what did not run)."""
    if flag:
        return True
    found = project_executables(cwd)
    if not found or is_trusted(cwd) or not interactive:
        return None
    sys.stderr.write(untrusted_reason(cwd, found) + "\n")
    answer = typer.prompt("Trust this directory now? [y/N]", default="n", show_default=False)
    if answer.strip().lower() in ("y", "yes"):
        trust(cwd)
        return True
    return False
