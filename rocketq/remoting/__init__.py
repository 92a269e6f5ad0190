"""asyncio transport for RocketMQ's remoting protocol: server, client, connections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl as _ssl
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..protocol import MAX_FRAME_SIZE, FrameDecoder, ProtocolError, RemotingCommand, ResponseCode
from ..protocol.command import encode
from .connection import (
    ConnectFailedError,
    Connection,
    ConnectionClosedError,
    ConnectTimeoutError,
    Handler,
    Observer,
    RemotingError,
    RemotingTimeoutError,
    Signer,
)
from .tls import ENFORCING, Listener, TlsSettings, bound_socket, client_context

log = logging.getLogger("rocketq.remoting")

T = TypeVar("T")

__all__ = [
    "ConnectFailedError", "ConnectTimeoutError", "Connection", "ConnectionClosedError",
    "Handler", "Observer", "RemotingClient", "RemotingError",
    "RemotingServer", "RemotingTimeoutError", "Signer", "TlsSettings", "cancel_tasks",
    "client_context", "parse_address", "run",
]

IDLE_TIMEOUT = 120.0


def parse_address(addr: str) -> tuple[str, int]:
    """Split ``"host:port"``; raise ValueError with the address in the message."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {addr!r}")
    return host, int(port)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(main)
    return uvloop.run(main)


