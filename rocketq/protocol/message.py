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
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import mul
from typing import Any

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194: filler at the end of a CommitLog file

#: The fixed part of a record, up to and including BODYLEN.
RECORD_HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 88
#: A record's size is this plus body, topic and properties lengths.
RECORD_OVERHEAD = RECORD_HEADER_SIZE + 1 + 2  # 91
#: Where STORETIMESTAMP lives inside a record.
STORE_TIMESTAMP_POS = 56
STORE_TIMESTAMP = struct.Struct(">q")
#: The first eight bytes: TOTALSIZE and MAGIC.
SIZE_AND_MAGIC = struct.Struct(">ii")

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
    SHARDING_KEY = "__SHARDINGKEY"
    DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
    DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"


class MessageFormatError(ValueError):
    """Bytes that are not a well-formed message record or property string."""


# --------------------------------------------------------------------------- properties


def encode_properties(properties: dict[str, str]) -> str:
    """Render properties as RocketMQ's ``name\\x01value\\x02`` string (trailing ``\\x02``)."""
    if not properties:
        return ""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items())


def decode_properties(data: str | bytes | memoryview) -> dict[str, str]:
    """Parse a property string the way RocketMQ does, skipping malformed segments."""
    if not isinstance(data, str):
        data = bytes(data).decode("utf-8", "replace")
    result: dict[str, str] = {}
    for segment in data.split("\x02"):
        name, sep, value = segment.partition("\x01")
        if sep and name:
            result[name] = value
    return result


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


def property_value(data: bytes, name: bytes) -> bytes | None:
    """Return one property's raw value from an encoded property string, without a full parse.

    ``name`` is the property name as bytes. Used on hot paths (dispatch) where only
    TAGS, KEYS and UNIQ_KEY are needed.
    """
    needle = name + b"\x01"
    start = 0
    while True:
        i = data.find(needle, start)
        if i < 0:
            return None
        if i == 0 or data[i - 1] == 2:
            begin = i + len(needle)
            end = data.find(b"\x02", begin)
            return data[begin:] if end < 0 else data[begin:end]
        start = i + 1


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


def encode_record(record: MessageRecord) -> bytes:
    """Encode a record (v1, IPv4 hosts). The CommitLog builds its own on the append path."""
    topic = record.topic.encode()
    props = encode_properties(record.properties).encode()
    if len(topic) > MAX_TOPIC_LENGTH:
        raise MessageFormatError(f"topic longer than {MAX_TOPIC_LENGTH} bytes")
    if len(props) > MAX_PROPERTIES_SIZE:
        raise MessageFormatError(f"properties longer than {MAX_PROPERTIES_SIZE} bytes")
    body = bytes(record.body)
    total = RECORD_OVERHEAD + len(body) + len(topic) + len(props)
    header = RECORD_HEADER.pack(
        total, MAGIC_V1, body_crc(body), record.queue_id, record.flag, record.queue_offset,
        record.commitlog_offset, record.sysflag, record.born_timestamp,
        host_to_bytes(record.born_host[0]), record.born_host[1], record.store_timestamp,
        host_to_bytes(record.store_host[0]), record.store_host[1], record.reconsume_times,
        record.prepared_transaction_offset, len(body),
    )
    return b"".join((header, body, bytes((len(topic),)), topic, len(props).to_bytes(2, "big"),
                     props))


