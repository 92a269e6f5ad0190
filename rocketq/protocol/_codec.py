"""The per-message inner loops of the wire and store formats, in plain Python.

This module is the reference: readable, and what runs when no compiled twin is installed or
``ROCKETQ_NO_EXTENSIONS=1`` is set. The build compiles this same file with Cython into
``rocketq.protocol._ccodec`` (``_ccodec.pxd`` declares the C types of its locals), so the two
cannot drift apart; ``rocketq.protocol.codec`` picks one. Nothing here imports the rest of
rocketq, and the rest of rocketq imports these functions through ``codec`` only.

Everything takes bytes-like objects and never trusts a length read from them.
"""

from __future__ import annotations

import struct
import zlib

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
#: SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6: records this store cannot hold.
V6_HOSTS = 0x30
#: TOTALSIZE .. BODYLEN of a v1 record, then TOPICLEN u8 and PROPERTIESLEN u16.
RECORD_HEADER_SIZE = 88
RECORD_OVERHEAD = 91
#: int32 arithmetic (named so the compiled twin types them as C integers).
_MASK32 = 0xFFFFFFFF
_MIN32 = 0x80000000
_WRAP32 = 0x100000000

_ELEMENT = struct.Struct(">iiiii")
_PULLED = struct.Struct(">ii4xiiqqiq4siq4sii8xi")


class CodecError(ValueError):
    """Bytes that do not hold what they claim to (a batch, a record)."""


# ------------------------------------------------------------------------------ frames


def frame_spans(data: bytes, max_frame: int) -> tuple[list[tuple[int, int]], int]:
    """The whole remoting frames at the start of ``data`` (``[length i32][length bytes]``
    each) as ``(start, end)`` spans after their length prefix, and where the unread rest
    begins. A length below 4 or over ``max_frame`` raises CodecError before anything waits
    for it to arrive."""
    spans = []
    end = len(data)
    pos = 0
    while end - pos >= 4:
        length = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        if length < 4 or length > max_frame:
            raise CodecError(f"frame length {length} outside 4..{max_frame}")
        if end - pos - 4 < length:
            break
        spans.append((pos + 4, pos + 4 + length))
        pos += 4 + length
    return spans, pos


# ------------------------------------------------------------------------------ properties


def encode_properties(properties: dict[str, str]) -> str:
    """``name\\x01value\\x02`` for each property, RocketMQ's property string."""
    if not properties:
        return ""
    return "".join([f"{k}\x01{v}\x02" for k, v in properties.items()])


def decode_properties(data: str) -> dict[str, str]:
    """Parse a property string as RocketMQ does, skipping malformed segments."""
    result: dict[str, str] = {}
    for segment in data.split("\x02"):
        name, sep, value = segment.partition("\x01")
        if sep and name:
            result[name] = value
    return result


def property_value(data: bytes, name: bytes) -> bytes | None:
    """One property's raw value from an encoded property string, without a full parse."""
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


# ------------------------------------------------------------------------------ hashing


def index_hashes(keys: list[bytes]) -> list[int]:
    """RocketMQ's index hash of UTF-8 keys: ``abs(String.hashCode(key))`` (Java's hash over
    UTF-16 code units), with ``Integer.MIN_VALUE``, whose abs stays negative, mapped to 0."""
    out = []
    for key in keys:
        h = 0
        if key.isascii():
            for c in key:
                h = (31 * h + c) & _MASK32
        else:
            raw = key.decode("utf-8", "replace").encode("utf-16-be")
            for i in range(0, len(raw), 2):
                h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & _MASK32
        if h == _MIN32:
            h = 0
        elif h > _MIN32:
            h = _WRAP32 - h  # the absolute value of the negative int32
        out.append(h)
    return out


# ------------------------------------------------------------------------------ batches


def split_batch(body: bytes) -> list[tuple[int, int, int, int, int]]:
    """The elements of a batch body, ``(flag, body start, body length, properties start,
    properties length)`` each. An element is ``[TOTALSIZE i32][MAGIC i32][BODYCRC i32]
    [FLAG i32][BODYLEN i32][body][PROPLEN u16][properties]``."""
    end = len(body)
    unpack = _ELEMENT.unpack_from
    out = []
    pos = 0
    while pos < end:
        if end - pos < 22:
            raise CodecError(f"truncated batch element at {pos}")
        total, _magic, _crc, flag, body_len = unpack(body, pos)
        p = pos + 20
        if body_len < 0 or p + body_len + 2 > end:
            raise CodecError(f"bad body length in batch element at {pos}")
        props_at = p + body_len + 2
        props_len = (body[props_at - 2] << 8) | body[props_at - 1]
        if props_at + props_len > end:
            raise CodecError(f"bad properties length in batch element at {pos}")
        if total != props_at + props_len - pos:
            raise CodecError(f"batch element size {total} does not add up at {pos}")
        out.append((flag, p, body_len, props_at, props_len))
        pos = props_at + props_len
    return out


