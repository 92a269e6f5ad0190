"""The broker's gRPC port (``grpcServerPort``, 8081 by default; 0 turns it off): grpcio's
asyncio server on the broker's own event loop, serving :class:`MessagingService`."""

from __future__ import annotations

import errno
import logging
from typing import TYPE_CHECKING

import grpc

from .proto import service_pb2_grpc
from .service import MessagingService

if TYPE_CHECKING:
    from ..broker import Broker
    from ..remoting.tls import TlsSettings

log = logging.getLogger("rocketq.grpc")

#: The largest message a client may send or receive: a 4 MiB body and its properties, with
#: room for a batch of them.
MAX_MESSAGE_LENGTH = 64 * 1024 * 1024


class GrpcServer:
    """``await start()`` binds (OSError naming the port when it is taken), ``await stop()``."""

    def __init__(self, broker: Broker, host: str | None = None, port: int | None = None,
                 tls: TlsSettings | None = None) -> None:
        """Serve ``broker`` on ``host:port``; by default where its config says: the
        ``grpcServerPort``, on the interface of its remoting port, with its TLS settings."""
        config = broker.config
        self.broker = broker
        self.host = host if host is not None else (
            "127.0.0.1" if config.brokerIP1 == "127.0.0.1" else "0.0.0.0")
        self.port = port if port is not None else config.grpcServerPort
        self.tls = tls if tls is not None else broker.tls
        self.service = MessagingService(broker)
        self._server: grpc.aio.Server | None = None

    def _credentials(self) -> grpc.ServerCredentials | None:
        tls = self.tls
        if tls is None or not tls.enabled:
            return None
        with open(tls.key_path, "rb") as fh:
            key = fh.read()
        with open(tls.cert_path, "rb") as fh:
            cert = fh.read()
        roots = None
        if tls.need_client_auth != "none":
            with open(tls.trust_cert_path, "rb") as fh:
                roots = fh.read()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=roots,
            require_client_auth=tls.need_client_auth == "require")

    async def start(self) -> int:
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_LENGTH),
                   ("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
                   ("grpc.so_reuseport", 0),
                   ("grpc.keepalive_permit_without_calls", 1),
                   ("grpc.http2.min_ping_interval_without_data_ms", 5000)]
        server = grpc.aio.server(options=options)
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        address = f"{self.host}:{self.port}"
        credentials = self._credentials()
        try:
            if credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, credentials)
        except RuntimeError as exc:
            port = 0
            reason = str(exc)
        else:
            reason = ""
        if not port:
            log.debug("gRPC cannot bind %s: %s", address, reason)
            raise OSError(errno.EADDRINUSE, "address already in use",
                          f"{address} (the gRPC port, grpcServerPort)")
        await server.start()
        self._server = server
        self.port = port
        # Where routes send clients, and what GET_BROKER_CONFIG tells other brokers.
        self.broker.config.grpcServerPort = port
        log.info("gRPC (RocketMQ 5 MessagingService) on %s:%d%s", self.host, port,
                 " with TLS" if credentials is not None else "")
        return port

    async def stop(self, grace: float = 0.5) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            for client in self.service.clients.values():
                if client.outbox is not None:
                    client.outbox.put_nowait(None)  # type: ignore[arg-type]
            await server.stop(grace)


__all__ = ["GrpcServer", "MAX_MESSAGE_LENGTH"]
