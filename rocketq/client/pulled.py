"""Pulled messages as consumers read them: the records of a pull (or POP) answer's body,
walked once by ``codec.pulled``, become ReceivedMessage objects that keep the tuple that walk
made and build each field from it only when asked (the topic and body at once; properties,
ids and hosts when a reader wants them). This is the consumers' per-message path, so it does
as little as it can per message."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from ..protocol import Property
from ..protocol.codec import pulled
from ..protocol.message import (
    create_offset_msg_id,
    decode_properties,
    plain_body,
)
from .message import ReceivedMessage


def _fixed(i: int) -> property:
    """A field of a pulled message, read from the tuple ``codec.pulled`` made for it."""

    def get(self: _PulledMessage) -> Any:
        return self._f[i]

    def put(self: _PulledMessage, value: Any) -> None:
        f = self._f
        self._f = (*f[:i], value, *f[i + 1:])

    return property(get, put)


def _cached(name: str, make: Callable[[_PulledMessage], Any]) -> property:
    """A field made from the record on first use (``make``), then kept in slot ``name``."""

    def get(self: _PulledMessage) -> Any:
        value = getattr(self, name)
        if value is None:
            value = make(self)
            setattr(self, name, value)
        return value

    def put(self: _PulledMessage, value: Any) -> None:
        setattr(self, name, value)

    return property(get, put)


def _host(ip_at: int) -> property:
    def get(self: _PulledMessage) -> tuple[str, int]:
        f = self._f
        return socket.inet_ntoa(f[ip_at]), f[ip_at + 1]

    def put(self: _PulledMessage, value: tuple[str, int]) -> None:
        f = self._f
        self._f = (*f[:ip_at], socket.inet_aton(value[0]), value[1], *f[ip_at + 2:])

    return property(get, put)


class _PulledMessage(ReceivedMessage):
    """A pulled message that keeps the tuple ``codec.pulled`` read from its record and makes
    each field from it when asked: the topic and body at once, properties, ids and hosts only
    when a reader wants them."""

    __slots__ = ("_f", "_broker", "_topic", "_body", "_props", "_msg_id", "_offset_id")

    # codec.pulled: (topic, body, queue_id, flag, queue_offset, commitlog_offset, sysflag,
    # born_timestamp, born_ip, born_port, store_timestamp, store_ip, store_port,
    # reconsume_times, properties, store_size)
    queue_id = _fixed(2)
    flag = _fixed(3)
    queue_offset = _fixed(4)
    commitlog_offset = _fixed(5)
    sysflag = _fixed(6)
    born_timestamp = _fixed(7)
    born_host = _host(8)
    store_timestamp = _fixed(10)
    store_host = _host(11)
    reconsume_times = _fixed(13)
    store_size = _fixed(15)
    topic = _cached("_topic", lambda m: _topic_name(m._f[0]))
    body = _cached("_body", lambda m: plain_body(m._f[1], m._f[6]))
    properties = _cached("_props", lambda m: decode_properties(m._f[14]))
    offset_msg_id = _cached("_offset_id", lambda m: create_offset_msg_id(
        m._f[11], m._f[12], m._f[5]))
    msg_id = _cached("_msg_id", lambda m: m.properties.get(Property.UNIQ_KEY)
                     or m.offset_msg_id)
    broker_name = property(lambda m: m._broker, lambda m, value: setattr(m, "_broker", value))
    _record = None


_topics: dict[bytes, str] = {}


def _topic_name(raw: bytes) -> str:
    topic = _topics.get(raw)
    if topic is None:
        topic = raw.decode()
        if len(_topics) < 10_000:
            _topics[raw] = topic
    return topic


def pulled_messages(data: bytes, broker_name: str) -> list[ReceivedMessage]:
    """The messages of a pull answer's body, read in one pass (``codec.pulled``); each makes
    its fields from that pass when they are asked for. A retried message shows its original
    topic, as from :meth:`ReceivedMessage.from_record`."""
    out = []
    append = out.append
    new = object.__new__
    cls = _PulledMessage
    for fields in pulled(data):
        m = new(cls)
        m._f = fields
        m._broker = broker_name
        m._topic = m._body = m._props = m._msg_id = m._offset_id = None
        if fields[0].startswith(b"%RETRY%"):
            retry_of = m.properties.get(Property.RETRY_TOPIC)
            if retry_of:
                m._topic = retry_of
        append(m)
    return out
