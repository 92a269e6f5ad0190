"""RocketMQ's message record: the bytes a pull response carries and the CommitLog stores.

Sans-IO: bytes in, objects out. The layout is RocketMQ's v1 record with IPv4 hosts, which every
RocketMQ client decodes (Java <= 4.9 and C++ decode nothing else)::

    TOTALSIZE i32 | MAGIC i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64
    PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 4s+i32 | STORETIMESTAMP i64
    STOREHOST 4s+i32 | RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64 | BODYLEN i32 | BODY
    TOPICLEN u8 | TOPIC | PROPERTIESLEN u16 | PROPERTIES

All integers are big-endian.
"""

from __future__ import annotations

import socket
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import mul
from typing import Any

from . import codec

MAGIC_V1 = codec.MAGIC_V1  # 0xDAA320A7
MAGIC_V2 = codec.MAGIC_V2  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194: filler at the end of a CommitLog file

#: The fixed part of a record, up to and including BODYLEN: each field's name and struct
#: format, in order. Every other description of the layout is derived from this one.
RECORD_FIELDS: tuple[tuple[str, str], ...] = (
    ("total_size", "i"), ("magic", "i"), ("body_crc", "i"), ("queue_id", "i"), ("flag", "i"),
    ("queue_offset", "q"), ("commitlog_offset", "q"), ("sysflag", "i"),
    ("born_timestamp", "q"), ("born_ip", "4s"), ("born_port", "i"),
    ("store_timestamp", "q"), ("store_ip", "4s"), ("store_port", "i"),
    ("reconsume_times", "i"), ("prepared_transaction_offset", "q"), ("body_length", "i"),
)


class RecordStruct(struct.Struct):
    """A Struct over a record's fixed part reading some of its fields: always the four the
    walker checks (TOTALSIZE, MAGIC, SYSFLAG, BODYLEN), the rest as asked; :meth:`index`
    says where a field is in the unpacked tuple."""

    names: tuple[str, ...]

    def index(self, name: str) -> int:
        return self.names.index(name)


_WALKER_FIELDS = ("total_size", "magic", "sysflag", "body_length")


def record_struct(*names: str) -> RecordStruct:
    """A :class:`RecordStruct` reading ``names`` (and the fields the walker needs), skipping
    the others as padding, for readers that need a few fields of many records."""
    known = {name for name, _ in RECORD_FIELDS}
    unknown = set(names) - known
    if unknown:
        raise ValueError(f"not record fields: {sorted(unknown)}")
    wanted = set(names) | set(_WALKER_FIELDS)
    fmt = [">"]
    chosen = []
    for name, code in RECORD_FIELDS:
        if name in wanted:
            fmt.append(code)
            chosen.append(name)
        else:
            fmt.append(f"{struct.calcsize('>' + code)}x")
    result = RecordStruct("".join(fmt))
    result.names = tuple(chosen)
    return result


#: Every field of the fixed part.
RECORD_HEADER = record_struct(*(name for name, _ in RECORD_FIELDS))
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 88
#: Where each field starts inside a record.
RECORD_FIELD_POS: dict[str, int] = {
    name: struct.calcsize(">" + "".join(code for _, code in RECORD_FIELDS[:i]))
    for i, (name, _) in enumerate(RECORD_FIELDS)}
#: A record's size is this plus body, topic and properties lengths (TOPICLEN u8,
#: PROPERTIESLEN u16).
RECORD_OVERHEAD = RECORD_HEADER_SIZE + 1 + 2  # 91
#: The same without TOPICLEN, for writers that keep a topic with its length byte
#: (:func:`topic_field`).
RECORD_FIXED_SIZE = RECORD_HEADER_SIZE + 2  # 90
#: Where STORETIMESTAMP lives inside a record.
STORE_TIMESTAMP_POS = RECORD_FIELD_POS["store_timestamp"]
STORE_TIMESTAMP = struct.Struct(">q")
#: The first eight bytes: TOTALSIZE and MAGIC.
SIZE_AND_MAGIC = struct.Struct(">ii")
_SHORT = struct.Struct(">H")