def record_layout(view: memoryview, pos: int = 0) -> tuple[tuple[Any, ...], int, int, int]:
    """Check the record at ``pos`` and find its parts, without copying any: returns the 17
    header fields (RECORD_HEADER), where the topic starts, the topic's length and where the
    properties start (they run to the record's end). Never trusts a length: a bad one raises
    MessageFormatError."""
    end = len(view)
    if end - pos < RECORD_HEADER_SIZE:
        raise MessageFormatError("truncated record header")
    fields = RECORD_HEADER.unpack_from(view, pos)
    total, magic, sysflag, body_len = fields[0], fields[1], fields[7], fields[16]
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise MessageFormatError(f"bad magic code {magic:#x} at {pos}")
    if sysflag & (SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6):
        raise MessageFormatError("IPv6 host records are not supported")
    if total < RECORD_OVERHEAD or pos + total > end:
        raise MessageFormatError(f"bad total size {total} at {pos}")
    if body_len < 0 or RECORD_OVERHEAD + body_len > total:
        raise MessageFormatError(f"bad body length {body_len} at {pos}")
    p = pos + RECORD_HEADER_SIZE + body_len
    if magic == MAGIC_V1:
        topic_len = view[p]
        p += 1
    else:
        topic_len = int.from_bytes(view[p:p + 2], "big")
        p += 2
    topic_at = p
    p += topic_len
    if p + 2 > pos + total:
        raise MessageFormatError(f"bad topic length at {pos}")
    props_len = int.from_bytes(view[p:p + 2], "big")
    p += 2
    if p + props_len != pos + total:
        raise MessageFormatError(f"record lengths do not add up at {pos}")
    return fields, topic_at, topic_len, p


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
    fields, topic_at, topic_len, props_at = record_layout(view, pos)
    (total, _magic, crc, queue_id, flag, queue_offset, phys, sysflag, born_ts, born_ip,
     born_port, store_ts, store_ip, store_port, reconsume, prepared, body_len) = fields
    body_at = pos + RECORD_HEADER_SIZE
    body = bytes(view[body_at:body_at + body_len])
    topic = bytes(view[topic_at:topic_at + topic_len]).decode()
    props = decode_properties(view[props_at:pos + total])
    if check_crc and body_crc(body) != crc:
        raise MessageFormatError(f"body CRC mismatch at {pos}")
    if decompress:
        body = plain_body(body, sysflag)
    return MessageRecord(
        topic=topic, body=body, queue_id=queue_id, flag=flag, queue_offset=queue_offset,
        commitlog_offset=phys, sysflag=sysflag, born_timestamp=born_ts,
        born_host=(socket.inet_ntoa(born_ip), born_port), store_timestamp=store_ts,
        store_host=(socket.inet_ntoa(store_ip), store_port), reconsume_times=reconsume,
        prepared_transaction_offset=prepared, properties=props, body_crc=crc, store_size=total,
    )


def decode_records(buf: bytes | memoryview, *, decompress: bool = False) -> list[MessageRecord]:
    """Decode records laid back to back, as in a PULL_MESSAGE or QUERY_MESSAGE body."""
    view = memoryview(buf)
    out = []
    pos = 0
    while pos < len(view):
        rec = decode_record(view, pos, decompress=decompress)
        out.append(rec)
        pos += rec.store_size
    return out


_BATCH_ELEMENT = struct.Struct(">iiiii")


def split_batch(body: bytes | memoryview) -> list[tuple[int, int, int, int, int]]:
    """Find the elements of a batch body (SEND_BATCH_MESSAGE, or a C++ batch) without copying
    them: ``(flag, body start, body length, properties start, properties length)`` each. An
    element is ``[TOTALSIZE][MAGIC][BODYCRC][FLAG][BODYLEN][body][PROPLEN i16][properties]``;
    lengths that do not add up raise MessageFormatError."""
    end = len(body)
    unpack = _BATCH_ELEMENT.unpack_from
    head = _BATCH_ELEMENT.size
    out = []
    pos = 0
    while pos < end:
        if end - pos < head + 2:
            raise MessageFormatError(f"truncated batch element at {pos}")
        total, _magic, _crc, flag, body_len = unpack(body, pos)
        p = pos + head
        if body_len < 0 or p + body_len + 2 > end:
            raise MessageFormatError(f"bad body length in batch element at {pos}")
        props_at = p + body_len + 2
        props_len = (body[props_at - 2] << 8) | body[props_at - 1]
        if props_at + props_len > end:
            raise MessageFormatError(f"bad properties length in batch element at {pos}")
        if total != props_at + props_len - pos:
            raise MessageFormatError(f"batch element size {total} does not add up at {pos}")
        out.append((flag, p, body_len, props_at, props_len))
        pos = props_at + props_len
    return out


def encode_batch(elements: Sequence[tuple[int, bytes, str | bytes]]) -> bytes:
    """Encode ``(flag, body, properties)`` elements as a batch body; the properties as a
    property string or already encoded."""
    parts = []
    append = parts.append
    pack = _BATCH_ELEMENT.pack
    for flag, element_body, props in elements:
        raw = props.encode() if type(props) is str else props
        append(pack(22 + len(element_body) + len(raw), 0, 0, flag, len(element_body)))
        append(element_body)
        append(len(raw).to_bytes(2, "big"))
        append(raw)
    return b"".join(parts)


def record_properties(record: bytes | memoryview) -> dict[str, str]:
    """The properties of an encoded record, without decoding the rest (for filters)."""
    view = memoryview(record)
    magic = int.from_bytes(view[4:8], "big", signed=True)
    body_len = int.from_bytes(view[84:88], "big", signed=True)
    p = RECORD_HEADER_SIZE + body_len
    if magic == MAGIC_V2:
        topic_len = int.from_bytes(view[p:p + 2], "big")
        p += 2 + topic_len
    else:
        p += 1 + view[p]
    props_len = int.from_bytes(view[p:p + 2], "big")
    return decode_properties(view[p + 2:p + 2 + props_len])
