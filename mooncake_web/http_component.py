"""An ASGI app served by uvicorn as a :class:`mooncake_core.lifecycle.Component`.

The dashboard and the conductor's front door run through the same serve scaffold as
every other long-running command (``mooncake_cli.serve``): the scaffold owns SIGINT and
SIGTERM, prints the ready line once the port is listening, and calls :meth:`stop`.
uvicorn's own signal capture is switched off, so one signal stops the process once,
through the component's stop.

The socket is bound here, before uvicorn starts: an address in use or not on this host
is a start failure whose message names the address, not a log line and an exit from
inside uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any, Literal

__all__ = ["HttpComponent", "listen_socket"]


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: any free port).

    Raises:
        RuntimeError: the address cannot be bound; the message names it and why.
    """
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise RuntimeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


class HttpComponent:
    """Serve ``app`` on ``host:port`` with uvicorn; start returns once it accepts.

    Args:
        app: the ASGI application.
        host, port: where to listen (port 0: any free port; :attr:`port` tells which).
        graceful_s: how long stop waits for open requests (None: uvicorn's default,
            unbounded; open server-sent-event streams never end by themselves).
        lifespan: uvicorn's lifespan mode ("on", "off", "auto").
        access_log: log every request.
    """

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        graceful_s: int | None = None,
        lifespan: Literal["auto", "on", "off"] = "auto",
        access_log: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self._app = app
        self._graceful_s = graceful_s
        self._lifespan = lifespan
        self._access_log = access_log
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    async def start(self) -> None:
        """Bind, start uvicorn and wait until it serves.

        Raises:
            RuntimeError: the port cannot be bound, or uvicorn stopped while starting.
        """
        import uvicorn

        class _Server(uvicorn.Server):
            # The serve scaffold owns SIGINT/SIGTERM (mooncake_core.lifecycle).
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        self._sock = listen_socket(self.host, self.port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            log_level="warning",
            lifespan=self._lifespan,
            access_log=self._access_log,
            timeout_graceful_shutdown=self._graceful_s,
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                exc = self._task.exception()
                raise RuntimeError(
                    f"http server on {self.host}:{self.port} stopped while starting"
                    + (f": {exc}" if exc else "")
                )
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Stop accepting, finish (or after ``graceful_s`` drop) open requests."""
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
