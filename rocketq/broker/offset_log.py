"""Consumer offsets in the replicated log: every change of a committed offset is also a record
of the system topic ``rmq_sys_CONSUMER_OFFSET_LOG`` (queue 0) in the CommitLog.

Why: a slave used to learn its master's offsets only from a periodic copy (slave_sync.py,
every 3 s in controller mode), so a consumer restarted after a failover could read up to 3 s
of messages again. As records, offsets replicate with the messages, through the same HA
stream, and a slave holds every offset its log holds:

- **Writing.** ``ConsumerOffsets`` tells :meth:`OffsetLog.changed` of each change, under its
  lock, so records are in the order of the changes; a commit of the offset already stored
  writes nothing. Only a master writes (a slave's log is its master's). UPDATE_CONSUMER_OFFSET
  answers once the record is as safe as a send would be (flushed under SYNC_FLUSH, held by
  the replicas a send waits for): a consumer whose commit returned finds it after a
  failover. Other paths (a pull's commitOffset, POP, gRPC, admin resets) do not wait.
- **Applying.** A dispatch listener reads the records as the store dispatches them and
  applies them to the table, in log order. A broker skips the records it wrote itself in
  this run (each record names its writer): its table is already newer than them.
- **Loading.** ``consumerOffset.json`` is the checkpoint, with how far into the log's queue
  it covers (``offsetLogOffset``); a start replays the records after it, the latest per
  group, topic and queue winning. Records whose CommitLog files expired are older than the
  checkpoint and not needed.

A record's body is small and binary (:func:`encode_record`).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocol.topic import OFFSET_LOG_TOPIC
from ..store import PutResult, PutStatus, StoreMessage
from ..store.config import SLAVE
from .offsets import COMMIT, REMOVE_GROUP, REMOVE_TOPIC, ConsumerOffsets

if TYPE_CHECKING:
    from ..store import MessageStore
    from .store_writer import StoreWriter

log = logging.getLogger("rocketq.broker")

__all__ = ["OFFSET_LOG_TOPIC", "OffsetLog", "OffsetRecord", "decode_record", "encode_record",
           "compact"]

#: version, writer, kind, queue id, offset, group length, topic length; then the two names.
_HEAD = struct.Struct(">B8sBiqHH")
VERSION = 1
#: Records read from the store at a time.
READ_CHUNK = 256
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
    """The record's body: a 26-byte header and the UTF-8 group and topic names."""
    group, topic = record.group.encode(), record.topic.encode()
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


