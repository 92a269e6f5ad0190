"""The store's housekeeping and its guard against a full disk (RocketMQ's
CleanCommitLogService, FlushConsumeQueueService and the DISK_FULL bit of its runningFlags):

- the *housekeeper* thread flushes the ConsumeQueues, the index and the checkpoint, looks at
  the disks every second (every 100 ms near full), and deletes expired files
  (``retention``);
- puts are refused (``refusal``, DiskFullError) while a disk is over
  ``diskSpaceWarningLevelRatio``, or a ConsumeQueue or index file found no room, and taken
  again as soon as there is room; a put needing a ConsumeQueue file makes it first, or is
  refused, so that the dispatcher never meets a full disk for a message acknowledged.

``Housekeeping`` is a part of ``message_store.MessageStore``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import MessageStoreConfig
from .consumequeue import UNIT_SIZE, ConsumeQueueTable
from .dispatch_runner import DispatchRunner
from .errors import DiskFullError, is_disk_full
from .flush import flush_logics
from .index import Index
from .retention import (
    DISK_CHECK_INTERVAL,
    DISK_CHECK_INTERVAL_NEAR_FULL,
    ConsumerOffsetsView,
    DiskWatch,
    StoreCounters,
    clean_expired_files,
    disk_used_ratio,
)

log = logging.getLogger("rocketq.store")


class Housekeeping:
    """The housekeeper's work and the full-disk guard: a part of :class:`MessageStore`,
    whose state (set in its ``__init__``) it reads and changes, and whose ``reput_offset``
    the flush of the logic files records."""

    config: MessageStoreConfig
    commitlog: CommitLog
    queues: ConsumeQueueTable
    index: Index
    checkpoint: Checkpoint | None
    dispatcher: DispatchRunner
    consumer_offsets: ConsumerOffsetsView | None
    counters: StoreCounters
    disk: DiskWatch
    refusal: str | None
    last_clean_time: float
    _logics_full: str | None
    _next_logics_probe: float
    _index_full: str | None
    _near_full: bool
    _room_logged_at: float
    _stop: threading.Event
    _logics_lock: threading.Lock
    _clean_lock: threading.Lock
    #: The confirm offset to checkpoint (``Replication.confirm_offset``).
    confirm_offset: Callable[[], int]

    def _flush_logics(self) -> None:
        with self._logics_lock:
            dispatched = self.reput_offset  # read first: the confirm offset is not below it
            flush_logics(self.queues, self.index, self.checkpoint, self.commitlog,
                         dispatched, max(dispatched, self.confirm_offset()))

    def _housekeeping_loop(self) -> None:
        """Flush the logic files every ``flushIntervalConsumeQueue`` ms, look at the disks
        every second (every 100 ms when one is over ``diskSpaceCleanForciblyRatio``), and
        clean every ``cleanResourceInterval`` ms, or at once when a disk has just gone over
        ``diskMaxUsedSpaceRatio``. Each part's failure is logged and leaves the others
        running."""
        cfg = self.config
        now = time.monotonic()
        next_flush = now + cfg.flushIntervalConsumeQueue / 1000
        next_clean = now + cfg.cleanResourceInterval / 1000
        # The store measured the disks as it started (check_disk): the loop begins from that
        # measure rather than taking another at a moment that depends on thread scheduling.
        next_check = now + (min(DISK_CHECK_INTERVAL, DISK_CHECK_INTERVAL_NEAR_FULL)
                            if self._near_full else DISK_CHECK_INTERVAL)
        was_over = self.disk.over(cfg.diskMaxUsedSpaceRatio)
        if was_over:
            next_clean = now  # a disk already over diskMaxUsedSpaceRatio: clean at once
        while not self._stop.wait(max(0.01, min(next_flush, next_check, next_clean)
                                      - time.monotonic())):
            now = time.monotonic()
            if now >= next_check:
                try:
                    self.check_disk()
                except Exception:
                    log.exception("checking the store's disks failed")
                next_check = now + (min(DISK_CHECK_INTERVAL, DISK_CHECK_INTERVAL_NEAR_FULL)
                                    if self._near_full else DISK_CHECK_INTERVAL)
                over = self.disk.over(cfg.diskMaxUsedSpaceRatio)
                if over and not was_over:
                    next_clean = now
                was_over = over
            if now >= next_flush:
                next_flush = now + cfg.flushIntervalConsumeQueue / 1000
                try:
                    self._flush_logics()
                except Exception:
                    log.exception("flushing ConsumeQueues, the index or the checkpoint failed")
            if now >= next_clean:
                next_clean = now + cfg.cleanResourceInterval / 1000
                try:
                    self.clean_expired_files()
                except Exception:
                    log.exception("deleting expired files failed")

    def disk_used_ratio(self) -> float:
        """Percentage of the CommitLog's disk in use."""
        return disk_used_ratio(self.config.storePathCommitLog)

    def check_disk(self) -> str | None:
        """Measure the disks of the CommitLog, ConsumeQueue and index directories and set
        :attr:`refusal`: why puts are refused (a directory over
        ``diskSpaceWarningLevelRatio``, or a logic file that found no room), or None. The
        housekeeper calls it every second; returns :attr:`refusal`."""
        full = self.disk.check()
        self._near_full = self.disk.over(self.config.diskSpaceCleanForciblyRatio)
        if self._logics_full is not None and self.dispatcher.failure is None:
            log.warning("ConsumeQueue files are written again")
            self._logics_full = None
        if self._index_full is not None and self._index_has_room():
            log.warning("the index directory has room again")
            self._index_full = None
        self.refusal = full or self._logics_full or self._index_full
        return self.refusal

    def _index_has_room(self) -> bool:
        """Whether the next index file exists or can be made now (see :meth:`_index_failed`)."""
        try:
            self.index.make_spare()
        except OSError:
            return False
        return True

    def _still_refused(self) -> bool:
        """Whether :attr:`refusal` stands. A put refused for a ConsumeQueue that found no
        room first tries (every 100 ms) whether the dispatcher can write again, so that
        sends resume as soon as there is room, not at the housekeeper's next look."""
        if self._logics_full is None or self.refusal is not self._logics_full:
            return True
        now = time.monotonic()
        if now < self._next_logics_probe:
            return True
        self._next_logics_probe = now + 0.1
        self.dispatcher.catch_up()
        return self.dispatcher.failure is not None or self.check_disk() is not None

    def _make_room(self, topic: str, queue_id: int, first: int, end: int) -> int:
        """Make the ConsumeQueue files for the units of queue offsets ``[first, end)`` before
        they are assigned (``CommitLog.make_room``, under its lock), so that the dispatcher
        never meets a full disk for a message already acknowledged: a put that would need a
        file the disk has no room for is refused instead, and nothing of it is stored.
        Returns the queue offset up to which files exist."""
        cq = self.queues.get_or_create(topic, queue_id)
        try:
            return cq.files.make_ahead(first * UNIT_SIZE, end * UNIT_SIZE) // UNIT_SIZE
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            remark = (f"the broker's disk is full: the ConsumeQueue directory "
                      f"{self.config.store_path_consume_queue} has no room for the next file "
                      f"of queue {topic}:{queue_id} ({os.strerror(exc.errno)}); sends are refused "
                      "until space is freed")
            self.counters.puts_refused_disk_full += 1
            now = time.monotonic()
            if now - self._room_logged_at >= 30:
                self._room_logged_at = now
                log.error("%s (reads and consumption go on)", remark)
            raise DiskFullError(remark) from exc

    def _dispatch_failed(self, exc: BaseException) -> None:
        """The dispatcher could not write a ConsumeQueue file: when for want of room,
        refuse puts at once (the messages already stored stay, and are dispatched once
        there is room; reads go on)."""
        if not is_disk_full(exc):
            return
        if self._logics_full is None:
            self._logics_full = (
                f"the broker's disk is full: a ConsumeQueue file cannot be written ({exc}); "
                "sends are refused until space is freed")
            log.error("%s", self._logics_full)
        if self.refusal is None:
            self.refusal = self._logics_full

    def _index_failed(self, exc: BaseException) -> None:
        """The dispatcher found no room for the next index file, made ahead of time (or, when
        even the file being written filled up, for entries, which it skipped): refuse puts
        until the next file can be made."""
        if self._index_full is None:
            self._index_full = (
                f"the broker's disk is full: the index directory {self.config.store_path_index}"
                f" has no room for the next index file ({exc}); sends are refused until space "
                "is freed")
            log.error("%s", self._index_full)
        if self.refusal is None:
            self.refusal = self._index_full

    def clean_expired_files(self, *, now: float | None = None, manual: bool = False) -> int:
        """Delete expired files now; see ``retention.clean_expired_files``. Returns the
        number of CommitLog files deleted."""
        now = time.time() if now is None else now
        with self._clean_lock:
            deleted = clean_expired_files(self.config, self.commitlog, self.queues,
                                          self.index, now=now, manual=manual, disk=self.disk,
                                          consumer_offsets=self.consumer_offsets,
                                          counters=self.counters)
            self.last_clean_time = now
            self.refusal = self.disk.full or self._logics_full or self._index_full
        return deleted


__all__ = ["Housekeeping"]
