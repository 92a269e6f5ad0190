"""TLS on the server ports, with RocketMQ's three modes, and the client's TLS context.

``tlsMode`` (or RocketMQ's ``tls.server.mode``) is ``disabled``, ``permissive`` or
``enforcing``. A permissive port serves TLS and plain connections alike, told apart by the
first byte a client sends (0x16 opens a TLS handshake; a remoting frame starts with its
length, whose first byte is 0 for any frame under 16 MiB), as RocketMQ's TlsModeHandler
does. An enforcing port serves TLS only; a plain client gets a plain answer saying so before
the connection is closed, instead of a bare reset.

The certificate, key and client verification come from RocketMQ's keys:
``tls.server.certPath``, ``tls.server.keyPath``, ``tls.server.keyPassword``,
``tls.server.need.client.auth`` (``none``, ``optional``, ``require``) and
``tls.server.trustCertPath`` (the CA that signs client certificates).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("rocketq.remoting")

DISABLED, PERMISSIVE, ENFORCING = "disabled", "permissive", "enforcing"
MODES = (DISABLED, PERMISSIVE, ENFORCING)
#: The first byte of a TLS ClientHello record (content type "handshake").
TLS_HANDSHAKE = 0x16
#: Seconds a new connection may take to send its first byte, and then its handshake.
FIRST_BYTE_TIMEOUT = 30.0


class TlsConfigError(ValueError):
    """TLS settings that cannot be used; the message names the key."""


@dataclass(frozen=True)
class TlsSettings:
    """A server's TLS settings (RocketMQ's ``tls.server.*`` keys)."""

    mode: str = DISABLED
    cert_path: str = ""
    key_path: str = ""
    key_password: str | None = None
    #: ``none``, ``optional`` or ``require``: whether clients must show a certificate.
    need_client_auth: str = "none"
    trust_cert_path: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TlsConfigError(f"tlsMode must be one of {', '.join(MODES)}, not "
                                 f"{self.mode!r}")
        if self.need_client_auth not in ("none", "optional", "require"):
            raise TlsConfigError("tls.server.need.client.auth must be none, optional or "
                                 f"require, not {self.need_client_auth!r}")
        if self.enabled and not (self.cert_path and self.key_path):
            raise TlsConfigError(f"tlsMode={self.mode} needs tls.server.certPath and "
                                 f"tls.server.keyPath")
        if self.need_client_auth != "none" and not self.trust_cert_path:
            raise TlsConfigError("tls.server.need.client.auth needs tls.server.trustCertPath "
                                 "(the CA of client certificates)")

    @property
    def enabled(self) -> bool:
        return self.mode != DISABLED

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> TlsSettings:
        """From ``broker.conf``-style keys; absent keys take the defaults (disabled)."""
        def get(*keys: str, default: str = "") -> str:
            for key in keys:
                if values.get(key) not in (None, ""):
                    return str(values[key]).strip()
            return default
        return cls(mode=get("tlsMode", "tls.server.mode", default=DISABLED).lower(),
                   cert_path=get("tls.server.certPath"), key_path=get("tls.server.keyPath"),
                   key_password=get("tls.server.keyPassword") or None,
                   need_client_auth=get("tls.server.need.client.auth", default="none").lower(),
                   trust_cert_path=get("tls.server.trustCertPath"))

    @functools.cached_property
    def server_context(self) -> ssl.SSLContext:
        """The SSLContext serving this certificate, loaded once and shared by every port of
        these settings; TlsConfigError if it cannot be loaded."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(self.cert_path, self.key_path, self.key_password)
            if self.need_client_auth != "none":
                ctx.load_verify_locations(self.trust_cert_path)
                ctx.verify_mode = (ssl.CERT_REQUIRED if self.need_client_auth == "require"
                                   else ssl.CERT_OPTIONAL)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load the TLS certificate or key "
                                 f"({self.cert_path}, {self.key_path}): {exc}") from None
        return ctx


