"""Messages: a test message sent, messages found by id, key or time (mqadmin queryMsgById,
queryMsgByKey, and the dashboard's search by time), and a group's dead letters listed and
sent again."""

from __future__ import annotations

import asyncio
import re
import time

from ...protocol import (
    MessageFormatError,
    Property,
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_records,
    dlq_topic,
    retry_topic,
)
from ...protocol.filter import Subscription
from ...protocol.message import decode_offset_msg_id
from ..consumer import pull_request
from ..errors import BrokerError, ClientError, InvalidArgumentError, NotFoundError
from ..message import Message, MessageQueue, ReceivedMessage, SendResult
from ..producer import AsyncProducer
from ..pulled import pulled_messages
from .base import TOOLS_CONSUMER_GROUP, AdminBase
from .offsets import OffsetAdmin
from .topics import TopicAdmin

#: The producer group of the messages an admin sends.
ADMIN_PRODUCER_GROUP = "rocketq-admin-producer"
#: Prefixes of the topics brokers keep for themselves: a search through every topic tries
#: them last.
_SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_",
                          "TBW102")
#: A message id: hex digits, 32 (an offset id of an IPv4 store host, or the unique id of a
#: 4.x producer on an IPv4 host), 34 (a RocketMQ 5 client's id: "01" and 32 digits) or 56
#: (an IPv6 host's unique or offset id).
_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}(?:[0-9A-Fa-f]{2}|[0-9A-Fa-f]{24})?")
#: Messages asked for in one pull when reading a range of a queue.
_PULL_BATCH = 32
#: Properties a message sent again does not keep: the broker's own, and those that would
#: send it back to the dead-letter queue, or delay it, at once.
_NOT_RESENT = (Property.CLUSTER, Property.RECONSUME_TIME, Property.MAX_RECONSUME_TIMES,
               Property.DELAY, Property.REAL_TOPIC, Property.REAL_QUEUE_ID, Property.WAIT,
               Property.MIN_OFFSET, Property.MAX_OFFSET, Property.TIMER_DELIVER_MS,
               Property.TIMER_DELAY_SEC, Property.TIMER_DELAY_MS, Property.TIMER_OUT_MS)


