"""Messages looked up rather than read in order (RocketMQ's lookMessageByOffset,
queryMessage and getOffsetInQueueByTime): by CommitLog offset, by offset message id, by key
or UNIQ_KEY through the index, and queue offsets by store time, a binary search over a
ConsumeQueue's units.

``MessageLookups`` is a part of ``message_store.MessageStore``.
"""

from __future__ import annotations

import time

from ..protocol import MessageRecord, decode_record
from ..protocol.message import STORE_TIMESTAMP, STORE_TIMESTAMP_POS, decode_offset_msg_id
from .commitlog import CommitLog
from .config import MessageStoreConfig
from .consumequeue import ConsumeQueueTable
from .index import Index


class MessageLookups:
    """Look-ups by offset, id, key and time: a part of :class:`MessageStore`, over its
    CommitLog, ConsumeQueues and index (and its ``get_min_offset``)."""

    config: MessageStoreConfig
    commitlog: CommitLog
    queues: ConsumeQueueTable
    index: Index

    def look_message_by_offset(self, commitlog_offset: int) -> MessageRecord | None:
        """Decode the record at a CommitLog offset, or None if there is none."""
        view = self.commitlog.record_at(commitlog_offset)
        if view is None:
            return None
        try:
            return decode_record(view)
        finally:
            view.release()

    def record_bytes(self, commitlog_offset: int) -> bytes | None:
        """The raw record at a CommitLog offset (for VIEW_MESSAGE_BY_ID answers)."""
        view = self.commitlog.record_at(commitlog_offset)
        if view is None:
            return None
        try:
            return view.tobytes()
        finally:
            view.release()

    def look_message_by_id(self, msg_id: str) -> MessageRecord | None:
        """Find a message by its offset message id (store host, port, CommitLog offset)."""
        _host, _port, offset = decode_offset_msg_id(msg_id)
        return self.look_message_by_offset(offset)

    def query_messages(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                       end: int | None = None) -> list[MessageRecord]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY include ``key``, stored in
        ``[begin, end]`` ms, newest first."""
        end = int(time.time() * 1000) + 1000 if end is None else end
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        found = []
        seen = set()
        for offset in self.index.query(topic, key, max_num * 2, begin, end):
            if offset in seen or offset < self.commitlog.min_offset:
                continue
            seen.add(offset)
            record = self.look_message_by_offset(offset)
            # Hash collisions and entries left by a cut tail are filtered out here.
            if record is None or record.topic != topic:
                continue
            if key not in record.keys and record.properties.get("UNIQ_KEY") != key:
                continue
            if not begin <= record.store_timestamp <= end:
                continue
            found.append(record)
            if len(found) >= max_num:
                break
        return found

    def query_message_by_unique_key(self, topic: str, uniq_key: str) -> MessageRecord | None:
        """Find a message by the UNIQ_KEY its producer gave it."""
        found = self.query_messages(topic, uniq_key, 1)
        return found[0] if found else None

    def _store_timestamp(self, phys: int) -> int | None:
        view = self.commitlog.view(phys + STORE_TIMESTAMP_POS, 8)
        if view is None:
            return None
        try:
            return STORE_TIMESTAMP.unpack(view)[0]
        finally:
            view.release()

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (ms);
        the max offset if every message is older."""
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        commitlog_min = self.commitlog.min_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = cq.unit(mid)
            ts = None
            if unit is not None and unit[1] > 0 and unit[0] >= commitlog_min:
                ts = self._store_timestamp(unit[0])
            if ts is None or ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def get_message_store_timestamp(self, topic: str, queue_id: int,
                                    queue_offset: int) -> int | None:
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(queue_offset) if cq else None
        if unit is None or unit[1] <= 0:
            return None
        return self._store_timestamp(unit[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int | None:
        """Store time of the oldest message still in the queue."""
        return self.get_message_store_timestamp(topic, queue_id,
                                                self.get_min_offset(topic, queue_id))


__all__ = ["MessageLookups"]
