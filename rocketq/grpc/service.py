"""``apache.rocketmq.v2.MessagingService``: RocketMQ 5's gRPC protocol, served by a broker
for the official 5.x clients (the Java proxy's "local mode": every route points at the gRPC
port of each broker itself).

Every answer carries a ``Status``; errors go there with ``definition.proto``'s codes and a
message saying what to fix, as the Java proxy answers, and a bad request never ends a stream
or the server. Sends go through the broker's own send checks and transforms (delays, timers,
transactional halves), receives and acks through its POP service, offsets through its
consumer offset table: a group's progress is one thing over gRPC and remoting.

The service is assembled from parts: ``routes`` (QueryRoute, QueryAssignment),
``telemetry`` (clients, their settings and telemetry streams, transaction checks),
``receiving`` (receive, ack, change of invisible time, dead-lettering) and this module (what
every call checks first, sends, transactions, offsets, pulls), over ``common`` (answers'
Status, and the readers of a request).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from ..acl.check import AccessDenied
from ..acl.plain import PUB, SUB
from ..broker.put_outcomes import SendRefused
from ..protocol import TRANS_HALF_TOPIC, Property, encode_properties
from ..protocol.message import host_to_bytes, java_hash
from ..protocol.sql92 import SqlError
from ..protocol.topic import validate_topic
from .common import (
    REMOTING_CODES,
    Refused,
    answers,
    consistent_hash,
    fault,
    parse_authorization,
    peer_host,
    status,
    subscription,
)
from .convert import (
    ACCEPTED_TYPES,
    TYPE_NAMES,
    ConversionError,
    message_type_of,
    to_message,
    to_properties,
)
from .proto import definition_pb2 as pb
from .proto import service_pb2 as spb
from .proto import service_pb2_grpc
from .receiving import MAX_POLL_MS, Receiving
from .routes import Routes
from .telemetry import ClientTelemetry, GrpcClient

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("rocketq.grpc")

#: Transactions sent and not yet ended: transaction id -> (CommitLog offset, when).
MAX_OPEN_TRANSACTIONS = 100_000

#: A send's store status -> v2 code.
_PUT_STATUS = {"FLUSH_DISK_TIMEOUT": pb.MASTER_PERSISTENCE_TIMEOUT,
               "FLUSH_SLAVE_TIMEOUT": pb.SLAVE_PERSISTENCE_TIMEOUT,
               "SLAVE_NOT_AVAILABLE": pb.HA_NOT_AVAILABLE}


class MessagingService(Routes, ClientTelemetry, Receiving,
                       service_pb2_grpc.MessagingServiceServicer):
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
                client_id, address=peer_host(context), language=md.get("x-mq-language", ""),
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
        access_key, signed = parse_authorization(auth)
        date = md.get("x-mq-date-time", "")

        def verify_with(secret: str) -> bool:
            expected = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
            return hmac.compare_digest(expected.upper(), (signed or "").upper())
        try:
            acl.check_access(peer_host(context), access_key, signed, verify_with, False,
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

    def accepted_types(self, topic_config: Any) -> tuple[int, ...]:
        kind = (topic_config.attributes.get("message.type") or "NORMAL").upper()
        return ACCEPTED_TYPES.get(kind, (pb.NORMAL,))

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
            queue_id = consistent_hash(java_hash(group), queue_nums)
        else:
            queue_id = next(self._round_robin) % queue_nums
        peer = peer_host(context)
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
            sub = subscription(topic, request.filter_expression)
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
            yield spb.PullMessageResponse(status=fault("PullMessage", exc))
            return
        if records:
            self.broker.stats.get(len(records), topic, request.group.name,
                                  sum(r.store_size for r in records), queue_id, next_offset)
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


__all__ = ["MessagingService", "Refused"]
