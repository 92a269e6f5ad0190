"""What users send and receive: Message, MessageQueue, SendResult, ReceivedMessage.

A pulled message's lazy decoding is in ``pulled``, the client's message ids in
``unique_ids``."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..protocol import MessageRecord, Property, is_retry_topic
from ..protocol.message import plain_body
from .checks import check_type, type_name
from .errors import ArgumentTypeError, InvalidArgumentError, MessageValidationError


class Keys(list[str]):
    """A message's keys: a list of str (index it, compare it with a list) that prints as
    RocketMQ's ``Message.getKeys()`` returns them, joined by spaces: ``print(message.keys)``
    shows ``order-17``, not ``['order-17']``."""

    __slots__ = ()

    def __str__(self) -> str:
        return " ".join(self)


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


#: Delay levels of a broker's default ``messageDelayLevel`` (1 s 5 s ... 1 h 2 h).
DELAY_LEVELS = 18
#: Epoch milliseconds below this (March 1973) are taken for seconds given by mistake.
_EPOCH_MS_FLOOR = 100_000_000_000


def _body_bytes(body: object) -> bytes:
    """``body`` as bytes: a bytes-like object as it is, a str in UTF-8; anything else is
    refused rather than turned into something else (``bytes(123)`` is 123 zero bytes)."""
    if type(body) is bytes:
        return body
    if isinstance(body, str):
        return body.encode()
    try:
        return bytes(memoryview(body))  # type: ignore[arg-type]
    except TypeError:
        raise ArgumentTypeError(f"body must be bytes (or bytearray, memoryview, str), not "
                                f"{type_name(body)}") from None


def _delay_ms(delay: object) -> int:
    """TIMER_DELAY_MS for ``delay``: seconds (int or float) or a timedelta."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    else:
        check_type(delay, (int, float), "delay", "seconds (an int or float) or a timedelta")
        seconds = float(delay)  # type: ignore[arg-type]
    if not math.isfinite(seconds) or seconds < 0:
        raise MessageValidationError(f"delay must be 0 seconds or more, not {delay!r}")
    return round(seconds * 1000)


def _deliver_ms(deliver_at: object) -> int:
    """TIMER_DELIVER_MS for ``deliver_at``: a datetime (a naive one is local time) or
    milliseconds since the epoch."""
    if isinstance(deliver_at, datetime):
        return round(deliver_at.timestamp() * 1000)
    check_type(deliver_at, (int, float), "deliver_at",
               "a datetime or milliseconds since the epoch (an int)")
    ms = float(deliver_at)  # type: ignore[arg-type]
    if not math.isfinite(ms) or ms < 0:
        raise MessageValidationError(f"deliver_at must be a time since the epoch, not "
                                     f"{deliver_at!r}")
    if 0 < ms < _EPOCH_MS_FLOOR:
        raise MessageValidationError(
            f"deliver_at is in milliseconds since the epoch; {deliver_at!r} looks like seconds "
            "(use time.time() * 1000, or a datetime)")
    return round(ms)


