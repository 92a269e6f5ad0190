"""Pulled message records straight into Arrow columns of the data source's schema.

Spark takes ``pyarrow.RecordBatch`` from a Python data source several times faster than tuples,
and building columns from the raw records skips the per-message objects a client builds. The
batch must match the Spark schema exactly: ``queue_id`` and ``reconsume_times`` are int32,
timestamps are microseconds in UTC.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from ..protocol import Property, decode_properties, walk_records
from ..protocol.message import RECORD_HEADER_SIZE, create_offset_msg_id, plain_body

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("broker", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("tags", pa.string()),
    ("keys", pa.list_(pa.string())),
    ("body", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("born_timestamp", pa.timestamp("us", tz="UTC")),
    ("store_timestamp", pa.timestamp("us", tz="UTC")),
    ("reconsume_times", pa.int32()),
])


class RecordColumns:
    """Accumulates records of one queue as columns; ``batch()`` hands them over as Arrow.

    ``accept(tags)`` can drop records whose tag the subscription does not want (the broker
    filters by tag hash, which can collide).
    """

    def __init__(self, topic: str, broker: str,
                 accept: Callable[[str | None], bool] | None = None) -> None:
        self.topic, self.broker, self.accept = topic, broker, accept
        self._reset()

    def _reset(self) -> None:
        self.queue_ids: list[int] = []
        self.offsets: list[int] = []
        self.msg_ids: list[str] = []
        self.tags: list[str | None] = []
        self.key_offsets: list[int] = [0]
        self.key_values: list[str] = []
        self.bodies: list[bytes] = []
        self.prop_offsets: list[int] = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.born: list[int] = []
        self.stored: list[int] = []
        self.reconsumes: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, buf: bytes | memoryview, start: int = 0, end: int | None = None) -> int:
        """Add the records laid back to back in ``buf`` whose queue offset is in
        ``[start, end)``; returns the highest queue offset seen plus one (or ``start``)."""
        view = memoryview(buf)
        seen = start
        for record_at, fields, _topic_at, _topic_len, props_at in walk_records(view):
            (total, _magic, _crc, queue_id, _flag, queue_offset, phys, sysflag, born_ts,
             _born_ip, _born_port, store_ts, store_ip, store_port, reconsume, _prepared,
             body_len) = fields
            pos = record_at + total
            if queue_offset < start or (end is not None and queue_offset >= end):
                continue
            seen = max(seen, queue_offset + 1)
            props = decode_properties(view[props_at:pos])
            tag = props.get(Property.TAGS)
            if self.accept is not None and not self.accept(tag):
                continue
            body_at = record_at + RECORD_HEADER_SIZE
            body = plain_body(view[body_at:body_at + body_len].tobytes(), sysflag)
            self.queue_ids.append(queue_id)
            self.offsets.append(queue_offset)
            self.msg_ids.append(props.get(Property.UNIQ_KEY)
                                or create_offset_msg_id(store_ip, store_port, phys))
            self.tags.append(tag)
            keys = props.get(Property.KEYS)
            if keys:
                self.key_values.extend(k for k in keys.split(" ") if k)
            self.key_offsets.append(len(self.key_values))
            self.bodies.append(body)
            self.prop_keys.extend(props)
            self.prop_values.extend(props.values())
            self.prop_offsets.append(len(self.prop_keys))
            self.born.append(born_ts)
            self.stored.append(store_ts)
            self.reconsumes.append(reconsume)
        return seen

    def batch(self) -> pa.RecordBatch:
        """The accumulated rows as one record batch; starts over empty."""
        n = len(self.offsets)
        string = pa.string()
        ms = pa.timestamp("ms", tz="UTC")
        us = pa.timestamp("us", tz="UTC")
        columns = [
            pa.array([self.topic] * n, string),
            pa.array([self.broker] * n, string),
            pa.array(self.queue_ids, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.msg_ids, string),
            pa.array(self.tags, string),
            pa.ListArray.from_arrays(pa.array(self.key_offsets, pa.int32()),
                                     pa.array(self.key_values, string)),
            pa.array(self.bodies, pa.binary()),
            pa.MapArray.from_arrays(pa.array(self.prop_offsets, pa.int32()),
                                    pa.array(self.prop_keys, string),
                                    pa.array(self.prop_values, string)),
            pa.array(self.born, pa.int64()).cast(ms).cast(us),
            pa.array(self.stored, pa.int64()).cast(ms).cast(us),
            pa.array(self.reconsumes, pa.int32()),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

