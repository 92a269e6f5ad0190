"""Consumer offsets in the replicated log: every change of a committed offset is also a record
of the system topic ``rmq_sys_CONSUMER_OFFSET_LOG`` (queue 0) in the CommitLog.

Why: a slave used to learn its master's offsets only from a periodic copy (SlaveSync,
every 3 s in controller mode), so a consumer restarted after a failover could read up to 3 s
of messages again. As records, offsets replicate with the messages, through the same HA
stream, and a slave holds every offset its log holds:

- **Writing.** ``ConsumerOffsets`` tells :meth:`OffsetLog.changed` of each change under its
  ``order`` lock (not the table's lock: an append may run the dispatch inline, which applies
  records under the table's lock), so records are in the order of the changes. Only a master
  writes (a slave's log is its master's). UPDATE_CONSUMER_OFFSET answers SUCCESS once the
  record is as safe as a send would be (flushed under SYNC_FLUSH, held by the replicas a send
  waits for), and an error when it is not (the flush or the replicas timed out, the record
  could not be written): a consumer whose commit succeeded finds it after a failover. A
  commit of the offset already stored writes nothing, but waits for that offset's record if
  it is still settling, and writes it again if it could not be written or did not settle.
  Other paths (a pull's commitOffset, POP, gRPC, admin resets) do not wait.
- **Applying.** A dispatch listener reads the records as the store dispatches them and
  applies them to the table, in log order. A broker skips the records it wrote itself in
  this run (each record names its writer, and a master remembers the CommitLog offsets of
  its own so as not to read them back): its table is already newer than them.
- **Truncation.** A demoted master cuts the tail of its log its new master does not share
  (``MessageStore.truncate``, whose ``on_truncate`` hook calls :meth:`OffsetLog.truncated`):
  the table's mark goes back to the end of what is left, the records this run wrote are
  forgotten, and the table is rebuilt from the checkpoint and the records after it, so the
  commits that were cut are gone and the new master's records at the same positions are
  applied. The next copy from the master settles the rest (see below).
- **Copies.** A slave still takes its master's table every few seconds (SlaveSync), with
  how far into the log it covers: :meth:`OffsetLog.take_copy` takes it in full (removals
  included) and, when the copy is older than what the log brought here, applies over it the
  records this slave holds beyond it: a copy never sets an offset back from what this
  slave's log says, and offsets the log cannot bring (committed before this slave's log
  begins, set while the tail was cut, the broker's own groups) come from the master.
- **Loading.** ``consumerOffset.json`` is the checkpoint, with how far into the log's queue
  it covers (``offsetLogOffset``); a start replays the records after it, the latest per
  group, topic and queue winning. Records whose CommitLog files expired are older than the
  checkpoint and not needed.

A record's body is small and binary (``log_records.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...protocol import ResponseCode
from ...protocol.topic import OFFSET_LOG_TOPIC
from ...store import PutResult, PutStatus, StoreMessage
from ...store.config import SLAVE
from .log_records import OffsetRecord, compact, decode_record, encode_record
from .table import COMMIT, ConsumerOffsets

if TYPE_CHECKING:
    from ...store import MessageStore
    from ..store_writer import StoreWriter

log = logging.getLogger("rocketq.broker")

__all__ = ["OFFSET_LOG_TOPIC", "OffsetLog", "Written"]

#: Records read from the store at a time.
READ_CHUNK = 256

#: What a record that did not settle answers, by the status its wait left.
_UNSETTLED = {
    PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT,
                                   "the offset is committed, but its offset-log record was not "
                                   "flushed in time"),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT,
                                    "the offset is committed, but its offset-log record was not "
                                    "acknowledged by the replicas in time (or this broker was "
                                    "demoted meanwhile)"),
}
#: Own records remembered at most (beyond, they are read back and skipped by their writer).
OWN_MAX = 100_000


@dataclass(eq=False, slots=True)
class Written:
    """What :meth:`OffsetLog.changed` did for a change: the record it appended (``appended``
    and what waiting for it needs), or why it could not (``error``; ``appended`` None)."""

    key: tuple[str, str, int] | None
    offset: int
    appended: list[PutResult] | None
    wait_at: int = 0
    replicas: Any = None
    role: int = 0
    error: str = ""
    #: The wait, shared by every commit that waits for this record.
    settling: asyncio.Future[tuple[int, str] | None] | None = None


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
        #: Held while records are read and applied (the dispatch listener, a truncation, a
        #: master's copy): one at a time, in log order.
        self._read_lock = threading.Lock()
        #: Guards the three sets below (written by appending threads, read by the listener).
        self._keys_lock = threading.Lock()
        #: CommitLog offsets of the records this run wrote and the listener has not passed
        #: yet: a master need not read its own records back to skip them. Forgotten when the
        #: log is cut (the offsets are then reused) and while the store is a slave.
        self._own: set[int] = set()
        #: (group, topic, queue) -> its latest record still to settle (flush, replicas).
        self._pending: dict[tuple[str, str, int], Written] = {}
        #: Keys whose latest record could not be written or did not settle: the next commit
        #: writes one, even of the same offset.
        self._failed: set[tuple[str, str, int]] = set()
        #: Counts, for tests and the benchmark.
        self.written = 0
        self.applied = 0
        self._last_error = 0.0
        if enabled:
            offsets.on_change = self.changed
            offsets.on_copy = self.take_copy

    # ------------------------------------------------------------------ writing
    def changed(self, kind: int, group: str, topic: str, queue_id: int, offset: int,
                same: bool = False) -> Written | None:
        """``ConsumerOffsets.on_change``: append the record (a master's). Returns what was
        written (for :meth:`wait`), or None when there is nothing to wait for. ``same``: a
        commit of the offset already stored, which writes nothing unless that offset's
        record failed; it returns that record while it is still settling. A record that
        cannot be written leaves the commit in memory, as it was before the log existed,
        and is logged; its key is written again at its next commit."""
        store = self.store
        if store is None or store.config.brokerRole == SLAVE:
            return None
        key = (group, topic, queue_id) if kind == COMMIT else None
        if same:
            with self._keys_lock:
                if key not in self._failed:
                    pending = self._pending.get(key) if key is not None else None
                    return pending if pending is not None and pending.offset == offset else None
        writer = self._writer()
        if writer is not None and writer.may_write is not None and not writer.may_write():
            # A master without its lease: its log is about to be cut.
            return self._not_written(key, offset, "this broker is not its group's master now "
                                     "(no lease from the controller)")
        before = writer.before_append() if writer is not None else (None, 0)
        try:
            body = encode_record(OffsetRecord(kind, group, topic, queue_id, offset, self.token))
            message = StoreMessage(OFFSET_LOG_TOPIC, body, 0,
                                   born_timestamp=int(time.time() * 1000))
            appended, wait_at = store.append((message,))
        except Exception as exc:  # a full disk, a store closing, a demotion under way
            now = time.monotonic()
            if now - self._last_error > 30:
                self._last_error = now
                log.warning("offset of %s in %s queue %d not written to the offset log (kept "
                            "in memory and in the next checkpoint): %s", group, topic,
                            queue_id, exc)
            return self._not_written(key, offset, f"the offset-log record was not written: "
                                                  f"{exc}")
        self.written += 1
        done = Written(key, offset, appended, wait_at, *before)
        with self._keys_lock:
            if len(self._own) < OWN_MAX:
                self._own.add(appended[0].commitlog_offset)
            if key is not None:
                self._failed.discard(key)
                if wait_at:
                    self._pending[key] = done
                else:
                    self._pending.pop(key, None)
        return done

    def _not_written(self, key: tuple[str, str, int] | None, offset: int, why: str) -> Written:
        with self._keys_lock:
            if key is not None:
                self._failed.add(key)
                self._pending.pop(key, None)
        return Written(key, offset, None, error=why)

    async def commit(self, group: str, topic: str, queue_id: int, offset: int
                     ) -> tuple[int, str] | None:
        """Commit, and wait until the record is as safe as a send (UPDATE_CONSUMER_OFFSET);
        returns what :meth:`wait` returns."""
        return await self.wait(self.offsets.commit(group, topic, queue_id, offset))

    async def wait(self, done: Written | None) -> tuple[int, str] | None:
        """Wait for what :meth:`changed` appended, as a send would. None when it is settled
        (or there was nothing to wait for), else the response code and remark to answer."""
        if done is None:
            return None
        if done.appended is None:
            return ResponseCode.SYSTEM_ERROR, f"the offset is committed in memory only: " \
                                              f"{done.error}"
        writer = self._writer()
        if not done.wait_at or writer is None:
            return None
        if done.settling is None:
            done.settling = asyncio.ensure_future(self._settle(writer, done))
        return await asyncio.shield(done.settling)

    async def _settle(self, writer: StoreWriter, done: Written) -> tuple[int, str] | None:
        assert done.appended is not None
        failure: tuple[int, str] | None
        try:
            await writer.settle(done.appended, done.wait_at, done.replicas, done.role)
            status = done.appended[0].status
            # SLAVE_NOT_AVAILABLE: a SYNC_MASTER with no slave now; the record is in its log
            # and reaches a slave when one connects, so the commit is answered as RocketMQ
            # answers every commit (a send would be told, a commit has nothing to wait for).
            failure = None if status in (PutStatus.PUT_OK, PutStatus.SLAVE_NOT_AVAILABLE) \
                else _UNSETTLED.get(
                status, (ResponseCode.SYSTEM_ERROR, f"offset-log record: {status.name}"))
        except Exception as exc:  # an fsync error
            failure = ResponseCode.SYSTEM_ERROR, f"the offset-log record did not settle: {exc}"
        with self._keys_lock:
            if done.key is not None and self._pending.get(done.key) is done:
                del self._pending[done.key]
                if failure is not None:
                    self._failed.add(done.key)  # the next commit writes it again
        return failure

    # ------------------------------------------------------------------ reading
    def attach(self, store: MessageStore) -> int:
        """Start writing to ``store`` and applying its records: first the records after the
        checkpoint (the broker's start), then each as it is dispatched; and rebuild the
        table when the store cuts its log (:meth:`truncated`). Returns how many records the
        start applied. With the log off nothing is replayed, and the checkpoint moves past
        the records there are (turned on again later, the log must not take the table back
        to them)."""
        self.store = store
        store.add_dispatch_listener(self._dispatched)
        store.on_truncate.append(self.truncated)
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
            if store.config.brokerRole == SLAVE:
                self._forget_own()
            start = self.offsets.log_offset
            first = store.get_min_offset(OFFSET_LOG_TOPIC, 0)
            end = store.get_max_offset(OFFSET_LOG_TOPIC, 0)
            if start > end:
                # Fewer records than the checkpoint covers, and no truncation said why (a
                # controller-mode start dispatches only up to the confirm offset first; a
                # store not the checkpoint's): go on from where the log ends now.
                log.info("the offset log ends at %d, before the checkpoint's %d", end, start)
                start = end
                self._forget_own()
            elif not replay and self._all_own(store, start, end):
                return self.offsets.apply_logged((), end)  # only this run's: nothing to do
            elif start < first:
                if replay and start and apply:
                    log.warning("offset-log records %d..%d are gone (expired CommitLog "
                                "files); the checkpoint stands for them", start, first)
                start = first
            changes = self._read(store, start, end, lambda record: (
                replay or record.writer != self.token)) if apply else []
            if replay:
                changes = compact(changes)
            applied = self.offsets.apply_logged((r.change() for r in changes), end)
            self.applied += applied
            return applied

    def _read(self, store: MessageStore, start: int, end: int,
              wanted: Callable[[OffsetRecord], bool] = lambda r: True
              ) -> list[OffsetRecord]:
        """The records of queue offsets ``[start, end)`` that are ``wanted``, in log order;
        the own records passed are forgotten."""
        records: list[OffsetRecord] = []
        offset, last = start, -1
        while offset < end:
            result = store.get_messages(OFFSET_LOG_TOPIC, 0, offset, min(READ_CHUNK, end - offset),
                                        max_bytes=1 << 20)
            try:
                for message in result.decode(decompress=False):
                    if message.queue_offset >= end:
                        break
                    last = message.commitlog_offset
                    try:
                        record = decode_record(message.body)
                    except ValueError as exc:
                        log.warning("offset-log record at %d skipped: %s",
                                    message.queue_offset, exc)
                        continue
                    if wanted(record):
                        records.append(record)
            finally:
                result.release()
            offset = max(result.next_begin_offset, offset + 1)
        if last >= 0:
            self._passed(last)
        return records

    def _all_own(self, store: MessageStore, start: int, end: int) -> bool:
        """Whether the records of queue offsets ``[start, end)`` are all this run's own
        (known by their CommitLog offsets, without reading them); forgets them if so."""
        with self._keys_lock:
            own = self._own
            if not own or end - start > len(own):
                return False
        cq = store.queues.get(OFFSET_LOG_TOPIC, 0)
        if cq is None:
            return False
        last = -1
        for queue_offset in range(start, end):
            unit = cq.unit(queue_offset)
            if unit is None or unit[0] not in own:
                return False
            last = unit[0]
        if last >= 0:
            self._passed(last)
        return True

    def _passed(self, commitlog_offset: int) -> None:
        """The listener is past ``commitlog_offset``: own records up to it are forgotten."""
        with self._keys_lock:
            if self._own:
                self._own = {o for o in self._own if o > commitlog_offset}

    def _forget_own(self) -> None:
        with self._keys_lock:
            self._own.clear()
            self._failed.clear()

    # ------------------------------------------------------------------ cuts and copies
    def truncated(self, commitlog_end: int) -> None:
        """``MessageStore.on_truncate``: the log was cut at ``commitlog_end`` (a demoted
        master's tail), dispatch paused. The table's mark goes back to the end of the
        records left, the own records are forgotten (their CommitLog and queue offsets are
        reused by the new master's records), and the table is rebuilt: the checkpoint and
        the records after it, when the checkpoint covers no more than what is left. Else
        the table keeps what it had until the master's next copy (:meth:`take_copy`)."""
        store = self.store
        if store is None:
            return
        with self._read_lock:
            self._forget_own()
            with self._keys_lock:
                self._pending.clear()
            end = store.get_max_offset(OFFSET_LOG_TOPIC, 0)
            if not self.enabled:
                self.offsets.apply_logged((), min(self.offsets.log_offset, end))
                return
            try:
                checkpoint = self.offsets.read_checkpoint()
            except (OSError, ValueError) as exc:
                log.warning("consumer offsets: cannot read the checkpoint: %s", exc)
                checkpoint = None
            if checkpoint is None or checkpoint[1] > end:
                log.warning("consumer offsets: the offset log was cut at record %d (the table "
                            "covered %d); the table is corrected by the master's next copy",
                            end, self.offsets.log_offset)
                self.offsets.apply_logged((), min(self.offsets.log_offset, end))
                return
            table, at = checkpoint
            records = self._read(store, max(at, store.get_min_offset(OFFSET_LOG_TOPIC, 0)),
                                 end)
            self.offsets.replace_all(table, (r.change() for r in compact(records)), end,
                                     keep_unlogged=True)
            log.warning("consumer offsets: the offset log was cut at record %d; the table is "
                        "the checkpoint (at %d) and the %d record(s) after it", end, at,
                        len(records))

    def take_copy(self, table: dict[str, dict[Any, Any]], log_offset: int) -> int:
        """``ConsumerOffsets.on_copy``: take the master's ``table``, which covers its log up
        to ``log_offset`` (a slave's sync). At or beyond this table's mark, the copy is at
        least as new: it is taken in full (removals too; the records below ``log_offset``
        that reach this slave later are applied as they come, and the table is the copy's
        again once they all have). Below the mark, the copy is taken in full and the records
        this slave holds from ``log_offset`` on are applied over it; when those are gone
        (expired), only the offsets this table has none of are taken. Returns how many
        offsets were taken or records applied."""
        store = self.store
        with self._read_lock:
            mine = self.offsets.log_offset
            if log_offset >= mine:
                self.offsets.replace_all(table)
                return sum(len(v) for v in table.values())
            if store is None or log_offset < store.get_min_offset(OFFSET_LOG_TOPIC, 0):
                return self.offsets.fill_missing(table)
            records = self._read(store, log_offset, mine)
            return self.offsets.replace_all(table, (r.change() for r in compact(records)))
