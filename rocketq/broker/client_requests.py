"""Requests by which clients manage their membership (RocketMQ's ClientManageProcessor, the
consumer list of ConsumerManageProcessor, and the queue locks of RebalanceLockManager).

HEART_BEAT (34) registers a client's producer and consumer groups, creating each consumer
group's retry topic; UNREGISTER_CLIENT (35) removes it; GET_CONSUMER_LIST_BY_GROUP (38) names a
group's members; LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) hold queues for orderly
consumers; CHECK_CLIENT_CONFIG (46) tells a consumer whether its subscription can be served.
When a group's membership changes, every member is told (NOTIFY_CONSUMER_IDS_CHANGED).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from ..protocol import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    Perm,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    fastjson,
    retry_topic,
)
from ..protocol.sql92 import SqlError, compile_selector
from ..remoting import Connection
from .clients import ClientTable, ConsumerGroup
from .config import BrokerConfig
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicTable

Handler = Callable[[Connection, RemotingCommand], Any]

log = logging.getLogger("rocketq.broker")

#: Seconds a queue lock lasts unless its holder renews it (RebalanceLockManager: 60 s).
LOCK_EXPIRY = 60.0


def _check_heartbeat(data: Any) -> None:
    """Raise ProtocolError unless ``data`` has HeartbeatData's shape (objects and lists of
    objects where it has them), before any of it is applied: a bad one changes nothing."""
    if not isinstance(data, dict):
        raise ProtocolError("heartbeat body is not a JSON object")
    for name in ("producerDataSet", "consumerDataSet"):
        items = data.get(name) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ProtocolError(f"heartbeat {name} is not a list of objects")
    for consumer in data.get("consumerDataSet") or []:
        subs = consumer.get("subscriptionDataSet") or []
        if not isinstance(subs, list) or not all(isinstance(s, dict) for s in subs):
            raise ProtocolError("heartbeat subscriptionDataSet is not a list of objects")


def notify_consumers(group: ConsumerGroup) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED, oneway, to each member of ``group``: rebalance now."""
    cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                  {"consumerGroup": group.name}, oneway=True)
    for channel in list(group.channels.values()):
        channel.connection.oneway(RemotingCommand(cmd.code, cmd.ext_fields, flag=cmd.flag))


class ClientRequests:
    """Serves heartbeats, client unregistration, consumer lists, queue locks and client config
    checks over the client table, subscription groups and topics."""

    def __init__(self, config: BrokerConfig, clients: ClientTable,
                 subscription_groups: SubscriptionGroupTable, topics: TopicTable,
                 topics_changed: Callable[[], None]) -> None:
        self.config = config
        self.clients = clients
        self.subscription_groups = subscription_groups
        self.topics = topics
        self.topics_changed = topics_changed
        #: (group, topic, queue id) -> (client id, last lock time): orderly consumption.
        self.queue_locks: dict[tuple[str, str, int], tuple[str, float]] = {}

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.HEART_BEAT: self.heartbeat,
                RequestCode.UNREGISTER_CLIENT: self.unregister_client,
                RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
                RequestCode.LOCK_BATCH_MQ: self.lock_batch,
                RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
                RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config}

    def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT: register the client's groups; create their retry topics."""
        try:
            data = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            try:
                data = fastjson.loads(cmd.body)
            except (ValueError, RecursionError) as exc:
                raise ProtocolError(f"heartbeat body is not HeartbeatData JSON: {exc}") from None
        _check_heartbeat(data)
        groups = self.clients.heartbeat(conn, data, cmd.language, cmd.version)
        created = False
        for group in groups:
            # The group's retry topic has the queues its subscription group says (none: no
            # retries), as ClientManageProcessor.heartBeat creates it.
            cfg = self.subscription_groups.find_or_create(group)
            if cfg is None or cfg.retry_queue_nums <= 0:
                continue
            if self.topics.get(retry_topic(group)) is None:
                try:
                    self.topics.create_system(retry_topic(group), cfg.retry_queue_nums,
                                              Perm.READ | Perm.WRITE)
                except OSError as exc:
                    # A config directory that cannot be written (a full disk) must not cost
                    # the consumer its heartbeat: the retry topic is made at a later one.
                    log.warning("retry topic of group %s not created: %s cannot be saved: %s",
                                group, self.topics.path, exc)
                    continue
                created = True
        if created:
            self.topics_changed()
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_CLIENT: the client leaves its producer and consumer groups."""
        self.clients.unregister(cmd.field("clientID") or "", cmd.field("producerGroup"),
                                cmd.field("consumerGroup"))
        return cmd.response()

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids of a group's members."""
        ids = self.clients.consumer_ids(cmd.field("consumerGroup") or "")
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"no consumer for this group, {cmd.field('consumerGroup')}")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))

    # ------------------------------------------------------------------ queue locks
    @staticmethod
    def _lock_body(cmd: RemotingCommand) -> tuple[str, str, list[tuple[str, int, Any]]]:
        """The group, the client and the queues (topic, queue id, the queue as sent) of a
        LockBatchRequestBody; ProtocolError when it is not one."""
        try:
            body = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            raise ProtocolError("lock body is not JSON") from None
        mq_set = body.get("mqSet") or [] if isinstance(body, dict) else None
        if not isinstance(mq_set, list) or not all(isinstance(mq, dict) for mq in mq_set):
            raise ProtocolError("lock body is not a LockBatchRequestBody")
        queues = []
        for mq in mq_set:
            queue_id = mq.get("queueId", 0)
            if type(queue_id) is not int or not JAVA_INT_MIN <= queue_id <= JAVA_INT_MAX:
                raise ProtocolError(f"lock body has a bad queueId {queue_id!r}")
            queues.append((str(mq.get("topic", "")), queue_id, mq))
        return str(body.get("consumerGroup", "")), str(body.get("clientId", "")), queues

    def lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ: orderly consumers lock the queues they consume; a lock lasts 60 s
        unless renewed, and only its holder may renew it."""
        group, client, queues = self._lock_body(cmd)
        now = time.monotonic()
        locked = []
        for topic, queue_id, mq in queues:
            key = (group, topic, queue_id)
            holder = self.queue_locks.get(key)
            if holder is None or holder[0] == client or now - holder[1] > LOCK_EXPIRY:
                self.queue_locks[key] = (client, now)
                locked.append(mq)
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": locked}))

    def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: release the queues the client holds; others' locks stay."""
        group, client, queues = self._lock_body(cmd)
        for topic, queue_id, _ in queues:
            key = (group, topic, queue_id)
            holder = self.queue_locks.get(key)
            if holder is not None and holder[0] == client:
                del self.queue_locks[key]
        return cmd.response()

    # ------------------------------------------------------------------ client config
    def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A consumer with a SQL92 subscription asks whether this broker can serve it."""
        try:
            body = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            body = {}
        sub = body.get("subscriptionData") if isinstance(body, dict) else None
        if not isinstance(sub, dict):
            sub = {}
        if str(sub.get("expressionType", "TAG")).upper() == "SQL92":
            if not self.config.enablePropertyFilter:
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark="The broker does not support consumer to filter "
                                           "message by SQL92")
            try:
                compile_selector(str(sub.get("subString") or ""))
            except SqlError as exc:
                return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=str(exc))
        return cmd.response()
