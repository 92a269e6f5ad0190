"""MessageStore: the broker's storage engine, CommitLog + ConsumeQueues + IndexFile.

A thin facade over the parts, each in its own module as in RocketMQ:

- ``commitlog``: appends (the caller's thread, one writer at a time under the CommitLog lock);
- ``dispatch``: the *dispatcher* (RocketMQ's reput service) reads new CommitLog records and
  writes ConsumeQueue units and index entries, then tells listeners (long polling) which
  queues grew;
- ``flush``: the *CommitLog flusher* fsyncs every ``flushIntervalCommitLog`` ms
  (ASYNC_FLUSH) or whenever a writer waits for durability (SYNC_FLUSH group commit), and the
  *housekeeper* flushes ConsumeQueues, the index and the checkpoint;
- ``retention``: the housekeeper also deletes expired files and, every second, measures
  the disks: over ``diskSpaceWarningLevelRatio`` puts are refused (DiskFullError) while
  reads go on. Whatever the ratio, a put is acknowledged only once the ConsumeQueue files
  its units go in exist (made on the put path when missing, else the put is refused), and
  the index keeps its next file made ahead: the dispatcher never lacks room for a message
  already acknowledged;
- ``recovery``: what happens at start.

The facade itself is four modules: this one (lifecycle, writing, dispatch, queue offsets,
reads), ``lookups`` (messages by offset, id, key and time), ``replication`` (the role, a
slave's replica bytes, the confirm offset and the cut tail) and ``housekeeping`` (the
housekeeper thread and the full-disk guard).

No asyncio here: an event loop hands the store a scheduling callable
(:meth:`MessageStore.dispatch_via`) and waits for SYNC_FLUSH on its own
(``broker.store_writer``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from ..protocol.message import property_value
from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import SLAVE, MessageStoreConfig
from .consumequeue import UNIT_SIZE, ConsumeQueue, ConsumeQueueTable
from .dispatch import Dispatcher
from .dispatch_runner import DispatchListener, DispatchRunner, Schedule
from .errors import DiskFullError, SlaveNotWritableError, StoreClosedError
from .flush import CommitLogFlusher, CommitLogWarmer, GroupCommit
from .housekeeping import Housekeeping
from .index import Index
from .lock import StoreLock
from .lookups import MessageLookups
from .messages import BatchMessage, BatchResults, PutResult, PutStatus, StoreMessage
from .reads import GetResult, GetStatus, get_messages
from .recovery import confirmed_bound, recover
from .replication import Replication
from .retention import (
    PUT_CHECK_INTERVAL_NEAR_FULL,
    ConsumerOffsetsView,
    DiskWatch,
    StoreCounters,
)

log = logging.getLogger("rocketq.store")


class MessageStore(MessageLookups, Replication, Housekeeping):
    """The message store of one broker. Open it, put and get messages, close it.

    >>> store = MessageStore(MessageStoreConfig(storePathRootDir=path))   # doctest: +SKIP
    >>> result = store.put_message(StoreMessage.create("Orders", b"hi", tags="paid"))
    >>> store.get_messages("Orders", 0, 0, 32).decode()[0].body
    """

    def __init__(self, config: MessageStoreConfig, *, start: bool = True,
                 consumer_offsets: ConsumerOffsetsView | None = None,
                 lock: StoreLock | None = None, owner: str = "") -> None:
        """``lock``: the store root's lock, taken already by the caller (a broker takes it
        before it binds its port); the store takes it itself otherwise, describing itself as
        ``owner``. Either way the store releases it on :meth:`close`."""
        self.config = config
        #: The exclusive lock on the store root, held from :meth:`start` to :meth:`close`:
        #: a second store on the same files is refused (StoreLockedError).
        self.lock = lock
        self.owner = owner
        #: The broker's committed consumer offsets: retention names the groups that lose
        #: messages when files go before they are read (None: nobody is named).
        self.consumer_offsets = consumer_offsets
        #: Totals for the metrics: files deleted, messages lost, puts refused.
        self.counters = StoreCounters()
        #: The disks' usage and whether they are full (set by :meth:`check_disk`).
        self.disk = DiskWatch(config)
        #: Why puts are refused now (a full disk, which directory), or None: the one flag
        #: the put path reads.
        self.refusal: str | None = None
        #: A ConsumeQueue write that found no room: puts are refused until the dispatcher
        #: writes again (it retries by itself; a refused put also tries, every 100 ms).
        self._logics_full: str | None = None
        self._next_logics_probe = 0.0
        #: An index write that found no room (its entries were skipped): puts are refused
        #: until the disk is back at ``diskSpaceCleanForciblyRatio``.
        self._index_full: str | None = None
        #: Whether a disk is over ``diskSpaceCleanForciblyRatio``: then the put path also
        #: measures, every PUT_CHECK_INTERVAL_NEAR_FULL seconds, so that a burst of writes
        #: cannot take the last free blocks between two of the housekeeper's looks.
        self._near_full = False
        self._next_put_check = 0.0
        self.commitlog = CommitLog(config)
        self.commitlog.files.set_write_mode(pwrite=bool(config.putCommitLogDataByFileChannel),
                                            zero_ahead=bool(config.warmMapedFileEnable))
        self.queues = ConsumeQueueTable(config.store_path_consume_queue,
                                        config.mappedFileSizeConsumeQueue)
        self.index = Index(config.store_path_index, config.maxHashSlotNum, config.maxIndexNum)
        self.checkpoint: Checkpoint | None = None
        self._dispatcher = Dispatcher(
            self.commitlog, self.index if config.messageIndexEnable else None,
            self.queues.get_or_create, config.delay_levels_ms)
        self.dispatcher = DispatchRunner(self.commitlog, self._dispatcher)
        self.dispatcher.on_failure = self._dispatch_failed
        self._dispatcher.on_index_failure = self._index_failed
        # A put whose units would need a ConsumeQueue file makes it first, or is refused.
        self.commitlog.make_room = self._make_room
        self._room_logged_at = -60.0
        #: CommitLog bytes a reader may lag behind the end before the store suggests a slave.
        self.memory_budget = physical_memory() * config.accessMessageInMemoryMaxRatio // 100
        #: SYNC_FLUSH only: where writers wait for durability.
        self.group_commit: GroupCommit | None = None
        #: Whether appends report where a writer waits (SYNC_FLUSH or SYNC_MASTER); read once,
        #: as the append path checks it on every call.
        self._answers_when_safe = config.answers_when_safe
        self._slave = config.is_slave
        self._flusher: CommitLogFlusher | None = None
        self._stop = threading.Event()
        #: Held while the housekeeper flushes the ConsumeQueues and while topics' queues are
        #: deleted (from the broker's loop): a flush must not fsync a file being closed.
        self._logics_lock = threading.Lock()
        #: One cleaning at a time: the housekeeper's and one asked for (an admin request, a
        #: test) would otherwise pick the same oldest file and report it twice.
        self._clean_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        #: Called with the new end after :meth:`truncate` cut the log (dispatch still
        #: paused): whoever built state from the records that are gone (the broker's
        #: offset log) rebuilds it.
        self.on_truncate: list[Callable[[int], None]] = []
        self.running = False
        self.recovered_abnormally = False
        self.last_clean_time = 0.0
        if start:
            self.start()

    @property
    def consume_queues(self) -> dict[tuple[str, int], ConsumeQueue]:
        """Every ConsumeQueue by ``(topic, queue id)`` (a snapshot; do not change it)."""
        return self.queues.queues

    # ================================================================== lifecycle
    def start(self) -> None:
        """Lock the store root, then load files, recover, and start the background threads.

        Raises StoreLockedError, having read or written nothing, when another store (another
        process, or another open in this one) holds the root: two writers on one CommitLog
        would each take the other's appends for a crash to recover from."""
        root = self.config.storePathRootDir
        if self.lock is None or not self.lock.held:
            self.lock = StoreLock.acquire(root, self.owner or "rocketq message store")
        elif os.path.abspath(root) != self.lock.directory:
            raise ValueError(f"the lock given is on {self.lock.directory}, not on {root}")
        try:
            self._open()
        except BaseException:
            self.lock.release()
            raise

    def _open(self) -> None:
        """Load files, recover, and start the background threads (the lock held)."""
        cfg = self.config
        os.makedirs(cfg.storePathRootDir, exist_ok=True)
        t0 = time.monotonic()
        self.checkpoint, self.recovered_abnormally = recover(
            cfg, self.commitlog, self.queues, self.index, self._dispatcher,
            hold_at_confirm=cfg.enableControllerMode)
        if cfg.enableControllerMode:
            # Until the broker knows its role and hears a live confirmOffset, readers see
            # no further than the confirm offset persisted, and appends wait for a
            # promotion (set_role), which dispatches the whole log first.
            bound = confirmed_bound(self.checkpoint)
            self.dispatcher.limit = lambda: bound
            self.set_role(SLAVE)
        with open(cfg.abort_path, "w"):
            pass
        self.checkpoint.clean_end_offset = -1
        self.checkpoint.flush()
        self.check_disk()  # a store opened on a full disk refuses puts from the first
        self.commitlog.on_append.append(self.dispatcher.on_append)
        if cfg.sync_flush:
            self.group_commit = GroupCommit(self.commitlog, cfg.syncFlushTimeout / 1000)
        self._flusher = CommitLogFlusher(self.commitlog, cfg, self.group_commit)
        self._stop.clear()
        self.running = True
        self.dispatcher.start()
        parts = [("commitlog-flusher", lambda: self._flusher.run(self._stop)),
                 ("housekeeper", self._housekeeping_loop)]
        if cfg.warmMapedFileEnable:
            warmer = CommitLogWarmer(self.commitlog.files, cfg.warmMappedFileAheadSize)
            parts.append(("commitlog-warmer", lambda: warmer.run(self._stop)))
        for name, target in parts:
            t = threading.Thread(target=target, name=f"rocketq-store-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("store at %s ready in %.0f ms: CommitLog [%d, %d), %d queues%s",
                 cfg.storePathRootDir, (time.monotonic() - t0) * 1000, self.commitlog.min_offset,
                 self.commitlog.max_offset, len(self.queues),
                 " (recovered after a crash)" if self.recovered_abnormally else "")

    def close(self) -> None:
        """Stop threads, flush everything, write a clean checkpoint, drop the abort marker and
        release the store root's lock."""
        if not self.running:
            return
        try:
            self._shut()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _shut(self) -> None:
        """Stop, flush and close the files (the lock still held)."""
        self.running = False
        self._stop.set()
        if self.group_commit:
            self.group_commit.wake()
        for t in self._threads:
            t.join()
        self._threads.clear()
        self.dispatcher.stop()
        self.commitlog.files.flush()
        self._flush_logics()
        cp = self.checkpoint
        assert cp is not None
        cp.flushed_offset = self.commitlog.files.flushed_offset
        cp.dispatched_offset = self.reput_offset
        cp.confirm_offset = self.confirm_offset()
        cp.clean_end_offset = self.commitlog.max_offset
        cp.flush()
        cp.close()
        self.commitlog.files.close()
        self.queues.close()
        self.index.close()
        try:
            os.unlink(self.config.abort_path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reload_config(self) -> None:
        """Take up the settings that are kept elsewhere once read (maxMessageSize,
        syncFlushTimeout) after ``config`` changed while the store runs; the others that
        may change (flush intervals, retention) are read from ``config`` on each use."""
        self.commitlog._max_body = self.config.maxMessageSize
        if self.group_commit is not None:
            self.group_commit.timeout = self.config.syncFlushTimeout / 1000

    # ================================================================== writing
    def put_messages(self, messages: Sequence[StoreMessage] | BatchMessage) -> list[PutResult]:
        """Append messages, or a batch's elements (one call, consecutive records) and, with
        SYNC_FLUSH, wait until they are on disk unless a message says ``WAIT=false``.

        Raises MessageIllegalError (bad topic, body or properties) or DiskFullError; the store
        stays usable either way.
        """
        appended, wait_at = self.append(messages)
        if wait_at and self.group_commit is not None and not self.group_commit.wait(
                wait_at, self.config.syncFlushTimeout / 1000):
            mark_status(appended, PutStatus.FLUSH_DISK_TIMEOUT)
        return appended

    def put_message(self, message: StoreMessage) -> PutResult:
        """Append one message; see :meth:`put_messages`."""
        return self.put_messages((message,))[0]

    def append(self, messages: Sequence[StoreMessage] | BatchMessage
               ) -> tuple[list[PutResult], int]:
        """Append without waiting; also return the end offset a writer must see durable
        (SYNC_FLUSH, ``group_commit``) or replicated (SYNC_MASTER) before it answers: 0 when
        neither applies or every message says ``WAIT=false``. For writers that wait their own
        way, such as an event loop."""
        if not self.running:
            raise StoreClosedError("the message store is closed")
        if self._slave:
            raise SlaveNotWritableError(
                "this broker is a slave: it takes messages only from its master")
        if self._near_full:
            now = time.monotonic()
            if now >= self._next_put_check:
                self._next_put_check = now + PUT_CHECK_INTERVAL_NEAR_FULL
                self.check_disk()
        if self.refusal is not None and self._still_refused():
            self.counters.puts_refused_disk_full += 1
            raise DiskFullError(self.refusal)
        if isinstance(messages, BatchMessage):
            appended = self.commitlog.append_batch(messages)
            waits = self._answers_when_safe and wants_wait(messages)
        else:
            appended = self.commitlog.append(messages)
            waits = self._answers_when_safe and any(wants_wait(m) for m in messages)
        if not waits or not appended:
            return appended, 0
        last = appended[-1]
        return appended, last.commitlog_offset + last.size

    # ================================================================== dispatch
    def dispatch_via(self, schedule: Schedule | None) -> None:
        """See :meth:`DispatchRunner.dispatch_via`: appends made on the calling thread are
        dispatched through ``schedule`` (an event loop's ``call_soon``)."""
        self.dispatcher.dispatch_via(schedule)

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """Call ``listener(topic, queue_id, max_offset)`` (on the dispatching thread) when
        new units land in a ConsumeQueue. Long polling hangs off this."""
        self.dispatcher.add_listener(listener)

    def remove_dispatch_listener(self, listener: DispatchListener) -> None:
        self.dispatcher.remove_listener(listener)

    @property
    def reput_offset(self) -> int:
        """How far the dispatcher has read the CommitLog."""
        return self._dispatcher.reput_offset

    def dispatch(self, wait: float | None = None) -> int:
        """Dispatch every record not yet dispatched; see :meth:`DispatchRunner.dispatch`."""
        return self.dispatcher.dispatch(wait)

    def catch_up(self) -> None:
        """Dispatch what the CommitLog holds beyond the ConsumeQueues, unless the dispatcher
        is at it: a read right after a write then sees the write."""
        self.dispatcher.catch_up()

    def wait_dispatched(self, offset: int | None = None, timeout: float = 5.0) -> bool:
        """Block until everything up to ``offset`` (default: the CommitLog end) is dispatched."""
        return self.dispatcher.wait_dispatched(offset, timeout)

    # ================================================================== consume queues
    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.min_offset(topic, queue_id)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last dispatched queue offset."""
        return self.queues.max_offset(topic, queue_id)

    def queue_ids(self, topic: str) -> list[int]:
        return self.queues.queue_ids(topic)

    def topics(self) -> set[str]:
        return self.queues.topics()

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the ConsumeQueues of ``topics`` (their CommitLog records age out normally)."""
        doomed = set(topics)
        with self._logics_lock:
            removed = self.queues.delete_topics(doomed)
        with self.commitlog.lock:
            for key in [k for k in self.commitlog.queue_offsets if k[0] in doomed]:
                del self.commitlog.queue_offsets[key]
            self.commitlog.queue_room = {k: v for k, v in self.commitlog.queue_room.items()
                                         if k[0] not in doomed}
        return removed

    # ================================================================== reading
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int,
                     tag_codes: set[int] | frozenset[int] | None = None,
                     record_filter: Callable[[memoryview], bool] | None = None,
                     max_bytes: int | None = None) -> GetResult:
        """Read up to ``max_count`` messages of a queue from logical ``offset``; see
        ``reads.get_messages``."""
        result = get_messages(
            self.queues.get(topic, queue_id), self.commitlog, offset, max_count, tag_codes,
            record_filter,
            self.config.maxTransferBytesOnMessageInMemory if max_bytes is None else max_bytes)
        result.suggest_slave = result.behind > self.memory_budget
        return result


def physical_memory() -> int:
    """This machine's physical memory in bytes (RocketMQ's TOTAL_PHYSICAL_MEMORY_SIZE)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX sysconf: assume 8 GiB
        return 8 << 30


def mark_status(results: list[PutResult], status: PutStatus) -> None:
    """Report appends whose SYNC_FLUSH or SYNC_MASTER wait failed; they are stored all the
    same."""
    if isinstance(results, BatchResults):
        results.status = status  # its results are made on demand, with this status
        for r in results.tail:
            r.status = status
        return
    for r in results:
        r.status = status


def wants_wait(message: StoreMessage | BatchMessage) -> bool:
    """False when the message carries ``WAIT=false`` (do not wait for the flush)."""
    value = property_value(message.properties, b"WAIT")
    return value is None or value.lower() != b"false"


__all__ = [
    "GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "UNIT_SIZE",
]