def encode_batch(elements: list[tuple[int, bytes, bytes]]) -> bytes:
    """A batch body of ``(flag, body, encoded properties)`` elements."""
    parts = []
    pack = _ELEMENT.pack
    for flag, element_body, props in elements:
        parts.append(pack(22 + len(element_body) + len(props), 0, 0, flag, len(element_body)))
        parts.append(element_body)
        parts.append(len(props).to_bytes(2, "big"))
        parts.append(props)
    return b"".join(parts)


# ------------------------------------------------------------------------------ records


def record_error(pos: int, total: int, magic: int, sysflag: int, body_len: int,
                 end: int) -> CodecError:
    """What is wrong with the fixed part of the record at ``pos``."""
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return CodecError(f"bad magic code {magic:#x} at {pos}")
    if sysflag & V6_HOSTS:
        return CodecError(f"IPv6 host records are not supported (at {pos})")
    if total < RECORD_OVERHEAD or pos + total > end:
        return CodecError(f"bad total size {total} at {pos}")
    return CodecError(f"bad body length {body_len} at {pos}")


def walk(view, pos: int, end: int, unpack, sysflag_at: int, check_crc: bool):
    """Records laid back to back from ``pos`` to ``end``: per record ``(pos, fields,
    topic_at, topic_len, props_at)``, ``fields`` being what ``unpack`` (a record struct's
    ``unpack_from``) reads. The first bad record raises CodecError, after the sound ones
    before it were yielded."""
    while pos < end:
        if end - pos < RECORD_HEADER_SIZE:
            raise CodecError(f"truncated record header at {pos}")
        fields = unpack(view, pos)
        total = fields[0]
        magic = fields[1]
        body_len = fields[-1]
        record_end = pos + total
        if ((magic != MAGIC_V1 and magic != MAGIC_V2) or fields[sysflag_at] & V6_HOSTS
                or total < RECORD_OVERHEAD or record_end > end or body_len < 0
                or RECORD_OVERHEAD + body_len > total):
            raise record_error(pos, total, magic, fields[sysflag_at], body_len, end)
        p = pos + RECORD_HEADER_SIZE + body_len
        if magic == MAGIC_V1:
            topic_len = view[p]
            topic_at = p + 1
        else:
            topic_len = (view[p] << 8) | view[p + 1]
            topic_at = p + 2
        p = topic_at + topic_len
        if p + 2 > record_end or p + 2 + ((view[p] << 8) | view[p + 1]) != record_end:
            raise CodecError(f"record lengths do not add up at {pos}")
        if check_crc:
            body_at = pos + RECORD_HEADER_SIZE
            if zlib.crc32(view[body_at:body_at + body_len]) & 0x7FFFFFFF != fields[2]:
                raise CodecError(f"body CRC mismatch at {pos}")
        yield pos, fields, topic_at, topic_len, p + 2
        pos = record_end


def pulled(data: bytes) -> list[tuple]:
    """The records of a pull answer, checked as :func:`walk` checks them, each as the tuple
    a consumer builds its message from: ``(topic, body, queue_id, flag, queue_offset,
    commitlog_offset, sysflag, born_timestamp, born_ip, born_port, store_timestamp,
    store_ip, store_port, reconsume_times, properties, store_size)``, topic and properties
    as bytes. The checks are :func:`walk`'s, written out again on purpose: a helper shared by
    the two costs a call and a tuple per record, 15 % of this function compiled (measured),
    and the twin test holds both to the same errors."""
    out = []
    unpack = _PULLED.unpack_from
    end = len(data)
    pos = 0
    while pos < end:
        if end - pos < RECORD_HEADER_SIZE:
            raise CodecError(f"truncated record header at {pos}")
        (total, magic, queue_id, flag, queue_offset, phys, sysflag, born_ts, born_ip,
         born_port, store_ts, store_ip, store_port, reconsume, body_len) = unpack(data, pos)
        record_end = pos + total
        if ((magic != MAGIC_V1 and magic != MAGIC_V2) or sysflag & V6_HOSTS
                or total < RECORD_OVERHEAD or record_end > end or body_len < 0
                or RECORD_OVERHEAD + body_len > total):
            raise record_error(pos, total, magic, sysflag, body_len, end)
        p = pos + RECORD_HEADER_SIZE + body_len
        if magic == MAGIC_V1:
            topic_len = data[p]
            topic_at = p + 1
        else:
            topic_len = (data[p] << 8) | data[p + 1]
            topic_at = p + 2
        p = topic_at + topic_len
        if p + 2 > record_end or p + 2 + ((data[p] << 8) | data[p + 1]) != record_end:
            raise CodecError(f"record lengths do not add up at {pos}")
        out.append((data[topic_at:p], data[pos + RECORD_HEADER_SIZE:pos + RECORD_HEADER_SIZE
                                                + body_len],
                    queue_id, flag, queue_offset, phys, sysflag, born_ts, born_ip, born_port,
                    store_ts, store_ip, store_port, reconsume, data[p + 2:record_end], total))
        pos = record_end
    return out