async def cancel_tasks(tasks: list[asyncio.Task[Any]], timeout: float = 5.0) -> None:
    """Cancel background tasks and wait until each has ended, cancelling again any that
    carried on (a cancellation can be lost inside a library call), for at most ``timeout``
    seconds in all: stopping must not hang on one task."""
    pending = {t for t in tasks if not t.done()}
    deadline = asyncio.get_running_loop().time() + timeout
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            log.warning("%d task(s) did not end when cancelled: %s", len(pending),
                        ", ".join(t.get_name() for t in pending))
            break
        _, pending = await asyncio.wait(pending, timeout=min(0.5, left))
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.warning("task %s had failed: %r", task.get_name(), task.exception())


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class RemotingServer:
    """Accepts connections and hands every request to ``handler``.

    Connections idle for ``idle_timeout`` seconds are closed, as RocketMQ does after 120 s.
    ``tls`` sets the port's TLS mode (see ``tls.py``; None: plain only).
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0, *,
                 idle_timeout: float = IDLE_TIMEOUT, max_frame: int = MAX_FRAME_SIZE,
                 on_close: Callable[[Connection], None] | None = None,
                 tls: TlsSettings | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.host = host
        self.port = port
        self.idle_timeout = idle_timeout
        self.max_frame = max_frame
        self.on_close = on_close
        self.connections: set[Connection] = set()
        #: Requests of closed connections whose handlers are still running.
        self._orphans: set[asyncio.Task[Any]] = set()
        #: Told of every request answered (see ``Observer``); set with ``set_observer``.
        self.observer: Observer | None = None
        self._server: Listener | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    def bind(self) -> int:
        """Bind the socket now and return the port, so a caller that asked for port 0 learns
        its port before serving. It listens only from :meth:`start` on: until then clients
        are refused at once instead of connecting to a server that cannot answer yet."""
        if self._sock is None:
            self._sock = bound_socket(self.host, self.port)
            self.port = self._sock.getsockname()[1]
        return self.port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.bind()
        assert self._sock is not None
        self._sock.listen(1024)
        self._server = Listener(self._sock, self._make_connection, self.tls, PlainRefused)
        await self._server.start()
        self._idle_task = loop.create_task(self._expire_idle())

    def _make_connection(self) -> Connection:
        conn = Connection(self.handler, max_frame=self.max_frame, on_close=self._closed)
        conn.observer = self.observer
        self.connections.add(conn)
        return conn

    def set_observer(self, observer: Observer | None) -> None:
        """Time every request this server answers from now on (``observer`` is told of
        each), or stop with None; connections already open follow at once."""
        self.observer = observer
        for conn in self.connections:
            conn.observer = observer

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        # Requests still being served for a peer that left: ``stop`` ends them too.
        for task in conn.running_requests():
            self._orphans.add(task)
            task.add_done_callback(self._orphans.discard)
        if self.on_close is not None:
            try:
                self.on_close(conn)
            except Exception:
                log.exception("connection close callback failed")

    async def _expire_idle(self) -> None:
        loop = asyncio.get_running_loop()
        interval = max(0.05, min(10.0, self.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                if now - conn.last_active > self.idle_timeout:
                    log.info("closing connection from %s:%d idle for %.0f s", *conn.peer,
                             now - conn.last_active)
                    conn.close()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        if self._server is not None:
            self._server.close()
        requests = [task for task in self._orphans if not task.done()]
        self._orphans.clear()
        for task in requests:
            task.cancel()
        for conn in list(self.connections):
            conn.close()
            requests += conn.cancel_requests()
        if requests:
            await asyncio.wait(requests, timeout=2)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)


class PlainRefused(asyncio.Protocol):
    """What a plain client of an enforcing TLS port meets: its first request is answered,
    in plain, with an error saying the port wants TLS, and the connection is closed."""

    REMARK = ("this port accepts TLS connections only (tlsMode=enforcing): connect with TLS "
              "(rocketq's clients: tls=True or an ssl.SSLContext)")

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        log.info("refused a plain connection from %s:%d: %s only", peer[0], peer[1], ENFORCING)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        try:
            commands = self.decoder.feed(data)
        except ProtocolError:
            self.transport.close()
            return
        if commands:
            cmd = commands[0]
            if not cmd.is_oneway and not cmd.flag & 1:
                self.transport.write(encode(cmd.response(ResponseCode.SYSTEM_ERROR,
                                                         remark=self.REMARK)))
            self.transport.close()


class RemotingClient:
    """One connection per remote address, opened on first use and reused.

    ``handler`` serves requests the remote side sends (CHECK_TRANSACTION_STATE,
    NOTIFY_CONSUMER_IDS_CHANGED, ...). ``signer`` signs every request sent (ACL
    credentials); ``ssl`` makes every connection a TLS one.
    """

    def __init__(self, handler: Handler | None = None, *, connect_timeout: float = 3.0,
                 on_close: Callable[[str, Connection], None] | None = None,
                 signer: Signer | None = None,
                 ssl: bool | _ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.signer = signer
        self.ssl = client_context(ssl)
        self.connect_timeout = connect_timeout
        self.on_close = on_close
        self.connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}

    async def connection(self, addr: str) -> Connection:
        conn = self.connections.get(addr)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Connection] = loop.create_future()
        self._connecting[addr] = fut
        try:
            host, port = parse_address(addr)

            def closed(c: Connection) -> None:
                if self.connections.get(addr) is c:
                    del self.connections[addr]
                if self.on_close is not None:
                    self.on_close(addr, c)

            try:
                _, conn = await asyncio.wait_for(loop.create_connection(
                    lambda: Connection(self.handler, on_close=closed, signer=self.signer),
                    host, port, ssl=self.ssl), self.connect_timeout)
            except TimeoutError:
                raise ConnectTimeoutError(f"connecting to {addr} timed out") from None
            except _ssl.SSLError as exc:
                raise ConnectFailedError(
                    f"TLS handshake with {addr} failed: {exc.reason or exc} (is TLS enabled "
                    f"on that port, and is its certificate trusted?)") from None
            except OSError as exc:
                if self.ssl is not None and not isinstance(exc, ConnectionRefusedError):
                    # The peer hung up in the handshake: most likely a port without TLS.
                    reason = exc.strerror or str(exc) or "the server closed the connection"
                    raise ConnectFailedError(f"TLS handshake with {addr} failed: {reason} "
                                                f"(is TLS enabled on that port?)") from None
                raise ConnectFailedError(f"cannot connect to {addr}: {exc.strerror or exc}"
                                            ) from None
            sock = conn.transport.get_extra_info("socket") if conn.transport else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.connections[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # mark retrieved
            raise
        finally:
            del self._connecting[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0
                     ) -> RemotingCommand:
        """Send a request to ``addr`` and return the response."""
        conn = self.connections.get(addr)
        if conn is None or not conn.is_open:  # an open connection is used without awaiting
            conn = await self.connection(addr)
        return await conn.request(cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        conn.oneway(cmd)

    def close_connection(self, addr: str) -> None:
        conn = self.connections.pop(addr, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        conns = list(self.connections.values())
        self.connections.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(conn.closed), 1)