def client_context(tls: bool | ssl.SSLContext | None) -> ssl.SSLContext | None:
    """A client's context: None or False for plain connections, True for one that verifies
    the server against the system's CAs, or the caller's own SSLContext (a private CA, a
    client certificate)."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return ssl.create_default_context()
    if isinstance(tls, ssl.SSLContext):
        return tls
    raise TypeError("tls must be True, False or an ssl.SSLContext")


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one), not yet listening."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno is None:
            raise
        # The address as the error's filename, so whoever reports it can say which port.
        raise OSError(exc.errno, exc.strerror, f"{host}:{port}") from None
    return sock


class Listener:
    """A listening socket that serves connections through ``factory``, in a TLS mode.

    ``refuse_plain`` makes the protocol that answers a plain client of an enforcing port
    (None: such clients are simply closed)."""

    def __init__(self, sock: socket.socket, factory: Callable[[], asyncio.Protocol],
                 settings: TlsSettings | None,
                 refuse_plain: Callable[[], asyncio.Protocol] | None = None) -> None:
        self.sock = sock
        self.factory = factory
        self.settings = settings if settings is not None and settings.enabled else None
        self.refuse_plain = refuse_plain
        self.port: int = sock.getsockname()[1]
        self._server: asyncio.AbstractServer | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._sniffing: set[asyncio.Task[None]] = set()
        self._ctx = self.settings.server_context if self.settings is not None else None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.settings is None:
            self._server = await loop.create_server(self.factory, sock=self.sock, backlog=1024)
            return
        self.sock.listen(1024)
        self.sock.setblocking(False)
        self._accepting = loop.create_task(self._accept())

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(self.sock)
            except OSError as exc:
                if self.sock.fileno() < 0:
                    return
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._serve(sock))
            self._sniffing.add(task)
            task.add_done_callback(self._sniffing.discard)

    async def _serve(self, sock: socket.socket) -> None:
        """Look at the first byte without taking it, then serve TLS or plain."""
        loop = asyncio.get_running_loop()
        assert self.settings is not None
        try:
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            first = await asyncio.wait_for(_peek(loop, sock), FIRST_BYTE_TIMEOUT)
            if first is None:
                sock.close()
                return
            if first == TLS_HANDSHAKE:
                await loop.connect_accepted_socket(self.factory, sock, ssl=self._ctx,
                                                   ssl_handshake_timeout=FIRST_BYTE_TIMEOUT)
            elif self.settings.mode == PERMISSIVE:
                await loop.connect_accepted_socket(self.factory, sock)
            elif self.refuse_plain is not None:
                await loop.connect_accepted_socket(self.refuse_plain, sock)
            else:
                sock.close()
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            log.info("connection dropped before it was served: %s", exc or type(exc).__name__)
            sock.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._accepting is not None:
            self._accepting.cancel()
            self.sock.close()
        for task in list(self._sniffing):
            task.cancel()

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()
        if self._accepting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> int | None:
    """The first byte the peer sent, left in the socket; None if it closed first."""
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _set_once, readable)
            try:
                await readable
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data[0] if data else None


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def outgoing_context(values: Mapping[str, Any], server_mode: str = DISABLED
                     ) -> ssl.SSLContext | None:
    """The context a server uses for its own connections (a broker to its NameServers, a
    slave to its master), from RocketMQ's client keys: TLS when ``tls.enable`` is true or the
    server itself enforces TLS; the server is verified against ``tls.client.trustCertPath``
    when given (unverified otherwise, RocketMQ's ``tls.client.authServer=false`` default);
    ``tls.client.certPath``/``keyPath`` is shown to servers that ask for a certificate."""
    enable = str(values.get("tls.enable", "")).strip().lower() == "true"
    if not enable and server_mode != ENFORCING:
        return None
    trust = str(values.get("tls.client.trustCertPath") or "")
    try:
        ctx = ssl.create_default_context(cafile=trust or None)
        if not trust:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        cert = str(values.get("tls.client.certPath") or "")
        if cert:
            ctx.load_cert_chain(cert, str(values.get("tls.client.keyPath") or "") or None,
                                values.get("tls.client.keyPassword") or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the client TLS settings: {exc}") from None
    return ctx
