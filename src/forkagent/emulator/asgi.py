"""The HTTP face of the emulator: a Starlette app over ``Emulator.handle``."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .core import Emulator, wire_for
from .errors import ApiError, EmulatedDisconnect
from .wire import SseEvent

_METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH"]


def build_app(emulator: Emulator) -> Starlette:
    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            error = ApiError("invalid_request", "The request body is not valid JSON.")
            exchange = emulator.error(wire_for(request.url.path, request.headers), error, "req_emu")
        else:
            try:
                exchange = await emulator.handle(request.method, path, body, dict(request.headers))
            except EmulatedDisconnect as drop:
                return StreamingResponse(_abort(drop), status_code=200)
        if exchange.events is not None:
            return StreamingResponse(
                _encode(exchange.events),
                status_code=exchange.status,
                headers=exchange.headers,
                media_type="text/event-stream",
            )
        return JSONResponse(exchange.body, status_code=exchange.status, headers=exchange.headers)

    _quiet_injected_disconnects()
    return Starlette(routes=[Route("/{path:path}", endpoint, methods=_METHODS)])


async def _encode(events: AsyncIterator[SseEvent]) -> AsyncIterator[bytes]:
    async for event in events:
        yield event.encode()


async def _abort(drop: EmulatedDisconnect) -> AsyncIterator[bytes]:
    """Headers go out, then the connection dies: what a dropped connection looks like."""
    yield b""
    raise drop


class _InjectedFaultFilter(logging.Filter):
    """Keeps uvicorn from logging a traceback for every injected disconnect."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _is_injected(record.exc_info[1] if record.exc_info else None)


def _is_injected(error: BaseException | None) -> bool:
    if isinstance(error, EmulatedDisconnect):
        return True
    if isinstance(error, BaseExceptionGroup):
        return all(_is_injected(e) for e in error.exceptions)
    return False


def _quiet_injected_disconnects() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _InjectedFaultFilter) for f in logger.filters):
        logger.addFilter(_InjectedFaultFilter())