class MessageAdmin(TopicAdmin, OffsetAdmin, AdminBase):
    """Messages: sent, found, read by time, dead letters."""

    # ------------------------------------------------------------------ sending
    def _producer(self, group: str) -> AsyncProducer:
        """The admin's producer of ``group``, on the admin's own connections. It is never
        started: it sends, and has nothing to tell brokers in heartbeats."""
        producer = self._producers.get(group)
        if producer is None:
            producer = self._producers[group] = AsyncProducer(
                group, ";".join(self.instance.namesrv_addrs), instance=self.instance)
        return producer

    async def send_message(self, topic: str, body: bytes, *, tags: str | None = None,
                           keys: str | list[str] | None = None,
                           producer_group: str = ADMIN_PRODUCER_GROUP) -> SendResult:
        """Send one message (a test message, as the dashboard's and mqadmin's sendMessage
        do) as producer group ``producer_group``. ``keys`` is one key or several.

        Raises:
            ArgumentTypeError: an argument of the wrong type.
            MessageValidationError: the message breaks a rule (topic name, empty body, a key
                with a space); nothing was sent.
            InvalidArgumentError: ``producer_group`` is not a legal group name.
            NameServerError: no NameServer answered.
            BrokerError: the broker refused the message.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: no answer within the timeout.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        return await self._producer(producer_group).send(
            Message(topic, body, tags=tags, keys=keys))

    # ------------------------------------------------------------------ by id and key
    async def message_by_id(self, msg_id: str, topic: str | None = None) -> ReceivedMessage:
        """The message with this id, whichever of RocketMQ's ids it is (mqadmin
        queryMsgById): the broker's offset id (store host, port and CommitLog offset), or
        the producer's unique id (UNIQ_KEY, what a send returns as ``msg_id``; a RocketMQ 5
        client's id is one, of 34 digits), looked up in ``topic`` or, without one, in every
        topic the NameServer knows. An id is read as an offset id only when it decodes as
        one and names a broker the NameServer knows; any other is looked up as a unique id.

        Raises:
            InvalidArgumentError: ``msg_id`` is not a message id (32, 34 or 56 hex digits).
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            NotFoundError: no such message was found.
            ClientError: the NameServer refused the query.
        """
        _check_id(msg_id)
        problem = ""
        try:
            host, port, offset = decode_offset_msg_id(msg_id)
        except MessageFormatError:
            pass  # 34 or 56 digits: a unique id (rocketq's offset ids have IPv4 hosts)
        else:
            addr = f"{host}:{port}"
            name = (await self._broker_names()).get(addr)
            if name is not None:  # else a unique id, read as an offset id, names no broker
                try:
                    return await self._view(addr, offset, msg_id, name)
                except (ClientError, OSError) as exc:
                    problem = f" (as an offset id: {exc})"
        if topic:
            found = await self.query_messages(topic, msg_id, max_num=1, unique=True)
            if found:
                return found[0]
            raise NotFoundError(f"no message of {topic} with id {msg_id}{problem}")
        topics = await self.list_topics()
        # The users' topics first; the retry, dead-letter and system ones if need be.
        for batch in ([t for t in topics if not t.startswith(_SYSTEM_TOPIC_PREFIXES)],
                      [t for t in topics if t.startswith(_SYSTEM_TOPIC_PREFIXES)]):
            found_one = await self._find_unique(batch, msg_id)
            if found_one is not None:
                return found_one
        raise NotFoundError(f"no message with id {msg_id} in any topic{problem}")

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
        """The message with this offset id (it names its broker and CommitLog offset). Only
        a broker the NameServer knows is asked: the id's address is checked against the
        cluster's broker table first.

        Raises:
            InvalidArgumentError: ``offset_msg_id`` is not an offset id.
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            NotFoundError: the id names no broker of this cluster, or the broker has no such
                message.
            BrokerError: the broker refused the query.
        """
        try:
            host, port, offset = decode_offset_msg_id(offset_msg_id)
        except MessageFormatError as exc:
            raise InvalidArgumentError(str(exc)) from None
        addr = f"{host}:{port}"
        name = (await self._broker_names()).get(addr)
        if name is None:
            raise NotFoundError(f"no broker at {addr} in this cluster (offset id "
                                f"{offset_msg_id})")
        return await self._view(addr, offset, offset_msg_id, name)

    async def _view(self, addr: str, offset: int, msg_id: str, broker_name: str
                    ) -> ReceivedMessage:
        """VIEW_MESSAGE_BY_ID of CommitLog ``offset`` on the broker at ``addr``."""
        response = await self.instance.remoting.invoke(addr, RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
        if response.code == ResponseCode.SYSTEM_ERROR and \
                "can not find" in (response.remark or ""):  # RocketMQ's answer too
            raise NotFoundError(f"no message {msg_id}: {response.remark}")
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, f"message {msg_id} on {addr}: "
                                             f"{response.remark or 'refused'}")
        record = decode_records(response.body, decompress=True)[0]
        return ReceivedMessage.from_record(record, broker_name)

    async def query_messages(self, topic: str, key: str, *, max_num: int = 32,
                             begin: int = 0, end: int | None = None, unique: bool = False
                             ) -> list[ReceivedMessage]:
        """Messages of ``topic`` whose key (or, with ``unique``, unique id) is ``key``, stored
        between ``begin`` and ``end`` (ms since the epoch), from every broker of the topic,
        newest first.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            NotFoundError: the topic has no route.
        """
        end = int(time.time() * 1000) + 1000 if end is None else end
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise NotFoundError(f"No route info of this topic: {topic}")

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
        """The message of ``topic`` whose unique id (UNIQ_KEY) is ``msg_id``.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            NotFoundError: the topic has no route, or no such message was found.
        """
        found = await self.query_messages(topic, msg_id, max_num=1, unique=True)
        if not found:
            raise NotFoundError(f"no message of {topic} with unique id {msg_id}")
        return found[0]

    # ------------------------------------------------------------------ by time
    async def _pull_range(self, mq: MessageQueue, begin: int, end: int, limit: int
                          ) -> list[ReceivedMessage]:
        """The messages of ``mq`` from queue offset ``begin`` up to ``end`` (excluded), at
        most ``limit``, read as the tools' group without committing anything."""
        sub = Subscription.parse(mq.topic, "*")
        out: list[ReceivedMessage] = []
        offset = begin
        while offset < end and len(out) < limit:
            r = await self.instance.invoke_broker(mq.broker_name, pull_request(
                TOOLS_CONSUMER_GROUP, mq, offset, min(_PULL_BATCH, end - offset), sub,
                sysflag=PullSysFlag.SUBSCRIPTION), 5, mq.topic)
            following = int(r.ext_fields.get("nextBeginOffset", offset))
            if r.code == ResponseCode.SUCCESS:
                out += [m for m in pulled_messages(r.body, mq.broker_name)
                        if m.queue_offset < end]
            elif r.code == ResponseCode.PULL_NOT_FOUND:
                break  # nothing more
            elif r.code not in (ResponseCode.PULL_OFFSET_MOVED,
                                ResponseCode.PULL_RETRY_IMMEDIATELY):
                raise BrokerError(r.code, f"reading {mq}: {r.remark or 'refused'}")
            if following <= offset:
                break
            offset = following
        return out[:limit]

    async def messages_by_time(self, topic: str, begin_ms: int, end_ms: int, *,
                               max_num: int = 64) -> list[ReceivedMessage]:
        """The messages of ``topic`` stored from ``begin_ms`` to ``end_ms`` (ms since the
        epoch, both included), oldest first, at most ``max_num`` (the oldest ones): each
        queue's offsets of both times are looked up and the messages between them read.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            NotFoundError: the topic has no route.
            ClientError: a broker refused a look-up or a read.
        """
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise NotFoundError(f"No route info of this topic: {topic}")

        async def one(mq: MessageQueue) -> list[ReceivedMessage]:
            low = await self.search_offset(mq, begin_ms)
            high = await self.search_offset(mq, end_ms + 1)
            return [m for m in await self._pull_range(mq, low, high, max_num)
                    if begin_ms <= m.store_timestamp <= end_ms]

        found = [m for batch in await asyncio.gather(*(one(mq) for mq in
                                                       route.subscribe_queues))
                 for m in batch]
        found.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id,
                                  m.queue_offset))
        return found[:max_num]

    # ------------------------------------------------------------------ dead letters
    async def dlq_messages(self, group: str, *, max_num: int = 32) -> list[ReceivedMessage]:
        """The newest ``max_num`` messages of ``group``'s dead-letter queue (``%DLQ%group``:
        those it failed too often), oldest first; none if the group has none.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused the query or the read.
        """
        topic = dlq_topic(group)
        if await self.instance.route(topic, refresh=True) is None:
            return []  # no message has gone there yet
        batches = await asyncio.gather(*(
            self._pull_range(MessageQueue(topic, q.broker_name, q.queue_id),
                             max(q.min_offset, q.max_offset - max_num), q.max_offset, max_num)
            for q in await self.topic_status(topic)))
        found = sorted((m for batch in batches for m in batch),
                       key=lambda m: (m.store_timestamp, m.broker_name, m.queue_offset))
        return found[-max_num:] if max_num > 0 else []

    async def resend_dlq(self, group: str, msg_id: str) -> SendResult:
        """Send the dead message ``msg_id`` (either id; see ``dlq_messages``) of ``group``
        again, to the group's retry topic ``%RETRY%group``, with its body, tags, keys,
        properties and unique id, and its attempts counted from zero. Returns where it went.

        Why the retry topic: only ``group`` consumes it, so the other groups of the original
        topic, which consumed the message, do not get it again, as they would from a send to
        that topic; and its members see it under the original topic, as any retry. RocketMQ
        Dashboard's resend instead asks one online member to consume the message directly
        (CONSUME_MESSAGE_DIRECTLY): that needs a member online and is lost if the member
        fails it, whereas a message in the retry topic waits for the group, survives
        restarts, and is retried (and dead-lettered again) by the usual rules. A group whose
        retryMaxTimes is 0 sends it straight back to the dead-letter queue; POP consumers
        read retries of their own (``%RETRY%group_topic``), not this topic.

        Raises:
            NameServerError: no NameServer answered.
            BrokerError: the broker refused the message.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: no answer within the timeout.
            InvalidArgumentError: ``msg_id`` is not a message id.
            NotFoundError: no such message in the group's dead-letter queue.
        """
        dlq = dlq_topic(group)
        dead = await self.message_by_id(msg_id, dlq)
        if dead.topic != dlq:
            raise NotFoundError(f"message {msg_id} is in {dead.topic}, not in {dlq}")
        properties = {k: v for k, v in dead.properties.items() if k not in _NOT_RESENT}
        origin = properties.get(Property.DLQ_ORIGIN_TOPIC)
        if origin and Property.RETRY_TOPIC not in properties:
            properties[Property.RETRY_TOPIC] = origin  # members see the original topic
        message = Message(retry_topic(group), dead.body, flag=dead.flag)
        message.properties.update(properties)
        return await self._producer(ADMIN_PRODUCER_GROUP).send(message)


def _check_id(msg_id: object) -> None:
    """InvalidArgumentError unless ``msg_id`` is a message id in hex (see ``_MSG_ID``)."""
    if not isinstance(msg_id, str) or not _MSG_ID.fullmatch(msg_id):
        raise InvalidArgumentError(
            f"not a message id: {msg_id!r} (an id has 32 hex digits, 34 from a RocketMQ 5 "
            "client, 56 from an IPv6 host)")