MAX_PROPERTIES_SIZE = 32767
MAX_TOPIC_LENGTH = 127

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class SysFlag:
    """Bits of a record's SYSFLAG (RocketMQ's MessageSysFlag)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_MASK = 0x700


class Property:
    """Names of the message properties RocketMQ gives meaning to (MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    UNIQ_KEY = "UNIQ_KEY"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    TTL = "TTL"
    MSG_TYPE = "MSG_TYPE"
    CLUSTER = "CLUSTER"
    TRANSACTION_ID = "__transactionId__"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"  # when a timed message is due (the broker sets it)
    SHARDING_KEY = "__SHARDINGKEY"
    DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
    DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
    # rocketq's own: the half messages of an exactly-once sink (broker/transactions/sink.py).
    SINK_NAME = "__SINK_NAME"
    SINK_BATCH = "__SINK_BATCH"
    SINK_TXN = "__SINK_TXN"


#: Bytes that are not a well-formed message record, batch or property string.
MessageFormatError = codec.CodecError


# --------------------------------------------------------------------------- properties


def encode_properties(properties: dict[str, str]) -> str:
    """Render properties as RocketMQ's ``name\\x01value\\x02`` string (trailing ``\\x02``)."""
    return codec.encode_properties(properties)


def decode_properties(data: str | bytes | memoryview) -> dict[str, str]:
    """Parse a property string the way RocketMQ does, skipping malformed segments."""
    if type(data) is not str:
        data = bytes(data).decode("utf-8", "replace")
    return codec.decode_properties(data)


def join_properties(properties: bytes, more: bytes) -> bytes:
    """``properties`` followed by the encoded properties ``more``, with one ``\\x02`` between.

    Clients differ in how a property string ends: the C++ client and Java 5.x end it with the
    separator, Java 4.9.1 to 4.9.8 leave it off (``MessageDecoder.messageProperties2String``).
    Never assume either: glued on without the separator, ``more`` would become part of the
    last property's value (RocketMQ's broker adds it the same way,
    ``CommitLog.needAppendLastPropertySeparator``)."""
    if properties and more and properties[-1] != 2:
        return properties + b"\x02" + more
    return properties + more


#: One property's raw value from an encoded property string (bytes), without a full parse:
#: ``property_value(data, name)``; used on hot paths (dispatch) for TAGS, KEYS and UNIQ_KEY.
property_value = codec.property_value


# --------------------------------------------------------------------------- hashing

_POWERS_OF_31 = [pow(31, k, 1 << 32) for k in range(1024)]


def java_hash(text: str) -> int:
    """Java's ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, as signed int32."""
    if text.isascii():
        units: bytes | list[int] = text.encode()[::-1]
    else:
        raw = text.encode("utf-16-be")
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)][::-1]
    n = len(units)
    if n > len(_POWERS_OF_31):
        _POWERS_OF_31.extend(pow(31, k, 1 << 32) for k in range(len(_POWERS_OF_31), n))
    h = sum(map(mul, units, _POWERS_OF_31)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tag code of a TAGS value: its Java hash, 0 when there is no tag."""
    if not tags:
        return 0
    return java_hash(tags)


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC: CRC32 of the stored body, masked to a non-negative int32 as RocketMQ does."""
    return zlib.crc32(body) & 0x7FFFFFFF


# --------------------------------------------------------------------------- ids


def host_to_bytes(host: str) -> bytes:
    """Four bytes of an IPv4 address (the only host form v1 records carry)."""
    try:
        return socket.inet_aton(host)
    except OSError as exc:
        raise ValueError(f"not an IPv4 address: {host!r}") from exc


def create_offset_msg_id(store_host: bytes, port: int, commitlog_offset: int) -> str:
    """The offset message id: hex of store host, port and CommitLog offset (32 characters)."""
    return (store_host + struct.pack(">iq", port, commitlog_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Split an offset message id into ``(host, port, commitlog_offset)``."""
    if len(msg_id) != 32:
        raise MessageFormatError(f"an offset message id has 32 hex digits, got {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageFormatError(f"not a hex message id: {msg_id!r}") from exc
    if len(raw) != 16:  # fromhex skips blanks: 32 characters may hold fewer digits
        raise MessageFormatError(f"not a hex message id: {msg_id!r}")
    port, offset = struct.unpack(">iq", raw[4:])
    return socket.inet_ntoa(raw[:4]), port, offset


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class MessageRecord:
    """A decoded message record, as stored in the CommitLog and sent in pull responses."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commitlog_offset: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(Property.TAGS)

    @property
    def keys(self) -> list[str]:
        value = self.properties.get(Property.KEYS, "")
        return [k for k in value.split(" ") if k]

    @property
    def offset_msg_id(self) -> str:
        host, port = self.store_host
        return create_offset_msg_id(host_to_bytes(host), port, self.commitlog_offset)

    @property
    def msg_id(self) -> str:
        """UNIQ_KEY when the producer set one, otherwise the offset message id."""
        return self.properties.get(Property.UNIQ_KEY) or self.offset_msg_id


def topic_field(topic: bytes) -> bytes:
    """TOPICLEN and TOPIC as a v1 record stores them; writers keep it per topic."""
    if len(topic) > MAX_TOPIC_LENGTH:
        raise MessageFormatError(f"topic longer than {MAX_TOPIC_LENGTH} bytes")
    return bytes((len(topic),)) + topic


_pack_header = RECORD_HEADER.pack
_pack_short = _SHORT.pack
_crc32 = zlib.crc32


def record_parts(size: int, queue_id: int, flag: int, queue_offset: int, commitlog_offset: int,
                 sysflag: int, born_timestamp: int, born_ip: bytes, born_port: int,
                 store_timestamp: int, store_ip: bytes, store_port: int, reconsume_times: int,
                 prepared_transaction_offset: int, body: bytes | memoryview, topic: bytes,
                 properties: bytes | memoryview, properties_tail: bytes = b"",
                 ) -> tuple[bytes | memoryview, ...]:
    """The one record encoder (v1, IPv4 hosts): the pieces of a record, in order, to be
    joined or copied into a file one after the other.

    ``topic`` is a :func:`topic_field`; the stored properties are ``properties`` followed by
    ``properties_tail`` (a batch element's properties and the suffix the broker adds, without
    concatenating them first). ``size`` is the record's TOTALSIZE, ``RECORD_FIXED_SIZE`` plus
    the lengths of body, topic and both property parts: writers compute it first to decide
    where the record goes. Lengths are the caller's to check (:data:`MAX_PROPERTIES_SIZE`).
    """
    return (_pack_header(size, MAGIC_V1, _crc32(body) & 0x7FFFFFFF, queue_id, flag,
                         queue_offset, commitlog_offset, sysflag, born_timestamp, born_ip,
                         born_port, store_timestamp, store_ip, store_port, reconsume_times,
                         prepared_transaction_offset, len(body)),
            body, topic, _pack_short(len(properties) + len(properties_tail)), properties,
            properties_tail)


def encode_record(record: MessageRecord) -> bytes:
    """Encode a decoded record again, byte for byte as the CommitLog writes it."""
    topic = topic_field(record.topic.encode())
    props = encode_properties(record.properties).encode()
    if len(props) > MAX_PROPERTIES_SIZE:
        raise MessageFormatError(f"properties longer than {MAX_PROPERTIES_SIZE} bytes")
    body = bytes(record.body)
    size = RECORD_FIXED_SIZE + len(body) + len(topic) + len(props)
    return b"".join(record_parts(
        size, record.queue_id, record.flag, record.queue_offset, record.commitlog_offset,
        record.sysflag, record.born_timestamp, host_to_bytes(record.born_host[0]),
        record.born_host[1], record.store_timestamp, host_to_bytes(record.store_host[0]),
        record.store_host[1], record.reconsume_times, record.prepared_transaction_offset,
        body, topic, props))


def walk_records(view: bytes | bytearray | memoryview | Any, pos: int = 0,
                 end: int | None = None, *, header: RecordStruct = RECORD_HEADER,
                 check_crc: bool = False) -> Iterator[tuple[int, tuple[Any, ...], int, int, int]]:
    """The one checked walker over records laid back to back, from ``pos`` to ``end`` (the
    buffer's end by default), copying nothing.

    Yields per record ``(pos, fields, topic_at, topic_len, props_at)``: where it starts, the
    fixed fields ``header`` reads (all of them by default; :func:`record_struct` makes a
    narrower one for hot readers), where the topic starts, its length, and where the
    properties start (they run to the record's end, ``pos + fields[0]``). Never trusts a
    length: a bad one, a record running past ``end``, IPv6 hosts or, with ``check_crc`` (full
    header only), a body whose CRC does not match raise MessageFormatError at that record,
    after the sound ones before it were yielded. Decoding, dispatch, recovery, filters and the
    Spark columns all read records through it.
    """
    if check_crc and header is not RECORD_HEADER:
        raise ValueError("check_crc needs the full RECORD_HEADER")
    return codec.walk(view, pos, len(view) if end is None else end, header.unpack_from,
                      header.index("sysflag"), check_crc)


def record_layout(view: bytes | bytearray | memoryview | Any, pos: int = 0,
                  end: int | None = None, *, check_crc: bool = False,
                  ) -> tuple[tuple[Any, ...], int, int, int]:
    """The record at ``pos`` as :func:`walk_records` finds it: ``(fields, topic_at,
    topic_len, props_at)``; MessageFormatError when there is no sound record there."""
    for _pos, fields, topic_at, topic_len, props_at in walk_records(view, pos, end,
                                                                   check_crc=check_crc):
        return fields, topic_at, topic_len, props_at
    raise MessageFormatError(f"no record at {pos}")


def plain_body(body: bytes, sysflag: int) -> bytes:
    """The body as the producer gave it: zlib-decompressed when SYSFLAG says COMPRESSED. A
    body another codec compressed is handed over as stored."""
    if sysflag & SysFlag.COMPRESSED:
        try:
            return zlib.decompress(body)
        except zlib.error:
            pass
    return body


def decode_record(buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = False,
                  decompress: bool = False) -> MessageRecord:
    """Decode the record at ``pos``. Never trusts a length: a bad one raises MessageFormatError."""
    view = memoryview(buf)
    fields, topic_at, topic_len, props_at = record_layout(view, pos, check_crc=check_crc)
    return _record(view, pos, fields, topic_at, topic_len, props_at, decompress)


def _record(view: memoryview, pos: int, fields: tuple[Any, ...], topic_at: int, topic_len: int,
            props_at: int, decompress: bool) -> MessageRecord:
    (total, _magic, crc, queue_id, flag, queue_offset, phys, sysflag, born_ts, born_ip,
     born_port, store_ts, store_ip, store_port, reconsume, prepared, body_len) = fields
    body_at = pos + RECORD_HEADER_SIZE
    body = bytes(view[body_at:body_at + body_len])
    if decompress:
        body = plain_body(body, sysflag)
    try:
        topic = bytes(view[topic_at:topic_at + topic_len]).decode()
    except UnicodeDecodeError:
        # Topic names are ASCII (TopicValidator): such a record is damaged, not a message.
        raise MessageFormatError(f"the topic of the record at {pos} is not UTF-8") from None
    return MessageRecord(
        topic=topic, body=body,
        queue_id=queue_id, flag=flag, queue_offset=queue_offset,
        commitlog_offset=phys, sysflag=sysflag, born_timestamp=born_ts,
        born_host=(socket.inet_ntoa(born_ip), born_port), store_timestamp=store_ts,
        store_host=(socket.inet_ntoa(store_ip), store_port), reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        properties=decode_properties(view[props_at:pos + total]), body_crc=crc,
        store_size=total,
    )


def decode_records(buf: bytes | memoryview, *, decompress: bool = False) -> list[MessageRecord]:
    """Decode records laid back to back, as in a PULL_MESSAGE or QUERY_MESSAGE body."""
    view = memoryview(buf)
    return [_record(view, pos, fields, topic_at, topic_len, props_at, decompress)
            for pos, fields, topic_at, topic_len, props_at in walk_records(view)]


#: The elements of a batch body (SEND_BATCH_MESSAGE, or a C++ batch) without copying them:
#: ``split_batch(body)`` gives ``(flag, body start, body length, properties start,
#: properties length)`` each. An element is ``[TOTALSIZE][MAGIC][BODYCRC][FLAG][BODYLEN][body]
#: [PROPLEN i16][properties]``; lengths that do not add up raise MessageFormatError.
split_batch = codec.split_batch


def encode_batch(elements: Sequence[tuple[int, bytes, str | bytes]]) -> bytes:
    """Encode ``(flag, body, properties)`` elements as a batch body; the properties as a
    property string or already encoded."""
    return codec.encode_batch([(flag, body, props.encode() if type(props) is str else props)
                               for flag, body, props in elements])


def record_properties(record: bytes | memoryview) -> dict[str, str]:
    """The properties of an encoded record, without decoding the rest (for filters)."""
    view = memoryview(record)
    fields, _topic_at, _topic_len, props_at = record_layout(view)
    return decode_properties(view[props_at:fields[0]])
