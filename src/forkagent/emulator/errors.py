"""Errors the emulated APIs answer with, independent of any provider's shape.

Each wire module renders an ``ApiError`` in its provider's own JSON; the
connection-level failures are exceptions because there is no reply to render.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

ErrorKind: TypeAlias = Literal[
    "invalid_request", "authentication", "not_found", "rate_limit", "server", "overloaded"
]

STATUS: dict[ErrorKind, int] = {
    "invalid_request": 400,
    "authentication": 401,
    "not_found": 404,
    "rate_limit": 429,
    "server": 500,
    "overloaded": 529,
}


class ApiError(Exception):
    """A request the emulated provider refuses (or fails) with an HTTP error."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        retry_after: float | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.param = param
        """The offending field, where OpenAI names one (``messages[1].content``)."""
        self.code = code
        """OpenAI's machine-readable ``code`` (``invalid_value``, ``unknown_parameter``, ...)."""

    @property
    def status(self) -> int:
        return STATUS[self.kind]


def invalid(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError("invalid_request", message, param=param, code=code)


class EmulatedDisconnect(ConnectionError):
    """The emulator dropped the connection or cut a stream (an injected fault).

    Over HTTP the client sees the socket close; in process ``dispatch`` raises
    this, with the stream events sent before the cut in ``events``.
    """

    def __init__(self, message: str, events: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.events = events or []
