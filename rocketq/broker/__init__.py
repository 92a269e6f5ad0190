"""The Broker: stores messages, serves producers and consumers, registers with NameServers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
import zlib
from typing import Any

import orjson

from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import ProtocolError, RemotingCommand
from ..protocol.message import Property, encode_properties
from ..protocol.sql92 import SqlError, compile_selector
from ..protocol.topic import dlq_topic, retry_topic
from ..remoting import Connection, RemotingClient, RemotingError, RemotingServer, cancel_tasks
from ..store import MessageStore, MessageStoreConfig, StoreMessage
from .admin_requests import admin_handlers
from .clients import ClientTable, ConsumerGroup
from .config import PERM_READ, PERM_WRITE, BrokerConfig, load_broker_conf, load_overrides
from .consumer_calls import consumer_call_handlers
from .delay import DelayDelivery, to_schedule
from .offsets import ConsumerOffsets
from .pull import PullProcessor
from .send import SendProcessor
from .stats import Stats, runtime_info
from .subscription_groups import SubscriptionGroupTable, subscription_group_handlers
from .timer import TimerWheel
from .topics import TopicConfigError, TopicTable, topic_config_from_request
from .transaction import Transactions

log = logging.getLogger("rocketq.broker")

DEFAULT_PORT = 10911

__all__ = ["Broker", "BrokerConfig", "DEFAULT_PORT", "load_broker_conf"]


def _mq(broker_name: str, topic: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


class Broker:
    """A broker over a MessageStore. ``await start()``, ``await stop()``."""

    def __init__(self, config: BrokerConfig | None = None,
                 store_config: MessageStoreConfig | None = None) -> None:
        if config is None:
            config, default_store = load_broker_conf({})
            store_config = store_config or default_store
        elif store_config is None:
            # The store writes the broker's address into records and shares its size limit.
            _, store_config = load_broker_conf({
                "brokerIP1": config.brokerIP1, "listenPort": config.listenPort,
                "maxMessageSize": config.maxMessageSize})
        self.config = config
        self.store_config = store_config
        self.config_dir = os.path.join(store_config.storePathRootDir, "config")
        load_overrides(config, store_config)  # updateBrokerConfig changes of an earlier run
        self.server = RemotingServer(self.handle, "0.0.0.0" if config.brokerIP1 != "127.0.0.1"
                                     else "127.0.0.1", config.listenPort,
                                     on_close=self._connection_closed)
        self.namesrv_client = RemotingClient()
        self.store: MessageStore | None = None  # type: ignore[assignment]
        self.topics = TopicTable(config, self.config_dir)
        self.offsets = ConsumerOffsets(self.config_dir)
        self.subscription_groups = SubscriptionGroupTable(config, self.config_dir)
        self.clients = ClientTable(self._notify_consumers, self.subscription_groups.notifies)
        self.stats = Stats()
        self.send = SendProcessor(self)
        self.pull = PullProcessor(self)
        self.schedule = DelayDelivery(self)
        self.transactions = Transactions(self)
        self.timer = TimerWheel(self)
        self._tasks: list[asyncio.Task[Any]] = []
        #: (group, topic, queue id) -> (client id, last lock time): orderly consumption.
        self.queue_locks: dict[tuple[str, str, int], tuple[str, float]] = {}
        self._stopping = False
        self._register_soon: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._handlers = {
            RequestCode.SEND_MESSAGE: self.send.handle,
            RequestCode.SEND_MESSAGE_V2: self.send.handle,
            RequestCode.SEND_BATCH_MESSAGE: self.send.handle,
            RequestCode.SEND_REPLY_MESSAGE: self.send.handle,
            RequestCode.SEND_REPLY_MESSAGE_V2: self.send.handle,
            RequestCode.PULL_MESSAGE: self.pull.handle,
            RequestCode.LITE_PULL_MESSAGE: self.pull.handle,
            RequestCode.HEART_BEAT: self._heartbeat,
            RequestCode.CONSUMER_SEND_MSG_BACK: self._send_back,
            RequestCode.END_TRANSACTION: self.transactions.end_transaction,
            RequestCode.CHECK_CLIENT_CONFIG: self._check_client_config,
            RequestCode.LOCK_BATCH_MQ: self._lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self._unlock_batch,
            RequestCode.UNREGISTER_CLIENT: self._unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self._consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: self._query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self._update_consumer_offset,
            RequestCode.GET_MAX_OFFSET: self._max_offset,
            RequestCode.GET_MIN_OFFSET: self._min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self._search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self._earliest_time,
            RequestCode.VIEW_MESSAGE_BY_ID: self._view_message,
            RequestCode.QUERY_MESSAGE: self._query_message,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self._create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self._delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self._all_topic_config,
            RequestCode.GET_TOPIC_CONFIG: self._topic_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self._runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self._topic_stats,
            RequestCode.GET_CONSUME_STATS: self._consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self._consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self._producer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self._consumed_by,
            RequestCode.GET_BROKER_CONFIG: self._broker_config,
        }
        self._handlers.update(admin_handlers(self))  # UPDATE_BROKER_CONFIG; bad admin fields
        self._handlers.update(consumer_call_handlers(self))  # reset offset; calls to consumers
        self._handlers.update(subscription_group_handlers(self))  # 200, 201, 207

    # ================================================================== lifecycle
    @property
    def address(self) -> str:
        return f"{self.config.brokerIP1}:{self.config.listenPort}"

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        port = self.server.bind()
        self.config.listenPort = port
        self.store_config.listenPort = port
        # Opening the store may scan files after a crash: keep the loop free meanwhile.
        self.store = await asyncio.to_thread(MessageStore, self.store_config)
        self.store.dispatch_on(self.loop)
        self.pull.start(self.loop)
        await asyncio.to_thread(self.transactions.load)
        await self.server.start()
        self._register_soon = asyncio.Event()
        await self.register_all()  # routes exist by the time start() returns
        self._tasks = [self.loop.create_task(self._register_loop()),
                       self.loop.create_task(self._housekeeping()),
                       self.loop.create_task(self.schedule.run()),
                       self.loop.create_task(self.transactions.run()),
                       self.loop.create_task(self.timer.run()),
                       self.loop.create_task(self.stats.run())]
        log.info("broker %s (cluster %s) listening on %s, store at %s, NameServers %s",
                 self.config.brokerName, self.config.brokerClusterName, self.address,
                 self.store_config.storePathRootDir, ",".join(self.config.namesrv_addrs))

    async def stop(self) -> None:
        """Unregister, stop serving, persist offsets, flush and close the store cleanly."""
        self._stopping = True
        if self._register_soon is not None:
            self._register_soon.set()
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self._unregister_all()
        await self.namesrv_client.close()
        self.pull.stop()
        await self.server.stop()
        self.offsets.persist(force=True)
        self.schedule.persist()
        self.transactions.persist()
        self.timer.persist()
        if self.store is not None:
            self.store.dispatch_on(None)
            await asyncio.to_thread(self.store.close)
        log.info("broker %s stopped", self.config.brokerName)

    async def _housekeeping(self) -> None:
        cfg = self.config
        last_expire = time.monotonic()
        while not self._stopping:
            await asyncio.sleep(cfg.flushConsumerOffsetInterval / 1000)
            await asyncio.to_thread(self.offsets.persist)
            await asyncio.to_thread(self.schedule.persist)
            self.timer.persist()
            if time.monotonic() - last_expire >= 10:
                last_expire = time.monotonic()
                self.clients.expire(cfg.channelExpiredTimeout / 1000)

    # ================================================================== NameServers
    def topics_changed(self) -> None:
        """Re-register with the NameServers at once (a topic was created or changed)."""
        if self._register_soon is not None:
            self._register_soon.set()

    async def _register_loop(self) -> None:
        assert self._register_soon is not None
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._register_soon.wait(),
                                       self.config.registerNameServerPeriod / 1000)
            self._register_soon.clear()
            if not self._stopping:
                await self.register_all()

    def _register_header(self) -> dict[str, Any]:
        cfg = self.config
        return {"brokerName": cfg.brokerName, "brokerAddr": self.address,
                "clusterName": cfg.brokerClusterName, "brokerId": cfg.brokerId}

    async def register_all(self) -> None:
        body = orjson.dumps({"topicConfigSerializeWrapper": self.topics.register_body(
                                 self.config.brokerPermission),
                             "filterServerList": []})
        header = {**self._register_header(), "haServerAddr": self.address,
                  "compressed": False, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
            try:
                r = await self.namesrv_client.invoke(
                    addr, cmd, self.config.registerBrokerTimeoutMills / 1000)
                if r.code != ResponseCode.SUCCESS:
                    log.warning("NameServer %s refused registration: %s", addr, r.remark)
            except (RemotingError, OSError) as exc:
                log.warning("cannot register with NameServer %s: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))

    async def _unregister_all(self) -> None:
        async def one(addr: str) -> None:
            with contextlib.suppress(RemotingError, OSError):
                await self.namesrv_client.invoke(addr, RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER, self._register_header()), 2)

        await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))

    # ================================================================== dispatch
    def handle(self, conn: Connection, cmd: RemotingCommand):
        handler = self._handlers.get(cmd.code)  # type: ignore[call-overload]
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f" request type {cmd.code} not supported")
        if self.store is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, remark="the broker is starting")
        return handler(conn, cmd)

    def _connection_closed(self, conn: Connection) -> None:
        self.clients.connection_closed(conn)

    # ================================================================== clients
    def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            data = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            try:
                data = fastjson.loads(cmd.body)
            except ValueError as exc:
                raise ProtocolError(f"heartbeat body is not HeartbeatData JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ProtocolError("heartbeat body is not a JSON object")
        groups = self.clients.heartbeat(conn, data, cmd.language, cmd.version)
        created = False
        for group in groups:
            # The group's retry topic has the queues its subscription group says (none: no
            # retries), as ClientManageProcessor.heartBeat creates it.
            cfg = self.subscription_groups.find_or_create(group)
            if cfg is None or cfg.retry_queue_nums <= 0:
                continue
            if self.topics.get(retry_topic(group)) is None:
                self.topics.create_system(retry_topic(group), cfg.retry_queue_nums,
                                          PERM_READ | PERM_WRITE)
                created = True
        if created:
            self.topics_changed()
        return cmd.response(ResponseCode.SUCCESS)

    def dead_letter_topic(self, group: str) -> str:
        """The group's dead-letter topic, created on first use."""
        topic = dlq_topic(group)
        if self.topics.get(topic) is None:
            self.topics.create_system(topic, 1, PERM_READ | PERM_WRITE)
            self.topics_changed()
        return topic

    async def _send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: a consumer failed a message; store it again for the group's
        retry topic with a delay that grows with each attempt, or in its dead-letter queue
        once it has been tried ``maxReconsumeTimes`` times."""
        group = cmd.field("group") or ""
        offset = cmd.int_field("offset")
        record = self.store.look_message_by_offset(offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"look message by offset failed, {offset}")
        if not group:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                remark="the group is missing")
        cfg = self.subscription_groups.find_or_create(group)
        if cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                remark=f"subscription group not exist, {group}")
        if cfg.retry_queue_nums <= 0:
            return cmd.response()  # the group takes no retries: RocketMQ drops the message
        retry = retry_topic(group)
        retry_config = self.topics.get(retry)
        if retry_config is None:
            retry_config = self.topics.create_system(retry, cfg.retry_queue_nums,
                                                     PERM_READ | PERM_WRITE)
            self.topics_changed()
        delay_level = cmd.int_field("delayLevel", 0)
        # The group's retryMaxTimes, unless the consumer says otherwise (clients since 3.4.9).
        max_times = cmd.int_field("maxReconsumeTimes", cfg.max_reconsume_times)
        times = record.reconsume_times
        props = dict(record.properties)
        props.setdefault(Property.RETRY_TOPIC, record.topic)
        props.setdefault(Property.ORIGIN_MESSAGE_ID,
                         cmd.field("originMsgId") or record.msg_id)
        props.pop(Property.DELAY, None)
        props[Property.CLUSTER] = self.config.brokerClusterName
        levels = len(self.store_config.delay_levels_ms)
        if times >= max_times or delay_level < 0:
            topic, queue_id = self.dead_letter_topic(group), 0
            encoded = encode_properties(props)
        else:
            level = delay_level if delay_level > 0 else 3 + times
            topic, queue_id, encoded = to_schedule(
                retry, random.randrange(max(1, retry_config.write_queue_nums)),
                encode_properties(props), level, levels)
        message = StoreMessage.from_record(
            record, topic, queue_id, encoded.encode(),
            reconsume_times=times + 1)
        try:
            await self.store.put_messages_async([message])
        except Exception as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"send back failed: {exc}")
        self.schedule.wake()
        return cmd.response()

    LOCK_EXPIRY = 60.0

    def _lock_body(self, cmd: RemotingCommand) -> tuple[str, str, list[dict[str, Any]]]:
        try:
            body = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            raise ProtocolError("lock body is not JSON") from None
        return (str(body.get("consumerGroup", "")), str(body.get("clientId", "")),
                list(body.get("mqSet") or []))

    def _lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ: orderly consumers lock the queues they consume; a lock lasts 60 s
        unless renewed, and only its holder may renew it."""
        group, client, queues = self._lock_body(cmd)
        now = time.monotonic()
        locked = []
        for mq in queues:
            key = (group, str(mq.get("topic", "")), int(mq.get("queueId", 0)))
            holder = self.queue_locks.get(key)
            if holder is None or holder[0] == client or now - holder[1] > self.LOCK_EXPIRY:
                self.queue_locks[key] = (client, now)
                locked.append(mq)
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"lockOKMQSet": locked}))

    def _unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, client, queues = self._lock_body(cmd)
        for mq in queues:
            key = (group, str(mq.get("topic", "")), int(mq.get("queueId", 0)))
            holder = self.queue_locks.get(key)
            if holder is not None and holder[0] == client:
                del self.queue_locks[key]
        return cmd.response()

    def _check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A consumer with a SQL92 subscription asks whether this broker can serve it."""
        try:
            body = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            body = {}
        sub = body.get("subscriptionData") or {}
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

    def _notify_consumers(self, group: ConsumerGroup) -> None:
        cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                      {"consumerGroup": group.name}, oneway=True)
        for channel in list(group.channels.values()):
            channel.connection.oneway(RemotingCommand(cmd.code, cmd.ext_fields, flag=cmd.flag))

    def _unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.clients.unregister(cmd.field("clientID") or "", cmd.field("producerGroup"),
                                cmd.field("consumerGroup"))
        return cmd.response()

    def _consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ids = self.clients.consumer_ids(cmd.field("consumerGroup") or "")
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"no consumer for this group, {cmd.field('consumerGroup')}")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))

    # ================================================================== offsets
    def _query_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic = cmd.field("consumerGroup") or "", cmd.field("topic") or ""
        queue_id = cmd.int_field("queueId")
        offset = self.offsets.query(group, topic, queue_id)
        if offset is not None:
            return cmd.response(ResponseCode.SUCCESS, {"offset": offset})
        if cmd.bool_field("setZeroIfNotFound") or self.store.get_min_offset(topic, queue_id) <= 0:
            # A young queue still holds its first message: a new group starts from it.
            return cmd.response(ResponseCode.SUCCESS, {"offset": 0})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                            remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot "
                                   "first")

    def _update_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.offsets.commit(cmd.field("consumerGroup") or "", cmd.field("topic") or "",
                            cmd.int_field("queueId"), cmd.int_field("commitOffset"))
        return cmd.response()

    def _max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, {"offset": self.store.get_max_offset(
            cmd.field("topic") or "", cmd.int_field("queueId"))})

    def _min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, {"offset": self.store.get_min_offset(
            cmd.field("topic") or "", cmd.int_field("queueId"))})

    def _search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = cmd.field("topic") or "", cmd.int_field("queueId")
        timestamp = cmd.int_field("timestamp")
        offset = self.store.get_offset_by_time(topic, queue_id, timestamp)
        if (cmd.field("boundaryType") or "LOWER").upper() == "UPPER":
            # The last message stored at or before the timestamp.
            upper = self.store.get_offset_by_time(topic, queue_id, timestamp + 1)
            offset = max(self.store.get_min_offset(topic, queue_id), upper - 1)
        return cmd.response(ResponseCode.SUCCESS, {"offset": offset})

    def _earliest_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ts = self.store.get_earliest_message_time(cmd.field("topic") or "",
                                                  cmd.int_field("queueId"))
        if ts is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="no message in the queue")
        return cmd.response(ResponseCode.SUCCESS, {"timestamp": ts})

    # ================================================================== queries
    def _view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = cmd.int_field("offset")
        data = self.store.record_bytes(offset)
        if data is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"can not find message by the offset, {offset}")
        return cmd.response(ResponseCode.SUCCESS, body=data)

    def _query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        found = self.store.query_messages(
            cmd.field("topic") or "", cmd.field("key") or "", cmd.int_field("maxNum", 32),
            cmd.int_field("beginTimestamp", 0), cmd.int_field("endTimestamp", 2**62))
        if not found:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                remark="can not find message, maybe time range not correct")
        records = [self.store.record_bytes(r.commitlog_offset) or b"" for r in found]
        return cmd.response(ResponseCode.SUCCESS, {
            "indexLastUpdateTimestamp": int(time.time() * 1000),
            "indexLastUpdatePhyoffset": self.store.commitlog.max_offset}, b"".join(records))

    # ================================================================== topics
    def _create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: every field is checked before anything changes, and the
        table changes in memory only once it is saved."""
        try:
            config = topic_config_from_request(cmd.ext_fields)
        except TopicConfigError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        topic = config.topic_name
        if topic == self.config.brokerClusterName or topic == self.config.brokerName:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"the topic[{topic}] is conflict with system topic")
        try:
            self.topics.update(config)
        except OSError as exc:
            log.error("topic %s not changed: %s cannot be saved: %s", topic, self.topics.path,
                      exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the topic config cannot be saved, nothing changed: "
                                       f"{exc}")
        self.topics_changed()
        return cmd.response()

    def _delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.field("topic") or ""
        self.topics.delete(topic)
        self.offsets.remove_topic(topic)
        self.store.delete_topics([topic])
        self.topics_changed()
        return cmd.response()

    def _all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self.topics.register_body()))

    def _topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = self.topics.get(cmd.field("topic") or "")
        if topic is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark="No topic in this broker.")
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"topicConfig": topic.to_json()}))

    # ================================================================== admin and stats
    def _runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"table": runtime_info(self)}))

    def _queue_ids(self, topic: str) -> list[int]:
        config = self.topics.get(topic)
        return list(range(config.read_queue_nums)) if config else self.store.queue_ids(topic)

    def _topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.field("topic") or ""
        if self.topics.get(topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"topic[{topic}] not exist")
        items = []
        for qid in self._queue_ids(topic):
            max_offset = self.store.get_max_offset(topic, qid)
            last = (self.store.get_message_store_timestamp(topic, qid, max_offset - 1)
                    if max_offset > 0 else None)
            items.append((_mq(self.config.brokerName, topic, qid), {
                "minOffset": self.store.get_min_offset(topic, qid), "maxOffset": max_offset,
                "lastUpdateTimestamp": last or 0}))
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(
            {"offsetTable": fastjson.ObjectKeyMap(items)}))

    def _consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.field("consumerGroup") or ""
        wanted = cmd.field("topic")
        topics = [wanted] if wanted else self.offsets.topics_of_group(group)
        if not wanted:
            g = self.clients.consumers.get(group)
            if g is not None:
                topics = sorted(set(topics) | set(g.subscriptions))
        items = []
        for topic in topics:
            if self.topics.get(topic) is None:
                continue
            for qid in self._queue_ids(topic):
                consumer = self.offsets.query(group, topic, qid)
                broker_offset = self.store.get_max_offset(topic, qid)
                last = None
                if consumer is not None and consumer > 0:
                    last = self.store.get_message_store_timestamp(topic, qid, consumer - 1)
                items.append((_mq(self.config.brokerName, topic, qid), {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer if consumer is not None else 0,
                    "pullOffset": consumer if consumer is not None else 0,
                    "lastTimestamp": last or 0}))
        if not items:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                remark=f"the consumer group[{group}] not online")
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(
            {"offsetTable": fastjson.ObjectKeyMap(items), "consumeTps": 0.0}))

    def _consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = self.clients.consumers.get(cmd.field("consumerGroup") or "")
        if group is None or not group.channels:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                remark=f"the consumer group[{cmd.field('consumerGroup')}] not "
                                       "online")
        body = {
            "connectionSet": [{"clientId": ch.client_id,
                               "clientAddr": f"{ch.connection.peer[0]}:{ch.connection.peer[1]}",
                               "language": ch.language, "version": ch.version}
                              for ch in group.channels.values()],
            "subscriptionTable": {t: s.to_json() for t, s in group.subscriptions.items()},
            "consumeType": group.consume_type, "messageModel": group.message_model,
            "consumeFromWhere": group.consume_from_where,
        }
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        members = self.clients.producers.get(cmd.field("producerGroup") or "") or {}
        if not members:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="the producer group not exist")
        body = {"connectionSet": [
            {"clientId": ch.client_id,
             "clientAddr": f"{ch.connection.peer[0]}:{ch.connection.peer[1]}",
             "language": ch.language, "version": ch.version} for ch in members.values()]}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def _consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.field("topic") or ""
        groups = set(self.offsets.groups_of_topic(topic))
        groups |= {g.name for g in self.clients.consumers.values() if topic in g.subscriptions}
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"groupList": sorted(groups)}))

    def _broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        import dataclasses

        values = {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)
                  if f.name != "unknown"}
        values.update({f.name: getattr(self.store_config, f.name)
                       for f in dataclasses.fields(self.store_config) if f.name != "unknown"})
        text = "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                       for k, v in sorted(values.items()))
        return cmd.response(ResponseCode.SUCCESS, {"version": orjson.dumps(
            self.topics.data_version.to_json()).decode()}, text.encode())
