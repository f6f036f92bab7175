"""How commands report problems: on stderr, as plain text (no markup eats ``[extras]``),
or as a JSON object when the command was asked for JSON."""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import typer


def fail(
    message: str, *, as_json: bool = False, kind: str = "error", exit_code: int = 1
) -> NoReturn:
    """Print the error and leave with ``exit_code`` (2: the command line itself was wrong)."""
    if as_json:
        sys.stdout.write(json.dumps({"error": {"type": kind, "message": message}}) + "\n")
    else:
        sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(exit_code)


def warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")
