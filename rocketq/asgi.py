"""HTTP for the dashboard and the metrics port: an ASGI application served by uvicorn on the
running event loop, beside whatever else the process serves (a standalone's NameServer and
broker, say). Served on that loop, a request reads the servers' tables between two of their
own requests, so nothing needs a lock.

uvicorn's ``Server.serve`` takes over SIGINT and SIGTERM, which the process's own loop
already answers; this class uses its parts instead (``startup``, ``main_loop``, ``shutdown``)
and is stopped by whoever started it. It binds its socket itself, so that port 0 picks a
free port and a port in use fails at ``start`` with the address named.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import uvicorn

log = logging.getLogger("rocketq.asgi")

#: Seconds a stop waits for requests in flight before it closes their connections.
GRACEFUL_STOP = 3.0


class AsgiServer:
    """Serves an ASGI ``app`` on ``host:port`` (port 0: any free port); ``lifespan``: whether
    the application has startup and shutdown events to run."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 8080, *,
                 lifespan: bool = True) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.lifespan = lifespan
        self._server: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """The server's root URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            exc.filename = f"{self.host}:{self.port}"
            raise
        sock.listen(128)
        sock.setblocking(False)
        return sock

    async def start(self) -> None:
        """Bind, run the application's startup, and serve; OSError names the address when it
        cannot be bound, RuntimeError says when the application failed to start. Either
        way nothing is left listening."""
        sock = self._bind()
        try:
            self.port = sock.getsockname()[1]
            # uvicorn's own logging says only what goes wrong; rocketq says where it serves.
            config = uvicorn.Config(self.app, lifespan="on" if self.lifespan else "off",
                                    log_config=None, access_log=False, log_level="warning",
                                    timeout_graceful_shutdown=GRACEFUL_STOP,
                                    server_header=False, proxy_headers=False)
            server = uvicorn.Server(config)
            config.load()
            server.lifespan = config.lifespan_class(config)
            try:
                await server.startup(sockets=[sock])
            except SystemExit:  # uvicorn's answer to an application whose startup failed
                raise RuntimeError(f"the application served on {self.url} failed to start "
                                   "(the log says why)") from None
        except BaseException:
            sock.close()
            raise
        self._socket, self._server = sock, server
        self._task = asyncio.get_running_loop().create_task(server.main_loop())

    async def stop(self) -> None:
        """Stop taking connections, finish the requests in flight (for a few seconds at
        most), run the application's shutdown. The shutdown runs and the socket is closed
        whatever happened before: a serving loop that failed is logged, not raised."""
        server, self._server = self._server, None
        sock, self._socket = self._socket, None
        task, self._task = self._task, None
        if server is None:
            if sock is not None:
                sock.close()
            return
        server.should_exit = True
        try:
            if task is not None:
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise  # this stop was cancelled, not (only) the serving loop
                except Exception:
                    log.exception("the server on %s failed while serving", self.url)
        finally:
            try:
                await server.shutdown(sockets=[sock] if sock is not None else None)
            finally:
                if sock is not None:
                    sock.close()
