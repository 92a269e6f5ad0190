"""The offset log's record: one change of the consumer offset table, as the body of a message
of ``rmq_sys_CONSUMER_OFFSET_LOG`` (small and binary: a 26-byte header, then the group and
topic names), and ``compact``, which keeps of a run of records only those that matter. The
format is a concept of its own beside ``log.py``, which writes and applies the records."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from ...protocol import JAVA_INT_MAX, JAVA_LONG_MAX, JAVA_LONG_MIN
from .table import COMMIT, REMOVE_GROUP, REMOVE_TOPIC

#: version, writer, kind, queue id, offset, group length, topic length; then the two names.
_HEAD = struct.Struct(">B8sBiqHH")
VERSION = 1
_KINDS = (COMMIT, REMOVE_GROUP, REMOVE_TOPIC)


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """One change of the offset table: ``COMMIT`` of ``offset`` for (group, topic, queue),
    or ``REMOVE_GROUP`` / ``REMOVE_TOPIC`` (every offset of the group or topic forgotten).
    ``writer`` names the broker run that wrote it."""

    kind: int
    group: str
    topic: str
    queue_id: int = 0
    offset: int = 0
    writer: bytes = bytes(8)

    def change(self) -> tuple[int, str, str, int, int]:
        """As ``ConsumerOffsets.apply_logged`` takes it."""
        return self.kind, self.group, self.topic, self.queue_id, self.offset


def encode_record(record: OffsetRecord) -> bytes:
    """The record's body: a 26-byte header and the UTF-8 group and topic names. ValueError
    when a field does not fit (a queue id beyond a Java int, an offset beyond a Java long,
    a name longer than 65535 bytes, an unknown kind)."""
    group, topic = record.group.encode(), record.topic.encode()
    if record.kind not in _KINDS or len(record.writer) != 8:
        raise ValueError(f"not an offset record (kind {record.kind})")
    if not 0 <= record.queue_id <= JAVA_INT_MAX:
        raise ValueError(f"queue id {record.queue_id} does not fit an offset record")
    if not JAVA_LONG_MIN <= record.offset <= JAVA_LONG_MAX:
        raise ValueError(f"offset {record.offset} does not fit an offset record")
    if len(group) > 0xFFFF or len(topic) > 0xFFFF:
        raise ValueError("a group or topic name too long for an offset record")
    return _HEAD.pack(VERSION, record.writer, record.kind, record.queue_id, record.offset,
                      len(group), len(topic)) + group + topic


def decode_record(body: bytes) -> OffsetRecord:
    """The record in ``body``; ValueError when it is not one this version reads."""
    if len(body) < _HEAD.size:
        raise ValueError(f"an offset record is at least {_HEAD.size} bytes, not {len(body)}")
    version, writer, kind, queue_id, offset, glen, tlen = _HEAD.unpack_from(body)
    if version != VERSION or kind not in _KINDS:
        raise ValueError(f"not an offset record (version {version}, kind {kind})")
    if len(body) != _HEAD.size + glen + tlen:
        raise ValueError("an offset record's names do not match its length")
    at = _HEAD.size
    return OffsetRecord(kind, body[at:at + glen].decode(), body[at + glen:].decode(),
                        queue_id, offset, writer)


def compact(records: Iterable[OffsetRecord]) -> list[OffsetRecord]:
    """The records that matter of a run, in order: per (group, topic, queue) the latest
    commit, and the removals, each after the commits it forgets. Applying the result gives
    the table that applying every record gives."""
    latest: dict[tuple[str, str, int], OffsetRecord] = {}
    for r in records:
        if r.kind == COMMIT:
            latest.pop((r.group, r.topic, r.queue_id), None)  # re-inserted last: keeps order
            latest[(r.group, r.topic, r.queue_id)] = r
        else:
            for key in [k for k in latest
                        if (k[0] if r.kind == REMOVE_GROUP else k[1])
                        == (r.group if r.kind == REMOVE_GROUP else r.topic)]:
                del latest[key]
            slot = (r.group, r.topic, -1 - r.kind)  # a removal's own slot
            latest.pop(slot, None)
            latest[slot] = r
    return list(latest.values())