class OffsetLog:
    """Writes the offset table's changes to the CommitLog and applies the records that
    arrive there (see the module docstring). ``attach`` it to the store once it is open."""

    def __init__(self, offsets: ConsumerOffsets, enabled: bool = True,
                 writer: Callable[[], StoreWriter | None] = lambda: None) -> None:
        self.offsets = offsets
        self.enabled = enabled
        self._writer = writer
        self.store: MessageStore | None = None
        #: Names this broker run in its records (its own are not applied again).
        self.token = os.urandom(8)
        self._read_lock = threading.Lock()
        #: Queue offsets of the records this run wrote and has not passed yet: a master
        #: need not read its own records back to skip them.
        self._own: set[int] = set()
        #: Counts, for tests and the benchmark.
        self.written = 0
        self.applied = 0
        self._last_error = 0.0
        if enabled:
            offsets.on_change = self.changed

    # ------------------------------------------------------------------ writing
    def changed(self, kind: int, group: str, topic: str, queue_id: int, offset: int
                ) -> tuple[list[PutResult], int, Any, int] | None:
        """``ConsumerOffsets.on_change``: append the record (a master's). Returns the append
        and what the writer needs to wait for it (:meth:`wait`), or None when nothing was
        written. A record that cannot be written leaves the commit in memory, as it was
        before the log existed, and is logged."""
        store = self.store
        if store is None or store.config.brokerRole == SLAVE:
            return None
        writer = self._writer()
        if writer is not None and writer.may_write is not None and not writer.may_write():
            return None  # a master without its lease: its log is about to be cut
        before = writer.before_append() if writer is not None else (None, 0)
        body = encode_record(OffsetRecord(kind, group, topic, queue_id, offset, self.token))
        message = StoreMessage(OFFSET_LOG_TOPIC, body, 0, born_timestamp=int(time.time() * 1000))
        try:
            appended, wait_at = store.append((message,))
        except Exception as exc:  # a full disk, a store closing, a demotion under way
            now = time.monotonic()
            if now - self._last_error > 30:
                self._last_error = now
                log.warning("offset of %s in %s queue %d not written to the offset log (kept "
                            "in memory and in the next checkpoint): %s", group, topic,
                            queue_id, exc)
            return None
        self.written += 1
        if len(self._own) < 100_000:
            self._own.add(appended[0].queue_offset)
        return appended, wait_at, *before

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Commit, and wait until the record is as safe as a send (UPDATE_CONSUMER_OFFSET).
        Returns False when a wait fell short (a flush or the replicas timed out)."""
        done = self.offsets.commit(group, topic, queue_id, offset)
        return await self.wait(done)

    async def wait(self, done: tuple[list[PutResult], int, Any, int] | None) -> bool:
        """Wait for what :meth:`changed` appended, as a send would."""
        writer = self._writer()
        if done is None or not done[1] or writer is None:
            return True
        appended, wait_at, replicas, role = done
        await writer.settle(appended, wait_at, replicas, role)
        return appended[0].status is PutStatus.PUT_OK

    # ------------------------------------------------------------------ reading
    def attach(self, store: MessageStore) -> int:
        """Start writing to ``store`` and applying its records: first the records after the
        checkpoint (the broker's start), then each as it is dispatched. Returns how many
        records the start applied. With the log off nothing is replayed, and the checkpoint
        moves past the records there are (turned on again later, the log must not take the
        table back to them)."""
        self.store = store
        store.add_dispatch_listener(self._dispatched)
        if not self.enabled:
            self.catch_up(apply=False)
            return 0
        began = time.monotonic()
        applied = self.catch_up(replay=True)
        if applied:
            log.info("consumer offsets: %d offset-log record(s) after the checkpoint applied "
                     "in %.0f ms", applied, (time.monotonic() - began) * 1000)
        return applied

    def _dispatched(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic == OFFSET_LOG_TOPIC and queue_id == 0:
            self.catch_up(apply=self.enabled)

    def catch_up(self, *, replay: bool = False, apply: bool = True) -> int:
        """Read the records the table does not cover yet and apply them, in log order: all
        of them when ``replay`` (a start), else those other brokers (or this broker's earlier
        runs) wrote. ``apply=False`` only moves the table's mark past them."""
        store = self.store
        if store is None:
            return 0
        with self._read_lock:
            start = self.offsets.log_offset
            first = store.get_min_offset(OFFSET_LOG_TOPIC, 0)
            end = store.get_max_offset(OFFSET_LOG_TOPIC, 0)
            own = self._own
            if start > end:
                # The log was cut below the mark (a demoted master's tail, a new store):
                # go on from where it ends now.
                start = end
                own.clear()
            elif own and not replay and all(o in own for o in range(start, end)):
                own.difference_update(range(start, end))  # only this run's: nothing to do
                return self.offsets.apply_logged((), end)
            elif start < first:
                if replay and start and apply:
                    log.warning("offset-log records %d..%d are gone (expired CommitLog "
                                "files); the checkpoint stands for them", start, first)
                start = first
            changes: list[OffsetRecord] = []
            offset = start
            while apply and offset < end:
                result = store.get_messages(OFFSET_LOG_TOPIC, 0, offset, READ_CHUNK,
                                            max_bytes=1 << 20)
                try:
                    for message in result.decode(decompress=False):
                        try:
                            record = decode_record(message.body)
                        except ValueError as exc:
                            log.warning("offset-log record at %d skipped: %s",
                                        message.queue_offset, exc)
                            continue
                        if replay or record.writer != self.token:
                            changes.append(record)
                finally:
                    result.release()
                offset = max(result.next_begin_offset, offset + 1)
            if own:
                own.difference_update(range(start, end))
            if replay:
                changes = compact(changes)
            applied = self.offsets.apply_logged((r.change() for r in changes), end)
            self.applied += applied
            return applied
