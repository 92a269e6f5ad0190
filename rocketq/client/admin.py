"""Administration (RocketMQ's MQAdminImpl and the parts of mqadmin a program needs): topics,
consumer progress, message queries by id, by key and time, offsets by time."""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

from ..acl import Credentials
from ..protocol import (
    MessageFormatError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_records,
    fastjson,
)
from ..protocol.message import decode_offset_msg_id
from .errors import ClientError, InvalidArgumentError
from .instance import ClientInstance
from .message import MessageQueue, ReceivedMessage

#: Queues of a topic created without saying how many: the default of mqadmin's updateTopic
#: and of a broker's defaultTopicQueueNums.
DEFAULT_TOPIC_QUEUES = 8
#: Values of a topic's ``message.type`` attribute (RocketMQ 5's TopicMessageType).
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
#: How long create_topic waits for the NameServer to list a topic it created, in seconds.
TOPIC_VISIBLE_WAIT = 5.0
#: Prefixes of the topics brokers keep for themselves: a search through every topic tries
#: them last.
_SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_",
                          "TBW102")


@dataclass(frozen=True)
class QueueProgress:
    """How far a consumer group has come in one queue (a row of mqadmin consumerProgress)."""

    queue: MessageQueue
    #: The queue's max offset: where the next message stored will go.
    broker_offset: int
    #: The group's committed offset: the next message it will consume.
    consumer_offset: int
    #: When the last message the group consumed was stored, ms since the epoch (0: unknown).
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        """Messages stored and not consumed yet (never negative)."""
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True)
class ConsumerProgress:
    """A consumer group's progress through every queue it has offsets in (or of one topic)."""

    group: str
    #: One entry per queue, by topic, broker and queue id.
    queues: list[QueueProgress]

    @property
    def total_lag(self) -> int:
        """The sum of the queues' lags: what the group still has to consume."""
        return sum(q.lag for q in self.queues)

    def lag_by_topic(self) -> dict[str, int]:
        """``topic -> lag`` summed over the topic's queues."""
        out: dict[str, int] = {}
        for q in self.queues:
            out[q.queue.topic] = out.get(q.queue.topic, 0) + q.lag
        return out


