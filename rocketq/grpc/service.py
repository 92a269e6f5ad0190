"""``apache.rocketmq.v2.MessagingService``: RocketMQ 5's gRPC protocol, served by a broker
for the official 5.x clients (the Java proxy's "local mode": every route points at the gRPC
port of each broker itself).

Every answer carries a ``Status``; errors go there with ``definition.proto``'s codes and a
message saying what to fix, as the Java proxy answers, and a bad request never ends a stream
or the server. Sends go through the broker's own send checks and transforms (delays, timers,
transactional halves), receives and acks through its POP service, offsets through its
consumer offset table: a group's progress is one thing over gRPC and remoting.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
import orjson

from ..acl.check import AccessDenied
from ..acl.plain import PUB, SUB
from ..broker.pop import MAX_INVISIBLE_MS, PopError
from ..broker.send import SendRefused
from ..protocol import (
    TRANS_HALF_TOPIC,
    Perm,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_properties,
)
from ..protocol.filter import EXPRESSION_SQL92, EXPRESSION_TAG, Subscription
from ..protocol.message import MessageRecord, host_to_bytes, java_hash
from ..protocol.sql92 import SqlError
from ..protocol.topic import validate_topic
from .convert import (
    ACCEPTED_TYPES,
    TYPE_NAMES,
    ConversionError,
    duration,
    message_type_of,
    timestamp,
    to_message,
    to_properties,
)
from .proto import definition_pb2 as pb
from .proto import service_pb2 as spb
from .proto import service_pb2_grpc

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("rocketq.grpc")

#: The invisible time a receive may ask for (the proxy's minInvisibleTimeMillsForRecv).
MIN_RECEIVE_INVISIBLE_MS = 10_000
#: The invisible time of messages received with ``auto_renew`` (push consumers).
AUTO_RENEW_INVISIBLE_MS = 60_000
#: Long polling bounds of a receive (the proxy's grpcClientConsumer*LongPollingTimeoutMillis).
MIN_POLL_MS, MAX_POLL_MS = 5_000, 20_000
#: Remoting response code -> v2 code (the proxy's ResponseBuilder).
REMOTING_CODES = {
    ResponseCode.SUCCESS: pb.OK, ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND, ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST, ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
}
POP_CODES = {"handle": pb.INVALID_RECEIPT_HANDLE, "expired": pb.INVALID_RECEIPT_HANDLE,
             "argument": pb.BAD_REQUEST, "topic": pb.TOPIC_NOT_FOUND,
             "group": pb.CONSUMER_GROUP_NOT_FOUND, "permission": pb.FORBIDDEN}
#: Transactions sent and not yet ended: transaction id -> (CommitLog offset, when).
MAX_OPEN_TRANSACTIONS = 100_000


def answers(response: Any, name: str) -> Any:
    """A unary handler that answers every failure in its response's Status: a refusal with
    its code, a POP error with its code, anything else as the proxy answers a fault."""
    def wrap(handler: Any) -> Any:
        @functools.wraps(handler)
        async def serve(self: Any, request: Any, context: Any) -> Any:
            try:
                return await handler(self, request, context)
            except Refused as exc:
                return response(status=exc.status)
            except PopError as exc:
                return response(status=status(POP_CODES.get(exc.kind, pb.BAD_REQUEST),
                                              str(exc)))
            except Exception as exc:
                return response(status=_fault(name, exc))
        return serve
    return wrap


def status(code: int = pb.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


class Refused(Exception):
    """A request answered with ``code`` and ``message`` in its Status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def status(self) -> pb.Status:
        return status(self.code, str(self))


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


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The 5.x protocol over one broker's parts."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.clients: dict[str, GrpcClient] = {}
        self._round_robin = itertools.count()
        #: Transaction id -> CommitLog offset of the half message (the proxy's
        #: TransactionData), oldest first.
        self.transactions: OrderedDict[str, int] = OrderedDict()
        #: brokerAddr -> (gRPC address, when learnt): other brokers' gRPC ports.
        self._grpc_addrs: dict[str, tuple[str, float]] = {}
        broker.transactions.askers.append(self._ask_transaction)

    # ------------------------------------------------------------------ helpers
    @property
    def config(self):  # noqa: ANN201 - the broker's BrokerConfig
        return self.broker.config

    def _metadata(self, context: grpc.aio.ServicerContext) -> dict[str, str]:
        return dict(context.invocation_metadata() or ())

    def _client(self, context: grpc.aio.ServicerContext, md: dict[str, str] | None = None
                ) -> GrpcClient:
        md = md if md is not None else self._metadata(context)
        client_id = md.get("x-mq-client-id", "")
        if not client_id:
            raise Refused(pb.CLIENT_ID_REQUIRED, "the request carries no x-mq-client-id "
                                                 "header: a client id is required")
        client = self.clients.get(client_id)
        if client is None:
            if len(self.clients) >= 1024:
                self._forget_silent()
            client = self.clients[client_id] = GrpcClient(
                client_id, address=_peer_host(context), language=md.get("x-mq-language", ""),
                version=md.get("x-mq-client-version", ""))
        client.last_seen = time.monotonic()
        return client

    def _enter(self, context: Any, perms: list[tuple[str, bool, int]]) -> dict[str, str]:
        """What every call does first: know its client (CLIENT_ID_REQUIRED without one) and
        check it against the ACL for ``perms``. Returns its metadata."""
        md = self._metadata(context)
        self._client(context, md)
        self._check(context, md, perms)
        return md

    def _forget_silent(self) -> None:
        """Forget clients without a telemetry stream that made no call for 2 minutes (the
        broker's channelExpiredTimeout for 4.x clients)."""
        horizon = time.monotonic() - 120
        for client_id in [c.client_id for c in self.clients.values()
                          if c.outbox is None and c.last_seen < horizon]:
            del self.clients[client_id]

    def _check(self, context: grpc.aio.ServicerContext, md: dict[str, str],
               perms: list[tuple[str, bool, int]]) -> None:
        """The ACL, when on: the ``authorization`` header's account must be known, its
        signature right, and its permissions cover ``perms``."""
        acl = self.broker.acl
        if acl is None:
            return
        auth = md.get("authorization", "")
        access_key, signed = _parse_authorization(auth)
        date = md.get("x-mq-date-time", "")

        def verify_with(secret: str) -> bool:
            expected = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
            return hmac.compare_digest(expected.upper(), (signed or "").upper())
        try:
            acl.check_access(_peer_host(context), access_key, signed, verify_with, False,
                             "this call", lambda: perms)
        except AccessDenied as exc:
            raise Refused(pb.UNAUTHORIZED if "Signature" in str(exc) or "AccessKey" in str(exc)
                          or "signature" in str(exc) else pb.FORBIDDEN,
                          f"access denied: {exc}") from None

    def _topic(self, resource: pb.Resource) -> Any:
        name = resource.name
        config = self.broker.topics.get(name)
        if config is not None and not name.startswith(("rmq_sys_", "RMQ_SYS_")):
            return config  # a known topic's name is valid
        try:
            validate_topic(name)
        except Exception as exc:
            raise Refused(pb.ILLEGAL_TOPIC, f"topic {name[:80]!r} is illegal: {exc}") from None
        if name.startswith("rmq_sys_") or name.startswith("RMQ_SYS_"):
            raise Refused(pb.ILLEGAL_TOPIC, f"topic {name} is a system topic: clients cannot "
                                            "use it")
        config = self.broker.topics.get(name)
        if config is None:
            raise Refused(pb.TOPIC_NOT_FOUND,
                          f"topic {name} does not exist: create it first (rocketq admin "
                          "topic create, or mqadmin updateTopic)")
        return config

    def _group(self, resource: pb.Resource) -> Any:
        name = resource.name
        config = self.broker.subscription_groups.get(name)
        if config is not None:
            return config  # a known group's name is valid
        if not name or not name.strip():
            raise Refused(pb.ILLEGAL_CONSUMER_GROUP, "the consumer group is empty")
        try:
            validate_topic(name)  # the same characters as topic names
        except Exception as exc:
            raise Refused(pb.ILLEGAL_CONSUMER_GROUP,
                          f"consumer group {name[:80]!r} is illegal: {exc}") from None
        if len(name) > 120:
            raise Refused(pb.ILLEGAL_CONSUMER_GROUP,
                          f"consumer group {name[:40]}... is {len(name)} characters long; the "
                          "limit is 120")
        config = self.broker.subscription_groups.find_or_create(name)
        if config is None:
            raise Refused(pb.CONSUMER_GROUP_NOT_FOUND,
                          f"consumer group {name} does not exist, and this broker creates "
                          "none (autoCreateSubscriptionGroup=false)")
        return config

    def _endpoints(self, address: str) -> pb.Endpoints:
        host, _, port = address.rpartition(":")
        return pb.Endpoints(scheme=pb.IPv4 if _is_ipv4(host) else pb.DOMAIN_NAME,
                            addresses=[pb.Address(host=host, port=int(port))])

    @property
    def address(self) -> str:
        return f"{self.config.brokerIP1}:{self.config.grpcServerPort}"

    def accepted_types(self, topic_config: Any) -> tuple[int, ...]:
        kind = (topic_config.attributes.get("message.type") or "NORMAL").upper()
        return ACCEPTED_TYPES.get(kind, (pb.NORMAL,))

    # ------------------------------------------------------------------ routes
    @answers(spb.QueryRouteResponse, "QueryRoute")
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any
                         ) -> spb.QueryRouteResponse:
        self._enter(context, [(request.topic.name, False, SUB)])
        topic_config = self._topic(request.topic)
        queues = []
        for name, broker_id, address, read, write, perm in await self._route(
                request.topic.name, topic_config):
            queues.extend(self._queues(request.topic, name, broker_id, address, read,
                                       write, perm, self.accepted_types(topic_config)))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    def _queues(self, topic: pb.Resource, broker_name: str, broker_id: int, address: str,
                read: int, write: int, perm: int, types: tuple[int, ...]
                ) -> list[pb.MessageQueue]:
        """One entry per queue, as the proxy's RouteActivity: the queues both readable and
        writable, then the read-only and write-only ones, with ids counted on."""
        broker = pb.Broker(name=broker_name, id=broker_id, endpoints=self._endpoints(address))
        both = min(read, write)
        kinds = ([pb.READ_WRITE] * both + [pb.READ] * (read - both) +
                 [pb.WRITE] * (write - both))
        out = []
        for queue_id, kind in enumerate(kinds):
            if not perm & Perm.READ and kind != pb.WRITE:
                kind = pb.WRITE if kind == pb.READ_WRITE else pb.NONE
            if not perm & Perm.WRITE and kind != pb.READ:
                kind = pb.READ if kind == pb.READ_WRITE else pb.NONE
            out.append(pb.MessageQueue(topic=topic, id=queue_id, permission=kind,
                                       broker=broker, accept_message_types=list(types)))
        return out

    async def _route(self, topic: str, topic_config: Any
                     ) -> list[tuple[str, int, str, int, int, int]]:
        """``(broker name, id, gRPC address, read queues, write queues, perm)`` of each
        master of the topic: from the NameServers, with each broker's gRPC port asked of
        it; this broker's own queues when the NameServers cannot say."""
        own = [(self.config.brokerName, 0, self.address, topic_config.read_queue_nums,
                topic_config.write_queue_nums, topic_config.perm)]
        client = self.broker.namesrv_client
        data = None
        for namesrv in self.config.namesrv_addrs:
            try:
                conn = await client.connection(namesrv)
                response = await conn.request(RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3)
            except Exception:
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                try:
                    data = orjson.loads(response.body)
                except orjson.JSONDecodeError:
                    continue
                break
        if not data:
            return own
        masters = {b.get("brokerName"): (b.get("brokerAddrs") or {}).get("0")
                   for b in data.get("brokerDatas") or ()}
        out = []
        for queue_data in data.get("queueDatas") or ():
            name = queue_data.get("brokerName")
            addr = masters.get(name)
            if not addr:
                continue  # no master now (a failover under way): not routed
            if addr == self.broker.address:
                grpc_addr = self.address
            else:
                grpc_addr = await self._grpc_address(addr)
                if grpc_addr is None:
                    continue
            out.append((name, 0, grpc_addr, int(queue_data.get("readQueueNums", 0)),
                        int(queue_data.get("writeQueueNums", 0)),
                        int(queue_data.get("perm", 6))))
        return out or own

    async def _grpc_address(self, broker_addr: str) -> str | None:
        """Another broker's gRPC address, from its config (GET_BROKER_CONFIG), cached."""
        cached = self._grpc_addrs.get(broker_addr)
        if cached is not None and time.monotonic() - cached[1] < 30:
            return cached[0] or None
        address = ""
        try:
            conn = await self.broker.namesrv_client.connection(broker_addr)
            response = await conn.request(RemotingCommand.request(
                RequestCode.GET_BROKER_CONFIG, {}), 3)
            if response.code == ResponseCode.SUCCESS:
                table = dict(line.split("=", 1) for line in response.body.decode().splitlines()
                             if "=" in line)
                port = int(table.get("grpcServerPort", "0") or 0)
                if port > 0:
                    host = table.get("brokerIP1") or broker_addr.rpartition(":")[0]
                    address = f"{host}:{port}"
        except Exception as exc:
            log.debug("cannot read the gRPC port of broker %s: %s", broker_addr, exc)
            return cached[0] if cached else None
        self._grpc_addrs[broker_addr] = (address, time.monotonic())
        return address or None

    @answers(spb.QueryAssignmentResponse, "QueryAssignment")
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context: Any
                              ) -> spb.QueryAssignmentResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        topic_config = self._topic(request.topic)
        group_config = self._group(request.group)
        fifo = group_config.consume_message_orderly
        assignments = []
        for name, broker_id, address, read, _write, perm in await self._route(
                request.topic.name, topic_config):
            if not perm & Perm.READ or read <= 0:
                continue
            broker = pb.Broker(name=name, id=broker_id,
                               endpoints=self._endpoints(address))
            # The whole broker: its queues are popped with queue id -1 (one queue each
            # for a FIFO group, which then gets a queue's messages in order).
            ids = range(read) if fifo else [-1]
            for queue_id in ids:
                assignments.append(pb.Assignment(message_queue=pb.MessageQueue(
                    topic=request.topic, id=queue_id, permission=pb.READ_WRITE,
                    broker=broker, accept_message_types=list(
                        self.accepted_types(topic_config)))))
        return spb.QueryAssignmentResponse(status=status(), assignments=assignments)

    # ------------------------------------------------------------------ clients
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

    # ------------------------------------------------------------------ sending
    @answers(spb.SendMessageResponse, "SendMessage")
    async def SendMessage(self, request: spb.SendMessageRequest, context: Any
                          ) -> spb.SendMessageResponse:
        md = self._metadata(context)
        self._client(context, md)
        if not request.messages:
            raise Refused(pb.MESSAGE_CORRUPTED, "no message to send")
        first = request.messages[0].topic
        if any(m.topic.name != first.name or
               m.topic.resource_namespace != first.resource_namespace
               for m in request.messages):
            raise Refused(pb.MESSAGE_CORRUPTED, "topic in message is not same")
        self._check(context, md, [(first.name, False, PUB)])
        topic_config = self._topic(first)
        entries = [await self._send_one(m, topic_config, context)
                   for m in request.messages]
        codes = {e.status.code for e in entries}
        overall = (entries[0].status if len(codes) == 1
                   else status(pb.MULTIPLE_RESULTS, "the messages had different results"))
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, message: pb.Message, topic_config: Any, context: Any
                        ) -> spb.SendResultEntry:
        message_id = message.system_properties.message_id
        now = int(time.time() * 1000)
        try:
            props, body, sysflag, born = to_properties(message, now,
                                                       self.broker.config.maxMessageSize)
        except ConversionError as exc:
            return spb.SendResultEntry(status=status(exc.code, str(exc)), message_id=message_id)
        topic = topic_config.topic_name
        actual = message_type_of(props)
        accepted = self.accepted_types(topic_config)
        if actual not in accepted:
            expected = (topic_config.attributes.get("message.type") or "NORMAL").upper()
            return spb.SendResultEntry(status=status(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"TopicMessageType validate failed, the expected type is {expected}, but "
                f"actual type is {TYPE_NAMES.get(actual, actual)} (topic {topic}'s attribute "
                "message.type says which types it takes)"), message_id=message_id)
        if actual == pb.TRANSACTION:
            props[Property.PRODUCER_GROUP] = topic  # the proxy's producer group: the topic
        queue_nums = topic_config.write_queue_nums
        group = props.get(Property.SHARDING_KEY)
        if group is not None:
            queue_id = _consistent_hash(java_hash(group), queue_nums)
        else:
            queue_id = next(self._round_robin) % queue_nums
        peer = _peer_host(context)
        try:
            born_host = host_to_bytes(peer)
        except ValueError:
            born_host = b"\x7f\x00\x00\x01"
        try:
            stored, result = await self.broker.send.put_one(
                topic, body, queue_id, encode_properties(props), born_timestamp=born,
                born_host=born_host, born_port=0, sysflag=sysflag)
        except SendRefused as exc:
            code = REMOTING_CODES.get(exc.code, pb.INTERNAL_SERVER_ERROR)
            return spb.SendResultEntry(status=status(code, str(exc)), message_id=message_id)
        except Exception as exc:
            log.exception("gRPC send to %s failed", topic)
            return spb.SendResultEntry(status=status(pb.INTERNAL_SERVER_ERROR,
                                                     f"{type(exc).__name__}: {exc}"),
                                       message_id=message_id)
        code = _PUT_STATUS.get(getattr(result.status, "name", ""), pb.OK)
        if actual == pb.TRANSACTION:
            self.transactions[message_id] = result.commitlog_offset
            while len(self.transactions) > MAX_OPEN_TRANSACTIONS:
                self.transactions.popitem(last=False)
        return spb.SendResultEntry(status=status(code, "OK" if code == pb.OK else
                                                 result.status.name),
                                   message_id=message_id, transaction_id=message_id,
                                   offset=result.queue_offset)

    @answers(spb.EndTransactionResponse, "EndTransaction")
    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Any
                             ) -> spb.EndTransactionResponse:
        self._enter(context, [(request.topic.name, False, PUB)])
        self._topic(request.topic)
        if not request.transaction_id.strip():
            raise Refused(pb.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
            # UNKNOWN: nothing to do; the broker checks back later.
            return spb.EndTransactionResponse(status=status())
        offset = self.transactions.get(request.transaction_id)
        if offset is None:
            offset = self._half_offset(request.transaction_id)
        if offset is None:
            raise Refused(pb.INVALID_TRANSACTION_ID,
                          f"no open transaction {request.transaction_id} on topic "
                          f"{request.topic.name} (ended already, or never sent here)")
        error = await self.broker.transactions.resolve(
            offset, request.resolution == pb.COMMIT, request.topic.name)
        if error is not None:
            raise Refused(pb.INVALID_TRANSACTION_ID, error)
        self.transactions.pop(request.transaction_id, None)
        return spb.EndTransactionResponse(status=status())

    def _half_offset(self, transaction_id: str) -> int | None:
        """The CommitLog offset of a half message from its id (the index keeps UNIQ_KEY),
        for a transaction sent before a restart."""
        record = self.broker.store.query_message_by_unique_key(TRANS_HALF_TOPIC,
                                                               transaction_id)
        return record.commitlog_offset if record is not None else None

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

    # ------------------------------------------------------------------ receiving
    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context: Any
                             ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            md = self._metadata(context)
            client = self._client(context, md)
            topic_resource = request.message_queue.topic
            self._check(context, md, [(topic_resource.name, False, SUB),
                                      (request.group.name, True, SUB)])
            self._topic(topic_resource)
            self._group(request.group)
            if request.auto_renew:
                invisible = AUTO_RENEW_INVISIBLE_MS
            else:
                invisible = (request.invisible_duration.ToMilliseconds()
                             if request.HasField("invisible_duration") else 0)
                if not MIN_RECEIVE_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                    raise Refused(pb.ILLEGAL_INVISIBLE_TIME,
                                  f"the invisible duration is {invisible} ms; it must be "
                                  f"within {MIN_RECEIVE_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms")
            remaining = context.time_remaining()
            remaining_ms = int(remaining * 1000) if remaining is not None else MAX_POLL_MS + 3000
            if request.HasField("long_polling_timeout"):
                poll = request.long_polling_timeout.ToMilliseconds()
            else:
                poll = remaining_ms - 1500
            poll = min(max(poll, MIN_POLL_MS), MAX_POLL_MS)
            if poll > remaining_ms:
                if remaining_ms < MIN_POLL_MS:
                    raise Refused(pb.ILLEGAL_POLLING_TIME,
                                  f"the call's deadline leaves {remaining_ms} ms, less than "
                                  f"the shortest long poll ({MIN_POLL_MS} ms)")
                poll = remaining_ms
            poll = max(0, poll - 200)  # answered before the caller's deadline
            sub = _subscription(topic_resource.name, request.filter_expression)
            batch = request.batch_size if request.batch_size > 0 else 32
            # Every queue of the topic on this broker, as the proxy pops (the client's queue
            # only says which broker): a FIFO group's queues out are skipped there.
            # A push consumer's messages stay invisible while it lives (the proxy renews
            # them): the pop renews them for this client until they are acked.
            result = await self.broker.pop.pop(
                request.group.name, topic_resource.name, -1, min(batch, 32), invisible,
                poll, sub, min_invisible_ms=1_000,
                owner=client.client_id if request.auto_renew else "")
        except Refused as exc:
            yield spb.ReceiveMessageResponse(status=exc.status)
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))
            return
        except PopError as exc:
            yield spb.ReceiveMessageResponse(status=status(POP_CODES.get(
                exc.kind, pb.BAD_REQUEST), str(exc)))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))
            return
        except SqlError as exc:
            yield spb.ReceiveMessageResponse(status=status(pb.ILLEGAL_FILTER_EXPRESSION,
                                                           f"the SQL filter is bad: {exc}"))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))
            return
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=_fault("ReceiveMessage", exc))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))
            return
        if not result.messages:
            yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND,
                                                           "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=status())
            namespace = topic_resource.resource_namespace
            for popped in result.messages:
                yield spb.ReceiveMessageResponse(message=to_message(
                    popped.record, popped.topic, namespace, receipt_handle=popped.handle,
                    delivery_attempt=popped.attempt, invisible_ms=popped.invisible_ms))
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(_now_ms()))

    @answers(spb.AckMessageResponse, "AckMessage")
    async def AckMessage(self, request: spb.AckMessageRequest, context: Any
                         ) -> spb.AckMessageResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        self._topic(request.topic)
        self._group(request.group)
        if not request.entries:
            raise Refused(pb.BAD_REQUEST, "no entry to ack")
        errors = await self.broker.pop.ack_many(
            request.group.name, request.topic.name,
            [e.receipt_handle for e in request.entries])
        entries = []
        for entry, error in zip(request.entries, errors, strict=True):
            entry_status = (status() if error is None else
                            status(POP_CODES.get(error.kind, pb.BAD_REQUEST), str(error)))
            entries.append(spb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                status=entry_status))
        codes = {e.status.code for e in entries}
        overall = (entries[0].status if len(codes) == 1
                   else status(pb.MULTIPLE_RESULTS, "the entries had different results"))
        return spb.AckMessageResponse(status=overall, entries=entries)

    @answers(spb.ChangeInvisibleDurationResponse, "ChangeInvisibleDuration")
    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Any) -> spb.ChangeInvisibleDurationResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        self._topic(request.topic)
        self._group(request.group)
        ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= ms <= MAX_INVISIBLE_MS:
            raise Refused(pb.ILLEGAL_INVISIBLE_TIME,
                          f"the invisible duration is {ms} ms; it must be within "
                          f"0..{MAX_INVISIBLE_MS} ms")
        handle = await self.broker.pop.change_invisible(
            request.group.name, request.topic.name, request.receipt_handle, ms)
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    @answers(spb.ForwardMessageToDeadLetterQueueResponse, "ForwardMessageToDeadLetterQueue")
    async def ForwardMessageToDeadLetterQueue(
            self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        self._topic(request.topic)
        self._group(request.group)
        await self.broker.pop.dead_letter(request.group.name, request.topic.name,
                                          request.receipt_handle, request.delivery_attempt)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())

    # ------------------------------------------------------------------ offsets
    def _queue(self, queue: pb.MessageQueue) -> tuple[str, int]:
        config = self._topic(queue.topic)
        if not 0 <= queue.id < config.read_queue_nums:
            raise Refused(pb.BAD_REQUEST, f"queue {queue.id} of topic {queue.topic.name} does "
                                          f"not exist (it has {config.read_queue_nums})")
        return queue.topic.name, queue.id

    @answers(spb.UpdateOffsetResponse, "UpdateOffset")
    async def UpdateOffset(self, request: spb.UpdateOffsetRequest, context: Any
                           ) -> spb.UpdateOffsetResponse:
        self._enter(context, [(request.message_queue.topic.name, False, SUB),
                             (request.group.name, True, SUB)])
        topic, queue_id = self._queue(request.message_queue)
        self._group(request.group)
        if request.offset < 0:
            raise Refused(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        self.broker.offsets.commit(request.group.name, topic, queue_id, request.offset)
        return spb.UpdateOffsetResponse(status=status())

    @answers(spb.GetOffsetResponse, "GetOffset")
    async def GetOffset(self, request: spb.GetOffsetRequest, context: Any
                        ) -> spb.GetOffsetResponse:
        self._enter(context, [(request.message_queue.topic.name, False, SUB),
                             (request.group.name, True, SUB)])
        topic, queue_id = self._queue(request.message_queue)
        self._group(request.group)
        offset = self.broker.offsets.query(request.group.name, topic, queue_id)
        if offset is None:
            raise Refused(pb.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset "
                                               f"on {topic}:{queue_id}")
        return spb.GetOffsetResponse(status=status(), offset=offset)

    @answers(spb.QueryOffsetResponse, "QueryOffset")
    async def QueryOffset(self, request: spb.QueryOffsetRequest, context: Any
                          ) -> spb.QueryOffsetResponse:
        self._enter(context, [(request.message_queue.topic.name, False, SUB)])
        topic, queue_id = self._queue(request.message_queue)
        store = self.broker.store
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = store.get_min_offset(topic, queue_id)
        elif policy == pb.END:
            offset = store.get_max_offset(topic, queue_id)
        else:
            if not request.HasField("timestamp"):
                raise Refused(pb.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a "
                                              "timestamp")
            offset = store.get_offset_by_time(topic, queue_id,
                                              request.timestamp.ToMilliseconds())
        return spb.QueryOffsetResponse(status=status(), offset=offset)

    async def PullMessage(self, request: spb.PullMessageRequest, context: Any
                          ) -> AsyncIterator[spb.PullMessageResponse]:
        try:
            self._enter(context, [(request.message_queue.topic.name, False, SUB),
                                 (request.group.name, True, SUB)])
            topic, queue_id = self._queue(request.message_queue)
            self._group(request.group)
            sub = _subscription(topic, request.filter_expression)
            if request.offset < 0:
                raise Refused(pb.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        except Refused as exc:
            yield spb.PullMessageResponse(status=exc.status)
            return
        except SqlError as exc:
            yield spb.PullMessageResponse(status=status(pb.ILLEGAL_FILTER_EXPRESSION,
                                                        f"the SQL filter is bad: {exc}"))
            return
        store = self.broker.store
        batch = min(max(request.batch_size, 1), 32)
        deadline = time.monotonic() + min(
            request.long_polling_timeout.ToMilliseconds() / 1000 if
            request.HasField("long_polling_timeout") else 0, MAX_POLL_MS / 1000)
        offset = request.offset
        try:
            while True:
                result = store.get_messages(topic, queue_id, offset, batch, sub.codes)
                try:
                    records = [r for r in result.decode() if sub.matches_tags(r.tags)]
                    next_offset = result.next_begin_offset
                finally:
                    result.release()
                if records or time.monotonic() >= deadline or next_offset != offset:
                    break
                await asyncio.sleep(0.1)
        except Exception as exc:
            yield spb.PullMessageResponse(status=_fault("PullMessage", exc))
            return
        if records:
            yield spb.PullMessageResponse(status=status())
            for record in records:
                yield spb.PullMessageResponse(message=to_message(record, topic))
        else:
            yield spb.PullMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
        yield spb.PullMessageResponse(next_offset=max(next_offset, offset))

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return spb.RecallMessageResponse(status=status(
            pb.NOT_IMPLEMENTED, "RecallMessage is not served by rocketq"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return spb.SyncLiteSubscriptionResponse(status=status(
            pb.NOT_IMPLEMENTED, "lite topics are not served by rocketq"))


_PUT_STATUS = {"FLUSH_DISK_TIMEOUT": pb.MASTER_PERSISTENCE_TIMEOUT,
               "FLUSH_SLAVE_TIMEOUT": pb.SLAVE_PERSISTENCE_TIMEOUT,
               "SLAVE_NOT_AVAILABLE": pb.HA_NOT_AVAILABLE}


def _fault(what: str, exc: Exception) -> pb.Status:
    """A failure that is not the request's fault (a full disk, a broker that stops)."""
    from ..broker.send import store_refusal

    try:
        refused = store_refusal(exc)
    except Exception:
        log.exception("gRPC %s failed", what)
        return status(pb.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
    return status(REMOTING_CODES.get(refused.code, pb.INTERNAL_SERVER_ERROR), str(refused))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _subscription(topic: str, expression: pb.FilterExpression) -> Subscription:
    if expression.type == pb.SQL:
        from ..protocol.sql92 import compile_selector
        compile_selector(expression.expression)  # SqlError: answered by the caller
        return Subscription.parse(topic, expression.expression, EXPRESSION_SQL92)
    return Subscription.parse(topic, expression.expression or "*", EXPRESSION_TAG)


def _consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash, as the proxy picks a message group's queue."""
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def _peer_host(context: Any) -> str:
    peer = context.peer() or ""
    # "ipv4:127.0.0.1:5555" or "ipv6:[::1]:5555"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return rest or peer


def _is_ipv4(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)


def _parse_authorization(value: str) -> tuple[str | None, str | None]:
    """``MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``."""
    if not value:
        return None, None
    _, _, rest = value.partition(" ")
    fields = {}
    for part in rest.split(","):
        key, _, val = part.strip().partition("=")
        fields[key.strip()] = val.strip()
    credential = fields.get("Credential") or None
    if credential and "/" in credential:
        credential = credential.split("/", 1)[0]
    return credential, fields.get("Signature") or None


__all__ = ["MessagingService", "Refused"]
