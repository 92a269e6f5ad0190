"""MessageStore: the broker's storage engine, CommitLog + ConsumeQueues + IndexFile.

Threads, as in RocketMQ:

- the caller appends to the CommitLog (one writer at a time, under the CommitLog lock);
- the *dispatcher* (RocketMQ's reput service) reads new CommitLog records and writes
  ConsumeQueue units and index entries, then tells listeners (long polling) which queues grew;
- the *CommitLog flusher* fsyncs the CommitLog every ``flushIntervalCommitLog`` ms
  (ASYNC_FLUSH) or whenever a writer waits for durability (SYNC_FLUSH group commit: one fsync
  releases every writer it covers);
- the *housekeeper* flushes ConsumeQueues and the index, writes the checkpoint, and deletes
  expired files.

fsync runs on those threads with the GIL released, so it never blocks an asyncio event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..protocol.message import (
    STORE_TIMESTAMP,
    STORE_TIMESTAMP_POS,
    MessageRecord,
    decode_offset_msg_id,
    decode_record,
    property_value,
)
from .checkpoint import Checkpoint
from .commitlog import BatchMessage, CommitLog, PutResult, PutStatus, StoreMessage
from .config import MessageStoreConfig
from .consumequeue import UNIT, UNIT_SIZE, ConsumeQueue
from .dispatch import Dispatcher
from .errors import StoreClosedError
from .index import Index

log = logging.getLogger("rocketq.store")

#: A listener learns that ``(topic, queue_id)`` now holds units up to ``max_offset``.
DispatchListener = Callable[[str, int, int], None]


class GetStatus(enum.Enum):
    """Outcome of a read (RocketMQ's GetMessageStatus)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetResult:
    """Messages read from one queue: raw record bytes, never re-encoded.

    ``buffers`` are memoryviews of the mapped CommitLog. Call ``release()`` (or use the
    result as a context manager) when done so deleted files can be unmapped.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    @property
    def total_size(self) -> int:
        return sum(len(b) for b in self.buffers)

    def data(self) -> bytes:
        """All records back to back, as a PULL_MESSAGE body."""
        return b"".join(self.buffers)

    def decode(self, decompress: bool = True) -> list[MessageRecord]:
        return [decode_record(b, decompress=decompress) for b in self.buffers]

    def release(self) -> None:
        for b in self.buffers:
            b.release()
        self.buffers = []

    def __enter__(self) -> GetResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _LoopWaiters:
    """Durability waiters of one event loop, and whether a flush round is running there."""

    __slots__ = ("waiters", "running")

    def __init__(self) -> None:
        self.waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self.running = False


class _GroupCommit:
    """SYNC_FLUSH: writers wait until an fsync covers their offset; one fsync serves many.

    asyncio writers are served by a flush round running on their own event loop: it takes
    every waiter present, fsyncs on a dedicated thread (the GIL is released, the loop keeps
    running, more writers queue up for the next round) and resolves them in the loop.
    Threaded writers are served the same way by the flusher thread.
    """

    def __init__(self, commitlog: CommitLog, timeout: float) -> None:
        self.commitlog = commitlog
        self.timeout = timeout
        self.cond = threading.Condition(threading.Lock())
        self.requests: list[int] = []
        self.flushed = commitlog.files.flushed_offset
        self.flush_count = 0
        self._flush_lock = threading.Lock()
        self._loops: dict[asyncio.AbstractEventLoop, _LoopWaiters] = {}
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="rocketq-store-fsync")

    def flush(self) -> int:
        """fsync the CommitLog up to its current end; return the durable offset."""
        with self._flush_lock:
            flushed = self.commitlog.files.flush()
            self.flush_count += 1
            if flushed > self.flushed:
                self.flushed = flushed
            return self.flushed

    # ---------------------------------------------------------------- asyncio writers
    def request_async(self, offset: int) -> asyncio.Future[bool]:
        """A future that becomes True once ``offset`` is durable (False on timeout)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        if self.flushed >= offset:
            fut.set_result(True)
            return fut
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _LoopWaiters()
        state.waiters.append((offset, fut))
        if not state.running:
            state.running = True
            loop.create_task(self._rounds(loop, state))
        return fut

    async def _rounds(self, loop: asyncio.AbstractEventLoop, state: _LoopWaiters) -> None:
        try:
            while state.waiters:
                waiters, state.waiters = state.waiters, []
                flush = loop.run_in_executor(self._executor, self.flush)
                try:
                    flushed = await asyncio.wait_for(asyncio.shield(flush), self.timeout)
                except TimeoutError:
                    for _, fut in waiters:
                        if not fut.done():
                            fut.set_result(False)
                    await flush  # let the slow fsync finish before starting another
                    continue
                for offset, fut in waiters:
                    if not fut.done():
                        if offset <= flushed:
                            fut.set_result(True)
                        else:
                            state.waiters.append((offset, fut))
        except Exception as exc:  # an fsync error: the writers must hear of it
            for _, fut in state.waiters:
                if not fut.done():
                    fut.set_exception(exc)
            state.waiters.clear()
            for _, fut in waiters:
                if not fut.done():
                    fut.set_exception(exc)
            raise
        finally:
            state.running = False

    # ---------------------------------------------------------------- threaded writers
    def wait(self, offset: int, timeout: float) -> bool:
        with self.cond:
            if self.flushed >= offset:
                return True
            self.requests.append(offset)
            self.cond.notify()
            return self.cond.wait_for(lambda: self.flushed >= offset, timeout)

    def run_once(self, idle_wait: float) -> None:
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

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class MessageStore:
    """The message store of one broker. Open it, put and get messages, close it.

    >>> store = MessageStore(MessageStoreConfig(storePathRootDir=path))   # doctest: +SKIP
    >>> result = store.put_message(StoreMessage.create("Orders", b"hi", tags="paid"))
    >>> store.get_messages("Orders", 0, 0, 32).decode()[0].body
    """

    def __init__(self, config: MessageStoreConfig, *, start: bool = True) -> None:
        self.config = config
        self.commitlog = CommitLog(config)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._cq_lock = threading.Lock()
        self.index = Index(config.store_path_index, config.maxHashSlotNum,
                                  config.maxIndexNum)
        self.checkpoint: Checkpoint | None = None
        self._dispatcher = Dispatcher(
            self.commitlog, self.index if config.messageIndexEnable else None, self._queue,
            config.delay_levels_ms)
        self._listeners: list[DispatchListener] = []
        self._dispatch_event = threading.Event()
        self._dispatch_lock = threading.Lock()
        self._dispatched_cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._group_commit: _GroupCommit | None = None
        self.running = False
        self.recovered_abnormally = False
        self.last_clean_time = 0.0
        self._flush_error: BaseException | None = None
        self._inline_loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._inline_pending = False
        if start:
            self.start()

    # ================================================================== lifecycle
    def start(self) -> None:
        """Load files, recover, and start the background threads."""
        cfg = self.config
        os.makedirs(cfg.storePathRootDir, exist_ok=True)
        t0 = time.monotonic()
        self._recover()
        with open(cfg.abort_path, "w"):
            pass
        assert self.checkpoint is not None
        self.checkpoint.clean_end_offset = -1
        self.checkpoint.flush()
        self.commitlog.on_append.append(self._on_append)
        if cfg.sync_flush:
            self._group_commit = _GroupCommit(self.commitlog, cfg.syncFlushTimeout / 1000)
        self._stop.clear()
        self.running = True
        for name, target in (("dispatcher", self._dispatch_loop),
                             ("commitlog-flusher", self._flush_loop),
                             ("housekeeper", self._housekeeping_loop)):
            t = threading.Thread(target=target, name=f"rocketq-store-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("store at %s ready in %.0f ms: CommitLog [%d, %d), %d queues%s",
                 cfg.storePathRootDir, (time.monotonic() - t0) * 1000, self.commitlog.min_offset,
                 self.commitlog.max_offset, len(self.consume_queues),
                 " (recovered after a crash)" if self.recovered_abnormally else "")

    def close(self) -> None:
        """Stop threads, flush everything, write a clean checkpoint and drop the abort marker."""
        if not self.running:
            return
        self.running = False
        self._stop.set()
        self._dispatch_event.set()
        if self._group_commit:
            self._group_commit.wake()
        for t in self._threads:
            t.join()
        self._threads.clear()
        if self._group_commit:
            self._group_commit.close()
        self.dispatch()
        self.commitlog.files.flush()
        self._flush_logics()
        cp = self.checkpoint
        assert cp is not None
        cp.flushed_offset = self.commitlog.files.flushed_offset
        cp.dispatched_offset = self.reput_offset
        cp.clean_end_offset = self.commitlog.max_offset
        cp.flush()
        cp.close()
        self.commitlog.files.close()
        for cq in self.consume_queues.values():
            cq.close()
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
        if self._group_commit is not None:
            self._group_commit.timeout = self.config.syncFlushTimeout / 1000

    # ================================================================== writing
    def put_messages(self, messages: Sequence[StoreMessage] | BatchMessage) -> list[PutResult]:
        """Append messages, or a batch's elements (one call, consecutive records) and, with
        SYNC_FLUSH, wait until they are on disk unless a message says ``WAIT=false``.

        Raises MessageIllegalError (bad topic, body or properties) or DiskFullError; the store
        stays usable either way.
        """
        appended, durable_at = self._append(messages)
        if durable_at and not self._group_commit.wait(durable_at,
                                                      self.config.syncFlushTimeout / 1000):
            _mark_timed_out(appended)
        return appended

    def put_message(self, message: StoreMessage) -> PutResult:
        """Append one message; see :meth:`put_messages`."""
        return self.put_messages((message,))[0]

    async def put_messages_async(self, messages: Sequence[StoreMessage] | BatchMessage
                                 ) -> list[PutResult]:
        """Like :meth:`put_messages`, but waits for a SYNC_FLUSH without blocking the loop."""
        appended, durable_at = self._append(messages)
        if durable_at and not await self._group_commit.request_async(durable_at):
            _mark_timed_out(appended)
        return appended

    def _append(self, messages: Sequence[StoreMessage] | BatchMessage
                ) -> tuple[list[PutResult], int]:
        """Append; also return the offset a SYNC_FLUSH writer must wait for (0: no wait)."""
        if not self.running:
            raise StoreClosedError("the message store is closed")
        if isinstance(messages, BatchMessage):
            appended = self.commitlog.append_batch(messages)
            waits = self._group_commit is not None and _wants_wait(messages)
        else:
            appended = self.commitlog.append(messages)
            waits = self._group_commit is not None and any(_wants_wait(m) for m in messages)
        if not waits or not appended:
            return appended, 0
        last = appended[-1]
        return appended, last.commitlog_offset + last.size

    async def put_message_async(self, message: StoreMessage) -> PutResult:
        return (await self.put_messages_async((message,)))[0]

    def _on_append(self, end: int) -> None:
        if self._inline_loop is not None and threading.get_ident() == self._loop_thread:
            if not self._inline_pending:
                self._inline_pending = True
                self._inline_loop.call_soon(self._dispatch_inline)
            return
        if not self._dispatch_event.is_set():
            self._dispatch_event.set()

    def dispatch_on(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Dispatch appends made on ``loop`` (a broker's event loop, called from its thread)
        on that loop, once per loop iteration after the callbacks that appended, instead of
        waking the dispatcher thread. Handing the interpreter lock to that thread and back for
        every small append costs more than the dispatch itself. Appends from other threads
        still wake the dispatcher thread; ``None`` sends everything back to it."""
        self._loop_thread = threading.get_ident() if loop is not None else 0
        self._inline_loop = loop

    def _dispatch_inline(self) -> None:
        self._inline_pending = False
        if self._dispatcher.reput_offset >= self.commitlog.max_offset:
            return
        try:
            self.dispatch(wait=0)
        except Exception:
            log.exception("dispatch failed at CommitLog offset %d", self.reput_offset)
        if self._dispatcher.reput_offset < self.commitlog.max_offset:
            self._dispatch_event.set()  # the thread was busy, or failed: let it finish

    # ================================================================== dispatch
    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """Call ``listener(topic, queue_id, max_offset)`` (on the dispatcher thread) when
        new units land in a ConsumeQueue. Long polling hangs off this."""
        self._listeners.append(listener)

    def remove_dispatch_listener(self, listener: DispatchListener) -> None:
        self._listeners.remove(listener)

    def _dispatch_loop(self) -> None:
        while not self._stop.is_set():
            self._dispatch_event.wait(0.5)
            self._dispatch_event.clear()
            try:
                if self.dispatch():
                    # Like RocketMQ's reput service, pause a moment after a round so records
                    # that arrive meanwhile are dispatched together, not one wake-up each.
                    time.sleep(0.001)
            except Exception:  # keep dispatching later records; say what went wrong
                log.exception("dispatch failed at CommitLog offset %d", self.reput_offset)
                self._stop.wait(0.1)

    @property
    def reput_offset(self) -> int:
        """How far the dispatcher has read the CommitLog."""
        return self._dispatcher.reput_offset

    def dispatch(self, wait: float | None = None) -> int:
        """Build ConsumeQueue units and index entries for every record not yet dispatched;
        return how many records were dispatched. ``wait`` bounds the seconds to wait for a
        busy dispatcher (which is dispatching those records anyway)."""
        total = 0
        if not self._dispatch_lock.acquire(timeout=-1 if wait is None else wait):
            return 0
        try:
            while True:
                end = self.commitlog.max_offset
                if self._dispatcher.reput_offset >= end:
                    break
                count, grown = self._dispatcher.run(end)
                total += count
                if grown:
                    self._notify(grown)
                if not count:
                    break
        finally:
            self._dispatch_lock.release()
        if total:
            with self._dispatched_cond:
                self._dispatched_cond.notify_all()
        return total

    def _notify(self, grown: dict[tuple[str, int], int]) -> None:
        for listener in self._listeners:
            for (topic, queue_id), max_offset in grown.items():
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("dispatch listener %r failed", listener)

    def catch_up(self) -> None:
        """Dispatch what the CommitLog holds beyond the ConsumeQueues, unless the dispatcher
        is at it: a read right after a write then sees the write."""
        if self._dispatcher.reput_offset < self.commitlog.max_offset:
            self.dispatch(wait=0.05)

    def wait_dispatched(self, offset: int | None = None, timeout: float = 5.0) -> bool:
        """Block until everything up to ``offset`` (default: the CommitLog end) is dispatched."""
        target = self.commitlog.max_offset if offset is None else offset
        deadline = time.monotonic() + timeout
        with self._dispatched_cond:
            while self.reput_offset < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._dispatch_event.set()
                self._dispatched_cond.wait(min(remaining, 0.05))
        return True

    # ================================================================== consume queues
    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return self.consume_queues.get((topic, queue_id)) or self._create_cq(topic, queue_id)

    def _create_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        with self._cq_lock:
            cq = self.consume_queues.get((topic, queue_id))
            if cq is None:
                cq = ConsumeQueue(self.config.store_path_consume_queue, topic, queue_id,
                                  self.config.mappedFileSizeConsumeQueue)
                self.consume_queues = {**self.consume_queues, (topic, queue_id): cq}
            return cq

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still readable (retention moves it up)."""
        cq = self.consume_queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last dispatched queue offset."""
        cq = self.consume_queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.consume_queues if t == topic)

    def topics(self) -> set[str]:
        return {t for t, _ in self.consume_queues}

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the ConsumeQueues of ``topics`` (their CommitLog records age out normally)."""
        doomed = set(topics)
        with self._cq_lock:
            gone = [cq for key, cq in self.consume_queues.items() if key[0] in doomed]
            self.consume_queues = {k: v for k, v in self.consume_queues.items()
                                   if k[0] not in doomed}
        with self.commitlog.lock:
            for key in [k for k in self.commitlog.queue_offsets if k[0] in doomed]:
                del self.commitlog.queue_offsets[key]
        for cq in gone:
            cq.files.remove_first(cq.files.files)
            shutil.rmtree(cq.files.directory, ignore_errors=True)
        for topic in doomed:
            shutil.rmtree(os.path.join(self.config.store_path_consume_queue, topic),
                          ignore_errors=True)
        return len(gone)

    # ================================================================== reading
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int,
                     tag_codes: set[int] | frozenset[int] | None = None,
                     record_filter: Callable[[memoryview], bool] | None = None,
                     max_bytes: int | None = None) -> GetResult:
        """Read up to ``max_count`` messages of a queue from logical ``offset``.

        ``tag_codes`` keeps units whose tag code is in the set (None keeps all);
        ``record_filter`` can look at each record's bytes (SQL92 filters). The answer's status
        and ``next_begin_offset`` follow RocketMQ's rules, so a broker maps them to pull codes.
        """
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_offset, max_offset = cq.min_offset, cq.max_offset
        if max_offset == 0 or max_offset <= min_offset:
            status = GetStatus.NO_MESSAGE_IN_QUEUE
            return GetResult(status, _correct(offset, max_offset, min_offset), min_offset,
                             max_offset)
        if offset < min_offset:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, _correct(offset, max_offset,
                                                                       min_offset),
                             min_offset, max_offset)
        max_bytes = self.config.maxTransferBytesOnMessageInMemory if max_bytes is None \
            else max_bytes
        result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
        units = cq.units(offset, max(800, max_count))
        if units is None:
            result.status = GetStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = offset + 1 if offset + 1 < max_offset else offset
            return result
        commitlog = self.commitlog
        commitlog_min = commitlog.min_offset
        files = commitlog.files
        total = 0
        next_offset = offset
        removed = False
        buffers = result.buffers
        for phys, size, code in UNIT.iter_unpack(units):
            if len(buffers) >= max_count or (buffers and total + size > max_bytes):
                break
            next_offset += 1
            if size <= 0:
                continue
            if phys < commitlog_min:
                removed = True
                continue
            if tag_codes is not None and code not in tag_codes:
                continue
            f = files.find(phys)
            if f is None:
                removed = True
                continue
            pos = phys - f.from_offset
            view = f.view[pos:pos + size]
            if record_filter is not None and not record_filter(view):
                view.release()
                continue
            buffers.append(view)
            total += size
        units.release()
        result.next_begin_offset = next_offset
        if buffers:
            result.status = GetStatus.FOUND
        elif removed:
            result.status = GetStatus.MESSAGE_WAS_REMOVING
        return result

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
        cq = self.consume_queues.get((topic, queue_id))
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
        cq = self.consume_queues.get((topic, queue_id))
        unit = cq.unit(queue_offset) if cq else None
        if unit is None or unit[1] <= 0:
            return None
        return self._store_timestamp(unit[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int | None:
        """Store time of the oldest message still in the queue."""
        return self.get_message_store_timestamp(topic, queue_id,
                                                self.get_min_offset(topic, queue_id))

    # ================================================================== flushing
    def _flush_loop(self) -> None:
        cfg = self.config
        gc = self._group_commit
        while not self._stop.is_set():
            try:
                if gc is not None:
                    gc.run_once(0.01)
                else:
                    self._stop.wait(cfg.flushIntervalCommitLog / 1000)
                    self.commitlog.files.flush()
            except Exception as exc:
                self._flush_error = exc
                log.exception("CommitLog flush failed")
                self._stop.wait(0.1)
        if gc is not None:
            gc.run_once(0)

    def _flush_logics(self) -> None:
        """Flush ConsumeQueues and the index, then record progress in the checkpoint."""
        dispatched = self.reput_offset
        for cq in list(self.consume_queues.values()):
            cq.flush()
        self.index.flush()
        cp = self.checkpoint
        if cp is not None and cp.fd >= 0:
            cp.dispatched_offset = dispatched
            cp.flushed_offset = self.commitlog.files.flushed_offset
            now = int(time.time() * 1000)
            cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = now
            cp.flush()

    def _housekeeping_loop(self) -> None:
        cfg = self.config
        next_clean = time.monotonic() + cfg.cleanResourceInterval / 1000
        while not self._stop.wait(cfg.flushIntervalConsumeQueue / 1000):
            try:
                self._flush_logics()
                if time.monotonic() >= next_clean:
                    next_clean = time.monotonic() + cfg.cleanResourceInterval / 1000
                    self.clean_expired_files()
            except Exception:
                log.exception("store housekeeping failed")

    # ================================================================== retention
    def disk_used_ratio(self) -> float:
        """Percentage of the CommitLog's disk in use."""
        usage = shutil.disk_usage(self.config.storePathCommitLog)
        return 100.0 * (usage.total - usage.free) / usage.total if usage.total else 0.0

    def clean_expired_files(self, *, now: float | None = None, manual: bool = False) -> int:
        """Delete CommitLog files past ``fileReservedTime`` when it is ``deleteWhen`` o'clock,
        the disk is over ``diskMaxUsedSpaceRatio``, or ``manual``; over
        ``diskSpaceCleanForciblyRatio`` the oldest files go even if not expired. The file being
        written is never deleted. ConsumeQueue and index files that only point below the new
        CommitLog minimum go too. Returns the number of CommitLog files deleted."""
        cfg = self.config
        now = time.time() if now is None else now
        hour = time.localtime(now).tm_hour
        due = any(part.strip() and int(part) == hour for part in cfg.deleteWhen.split(";")
                  if part.strip().isdigit())
        ratio = self.disk_used_ratio()
        space_full = ratio > cfg.diskMaxUsedSpaceRatio
        force = ratio > cfg.diskSpaceCleanForciblyRatio
        deleted = 0
        if due or space_full or manual:
            doomed = self.commitlog.files.expired_files(
                cfg.fileReservedTime * 3600, now, cfg.deleteFileBatchMax, force=force)
            if doomed:
                deleted = self.commitlog.files.remove_first(doomed)
                log.info("deleted %d CommitLog file(s) (disk %.0f%% used); min offset now %d",
                         deleted, ratio, self.commitlog.min_offset)
        self.commitlog.files.retry_closing()
        commitlog_min = self.commitlog.min_offset
        for cq in list(self.consume_queues.values()):
            cq.delete_expired(commitlog_min)
            cq.files.retry_closing()
        self.index.delete_before(commitlog_min)
        self.last_clean_time = now
        return deleted

    # ================================================================== recovery
    def _recover(self) -> None:
        cfg = self.config
        abnormal = os.path.exists(cfg.abort_path)
        cp = self.checkpoint = Checkpoint(cfg.checkpoint_path)
        commitlog = self.commitlog
        commitlog.files.load()
        self._load_consume_queues()
        self.index.load()
        files = commitlog.files.files
        index_from = self.index.end_phy_offset
        if not files:
            self._dispatcher.reput_offset = 0
            self._truncate_logics(0)
        elif (not abnormal and cp.existed and files[-1].from_offset <= cp.clean_end_offset
              <= files[-1].from_offset + files[-1].file_size):
            # Clean shutdown: the checkpoint says exactly where the log ends.
            last = files[-1]
            last.wrote_position = last.flushed_position = cp.clean_end_offset - last.from_offset
            self._truncate_logics(cp.clean_end_offset)
            self._dispatcher.reput_offset = max(commitlog.min_offset,
                                                min(cp.dispatched_offset, cp.clean_end_offset))
        else:
            # After a crash: everything before the last checkpointed offsets is sound; scan
            # from there, validating each record, and cut the log at the first bad one.
            self.recovered_abnormally = True
            start = min(cp.flushed_offset, cp.dispatched_offset) if cp.existed else 0
            if not commitlog.min_offset <= start <= commitlog.files.max_offset:
                start = commitlog.min_offset
            scan_file = commitlog.files.find(start) or files[-1]
            for f in files:
                if f.from_offset < scan_file.from_offset:
                    f.wrote_position = f.flushed_position = f.file_size
            end = start
            while True:
                records, end, bad = commitlog.scan(end, validate=True)
                if bad or not records:
                    break
            commitlog.files.truncate(end)
            log.warning("recovered after a crash: scanned CommitLog from %d, end at %d", start,
                        end)
            self._truncate_logics(end)
            self._dispatcher.reput_offset = start
            index_from = min(index_from, end)
        # Re-dispatch what the ConsumeQueues and index may lack (idempotent per unit).
        end = commitlog.max_offset
        while self._dispatcher.reput_offset < end:
            count, _ = self._dispatcher.run(end, index_from=index_from)
            if not count:
                break
        with commitlog.lock:
            commitlog.queue_offsets = {key: cq.max_offset
                                       for key, cq in self.consume_queues.items()}
        commitlog_min = commitlog.min_offset
        for cq in self.consume_queues.values():
            cq.correct_min_offset(commitlog_min)

    def _load_consume_queues(self) -> None:
        root = self.config.store_path_consume_queue
        os.makedirs(root, exist_ok=True)
        queues = {}
        for topic in sorted(os.listdir(root)):
            topic_dir = os.path.join(root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in os.listdir(topic_dir):
                if not qid.isdigit():
                    continue
                cq = ConsumeQueue(root, topic, int(qid), self.config.mappedFileSizeConsumeQueue)
                cq.files.load()
                cq.recover()
                queues[(topic, int(qid))] = cq
        self.consume_queues = queues

    def _truncate_logics(self, commitlog_end: int) -> None:
        for cq in self.consume_queues.values():
            cq.truncate_to_commitlog(commitlog_end)


def _correct(offset: int, max_offset: int, min_offset: int) -> int:
    """Where a consumer asking for a bad offset should go next (nextOffsetCorrection)."""
    return max_offset if offset > max_offset else max(min_offset, 0)


def _mark_timed_out(results: list[PutResult]) -> None:
    for r in results:
        r.status = PutStatus.FLUSH_DISK_TIMEOUT


def _wants_wait(message: StoreMessage | BatchMessage) -> bool:
    """False when the message carries ``WAIT=false`` (do not wait for the flush)."""
    value = property_value(message.properties, b"WAIT")
    return value is None or value.lower() != b"false"


__all__ = [
    "GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "UNIT_SIZE",
]
