"""What users send and receive: Message, MessageQueue, SendResult, ReceivedMessage."""

from __future__ import annotations

import enum
import itertools
import os
import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..protocol import MessageRecord, Property, is_retry_topic
from ..protocol.codec import pulled
from ..protocol.message import (
    SysFlag,
    create_offset_msg_id,
    decode_properties,
    plain_body,
)


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class Message:
    """A message to send.

    >>> Message("Orders", b'{"id": 17}', tags="paid", keys=["order-17"],
    ...         properties={"region": "eu"})
    """

    __slots__ = ("topic", "body", "flag", "properties")

    def __init__(self, topic: str, body: bytes | str, *, tags: str | None = None,
                 keys: Iterable[str] | str | None = None,
                 properties: Mapping[str, str] | None = None, flag: int = 0,
                 delay_level: int | None = None) -> None:
        self.topic = topic
        self.body = body.encode() if isinstance(body, str) else bytes(body)
        self.flag = flag
        self.properties: dict[str, str] = {}
        if properties:
            for name, value in properties.items():
                self.put_property(name, value)
        if tags:
            self.properties[Property.TAGS] = tags
        if keys:
            self.keys = [keys] if isinstance(keys, str) else list(keys)
        if delay_level:
            self.properties[Property.DELAY] = str(delay_level)

    def put_property(self, name: str, value: object) -> None:
        text = str(value)
        if "\x01" in name or "\x02" in name or "\x01" in text or "\x02" in text:
            raise ValueError(f"property {name!r} contains a reserved separator character")
        self.properties[name] = text

    @property
    def tags(self) -> str | None:
        return self.properties.get(Property.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[Property.TAGS] = value
        else:
            self.properties.pop(Property.TAGS, None)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(Property.KEYS, "").split(" ") if k]

    @keys.setter
    def keys(self, keys: Iterable[str]) -> None:
        self.properties[Property.KEYS] = " ".join(keys)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(Property.DELAY, "0") or 0)

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self.properties[Property.DELAY] = str(level)

    def __repr__(self) -> str:
        return f"Message({self.topic!r}, {len(self.body)} bytes, properties={self.properties})"


