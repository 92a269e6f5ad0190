"""Flushing (RocketMQ's FlushCommitLogService and FlushConsumeQueueService).

- ASYNC_FLUSH: the CommitLog flusher thread fsyncs every ``flushIntervalCommitLog`` ms.
- SYNC_FLUSH: writers wait until an fsync covers their offset, and one fsync releases every
  writer it covers (group commit). Threads wait on :meth:`GroupCommit.wait`; a writer on an
  event loop runs :meth:`GroupCommit.flush` on a worker thread itself (see
  ``broker.store_writer``), so nothing here knows of asyncio.
- ConsumeQueues, the index and then the checkpoint are flushed by the housekeeper
  (:func:`flush_logics`), after the records they describe.
- The *CommitLog warmer* (``warmMapedFileEnable``, :class:`CommitLogWarmer`) writes zeros
  ahead of the appends and syncs them, so that SYNC_FLUSH's fdatasync only writes data.

fsync runs on these threads with the GIL released, so it never blocks an event loop.
"""

from __future__ import annotations

import logging
import threading
import time

from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import MessageStoreConfig
from .consumequeue import ConsumeQueueTable
from .errors import is_disk_full
from .index import Index
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger("rocketq.store")


class GroupCommit:
    """SYNC_FLUSH: writers wait until an fsync covers their offset; one fsync serves many."""

    def __init__(self, commitlog: CommitLog, timeout: float) -> None:
        self.commitlog = commitlog
        #: Seconds a writer waits before its send is reported FLUSH_DISK_TIMEOUT.
        self.timeout = timeout
        self.cond = threading.Condition(threading.Lock())
        self.requests: list[int] = []
        self.flushed = commitlog.files.flushed_offset
        self.flush_count = 0
        self._flush_lock = threading.Lock()

    def flush(self) -> int:
        """fsync the CommitLog up to its current end; return the durable offset. Safe from
        any thread; concurrent callers take turns and each sees the latest offset."""
        with self._flush_lock:
            flushed = self.commitlog.files.flush()
            self.flush_count += 1
            if flushed > self.flushed:
                self.flushed = flushed
            return self.flushed

    def wait(self, offset: int, timeout: float) -> bool:
        """Block until ``offset`` is durable (True) or ``timeout`` seconds pass (False)."""
        with self.cond:
            if self.flushed >= offset:
                return True
            self.requests.append(offset)
            self.cond.notify()
            return self.cond.wait_for(lambda: self.flushed >= offset, timeout)

    def run_once(self, idle_wait: float) -> None:
        """One round of the flusher thread: fsync if anyone waits, then wake them."""
        with self.cond:
            if not self.requests:
                self.cond.wait(idle_wait)
            requests, self.requests = self.requests, []
        if not requests:
            return
        self.flush()
        with self.cond:
            self.cond.notify_all()

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()


class CommitLogFlusher:
    """The thread that makes the CommitLog durable: on an interval (ASYNC_FLUSH) or for the
    writers waiting in ``group_commit`` (SYNC_FLUSH)."""

    def __init__(self, commitlog: CommitLog, config: MessageStoreConfig,
                 group_commit: GroupCommit | None) -> None:
        self.commitlog = commitlog
        self.config = config
        self.group_commit = group_commit
        #: The last fsync error, if any (the disk may be failing).
        self.error: BaseException | None = None

    def run(self, stop: threading.Event) -> None:
        gc = self.group_commit
        while not stop.is_set():
            try:
                if gc is not None:
                    gc.run_once(0.01)
                else:
                    stop.wait(self.config.flushIntervalCommitLog / 1000)
                    self.commitlog.files.flush()
            except Exception as exc:
                self.error = exc
                log.exception("CommitLog flush failed")
                stop.wait(0.1)
        if gc is not None:
            gc.run_once(0)


class CommitLogWarmer:
    """Keeps the last CommitLog file written with zeros ``distance`` bytes ahead of its write
    position (RocketMQ's warmMappedFile, as a moving window rather than the whole file at
    creation): an fdatasync of appends then finds their blocks written already, and commits
    no filesystem journal for them. Zeros go a chunk at a time, each chunk synced
    (:meth:`MappedFile.zero_ahead` says how appends are kept safe); the thread sleeps
    :attr:`idle_wait` seconds whenever it is ahead."""

    def __init__(self, files: MappedFileQueue, distance: int, idle_wait: float = 0.02) -> None:
        self.files = files
        self.distance = distance
        self.idle_wait = idle_wait
        #: Bytes of zeros written so far.
        self.zeroed = 0
        #: The last error, if any; the file it happened in is not zeroed further.
        self.error: BaseException | None = None
        self._given_up: MappedFile | None = None

    def warm_once(self) -> int:
        """Zero the next chunk ahead of the appends, if one is due; return its size."""
        f = self.files.last
        if f is None or f.is_full or f is self._given_up or f.write_lock is None:
            return 0
        try:
            done = f.zero_ahead(self.distance)
        except OSError as exc:
            self.error = exc
            self._given_up = f
            log.error("writing zeros ahead of the CommitLog's appends failed; appends go on "
                      "(SYNC_FLUSH is slower until the next file): %s", exc,
                      exc_info=not is_disk_full(exc))
            return 0
        self.zeroed += done
        return done

    def run(self, stop: threading.Event) -> None:
        """Warm until ``stop`` is set: a chunk after another while behind, else a nap."""
        while not stop.is_set():
            try:
                done = self.warm_once()
            except Exception as exc:  # a bug, not the disk: keep the store running
                self.error = exc
                log.exception("warming the CommitLog failed")
                done = 0
                stop.wait(1.0)
            if not done:
                stop.wait(self.idle_wait)


def flush_logics(queues: ConsumeQueueTable, index: Index, checkpoint: Checkpoint | None,
                 commitlog: CommitLog, dispatched: int, confirmed: int | None = None) -> None:
    """Flush ConsumeQueues and the index, then record in the checkpoint how far they and
    the CommitLog are durable (recovery starts its scan there) and, when given, the confirm
    offset (controller mode's recovery dispatches no further)."""
    queues.flush()
    index.flush()
    if checkpoint is not None and checkpoint.fd >= 0:
        checkpoint.dispatched_offset = dispatched
        checkpoint.flushed_offset = commitlog.files.flushed_offset
        if confirmed is not None:
            checkpoint.confirm_offset = confirmed
        now = int(time.time() * 1000)
        checkpoint.physic_msg_timestamp = checkpoint.logics_msg_timestamp = now
        checkpoint.index_msg_timestamp = now
        checkpoint.flush()