class Message:
    """A message to send.

    >>> Message("Orders", b'{"id": 17}', tags="paid", keys=["order-17"],
    ...         properties={"region": "eu"})

    ``body`` is bytes (or a bytearray, memoryview; a str is sent as UTF-8). ``keys`` is one key (a
    str) or several, each without spaces (they are joined by spaces on the wire); brokers
    index them for ``Admin.query_messages``. A message can wait before delivery: by
    ``delay_level`` (1..18, the levels of the broker's ``messageDelayLevel``, by default
    1 s 5 s 10 s 30 s 1 m .. 10 m 20 m 30 m 1 h 2 h), by ``delay`` (seconds, or a timedelta) or
    until ``deliver_at`` (a datetime, or milliseconds since the epoch); the last two are
    RocketMQ 5's timer messages (``TIMER_DELAY_MS``, ``TIMER_DELIVER_MS``, up to the broker's
    ``timerMaxDelaySec``, 3 days by default). Give one of the three at most.

    Raises:
        ArgumentTypeError: an argument of the wrong type, named in the message (an int
            body, a topic that is not a str, a key that is not a str).
        MessageValidationError: a key with a space or an empty key, a property with a
            reserved separator character, a delay out of range, or more than one of
            ``delay_level``, ``delay`` and ``deliver_at``.
    """

    __slots__ = ("topic", "body", "flag", "properties")

    def __init__(self, topic: str, body: bytes | bytearray | memoryview | str, *,
                 tags: str | None = None, keys: Iterable[str] | str | None = None,
                 properties: Mapping[str, str] | None = None, flag: int = 0,
                 delay_level: int | None = None, delay: float | timedelta | None = None,
                 deliver_at: datetime | float | None = None) -> None:
        if type(topic) is not str:
            check_type(topic, str, "topic", "a str")
        self.topic = topic
        self.body = body if type(body) is bytes else _body_bytes(body)
        if type(flag) is not int:
            check_type(flag, int, "flag", "an int")
        self.flag = flag
        self.properties: dict[str, str] = {}
        if properties:
            for name, value in properties.items():
                self.put_property(name, value)
        if tags is not None:
            if type(tags) is not str:
                check_type(tags, str, "tags", "a str")
            if tags:
                self.properties[Property.TAGS] = tags
        if keys is not None:
            self.keys = keys
        if delay_level or delay is not None or deliver_at is not None:
            given = [name for name, value in (("delay_level", delay_level), ("delay", delay),
                                              ("deliver_at", deliver_at))
                     if value is not None and (name != "delay_level" or value)]
            if len(given) > 1:
                raise MessageValidationError(
                    f"give one of delay_level, delay and deliver_at, not {' and '.join(given)}")
            if delay_level:
                self.delay_level = delay_level
            elif delay is not None:
                self.properties[Property.TIMER_DELAY_MS] = str(_delay_ms(delay))
            else:
                self.properties[Property.TIMER_DELIVER_MS] = str(_deliver_ms(deliver_at))
        elif delay_level is not None:
            check_type(delay_level, int, "delay_level", f"an int from 1 to {DELAY_LEVELS}")

    def put_property(self, name: str, value: object) -> None:
        """Set a user property (``str(value)``); consumers read it from ``properties``.

        Raises:
            ArgumentTypeError: ``name`` is not a str.
            MessageValidationError: the name or value holds a reserved separator character.
        """
        check_type(name, str, "a property name", "a str")
        text = str(value)
        if "\x01" in name or "\x02" in name or "\x01" in text or "\x02" in text:
            raise MessageValidationError(
                f"property {name!r} contains a reserved separator character")
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
    def keys(self) -> Keys:
        """The message's keys: a list that prints as RocketMQ's ``getKeys()`` reads, the keys
        joined by spaces (``order-17``; empty when there is none)."""
        return Keys(k for k in self.properties.get(Property.KEYS, "").split(" ") if k)

    @keys.setter
    def keys(self, keys: Iterable[str] | str) -> None:
        if isinstance(keys, str):
            keys = [keys]
        elif type(keys) is not list:
            check_type(keys, Iterable, "keys", "a str or an iterable of str")
            keys = list(keys)
        for key in keys:
            if type(key) is not str:
                check_type(key, str, "keys: each key", "a str")
            if not key:
                raise MessageValidationError("keys: a key is empty")
            if " " in key:
                raise MessageValidationError(
                    f"keys: the key {key!r} contains a space; keys travel joined by spaces, "
                    "so it would become several keys (use e.g. '-' instead)")
        if keys:
            self.properties[Property.KEYS] = " ".join(keys)
        else:
            self.properties.pop(Property.KEYS, None)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(Property.DELAY, "0") or 0)

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        check_type(level, int, "delay_level", f"an int from 1 to {DELAY_LEVELS}")
        if not 0 <= level <= DELAY_LEVELS:
            raise MessageValidationError(
                f"delay_level must be from 1 to {DELAY_LEVELS} (the levels of a broker's "
                f"default messageDelayLevel, 1 s to 2 h), not {level}; for other delays use "
                "delay= (seconds) or deliver_at=")
        if level:
            self.properties[Property.DELAY] = str(level)
        else:
            self.properties.pop(Property.DELAY, None)

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
    """A message as a consumer sees it (RocketMQ's MessageExt).

    A message received by a ``SimpleConsumer`` also has its ``receipt_handle`` (the
    ``POP_CK`` text the broker handed out with it, which acks it); other consumers' messages
    have None there."""

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
    #: What acks (or changes the invisible time of) a message a SimpleConsumer received:
    #: RocketMQ's ``POP_CK`` text; None for messages pulled or pushed.
    receipt_handle: str | None = field(default=None, repr=False)

    @property
    def tags(self) -> str | None:
        return self.properties.get(Property.TAGS)

    @property
    def delivery_attempt(self) -> int:
        """Which delivery this is: 1 the first time, 2 the first time it came again (a 5.x
        client's ``deliveryAttempt``: ``reconsume_times + 1``)."""
        return self.reconsume_times + 1

    @property
    def keys(self) -> Keys:
        """The message's keys: a list that prints as RocketMQ's ``getKeys()`` reads, the keys
        joined by spaces (``order-17``; empty when there is none)."""
        return Keys(k for k in self.properties.get(Property.KEYS, "").split(" ") if k)

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


def create_reply(request: ReceivedMessage, body: bytes | str) -> Message:
    """The reply to a request message (send it with any producer); a str ``body`` is sent
    UTF-8 encoded."""
    props = request.properties
    correlation = props.get(Property.CORRELATION_ID)
    client = props.get(Property.REPLY_TO_CLIENT)
    if not correlation or not client:
        raise InvalidArgumentError(
            "request: the message is not a request (no CORRELATION_ID or REPLY_TO_CLIENT)")
    reply = Message(f"{props.get(Property.CLUSTER, 'DefaultCluster')}_REPLY_TOPIC",
                    body.encode() if isinstance(body, str) else body)
    reply.properties.update({Property.MSG_TYPE: "reply", Property.CORRELATION_ID: correlation,
                             Property.REPLY_TO_CLIENT: client,
                             Property.TTL: props.get(Property.TTL, "3000")})
    return reply