@dataclass(frozen=True)
class MessageSelector:
    """What a consumer subscribes to: tags (``"*"`` or ``"a || b"``) or a SQL92 condition on
    properties, evaluated by the broker (which needs ``enablePropertyFilter=true``)."""

    expression: str
    type: str = "TAG"

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        return cls(expression or "*", "TAG")

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """A SQL92 selector; a bad expression raises ``SqlError`` here, before subscribing."""
        from ..protocol.sql92 import compile_selector

        compile_selector(expression)
        return cls(expression, "SQL92")


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass
class SendResult:
    """Where a message went: ``msg_id`` is the client's unique id (UNIQ_KEY),
    ``offset_msg_id`` the broker's (store host and CommitLog offset)."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


@dataclass
class ReceivedMessage:
    """A message as a consumer sees it (RocketMQ's MessageExt)."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    broker_name: str
    properties: dict[str, str]
    msg_id: str
    offset_msg_id: str
    born_timestamp: int
    store_timestamp: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    reconsume_times: int
    flag: int = 0
    sysflag: int = 0
    store_size: int = 0
    _record: MessageRecord | None = field(default=None, repr=False)

    @property
    def tags(self) -> str | None:
        return self.properties.get(Property.TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(Property.KEYS, "").split(" ") if k]

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @classmethod
    def from_record(cls, record: MessageRecord, broker_name: str) -> ReceivedMessage:
        body = plain_body(record.body, record.sysflag)
        topic = record.topic
        retry_of = record.properties.get(Property.RETRY_TOPIC)
        if retry_of and is_retry_topic(topic):
            topic = retry_of  # consumers see the original topic of a retried message
        offset_id = record.offset_msg_id
        return cls(topic, body, record.queue_id, record.queue_offset, record.commitlog_offset,
                   broker_name, record.properties,
                   record.properties.get(Property.UNIQ_KEY) or offset_id, offset_id,
                   record.born_timestamp, record.store_timestamp, record.born_host,
                   record.store_host, record.reconsume_times, record.flag, record.sysflag,
                   record.store_size, record)


class _PulledMessage(ReceivedMessage):
    """A pulled message whose properties, ids and hosts are decoded on first use: a consumer
    that reads only bodies pays for none of them."""

    @property  # type: ignore[override]
    def properties(self) -> dict[str, str]:
        d = self.__dict__
        props = d.get("_props")
        if props is None:
            props = d["_props"] = decode_properties(d["_raw_props"])
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self.__dict__["_props"] = value

    @property  # type: ignore[override]
    def offset_msg_id(self) -> str:
        d = self.__dict__
        value = d.get("_offset_id")
        if value is None:
            value = d["_offset_id"] = create_offset_msg_id(d["_store_ip"], d["_store_port"],
                                                           self.commitlog_offset)
        return value

    @offset_msg_id.setter
    def offset_msg_id(self, value: str) -> None:
        self.__dict__["_offset_id"] = value

    @property  # type: ignore[override]
    def msg_id(self) -> str:
        d = self.__dict__
        value = d.get("_msg_id")
        if value is None:
            value = d["_msg_id"] = self.properties.get(Property.UNIQ_KEY) or self.offset_msg_id
        return value

    @msg_id.setter
    def msg_id(self, value: str) -> None:
        self.__dict__["_msg_id"] = value

    @property  # type: ignore[override]
    def born_host(self) -> tuple[str, int]:
        d = self.__dict__
        return socket.inet_ntoa(d["_born_ip"]), d["_born_port"]

    @born_host.setter
    def born_host(self, value: tuple[str, int]) -> None:
        self.__dict__["_born_ip"], self.__dict__["_born_port"] = \
            socket.inet_aton(value[0]), value[1]

    @property  # type: ignore[override]
    def store_host(self) -> tuple[str, int]:
        d = self.__dict__
        return socket.inet_ntoa(d["_store_ip"]), d["_store_port"]

    @store_host.setter
    def store_host(self, value: tuple[str, int]) -> None:
        self.__dict__["_store_ip"], self.__dict__["_store_port"] = \
            socket.inet_aton(value[0]), value[1]


_topics: dict[bytes, str] = {}


def pulled_messages(data: bytes, broker_name: str) -> list[ReceivedMessage]:
    """The messages of a pull answer's body, decoded in one pass (``codec.pulled``) with
    their properties left encoded until asked for. A retried message shows its original
    topic, as from :meth:`ReceivedMessage.from_record`."""
    out = []
    append = out.append
    new = object.__new__
    cls = _PulledMessage
    compressed = SysFlag.COMPRESSED
    topics = _topics
    for (raw_topic, body, queue_id, flag, queue_offset, phys, sysflag, born_ts, born_ip,
         born_port, store_ts, store_ip, store_port, reconsume, raw_props, size) in pulled(data):
        topic = topics.get(raw_topic)
        if topic is None:
            topic = raw_topic.decode()
            if len(topics) < 10_000:
                topics[raw_topic] = topic
        m = new(cls)
        m.__dict__ = {
            "topic": topic, "body": plain_body(body, sysflag) if sysflag & compressed
            else body, "queue_id": queue_id, "queue_offset": queue_offset,
            "commitlog_offset": phys, "broker_name": broker_name,
            "born_timestamp": born_ts, "store_timestamp": store_ts,
            "reconsume_times": reconsume, "flag": flag, "sysflag": sysflag,
            "store_size": size, "_raw_props": raw_props, "_born_ip": born_ip,
            "_born_port": born_port, "_store_ip": store_ip, "_store_port": store_port}
        if topic.startswith("%RETRY%"):
            retry_of = m.properties.get(Property.RETRY_TOPIC)
            if retry_of:
                m.topic = retry_of
        append(m)
    return out


def create_reply(request: ReceivedMessage, body: bytes | str) -> Message:
    """The reply to a request message (send it with any producer)."""
    props = request.properties
    correlation = props.get(Property.CORRELATION_ID)
    client = props.get(Property.REPLY_TO_CLIENT)
    if not correlation or not client:
        raise ValueError("the message is not a request (no CORRELATION_ID or REPLY_TO_CLIENT)")
    reply = Message(f"{props.get(Property.CLUSTER, 'DefaultCluster')}_REPLY_TOPIC", body)
    reply.properties.update({Property.MSG_TYPE: "reply", Property.CORRELATION_ID: correlation,
                             Property.REPLY_TO_CLIENT: client,
                             Property.TTL: props.get(Property.TTL, "3000")})
    return reply


# ---------------------------------------------------------------------------- unique ids


class UniqueIdGenerator:
    """Client message ids (UNIQ_KEY) as RocketMQ's MessageClientIDSetter makes them:
    hex of ip(4) pid(2) random(4) ms-since-month-start(4) counter(2)."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = (ip + struct.pack(">H", os.getpid() & 0xFFFF)
                        + os.urandom(4)).hex().upper()
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._month_start = 0.0
        self._next_month = 0.0

    def _roll_month(self, now: float) -> None:
        t = time.localtime(now)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start = start
        self._next_month = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))

    def next(self) -> str:
        now = time.time()
        if now >= self._next_month:
            with self._lock:
                if now >= self._next_month:
                    self._roll_month(now)
        counter = next(self._counter) & 0xFFFF  # itertools.count is atomic under the GIL
        since = int((now - self._month_start) * 1000) & 0xFFFFFFFF
        return f"{self._prefix}{since:08X}{counter:04X}"


unique_ids = UniqueIdGenerator()
