"""Serve an emulator over HTTP on loopback, in a background thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import TracebackType

from ..errors import ConfigurationError

try:
    import uvicorn

    from .asgi import build_app
except ImportError as missing:  # the server is an extra: the in-process emulator needs none of it
    raise ConfigurationError(
        f"the emulator's HTTP server needs {missing.name}: pip install 'forkagent[server]'"
    ) from missing

from .core import Emulator, default_emulator


class RunningServer:
    """A uvicorn server in a daemon thread; ``stop()`` (or ``with``) ends it."""

    def __init__(self, emulator: Emulator, host: str, port: int, log_level: str) -> None:
        self.emulator = emulator
        self._socket = _bound(host, port)
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        self._server = _server(emulator, log_level)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        """Base URL; SDKs take ``url`` (Anthropic, Gemini) or ``url + "/v1"`` (OpenAI)."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> RunningServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the emulator's HTTP server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


class LoopServer:
    """An emulator served by a task of the running event loop, not a thread.

    For a process that also calls the same emulator in process (a driver whose
    Ray workers reach it over HTTP): every request, local or remote, is then
    handled on one loop, as the in-process emulator expects.
    """

    def __init__(self, emulator: Emulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.emulator = emulator
        self._socket = _bound(host, port)
        self.url = f"http://{host}:{self._socket.getsockname()[1]}"
        self._server = _server(emulator, "warning")
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> LoopServer:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the emulator's HTTP server did not start")
            await asyncio.sleep(0.005)
        return self

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._socket.close()


def _bound(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that name it,
    # and without it every response waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _server(emulator: Emulator, log_level: str) -> uvicorn.Server:
    config = uvicorn.Config(
        build_app(emulator),
        log_level=log_level,
        access_log=False,
        lifespan="off",
        ws="none",  # no websocket route: and no import of whichever websockets is installed
        timeout_graceful_shutdown=1,
    )
    return uvicorn.Server(config)


def serve(
    emulator: Emulator | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_level: str = "warning",
) -> RunningServer:
    """Start serving ``emulator`` (default: the process-wide one); port 0 picks a free port."""
    return RunningServer(emulator or default_emulator(), host, port, log_level).start()
