"""Writes to the message store from the broker's event loop.

The store knows nothing of asyncio: it appends on the caller's thread and, for SYNC_FLUSH,
says which offset must be durable before the sender is answered. A flush round takes every
writer waiting and resolves them together, so one fsync releases many sends (group commit).

Where the fsync runs depends on how long the disk takes. Rounds start on a worker thread
(the GIL is released; the loop keeps serving everyone else and more writers queue up for the
next round), which measures the disk. While fsyncs are quick (under :data:`INLINE_FSYNC_MAX`
on average), a round runs the fsync on the loop itself, at the end of the loop iteration that
appended: the loop waits a fraction of a millisecond, and sends that arrive meanwhile join the
next round. Handing a quick fsync to a thread and back costs more than the fsync (a quarter
fewer one-at-a-time SYNC_FLUSH sends per second, measured). One fsync that turns slow while
inline holds the loop that once; the average then sends the next rounds to the thread until
the disk is quick again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..ha import HAServer
from ..protocol.topic import Perm
from ..store import (
    BatchMessage,
    InSyncReplicasNotEnoughError,
    MessageStore,
    MessageStoreConfig,
    PutResult,
    PutStatus,
    SlaveNotWritableError,
    StoreMessage,
)
from ..store.lock import StoreLock
from ..store.message_store import mark_status
from ..store.retention import ConsumerOffsetsView

if TYPE_CHECKING:
    from .config import BrokerConfig

#: Mean fsync time (seconds) under which flush rounds fsync on the event loop itself.
INLINE_FSYNC_MAX = 0.002


class StoreWriter:
    """Appends for coroutines of one event loop; see the module docstring. With
    ``replicas`` (a SYNC_MASTER's HA port), a send also waits until a slave holds it."""

    def __init__(self, store: MessageStore, replicas: HAServer | None = None) -> None:
        self.store = store
        self.replicas = replicas
        #: Controller mode: whether this master may write now (it holds its lease).
        self.may_write: Callable[[], bool] | None = None
        #: Counts role changes (controller mode): a send that was waiting while its broker
        #: was demoted is not reported stored, whatever its waits said.
        self.role_changes = 0
        self._waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._running = False
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: Moving average of fsync durations, seconds (what decides where rounds fsync). It
        #: starts at the limit: the first rounds go to the thread and measure the disk.
        self.fsync_seconds = INLINE_FSYNC_MAX

    def refusal(self) -> str | None:
        """Why every put is refused now, in the words its refusal is answered with: the
        store is full (a disk over ``diskSpaceWarningLevelRatio``, or a ConsumeQueue or
        index file that could not be made), a controller-mode master without its lease, or
        too few in-sync replicas. None while puts are taken. A slave is not counted: it
        never takes sends, and its role says so."""
        store = self.store
        if store.refusal is not None:
            return store.refusal
        if store.config.is_slave:
            return None
        if self.may_write is not None and not self.may_write():
            return "this broker is not its group's master now (no lease from the controller)"
        replicas = self.replicas
        if replicas is not None and replicas.sync_members is not None:
            in_sync = len(replicas.sync_members) + 1
            if in_sync < store.config.minInSyncReplicas:
                return (f"in-sync replicas not enough: {in_sync} in the SyncStateSet, "
                        f"minInSyncReplicas is {store.config.minInSyncReplicas}")
        return None

    async def put_messages(self, messages: Sequence[StoreMessage] | BatchMessage
                           ) -> list[PutResult]:
        """Like ``MessageStore.put_messages``, but waits for a SYNC_FLUSH without blocking
        the loop; a wait longer than ``syncFlushTimeout`` reports FLUSH_DISK_TIMEOUT."""
        if self.may_write is not None and not self.may_write():
            raise SlaveNotWritableError(
                "this broker is not its group's master now (no lease from the controller)")
        # Taken before appending: a demotion during the waits below must not turn this
        # send into one that waits for nobody.
        replicas, role = self.replicas, self.role_changes
        if replicas is not None and replicas.sync_members is not None:
            in_sync = len(replicas.sync_members) + 1
            if in_sync < self.store.config.minInSyncReplicas:
                raise InSyncReplicasNotEnoughError(
                    f"in-sync replicas not enough: {in_sync} in the SyncStateSet, "
                    f"minInSyncReplicas is {self.store.config.minInSyncReplicas}")
        appended, wait_at = self.store.append(messages)
        if wait_at:
            await self.settle(appended, wait_at, replicas, role)
        return appended

    def before_append(self) -> tuple[HAServer | None, int]:
        """What :meth:`settle` needs, taken before a caller appends on its own."""
        return self.replicas, self.role_changes

    async def settle(self, appended: list[PutResult], wait_at: int,
                     replicas: HAServer | None, role: int) -> None:
        """Wait until appends that end at ``wait_at`` are durable (SYNC_FLUSH) and held by
        the replicas (``replicas``, from before the append), marking them when they are
        not. ``role``: ``role_changes`` from before the append."""
        if self.store.group_commit is not None and not await self._durable(wait_at):
            mark_status(appended, PutStatus.FLUSH_DISK_TIMEOUT)
        if replicas is not None:
            await self._replicated(replicas, appended, wait_at)
        if role != self.role_changes and appended[0].status is PutStatus.PUT_OK:
            # Demoted meanwhile: the new master may not hold it, and this log may
            # lose it when it follows.
            mark_status(appended, PutStatus.FLUSH_SLAVE_TIMEOUT)

    async def _replicated(self, replicas: HAServer, appended: list[PutResult], end: int
                          ) -> None:
        """SYNC_MASTER (RocketMQ's handleHA): SLAVE_NOT_AVAILABLE at once unless a slave is
        connected and close enough; else wait for a slave's acknowledgement of ``end``,
        sharing it with every send waiting, and FLUSH_SLAVE_TIMEOUT at the deadline."""
        if not replicas.slave_caught_up(end):
            mark_status(appended, PutStatus.SLAVE_NOT_AVAILABLE)
            return
        waiter = replicas.wait_for_slave(end)
        try:
            ok = await asyncio.wait_for(asyncio.shield(waiter),
                                        self.store.config.syncFlushTimeout / 1000)
        except TimeoutError:
            ok = False
        if not ok and appended[0].status is PutStatus.PUT_OK:
            mark_status(appended, PutStatus.FLUSH_SLAVE_TIMEOUT)

    async def put_message(self, message: StoreMessage) -> PutResult:
        return (await self.put_messages((message,)))[0]

    def _durable(self, offset: int) -> asyncio.Future[bool]:
        """A future that becomes True once ``offset`` is durable (False on timeout)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        gc = self.store.group_commit
        if gc is None or gc.flushed >= offset:
            fut.set_result(True)
            return fut
        self._waiters.append((offset, fut))
        if not self._running:
            self._running = True
            loop.create_task(self._rounds(loop))
        return fut

    def _timed_flush(self) -> int:
        gc = self.store.group_commit
        assert gc is not None
        began = time.monotonic()
        try:
            return gc.flush()
        finally:
            self.fsync_seconds = 0.8 * self.fsync_seconds + 0.2 * (time.monotonic() - began)

    async def _rounds(self, loop: asyncio.AbstractEventLoop) -> None:
        gc = self.store.group_commit
        assert gc is not None
        waiters: list[tuple[int, asyncio.Future[bool]]] = []
        try:
            while self._waiters:
                waiters, self._waiters = self._waiters, []
                if self.fsync_seconds < INLINE_FSYNC_MAX:
                    began = time.monotonic()
                    flushed = self._timed_flush()
                    in_time = time.monotonic() - began <= gc.timeout
                    self._resolve(waiters, flushed, in_time)
                    if self._waiters:
                        await asyncio.sleep(0)  # not covered yet: let the loop go on first
                    continue
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        1, thread_name_prefix="rocketq-store-fsync")
                flush = loop.run_in_executor(self._executor, self._timed_flush)
                try:
                    flushed = await asyncio.wait_for(asyncio.shield(flush), gc.timeout)
                except TimeoutError:
                    for _, fut in waiters:
                        if not fut.done():
                            fut.set_result(False)
                    await flush  # let the slow fsync finish before starting another
                    continue
                self._resolve(waiters, flushed, True)
        except Exception as exc:  # an fsync error: the writers must hear of it
            for _, fut in (*self._waiters, *waiters):
                if not fut.done():
                    fut.set_exception(exc)
            self._waiters.clear()
            raise
        finally:
            self._running = False

    def _resolve(self, waiters: list[tuple[int, asyncio.Future[bool]]], flushed: int,
                 in_time: bool) -> None:
        """Answer the writers an fsync up to ``flushed`` covered; the others wait on."""
        for offset, fut in waiters:
            if not fut.done():
                if offset <= flushed:
                    fut.set_result(in_time)
                else:
                    self._waiters.append((offset, fut))

    def close(self) -> None:
        """Stop the fsync worker (after the store is closed)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def send_refusal(config: BrokerConfig, writer: StoreWriter) -> str | None:
    """Why the broker refuses every send now, None while it takes them: its
    ``brokerPermission`` without write, else :meth:`StoreWriter.refusal`."""
    if not config.brokerPermission & Perm.WRITE:
        return f"brokerPermission={config.brokerPermission} forbids writes"
    return writer.refusal()


class StoreSlot:
    """The broker's store, its writer and the lock on its root: the store and writer are
    empty from the broker's construction until ``start()`` opens them. The parts are handed
    ``opened`` (the store, once open) and ``put_messages`` (the one way they write from the
    event loop) before there is a store.

    ``lock``: the ``flock`` on ``storePathRootDir``, when the caller took it before anything
    else (``rocketq broker`` does, so that a second broker on the same store reads no file of
    it); ``take_lock`` takes it otherwise. It is held until the store closes."""

    def __init__(self, root: str, lock: StoreLock | None = None) -> None:
        self.root = root
        self.lock = lock
        self.store: MessageStore | None = None
        self.writer: StoreWriter | None = None

    def take_lock(self, owner: str) -> StoreLock:
        """Take the store root's lock if it is not held yet. Raises StoreLockedError, naming
        the process that holds it, when another broker runs on the same store: it must not
        bind, register or write anything beside that one."""
        if self.lock is None or not self.lock.held:
            self.lock = StoreLock.acquire(self.root, owner)
        return self.lock

    def opened(self) -> MessageStore:
        """The store, once ``open`` has opened it."""
        return self.store  # type: ignore[return-value]

    async def put_messages(self, messages: Sequence[StoreMessage] | BatchMessage
                           ) -> list[PutResult]:
        """Append from the event loop and, under SYNC_FLUSH, wait for the flush without
        blocking it."""
        assert self.writer is not None
        return await self.writer.put_messages(messages)

    async def open(self, config: MessageStoreConfig, consumer_offsets: ConsumerOffsetsView,
                   lock: StoreLock, loop: asyncio.AbstractEventLoop) -> MessageStore:
        """Open the store on a worker thread (it may scan files after a crash: the loop
        stays free meanwhile), dispatching on ``loop``, and its writer."""
        store = await asyncio.to_thread(MessageStore, config,
                                        consumer_offsets=consumer_offsets, lock=lock)
        store.dispatch_via(loop.call_soon)
        self.store = store
        self.writer = StoreWriter(store)
        return store

    async def close(self) -> None:
        """Flush and close the store cleanly, then stop its writer's fsync worker."""
        if self.store is not None:
            self.store.dispatch_via(None)
            await asyncio.to_thread(self.store.close)
            if self.writer is not None:
                self.writer.close()
