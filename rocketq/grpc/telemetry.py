"""The 5.x clients as the broker knows them (the proxy's ClientActivity): heartbeats, the
telemetry stream each client keeps open (its settings in, the broker's merged settings and
commands out), its termination, and the transaction checks sent down a producer's stream
(RecoverOrphanedTransactionCommand).

``ClientTelemetry`` is a part of ``service.MessagingService``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from ..acl.plain import PUB, SUB
from ..protocol import Property
from ..protocol.message import MessageRecord
from .common import Refused, answers, status
from .convert import duration, to_message
from .proto import definition_pb2 as pb
from .proto import service_pb2 as spb
from .receiving import MAX_POLL_MS

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("rocketq.grpc")


@dataclass
class GrpcClient:
    """A 5.x client as the broker knows it: from its telemetry settings and heartbeats."""

    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    topics: set[str] = field(default_factory=set)
    settings: pb.Settings | None = None
    #: Commands to write on its telemetry stream.
    outbox: asyncio.Queue[pb.TelemetryCommand] | None = None
    last_seen: float = field(default_factory=time.monotonic)
    address: str = ""
    language: str = ""
    version: str = ""


class ClientTelemetry:
    """Heartbeat, Telemetry and NotifyClientTermination, and the transaction checks: a part
    of :class:`service.MessagingService`, whose ``_metadata``, ``_client``, ``_check`` and
    ``_group`` it calls."""

    broker: Broker
    clients: dict[str, GrpcClient]
    transactions: OrderedDict[str, int]

    @answers(spb.HeartbeatResponse, "Heartbeat")
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any
                        ) -> spb.HeartbeatResponse:
        md = self._metadata(context)
        client = self._client(context, md)
        if request.HasField("group") and request.group.name:
            self._check(context, md, [(request.group.name, True, SUB)])
        if request.client_type != pb.CLIENT_TYPE_UNSPECIFIED:
            client.client_type = request.client_type
        if client.client_type == pb.CLIENT_TYPE_UNSPECIFIED:
            raise Refused(pb.UNRECOGNIZED_CLIENT_TYPE,
                          "unknown client type: send the client's settings on the "
                          "telemetry stream first")
        if request.HasField("group") and request.group.name:
            self._group(request.group)
            client.group = request.group.name
        return spb.HeartbeatResponse(status=status())

    async def NotifyClientTermination(self, request: spb.NotifyClientTerminationRequest,
                                      context: Any) -> spb.NotifyClientTerminationResponse:
        md = self._metadata(context)
        client = self.clients.pop(md.get("x-mq-client-id", ""), None)
        self.broker.pop.forget_owner(md.get("x-mq-client-id", ""))
        if client is not None and client.outbox is not None:
            client.outbox.put_nowait(None)  # type: ignore[arg-type]  # ends its stream
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(self, request_iterator: AsyncIterator[pb.TelemetryCommand],
                        context: Any) -> AsyncIterator[pb.TelemetryCommand]:
        md = self._metadata(context)
        try:
            client = self._client(context, md)
        except Refused as exc:
            yield spb.TelemetryCommand(status=exc.status)
            return
        outbox: asyncio.Queue[pb.TelemetryCommand | None] = asyncio.Queue()
        client.outbox = outbox  # type: ignore[assignment]

        async def read() -> None:
            try:
                async for command in request_iterator:
                    reply = self._telemetry(client, md, context, command)
                    if reply is not None:
                        outbox.put_nowait(reply)
            except (asyncio.CancelledError, grpc.RpcError):
                pass
            except Exception:
                log.exception("telemetry stream of client %s", client.client_id)
            finally:
                outbox.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                item = await outbox.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if client.outbox is outbox:
                client.outbox = None
                # Its stream is how the broker knows it lives: its messages are renewed no
                # more (they come back when their invisible time ends).
                self.broker.pop.forget_owner(client.client_id)

    def _telemetry(self, client: GrpcClient, md: dict[str, str], context: Any,
                   command: spb.TelemetryCommand) -> spb.TelemetryCommand | None:
        which = command.WhichOneof("command")
        if which == "settings":
            try:
                return spb.TelemetryCommand(status=status(),
                                            settings=self._settings(client, md, context,
                                                                    command.settings))
            except Refused as exc:
                return spb.TelemetryCommand(status=exc.status)
        return None  # thread stack traces, verify results: nothing to answer

    def _settings(self, client: GrpcClient, md: dict[str, str], context: Any,
                  settings: pb.Settings) -> pb.Settings:
        """The client's settings merged with the broker's (ClientActivity and
        GrpcClientSettingsManager)."""
        reply = pb.Settings()
        reply.CopyFrom(settings)
        kind = settings.WhichOneof("pub_sub")
        if kind == "publishing":
            self._check(context, md, [(t.name, False, PUB) for t in settings.publishing.topics])
            client.client_type = settings.client_type or pb.PRODUCER
            client.topics = {t.name for t in settings.publishing.topics}
            reply.publishing.max_body_size = self.broker.config.maxMessageSize
            reply.publishing.validate_message_type = True
            reply.backoff_policy.CopyFrom(pb.RetryPolicy(
                max_attempts=3, exponential_backoff=pb.ExponentialBackoff(
                    initial=duration(10), max=duration(1000), multiplier=2)))
        elif kind == "subscription":
            sub = settings.subscription
            self._check(context, md, [(sub.group.name, True, SUB)] +
                        [(s.topic.name, False, SUB) for s in sub.subscriptions])
            group_config = self._group(sub.group)
            client.client_type = settings.client_type or pb.SIMPLE_CONSUMER
            client.group = sub.group.name
            client.topics = {s.topic.name for s in sub.subscriptions}
            reply.subscription.fifo = group_config.consume_message_orderly
            reply.subscription.receive_batch_size = 32
            reply.subscription.long_polling_timeout.CopyFrom(duration(MAX_POLL_MS))
            attempts = max(1, group_config.retry_max_times + 1)
            if group_config.consume_message_orderly:
                policy = pb.RetryPolicy(max_attempts=attempts,
                                        customized_backoff=pb.CustomizedBackoff(
                                            next=[duration(1000)]))
            else:
                policy = pb.RetryPolicy(max_attempts=attempts,
                                        exponential_backoff=pb.ExponentialBackoff(
                                            initial=duration(1000), max=duration(60_000),
                                            multiplier=2))
            reply.backoff_policy.CopyFrom(policy)
        else:
            raise Refused(pb.BAD_REQUEST if settings.client_type else
                          pb.UNRECOGNIZED_CLIENT_TYPE,
                          "the settings name neither publishing nor subscription")
        client.settings = reply
        return reply

    def _ask_transaction(self, half: MessageRecord, group: str) -> bool:
        """Ask a 5.x producer of the half's topic to resolve it (RecoverOrphanedTransaction
        on its telemetry stream). True when a producer was asked."""
        topic = half.topic
        for client in list(self.clients.values()):
            if client.outbox is None or client.client_type != pb.PRODUCER:
                continue
            if topic not in client.topics and group not in client.topics:
                continue
            uniq = half.properties.get(Property.UNIQ_KEY) or half.offset_msg_id
            self.transactions[uniq] = half.commitlog_offset
            message = to_message(half, topic)
            client.outbox.put_nowait(spb.TelemetryCommand(
                recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                    message=message, transaction_id=uniq)))
            return True
        return False


__all__ = ["ClientTelemetry", "GrpcClient"]