class AsyncAdmin:
    """Topics, consumer progress and message queries across the brokers a NameServer knows."""

    def __init__(self, namesrv: str, *,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        self.instance = instance or ClientInstance(namesrv, credentials=credentials, tls=tls)

    async def close(self) -> None:
        await self.instance.remoting.close()

    async def __aenter__(self) -> AsyncAdmin:
        """The admin itself; ``close()`` runs on leaving the block."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """``broker name -> master address`` of every broker (of ``cluster``, if given)."""
        r = await self.instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_BROKER_CLUSTER_INFO))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"cluster info: {r.remark}")
        info = fastjson.loads(r.body)
        names = set(info.get("clusterAddrTable", {}).get(cluster, [])) if cluster else None
        out = {}
        for name, data in info.get("brokerAddrTable", {}).items():
            addrs = {int(k): v for k, v in (data.get("brokerAddrs") or {}).items()}
            if 0 in addrs and (names is None or name in names):
                out[name] = addrs[0]
        return out

    async def create_topic(self, topic: str, queues: int = DEFAULT_TOPIC_QUEUES, *,
                           cluster: str | None = None,
                           perm: int = 6, order: bool = False,
                           message_type: str | None = None) -> dict[str, str]:
        """Create (or update) ``topic`` with ``queues`` read and write queues on every master
        broker (of ``cluster``); returns the brokers it was created on. ``message_type``
        (NORMAL, FIFO, DELAY, TRANSACTION or MIXED) sets RocketMQ 5's ``message.type``
        attribute, which says what the 5.x clients may send to it.

        Raises:
            ClientError: no master broker, or a broker refused the topic.
            InvalidArgumentError: ``message_type`` is not one of those five.
        """
        if message_type is not None and message_type.upper() not in MESSAGE_TYPES:
            raise InvalidArgumentError(f"message_type must be one of {', '.join(MESSAGE_TYPES)}"
                                       f", not {message_type!r}")
        masters = await self.masters(cluster)
        if not masters:
            raise ClientError("no master broker found" + (f" in {cluster}" if cluster else ""))
        for name, addr in sorted(masters.items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
                    "writeQueueNums": queues, "perm": perm, "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0, "order": order,
                    **({"attributes": f"+message.type={message_type.upper()}"}
                       if message_type else {})}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"creating {topic} on {name} ({addr}): {r.remark}")
        # The brokers tell the NameServer right after they answer: wait for that (briefly),
        # so that what follows (list_topics, a send, a consumer's route) finds the topic.
        deadline = time.monotonic() + TOPIC_VISIBLE_WAIT
        while topic not in await self.list_topics() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return masters

    async def list_topics(self) -> list[str]:
        """Every topic the NameServer knows, sorted (mqadmin topicList), system ones included:
        those brokers create for retries, dead letters and their own use."""
        r = await self.instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"topic list: {r.remark} (code {r.code})")
        return sorted(fastjson.loads(r.body).get("topicList") or [])

    async def _broker_topics(self, addr: str) -> set[str]:
        """The topics a broker holds (GET_ALL_TOPIC_CONFIG)."""
        r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
            RequestCode.GET_ALL_TOPIC_CONFIG))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"topic table of {addr}: {r.remark} (code {r.code})")
        return set(fastjson.loads(r.body).get("topicConfigTable") or {})

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from every master broker (of ``cluster``) and from the NameServers
        (mqadmin deleteTopic): its queues, messages and consumer offsets go. Returns the names
        of the brokers that held it. Raises ClientError when neither a NameServer nor a master
        knows the topic, so that a misspelt name is not taken for a deleted topic."""
        masters = await self.masters(cluster)
        holders = [name for name, addr in sorted(masters.items())
                   if topic in await self._broker_topics(addr)]
        if not holders and await self.instance.fetch_route(topic) is None:
            raise ClientError(f"topic {topic} does not exist")
        for name, addr in sorted(masters.items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"deleting {topic} on {name} ({addr}): {r.remark}")
        for addr in self.instance.namesrv_addrs:
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"deleting {topic} on the NameServer {addr}: {r.remark}")
        self.instance.routes.pop(topic, None)
        return holders

    async def consumer_progress(self, group: str, topic: str | None = None
                                ) -> ConsumerProgress:
        """Where ``group`` stands in each queue of ``topic`` (default: of every topic it has
        offsets in or subscribes to), from every master broker: the queue's max offset, the
        group's committed offset, and the lag between them (mqadmin consumerProgress). A
        group no broker knows has no queues."""
        ext = {"consumerGroup": group}
        if topic:
            ext["topic"] = topic
        rows = []
        for name, addr in sorted((await self.masters()).items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.GET_CONSUME_STATS, ext))
            if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue  # the broker has no offsets of the group (RocketMQ's answer)
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"progress of {group} on {name} ({addr}): {r.remark} "
                                  f"(code {r.code})")
            for mq, stats in fastjson.loads(r.body)["offsetTable"].items:
                rows.append(QueueProgress(
                    MessageQueue(mq["topic"], mq.get("brokerName") or name, mq["queueId"]),
                    int(stats["brokerOffset"]), int(stats["consumerOffset"]),
                    int(stats.get("lastTimestamp") or 0)))
        rows.sort(key=lambda q: (q.queue.topic, q.queue.broker_name, q.queue.queue_id))
        return ConsumerProgress(group, rows)

    async def message_by_id(self, msg_id: str, topic: str | None = None) -> ReceivedMessage:
        """The message with this id, whichever of RocketMQ's two ids it is (mqadmin
        queryMsgById): the broker's offset id (store host, port and CommitLog offset), or
        the producer's unique id (UNIQ_KEY, what a send returns as ``msg_id``), looked up
        in ``topic`` or, without one, in every topic the NameServer knows."""
        problem = ""
        try:
            _, port, _ = decode_offset_msg_id(msg_id)
        except MessageFormatError:
            raise ClientError(f"not a message id: {msg_id!r} (an id has 32 hex digits)") \
                from None
        if 0 < port < 65536:  # a unique id read as an offset id names no real port
            try:
                return await self.view_message(msg_id)
            except (ClientError, OSError) as exc:
                problem = f" (as an offset id: {exc})"
        if topic:
            found = await self.query_messages(topic, msg_id, max_num=1, unique=True)
            if found:
                return found[0]
            raise ClientError(f"no message of {topic} with id {msg_id}{problem}")
        topics = await self.list_topics()
        # The users' topics first; the retry, dead-letter and system ones if need be.
        for batch in ([t for t in topics if not t.startswith(_SYSTEM_TOPIC_PREFIXES)],
                      [t for t in topics if t.startswith(_SYSTEM_TOPIC_PREFIXES)]):
            found = await self._find_unique(batch, msg_id)
            if found is not None:
                return found
        raise ClientError(f"no message with id {msg_id} in any topic{problem}")

    async def _find_unique(self, topics: list[str], msg_id: str,
                           parallel: int = 8) -> ReceivedMessage | None:
        """The newest message with unique id ``msg_id`` in any of ``topics``."""
        limit = asyncio.Semaphore(parallel)

        async def one(topic: str) -> list[ReceivedMessage]:
            async with limit:
                try:
                    return await self.query_messages(topic, msg_id, max_num=1, unique=True)
                except (ClientError, OSError):
                    return []  # a topic without a route, a broker that went away

        found = [m for batch in await asyncio.gather(*(one(t) for t in topics))
                 for m in batch]
        return max(found, key=lambda m: m.store_timestamp) if found else None

    async def view_message(self, offset_msg_id: str) -> ReceivedMessage:
        """The message with this offset id (it names its broker and CommitLog offset)."""
        try:
            host, port, offset = decode_offset_msg_id(offset_msg_id)
        except MessageFormatError as exc:
            raise ClientError(str(exc)) from None
        response = await self.instance.remoting.invoke(f"{host}:{port}", RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"no message {offset_msg_id}: {response.remark}")
        record = decode_records(response.body, decompress=True)[0]
        return ReceivedMessage.from_record(record, "")

    async def query_messages(self, topic: str, key: str, *, max_num: int = 32,
                             begin: int = 0, end: int | None = None, unique: bool = False
                             ) -> list[ReceivedMessage]:
        """Messages of ``topic`` whose key (or, with ``unique``, unique id) is ``key``, stored
        between ``begin`` and ``end`` (ms since the epoch), from every broker of the topic."""
        end = int(time.time() * 1000) + 1000 if end is None else end
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise ClientError(f"No route info of this topic: {topic}")

        async def one(name: str) -> list[ReceivedMessage]:
            addr = self.instance.broker_addr(name)
            if addr is None:
                return []
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.QUERY_MESSAGE, {"topic": topic, "key": key, "maxNum": max_num,
                                            "beginTimestamp": begin, "endTimestamp": end,
                                            "_UNIQUE_KEY_QUERY": unique}))
            if r.code != ResponseCode.SUCCESS:
                return []
            return [ReceivedMessage.from_record(rec, name)
                    for rec in decode_records(r.body, decompress=True)]

        found = [m for batch in await asyncio.gather(*(one(n) for n in route.broker_addrs))
                 for m in batch]
        # The index matches hashes; keep exact matches only, newest first.
        found = [m for m in found
                 if (m.properties.get("UNIQ_KEY") == key if unique else key in m.keys)]
        found.sort(key=lambda m: m.store_timestamp, reverse=True)
        return found[:max_num]

    async def query_message_by_unique_key(self, topic: str, msg_id: str) -> ReceivedMessage:
        """The message of ``topic`` whose unique id (UNIQ_KEY) is ``msg_id``."""
        found = await self.query_messages(topic, msg_id, max_num=1, unique=True)
        if not found:
            raise ClientError(f"no message of {topic} with unique id {msg_id}")
        return found[0]

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms``."""
        r = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": mq.topic, "queueId": mq.queue_id,
                                                     "timestamp": timestamp_ms}), 3, mq.topic)
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"offset search on {mq}: {r.remark}")
        return int(r.ext_fields.get("offset", "0"))
